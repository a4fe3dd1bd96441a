#!/usr/bin/env python3
"""Where a PyTorch training step's GPU time goes, per kernel class: the evidence for the mechanisms
of the `framework` compute model (layout transposes, batch norm, casts, the optimizer step, the
host's dispatch), measured rather than guessed.

    analysis/torch_kernel_profile.py --plan resnet50:256:bf16:nchw,resnet50:256:bf16:nhwc -o prof.json

Each plan row (the syntax of analysis/torch_gpu_bench.py, whose models and training step it
reuses) is warmed up, then STEPS steps run under torch.profiler. Written per row: the steps' wall
time (host clock, CUDA synchronised at both ends), the GPU's kernel time (the sum of kernel
durations; kernels of one stream do not overlap), the kernels per step, the host time spent in
PyTorch operators outside kernels is the difference the GPU idles, and kernel time by class: the
class is read from the kernel's name (cuDNN, cuBLAS and CUTLASS convolution and GEMM kernels;
PyTorch's layout transposes, batch norm, elementwise, reduction, cast and copy, softmax, layer norm
and multi-tensor optimizer kernels). The 25 kernels with the most time are listed by name too, so a
class that is wrong can be seen and fixed.
"""

import argparse
import collections
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpu_bench as bench  # noqa: E402

# Kernel classes, first match wins: (class, substrings of the lower-cased kernel name).
CLASSES = (
    ("layout_transpose", ("nchwtonhwc", "nhwctonchw", "transpose", "permute")),
    ("batch_norm", ("batch_norm", "batchnorm", "bn_fw", "bn_bw", "bn_")),
    ("layer_norm", ("layer_norm", "layernorm")),
    ("softmax", ("softmax",)),
    ("attention", ("flash", "fmha", "attention", "efficient_attention")),
    ("optimizer", ("multi_tensor_apply", "foreach", "fused_adam", "adam", "sgd")),
    ("conv", ("conv", "dgrad", "wgrad", "fprop", "implicit", "winograd", "fft")),
    ("gemm", ("gemm", "xmma", "cutlass", "sm80_", "sm90_", "ampere_", "hopper_", "volta_", "cublas",
              "matmul", "nvjet")),
    ("cast_copy", ("copy", "cast", "to_copy")),
    ("reduce", ("reduce", "sum_kernel", "norm_kernel")),
    ("pool", ("pool",)),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "relu", "gelu", "add", "mul",
                     "dropout", "threshold")),
)


def is_annotation(name, user_annotation=False):
    """Whether a GPU-side profiler event is a range, not a kernel. torch.profiler puts the ranges a
    step's code marks (the optimizer's `Optimizer.step#AdamW.step`, `ProfilerStep#N`,
    record_function's) on the GPU's timeline too, spanning the kernels they launched; counted as
    kernels they count those kernels twice."""
    return user_annotation or name.startswith(("Optimizer.", "ProfilerStep#"))


def kernel_class(name):
    low = name.lower()
    for cls, keys in CLASSES:
        if any(k in low for k in keys):
            return cls
    return "other"


def profile_row(torch, row, device, warmup, steps):
    name, batch, tokens, precision, layout = row
    step, _opt_name, held = bench.training_step(torch, row, device)
    for _ in range(warmup):
        step()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync()
    with torch.profiler.profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall = time.perf_counter() - t0
    by_class = collections.Counter()
    by_name = collections.Counter()
    count_by_name = collections.Counter()
    kernels = 0
    for ev in prof.events():
        if device == "cuda":
            if ev.device_type != torch.autograd.DeviceType.CUDA:
                continue
            if is_annotation(ev.name, bool(getattr(ev, "is_user_annotation", False))):
                continue
        elif ev.cpu_parent is not None:
            continue  # on the CPU: top-level operators only
        us = ev.time_range.elapsed_us()  # a kernel's duration, or a top-level operator's
        kernels += 1
        by_class[kernel_class(ev.name)] += us
        by_name[ev.name] += us
        count_by_name[ev.name] += 1
    gpu_ms = sum(by_class.values()) / 1e3 / steps
    out = {
        "model": name, "batch": batch, "tokens": tokens, "precision": precision, "layout": layout,
        "steps": steps, "wall_ms_per_step": 1e3 * wall / steps, "kernel_ms_per_step": gpu_ms,
        "kernels_per_step": kernels / steps,
        "kernel_ms_by_class": {k: v / 1e3 / steps for k, v in by_class.most_common()},
        "top_kernels": [{"name": n[:160], "ms_per_step": v / 1e3 / steps,
                         "per_step": count_by_name[n] / steps}
                        for n, v in by_name.most_common(25)],
    }
    del step, held
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True, help="rows as MODEL:BATCH[:TOKENS]:PRECISION:LAYOUT,...")
    ap.add_argument("-o", "--output", required=True, help="JSON file to write")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--torch-device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args(argv)
    try:
        if args.warmup < 0 or args.steps < 1:
            raise bench.BenchError("--warmup must be >= 0 and --steps >= 1")
        plan = bench.parse_plan(args.plan)
        import torch
        if args.torch_device == "cuda" and not torch.cuda.is_available():
            raise bench.BenchError("no CUDA device visible to PyTorch; use --torch-device cpu "
                                   "to test the script")
        env = bench.environment(torch, args.torch_device)
        env["when"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        result = {"environment": env, "rows": []}
        for row in plan:
            r = profile_row(torch, row, args.torch_device, args.warmup, args.steps)
            result["rows"].append(r)
            tmp = args.output + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=1)
            os.replace(tmp, args.output)
            top = ", ".join(f"{k} {v:.2f}" for k, v in list(r["kernel_ms_by_class"].items())[:6])
            print(f"torch_kernel_profile: {':'.join(str(v) for v in row if v is not None)}: "
                  f"wall {r['wall_ms_per_step']:.2f} ms/step, kernels {r['kernel_ms_per_step']:.2f} "
                  f"ms in {r['kernels_per_step']:.0f}; {top}", flush=True)
    except bench.BenchError as e:
        print(f"torch_kernel_profile: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
