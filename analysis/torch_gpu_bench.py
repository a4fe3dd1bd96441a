#!/usr/bin/env python3
"""Measures single-GPU training throughput of PyTorch models at each precision and layout, and
writes it as a measurement file of scenarios/devices/measurements/ (what `poseidon gpu-model
check` reads).

    analysis/torch_gpu_bench.py --device-name h200 -o h200_pytorch.yaml [--budget-s 200]
    analysis/torch_gpu_bench.py --device-name h200 -o out.yaml --only resnet50,bert_large

A row is one (model, batch, tokens, precision, layout) run the way the public benchmark tables
run theirs (timm's benchmark.py, NVIDIA DeepLearningExamples, Lambda): synthetic inputs already
on the GPU, eager PyTorch (no torch.compile), cudnn.benchmark on, WARMUP steps (cuDNN's autotuning
happens there), then BLOCKS blocks of STEPS steps each timed with CUDA events; a step is zero_grad,
forward, loss, backward and the optimizer step. samples_per_s is the median over blocks of
batch * STEPS / block time; the row's ref keeps every block's figure and the loss. Precisions:
fp32 (TF32 off for matmul and cuDNN), tf32 (on for both), fp16 (autocast float16 with a
GradScaler) and bf16 (autocast bfloat16); parameters and optimizer state stay fp32 (automatic
mixed precision). Layout nhwc = model and input in torch.channels_last (CNNs only).

Models and how they match scenarios/models/: resnet18, resnet34, resnet50, resnet101, resnet152,
vgg11, vgg16, vgg19 (torchvision, 1000 classes, 224 px), vit_b16 (torchvision vit_b_16),
inception_v3 (torchvision, no aux head, 299 px), bert_base and bert_large (transformers
BertForSequenceClassification of bert-base/large-uncased's shape with 2 labels: our models are the
encoder with its pooler, the 2-way classifier adds 2 x hidden + 2 parameters), gpt2_small and
gpt2_medium (transformers GPT2LMHeadModel of gpt2's / gpt2-medium's shape, LM loss over the
sequence).
CNNs train with SGD (momentum 0.9), transformers with AdamW (PyTorch's default implementation).
`tiny` is a two-layer perceptron for testing this script without a GPU (--torch-device cpu).

The file is rewritten after every row, so a run stopped by its budget or a time limit keeps the
rows it finished. Rows are `set: heldout`: a file this script writes is a measurement nobody has
compared with a prediction yet; whoever fits a model to it marks its rows fit first, or fits with
`poseidon gpu-model fit --all-rows` and says so, and judges the model on a set measured after.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")

# The default plan, most wanted first (a budget cuts the tail): (model, batch, tokens, precision,
# layout). ResNet-50 in both layouts at every precision, the transformers at every precision,
# then small batches (where framework overhead decides) and more models.
DEFAULT_PLAN = (
    [("resnet50", 256, None, p, l) for l in ("nchw", "nhwc") for p in PRECISIONS]
    + [("bert_large", 32, 128, p, "nchw") for p in PRECISIONS]
    + [("vgg16", 128, None, p, "nchw") for p in PRECISIONS]
    + [("vgg16", 128, None, p, "nhwc") for p in ("fp16", "bf16")]
    + [("vit_b16", 128, None, p, "nchw") for p in PRECISIONS]
    + [("resnet50", 64, None, p, "nchw") for p in PRECISIONS]
    + [("gpt2_medium", 8, 1024, p, "nchw") for p in ("tf32", "fp16", "bf16")]
    + [("bert_large", 8, 512, p, "nchw") for p in ("fp16", "bf16")]
    + [("resnet101", 128, None, p, l) for l in ("nchw", "nhwc") for p in ("fp16", "bf16")]
    + [("inception_v3", 128, None, p, "nchw") for p in ("tf32", "bf16")]
)
CNNS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vgg11", "vgg16", "vgg19",
        "vit_b16", "inception_v3", "tiny")
TRANSFORMERS = ("bert_base", "bert_large", "gpt2_small", "gpt2_medium")
# The transformers' shapes (scenarios/models/<name>.yaml): hidden size, layers, heads, MLP width.
TRANSFORMER_SHAPES = {"bert_base": (768, 12, 12, 3072), "bert_large": (1024, 24, 16, 4096),
                      "gpt2_small": (768, 12, 12, 3072), "gpt2_medium": (1024, 24, 16, 4096)}


class BenchError(Exception):
    """A plan or environment problem, reported as one line."""


def parse_plan_filter(text):
    if not text:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = set(CNNS) | set(TRANSFORMERS)
    for n in names:
        if n not in known:
            raise BenchError(f"--only: unknown model '{n}' (known: {', '.join(sorted(known))})")
    return set(names)


def build_model(torch, name):
    """Returns (model, make_batch(batch, tokens, device, channels_last) -> (inputs, targets),
    loss(model, inputs, targets), optimizer name)."""
    nn = torch.nn
    if name == "tiny":
        model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10))
        size, classes = 8, 10
    elif name in CNNS:
        try:
            import torchvision.models as tvm
        except ImportError as e:
            raise BenchError(f"model {name} needs torchvision ({e})")
        if name == "inception_v3":
            model = tvm.inception_v3(weights=None, aux_logits=False, init_weights=False)
            size = 299
        else:
            model = getattr(tvm, {"vit_b16": "vit_b_16"}.get(name, name))(weights=None)
            size = 224
        classes = 1000
    elif name in TRANSFORMERS:
        try:
            import transformers
        except ImportError as e:
            raise BenchError(f"model {name} needs transformers ({e})")
        hidden, depth, heads, mlp = TRANSFORMER_SHAPES[name]
        if name.startswith("bert"):
            cfg = transformers.BertConfig(vocab_size=30522, hidden_size=hidden,
                                          num_hidden_layers=depth, num_attention_heads=heads,
                                          intermediate_size=mlp, max_position_embeddings=512,
                                          num_labels=2)
            model = transformers.BertForSequenceClassification(cfg)
            vocab = 30522

            def make(batch, tokens, device, _cl):
                ids = torch.randint(0, vocab, (batch, tokens), device=device)
                return ids, torch.randint(0, 2, (batch,), device=device)
        else:
            cfg = transformers.GPT2Config(vocab_size=50257, n_positions=1024, n_embd=hidden,
                                          n_layer=depth, n_head=heads, n_inner=mlp)
            model = transformers.GPT2LMHeadModel(cfg)
            vocab = 50257

            def make(batch, tokens, device, _cl):
                ids = torch.randint(0, vocab, (batch, tokens), device=device)
                return ids, ids

        def loss(m, x, y):
            return m(input_ids=x, labels=y).loss

        return model, make, loss, "adamw"
    else:
        raise BenchError(f"unknown model '{name}'")

    def make(batch, _tokens, device, channels_last):
        x = torch.randn(batch, 3, size, size, device=device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.randint(0, classes, (batch,), device=device)

    ce = nn.CrossEntropyLoss()

    def loss(m, x, y):
        return ce(m(x), y)

    return model, make, loss, "sgd"


def training_step(torch, row, device):
    """Builds one plan row's model, optimizer and batch on `device` at its precision and layout;
    returns step() (zero_grad, forward, loss, backward, optimizer step; returns the loss) and
    the objects it holds, to delete after."""
    name, batch, tokens, precision, layout = row
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    model, make, loss_fn, opt_name = build_model(torch, name)
    channels_last = layout == "nhwc"
    model = model.to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" and device == "cuda" else None
    x, y = make(batch, tokens, device, channels_last)

    def step():
        opt.zero_grad(set_to_none=True)
        if dtype is not None:
            with torch.autocast(device_type=device, dtype=dtype):
                loss = loss_fn(model, x, y)
        else:
            loss = loss_fn(model, x, y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    return step, opt_name, [model, opt, x, y]


def run_one(torch, row, device, warmup, steps, blocks):
    """Trains one plan row and returns (samples_per_s, block figures, last loss)."""
    name, batch, _tokens, precision, _layout = row
    step, opt_name, held = training_step(torch, row, device)
    for _ in range(warmup):
        loss = step()
    figures = []
    for _ in range(blocks):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(steps):
                loss = step()
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            for _ in range(steps):
                loss = step()
            seconds = time.perf_counter() - t0
        figures.append(batch * steps / seconds)
    last = float(loss.detach().float().cpu())
    if last != last or last in (float("inf"), float("-inf")):
        raise BenchError(f"{name} {precision}: the loss is {last} (not finite)")
    del step, held
    if device == "cuda":
        torch.cuda.empty_cache()
    return statistics.median(figures), figures, last, opt_name


def environment(torch, device):
    env = {"host": platform.node(), "python": platform.python_version(), "torch": torch.__version__}
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
        props = torch.cuda.get_device_properties(0)
        env["sm_count"] = props.multi_processor_count
        env["memory_gib"] = round(props.total_memory / 2**30, 1)
    for mod in ("torchvision", "transformers"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            pass
    if shutil.which("nvidia-smi"):
        q = "name,driver_version,power.limit,clocks.max.sm,clocks.max.mem,clocks.sm"
        r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                           capture_output=True, text=True, check=False)
        env["nvidia_smi"] = f"{q}: {r.stdout.strip()}"
    return env


def yaml_str(s):
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def write_file(path, device_name, env, rows, args):
    fw = f"PyTorch {env['torch']}"
    if "cuda" in env:
        fw += f", CUDA {env['cuda']}, cuDNN {env['cudnn']}"
    fw += ", eager, native AMP (torch.autocast)"
    head = [
        "# Measured by analysis/torch_gpu_bench.py (its docstring says how each row is run).",
        f"# When: {env['when']}. Command: {env['command']}",
        "# Environment: " + json.dumps({k: v for k, v in env.items()
                                        if k not in ("when", "command")}, sort_keys=True),
        f"# warmup {args.warmup} steps, {args.blocks} blocks of {args.steps} steps; samples_per_s ="
        " the median block; rows set: heldout (compared with no prediction when written).",
        "schema_version: 1",
        f"source: {yaml_str('analysis/torch_gpu_bench.py on ' + env.get('gpu', 'cpu') + ', ' + env['when'])}",
        f"framework: {yaml_str(fw)}",
        "measurements:",
    ]
    lines = []
    for r in rows:
        tokens = f", tokens: {r['tokens']}" if r["tokens"] else ""
        lines.append(
            f"  - {{model: {r['model']}, device: {device_name}, precision: {r['precision']}, "
            f"batch: {r['batch']}{tokens}, samples_per_s: {r['samples_per_s']:.2f}, "
            f"optimizer: {r['optimizer']}, memory_format: {r['layout']}, set: heldout, "
            f"ref: {yaml_str(r['ref'])}}}")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(head + lines) + "\n")
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device-name", required=True,
                    help="the scenarios/devices/NAME.yaml this GPU is (rows' device)")
    ap.add_argument("-o", "--output", required=True, help="measurement file to write")
    ap.add_argument("--only", default="", help="comma-separated models of the plan to run")
    ap.add_argument("--plan", default="",
                    help="rows as MODEL:BATCH[:TOKENS]:PRECISION:LAYOUT,... (default: the built-in plan)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no row after this many seconds (0: no limit)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--torch-device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args(argv)
    try:
        if min(args.warmup, args.steps - 1, args.blocks - 1) < 0:
            raise BenchError("--warmup must be >= 0, --steps and --blocks >= 1")
        plan = parse_plan(args.plan) if args.plan else list(DEFAULT_PLAN)
        only = parse_plan_filter(args.only)
        if only is not None:
            plan = [r for r in plan if r[0] in only]
        import torch
        if args.torch_device == "cuda" and not torch.cuda.is_available():
            raise BenchError("no CUDA device visible to PyTorch (torch "
                             f"{torch.__version__}); use --torch-device cpu to test the script")
        env = environment(torch, args.torch_device)
        env["when"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        env["command"] = " ".join([os.path.basename(sys.argv[0])] + (argv or sys.argv[1:]))
        print("torch_gpu_bench: " + json.dumps(env, sort_keys=True), flush=True)
        rows, t0 = [], time.monotonic()
        for row in plan:
            if args.budget_s and time.monotonic() - t0 > args.budget_s:
                print(f"torch_gpu_bench: budget spent; not run: {row}", flush=True)
                continue
            name, batch, tokens, precision, layout = row
            t1 = time.monotonic()
            try:
                sps, figs, loss, opt = run_one(torch, row, args.torch_device, args.warmup,
                                               args.steps, args.blocks)
            except torch.cuda.OutOfMemoryError as e:
                print(f"torch_gpu_bench: {row}: out of memory, row left out ({e})", flush=True)
                torch.cuda.empty_cache()
                continue
            ref = (f"blocks {', '.join(f'{f:.2f}' for f in figs)} samples/s; last loss {loss:.4f}; "
                   f"{layout}; {opt}")
            rows.append({"model": name, "batch": batch, "tokens": tokens, "precision": precision,
                         "layout": layout, "samples_per_s": sps, "optimizer": opt, "ref": ref})
            write_file(args.output, args.device_name, env, rows, args)
            print(f"torch_gpu_bench: {name} b{batch}{' t' + str(tokens) if tokens else ''} "
                  f"{precision} {layout}: {sps:.1f} samples/s ({time.monotonic() - t1:.1f} s)",
                  flush=True)
        if not rows:
            raise BenchError("no row ran")
    except BenchError as e:
        print(f"torch_gpu_bench: error: {e}", file=sys.stderr)
        return 2
    return 0


def parse_plan(text):
    rows = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) not in (4, 5):
            raise BenchError(f"--plan: '{item}' is not MODEL:BATCH[:TOKENS]:PRECISION:LAYOUT")
        name, batch = parts[0], parts[1]
        tokens = parts[2] if len(parts) == 5 else None
        precision, layout = parts[-2], parts[-1]
        if name not in CNNS and name not in TRANSFORMERS:
            raise BenchError(f"--plan: unknown model '{name}' in '{item}'")
        if precision not in PRECISIONS:
            raise BenchError(f"--plan: unknown precision '{precision}' in '{item}' "
                             f"(one of {', '.join(PRECISIONS)})")
        if layout not in ("nchw", "nhwc"):
            raise BenchError(f"--plan: unknown layout '{layout}' in '{item}' (nchw or nhwc)")
        if layout == "nhwc" and name in TRANSFORMERS:
            raise BenchError(f"--plan: '{item}': nhwc is for CNNs")
        try:
            b = int(batch)
            t = int(tokens) if tokens is not None else None
        except ValueError:
            raise BenchError(f"--plan: '{item}': batch and tokens must be integers") from None
        if b < 1 or (t is not None and t < 1):
            raise BenchError(f"--plan: '{item}': batch and tokens must be >= 1")
        if (name in TRANSFORMERS) != (t is not None):
            raise BenchError(f"--plan: '{item}': transformers take TOKENS, CNNs do not")
        rows.append((name, b, t, precision, layout))
    return rows


if __name__ == "__main__":
    sys.exit(main())
