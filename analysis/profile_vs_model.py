#!/usr/bin/python3
"""A kernel profile (analysis/torch_kernel_profile.py's JSON) against the framework model, row by
row, split the way both can say: the GPU time of GEMM-like kernels (GEMMs, convolutions, fused
attention), of everything else, and of the optimizer step. The model's split is `poseidon
gpu-model show`'s "GPU kernels:" line for the row's model, batch, tokens, precision and layout on
DEVICE, with the optimizer the profiling script ran (AdamW for transformers, SGD otherwise).

    /usr/bin/python3 analysis/profile_vs_model.py PROFILE.json --device h200 \\
        [--poseidon build/apps/poseidon/poseidon]

The profile's `optimizer` class and kernel total can hold the optimizer's GPU-side range
(`Optimizer.step#...`, counted as a kernel by profiles written before 2026-12-07); it is taken
out, from the row's top kernels.
"""

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEMM_CLASSES = ("gemm", "conv", "attention")
LINE = re.compile(r"^GPU kernels: GEMMs and convolutions ([\d.]+) ms, the rest ([\d.]+) ms, "
                  r"optimizer step ([\d.]+) ms$", re.M)
TRANSFORMERS = ("bert", "gpt", "vit")


def profile_split(row):
    """(GEMM-like, rest, optimizer, total) ms of one profile row, the optimizer's range out."""
    classes = row["kernel_ms_by_class"]
    ranges = sum(k["ms_per_step"] for k in row.get("top_kernels", [])
                 if k["name"].startswith(("Optimizer.", "ProfilerStep#")))
    gemm = sum(classes.get(c, 0.0) for c in GEMM_CLASSES)
    opt = max(0.0, classes.get("optimizer", 0.0) - ranges)
    total = row["kernel_ms_per_step"] - ranges
    return gemm, total - gemm - opt, opt, total


def model_split(text):
    """(GEMM-like, rest, optimizer) ms from `gpu-model show`'s output."""
    m = LINE.search(text)
    if not m:
        raise ValueError("no 'GPU kernels:' line in gpu-model show's output")
    return tuple(float(x) for x in m.groups())


def show_args(row, device):
    args = ["gpu-model", "show", row["model"], "--device", device, "--batch", str(row["batch"]),
            "--precision", row["precision"], "--memory-format", row["layout"],
            "--compute-model", "framework",
            "--optimizer", "adamw" if row["model"].startswith(TRANSFORMERS) else "sgd"]
    if row.get("tokens"):
        args += ["--tokens", str(row["tokens"])]
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", help="JSON written by analysis/torch_kernel_profile.py")
    ap.add_argument("--device", required=True, help="device the profile ran on (a device file)")
    ap.add_argument("--poseidon", default=os.path.join(ROOT, "build", "apps", "poseidon",
                                                       "poseidon"))
    a = ap.parse_args()
    try:
        rows = json.load(open(a.profile))["rows"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"profile_vs_model.py: {a.profile}: not a kernel profile ({e})")
    print(f"{'row':<34} {'GEMM-like ms':>17} {'the rest ms':>17} {'optimizer ms':>14} "
          f"{'total ms':>15}")
    print(f"{'':<34} {'profile':>8} {'model':>8} {'profile':>8} {'model':>8} {'profile':>6} "
          f"{'model':>7} {'profile':>7} {'model':>7}")
    for row in rows:
        name = f"{row['model']} b{row['batch']} {row['precision']} {row['layout']}"
        out = subprocess.run([a.poseidon, *show_args(row, a.device)], capture_output=True,
                             text=True)
        if out.returncode != 0:
            print(f"{name:<34} not priced: {out.stderr.strip()}")
            continue
        pg, pr, po, pt = profile_split(row)
        try:
            mg, mr, mo = model_split(out.stdout)
        except ValueError as e:
            print(f"{name:<34} not priced: {e}")
            continue
        print(f"{name:<34} {pg:>8.1f} {mg:>8.1f} {pr:>8.1f} {mr:>8.1f} {po:>6.1f} {mo:>7.1f} "
              f"{pt:>7.1f} {mg + mr + mo:>7.1f}")


if __name__ == "__main__":
    main()
