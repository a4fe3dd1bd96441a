#!/usr/bin/python3
"""`poseidon models import` on the models scripts/make-onnx-models writes (PyTorch 1.13 exports:
a ResNet-18-like, a MobileNet-like, a transformer encoder, a causal LM; and the corpus of
scripts/onnx_corpus.py, torchvision's ResNet-50, MobileNet v2 and v3, DenseNet-121 and Inception
layouts and a BERT-like and a GPT-like, each exported with torch.onnx's default settings in eval
and in training mode, the transformers at opsets 14 and 17):

  (a) each import succeeds, with one summary line;
  (b) `poseidon models show` of the YAML gives the PyTorch module's parameter count (the
      generator's params.json: sum(p.numel() for p in model.parameters()), counted by torch, not
      by the importer; for the first four also what the ONNX initializers hold, the same);
  (c) the last layer's shape is the export's output's (the logits), and the YAML has as many
      convs as the module (the ResNet-like and the corpus), and for the corpus as many
      batchnorms (in an eval export, restored after the convs they were folded into) and
      attention layers;
  (g) an eval export and a training export of one corpus model import as the same layers: types
      and output shapes in order, and the same FLOPs (the eval export's folded BatchNorms
      restored where the training export has them);
  (d) importing twice gives byte-identical YAML;
  (f) the shipped scenarios/imported/ files load and simulate with the imported ResNet-like
      next to them, as the demo runs them;
  (e) the CLI refuses an unknown operator (a file built with the python onnx helper), a file
      that is not ONNX, a truncated one and a missing one: exit status 2, one located line.

  onnx_import_test.py --poseidon build/apps/poseidon/poseidon --work DIR

Exit status 77 (ctest: skipped) when python3-torch or python3-onnx is missing.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77


def run(cmd):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def refusals(poseidon, work):
    """(e): returns the number of failures."""
    import onnx
    from onnx import TensorProto, helper
    os.makedirs(work, exist_ok=True)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], [0.1] * 108)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", kernel_shape=[3, 3]),
         helper.make_node("Hardmax", ["c"], ["y"], name="/act/Hardmax")],
        "unknown_op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], [w])
    unknown = os.path.join(work, "unknown_op.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), unknown)
    text = os.path.join(work, "not_onnx.onnx")
    with open(text, "w") as f:
        f.write("this is a text file, not a model\n")
    truncated = os.path.join(work, "truncated.onnx")
    with open(unknown, "rb") as f, open(truncated, "wb") as g:
        g.write(f.read()[:200])
    cases = [
        (unknown, f"{unknown}: error: node '/act/Hardmax' (Hardmax): no Poseidon layer type"),
        (text, f"{text}: error: not an ONNX model"),
        (truncated, f"{truncated}: error: not an ONNX model, or a truncated one"),
        (os.path.join(work, "missing.onnx"), f"{work}/missing.onnx: error: no such file"),
    ]
    bad = 0
    for path, want in cases:
        r = run([poseidon, "models", "import", path, "-o", os.path.join(work, "refused.yaml")])
        lines = r.stderr.strip().splitlines()
        if r.returncode != 2 or len(lines) != 1 or not lines[0].startswith(want):
            print(f"FAIL refusal of {path}: rc {r.returncode}, stderr:\n{r.stderr}"
                  f"expected one line starting {want!r}")
            bad += 1
        else:
            print(f"ok   refused: {lines[0]}")
    return bad


def imported_scenarios(poseidon, work):
    """(f): the demo's use of scenarios/imported/; returns the number of failures."""
    import shutil
    d = os.path.join(work, "imported")
    os.makedirs(os.path.join(d, "models"), exist_ok=True)
    shutil.copy(os.path.join(work, "resnet18_like.yaml"), os.path.join(d, "models"))
    for f in ("resnet18_like.yaml", "resnet18_like_speedup.yaml"):
        shutil.copy(os.path.join(ROOT, "scenarios", "imported", f), d)
    check = run([poseidon, "sweep", "--check", os.path.join(d, "resnet18_like_speedup.yaml")])
    sim = run([poseidon, "simulate", os.path.join(d, "resnet18_like.yaml"), "--format", "json"])
    if check.returncode != 0 or sim.returncode != 0:
        print(f"FAIL scenarios/imported: sweep --check rc {check.returncode}, simulate rc "
              f"{sim.returncode}\n{check.stderr}{sim.stderr}")
        return 1
    result = json.loads(sim.stdout)
    if result.get("model") != "resnet18_like" or not result.get("iteration_ms", 0) > 0:
        print(f"FAIL scenarios/imported: simulate gave {sim.stdout[:300]}")
        return 1
    print(f"ok   scenarios/imported: {result['iteration_ms']:.3f} ms per iteration on 8 nodes")
    return 0


def same_layers_in_eval_and_train(expected, shapes):
    """(g): returns the number of failures."""
    bad = 0
    for name in sorted(expected):
        twin = name.replace("_eval", "_train", 1)
        if "_eval" not in name or twin not in shapes or name not in shapes:
            continue
        if shapes[name] != shapes[twin]:
            print(f"FAIL {name} and {twin}: the layers (type, shape) or FLOPs differ")
            bad += 1
        else:
            print(f"ok   {name} = {twin}: {len(shapes[name][0])} layers of the same types and "
                  f"shapes, {shapes[name][1]} FLOPs")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poseidon", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("SKIP: python3-onnx is not installed (apt-get install python3-onnx, or run "
              "scripts/install-deps)")
        return SKIP
    bad = refusals(a.poseidon, a.work)
    gen = run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "make-onnx-models"), a.work])
    if gen.returncode == 3:
        print("SKIP: " + gen.stderr.strip())
        return SKIP
    if gen.returncode != 0:
        print(gen.stdout + gen.stderr)
        return 1
    with open(os.path.join(a.work, "params.json")) as f:
        expected = json.load(f)
    shapes = {}  # name -> ([(type, output shape) per layer], forward FLOPs), from models show
    for name, e in sorted(expected.items()):
        onnx_path = os.path.join(a.work, e["file"])
        yaml_path = os.path.join(a.work, name + ".yaml")
        imp = run([a.poseidon, "models", "import", onnx_path, "-o", yaml_path])
        if imp.returncode != 0 or len(imp.stdout.strip().splitlines()) != 1:
            print(f"FAIL {name}: import: rc {imp.returncode}\n{imp.stdout}{imp.stderr}")
            bad += 1
            continue
        print(imp.stdout.strip())
        with open(yaml_path, "rb") as f:
            first = f.read()
        again = run([a.poseidon, "models", "import", onnx_path, "-o", yaml_path + ".again"])
        with open(yaml_path + ".again", "rb") as f:
            second = f.read()
        if again.returncode != 0 or first != second:
            print(f"FAIL {name}: a second import differs from the first")
            bad += 1
        show = run([a.poseidon, "models", "show", yaml_path])
        if show.returncode != 0 or show.stderr:
            print(f"FAIL {name}: models show: rc {show.returncode}\n{show.stderr}")
            bad += 1
            continue
        m = re.search(r"^parameters:\s+([\d,]+)", show.stdout, re.M)
        got = int(m.group(1).replace(",", "")) if m else -1
        if got != e["torch_params"]:
            print(f"FAIL {name}: models show says {got:,} parameters, the PyTorch module has "
                  f"{e['torch_params']:,}")
            bad += 1
        else:
            print(f"ok   {name}: {got:,} parameters = the PyTorch module's")
        # The last layer's output is the exported output's shape: a vector [N] is Nx1x1 here
        # (fc), a sequence [S, V] SxV.
        rows = [l.split() for l in show.stdout.splitlines() if re.match(r"^\s+\d+\s", l)]
        flops = re.search(r"^forward FLOPs/image:\s+([\d,]+)", show.stdout, re.M)
        shapes[name] = ([(r[2], r[3]) for r in rows], flops.group(1) if flops else None)
        logits = rows[-1][3]
        dims = e["output_shape"] + ([1, 1] if len(e["output_shape"]) == 1 else [])
        want = "x".join(str(d) for d in dims)
        if logits != want:
            print(f"FAIL {name}: the output is {logits}; the export's is {want}")
            bad += 1
        else:
            print(f"ok   {name}: output {logits}")
        for key, kind in (("convs", "conv"), ("batchnorms", "batchnorm"),
                          ("attentions", "attention")):
            if key not in e:
                continue
            count = sum(1 for r in rows if r[2] == kind)
            if count != e[key]:
                print(f"FAIL {name}: {count} {kind} layers; the module has {e[key]}")
                bad += 1
            elif count:
                print(f"ok   {name}: {count} {kind} layers, as the module")
    bad += same_layers_in_eval_and_train(expected, shapes)
    bad += imported_scenarios(a.poseidon, a.work)
    print("PASS" if bad == 0 else f"{bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
