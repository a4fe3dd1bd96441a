#!/usr/bin/python3
"""Batch norm's rate in values per SM per clock, from a kernel profile of PyTorch training
(analysis/torch_kernel_profile.py's JSON), for the framework compute model's measured constants
(bn_cudnn_nchw, bn_cudnn_nhwc, bn_native_nchw, bn_native_nhwc; cost/framework_model.h).

    /usr/bin/python3 analysis/bn_rates.py docs/measured/prof_h200_seen.json \
        docs/measured/prof_h200_blind_misses.json [--poseidon build/apps/poseidon/poseidon] \
        [--bandwidth-gbs 4800]

Per CNN row of the profile: the batch-norm kernels' time a step (the `batch_norm` class), and the
values they touch as the model counts them: forward x twice and y (3 per activation value),
backward x and dy twice and dx (5), so 8 x each batch norm's output values a step. PyTorch runs
cuDNN's batch norm unless the values are bf16 (_select_batch_norm_backend), so a bf16 row
measures ATen's kernels ("native"), any other cuDNN's. In NCHW a layer of C channels keeps
min(1, C / (K x SMs)) of the GPU busy (its kernels work a channel plane per block; K channels per
SM fill it, --nchw-channels-per-sm); channels-last uses every SM. The rate is the values over
(time x SMs x clock x that fraction), layer by layer. The SMs are the profile's `sm_count`; the
clock its nvidia-smi `clocks.max.sm` (or --clock-mhz). The layers (channels, values per image)
come from `poseidon models show MODEL`. Prints a row per profile row, the median per
implementation and layout (with --bandwidth-gbs, each row's share of DRAM bandwidth at the values'
width too: a kernel near it is bound by DRAM, and its rate is a lower bound), and, for the NCHW rows, the spread of each implementation's rates
under K = 1, 2, 4, 8 (how K was chosen: the smallest spread). Standard library only.
"""

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Forward reads x twice and writes y; backward reads x and dy for the reductions, again for dx,
# and writes dx (cost/framework_model.cc, FrameworkWork): values per activation value.
TOUCHES_PER_VALUE = 3 + 5


def bn_layers_from_poseidon(poseidon, model):
    """[(channels, output values per image)] of MODEL's batch norms, from `poseidon models show`."""
    out = subprocess.run([poseidon, "models", "show", model], check=True, capture_output=True,
                         text=True).stdout
    layers = []
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[2] == "batchnorm":
            c, h, w = (int(v) for v in cols[3].split("x"))
            layers.append((c, c * h * w))
    if not layers:
        raise ValueError(f"model {model}: `poseidon models show` lists no batchnorm layer")
    return layers


def max_clock_mhz(environment):
    """clocks.max.sm from the profile's nvidia-smi line, MHz; None if absent."""
    smi = environment.get("nvidia_smi", "")
    head, _, values = smi.partition(": ")
    names = [n.strip() for n in head.split(",")]
    vals = [v.strip() for v in values.split(",")]
    # The first name is the GPU's (its value may hold no comma): align from the end.
    for name, value in zip(reversed(names), reversed(vals)):
        if name == "clocks.max.sm":
            m = re.match(r"([\d.]+)\s*MHz", value)
            return float(m.group(1)) if m else None
    return None


def rates(profile, bn_layers, clock_mhz=None, channels_per_sm=2):
    """[(model, batch, precision, layout, implementation, ms, values per SM per clock)]."""
    env = profile["environment"]
    sms = env["sm_count"]
    clock = clock_mhz or max_clock_mhz(env)
    if not clock:
        raise ValueError("the profile gives no clocks.max.sm; pass --clock-mhz")
    out = []
    for row in profile["rows"]:
        ms = row.get("kernel_ms_by_class", {}).get("batch_norm", 0)
        if ms <= 0 or row["model"] not in bn_layers:
            continue
        nchw = row["layout"] == "nchw"
        # SM-clocks' worth of work: each layer's values over the fraction of the GPU it keeps busy.
        work = sum(TOUCHES_PER_VALUE * values * row["batch"] /
                   (min(1.0, c / (channels_per_sm * sms)) if nchw else 1.0)
                   for c, values in bn_layers[row["model"]])
        rate = work / (ms * 1e-3 * sms * clock * 1e6)
        impl = "native" if row["precision"] == "bf16" else "cudnn"
        out.append((row["model"], row["batch"], row["precision"], row["layout"], impl, ms, rate))
    return out


def spread(rates_):
    """max / min of a list of rates."""
    return max(rates_) / min(rates_)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profiles", nargs="+", help="JSON of one GPU (the first one's environment)")
    ap.add_argument("--poseidon", default=os.path.join(ROOT, "build/apps/poseidon/poseidon"))
    ap.add_argument("--clock-mhz", type=float)
    ap.add_argument("--nchw-channels-per-sm", type=float, default=2)
    ap.add_argument("--bandwidth-gbs", type=float, help="the GPU's DRAM bandwidth (datasheet)")
    a = ap.parse_args(argv)
    profile = None
    for path in a.profiles:
        with open(path) as f:
            p = json.load(f)
        if profile is None:
            profile = p
        elif p["environment"].get("gpu") != profile["environment"].get("gpu"):
            ap.error(f"{path}: a profile of {p['environment'].get('gpu')}, not "
                     f"{profile['environment'].get('gpu')}")
        else:
            profile["rows"] += p["rows"]
    bn_layers = {}
    for row in profile["rows"]:
        m = row["model"]
        if m in bn_layers or row.get("kernel_ms_by_class", {}).get("batch_norm", 0) <= 0:
            continue
        bn_layers[m] = bn_layers_from_poseidon(a.poseidon, m)
    table = rates(profile, bn_layers, a.clock_mhz, a.nchw_channels_per_sm)
    if not table:
        print("no row with batch-norm kernels", file=sys.stderr)
        return 1
    print(f"{'model':<10} {'batch':>5} {'prec':<5} {'layout':<6} {'impl':<7} {'bn ms':>8} "
          f"{'values/SM/clock':>16}" + (f" {'DRAM share':>10}" if a.bandwidth_gbs else ""))
    groups = collections.defaultdict(list)
    for model, batch, prec, layout, impl, ms, rate in table:
        line = f"{model:<10} {batch:>5} {prec:<5} {layout:<6} {impl:<7} {ms:>8.2f} {rate:>16.3f}"
        if a.bandwidth_gbs:
            values = sum(TOUCHES_PER_VALUE * v * batch for _, v in bn_layers[model])
            width = 2 if prec in ("fp16", "bf16") else 4
            line += f" {values * width / (ms * 1e-3) / (a.bandwidth_gbs * 1e9):>10.2f}"
        print(line)
        groups[(impl, layout)].append(rate)
    print("\nmedian per implementation and layout:")
    for (impl, layout), rs in sorted(groups.items()):
        print(f"  bn_{impl}_{layout}: {statistics.median(rs):.3f}  ({len(rs)} rows)")
    print("\nNCHW: max / min of each implementation's rates, by channels per SM:")
    for k in (1, 2, 4, 8):
        by_impl = collections.defaultdict(list)
        for *_, layout, impl, _, rate in rates(profile, bn_layers, a.clock_mhz, k):
            if layout == "nchw":
                by_impl[impl].append(rate)
        cells = "  ".join(f"{impl} {spread(rs):.3f} ({len(rs)})" for impl, rs in sorted(by_impl.items()))
        print(f"  K = {k}: {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
