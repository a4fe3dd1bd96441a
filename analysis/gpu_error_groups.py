#!/usr/bin/python3
"""The framework model's errors grouped by the GPU's memory (HBM or GDDR, from the device file's
description) and the model's family (transformer: a model file with an `attention` layer; CNN
otherwise), or with --by architecture by the GPU's generation (the device file's `architecture`)
and the precision as the row labels it, or with --by release by generation and the CUDA release
the row ran (the CSV's cuda_version; "current" where the row does not say), then family and the
precision it was priced at, from `poseidon gpu-model check --csv` output.

    poseidon gpu-model check --compute-model framework --csv FILES... > check.csv
    /usr/bin/python3 analysis/gpu_error_groups.py check.csv [--by memory|architecture|release]
        [--devices scenarios/devices] [--models scenarios/models]

Prints, per group: rows, the median signed error (+ = predicted slow), the median and largest
|error|, and how many rows are predicted slow. Standard library only.
"""

import argparse
import collections
import csv
import functools
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=None)
def _text(directory, name):
    """The text of DIRECTORY/NAME.yaml, or None when there is no such file (read once)."""
    path = os.path.join(directory, name + ".yaml")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


def memory_kind(devices_dir, device):
    """'HBM', 'GDDR' or '?' from the device file's description (its datasheet memory type)."""
    text = _text(devices_dir, device)
    m = re.search(r'^description:\s*"(.*)"', text, re.M) if text is not None else None
    desc = m.group(1) if m else ""
    return "HBM" if "HBM" in desc else "GDDR" if "GDDR" in desc else "?"


def architecture(devices_dir, device):
    """The device file's `architecture` (volta, ampere, hopper, ...), or '?' without one."""
    text = _text(devices_dir, device)
    m = re.search(r"^architecture:\s*(\w+)", text, re.M) if text is not None else None
    return m.group(1) if m else "?"


def family(models_dir, model):
    """'transformer' when the model file has an attention layer, else 'cnn'; '?' without one."""
    text = _text(models_dir, model)
    if text is None:
        return "?"
    return "transformer" if re.search(r"type:\s*attention\b", text) else "cnn"


def groups(rows, devices_dir, models_dir, by="memory"):
    """{(memory, family): [signed errors]}, or {(architecture, precision): ...} when `by` is
    'architecture', or {('architecture release', 'family priced_as'): ...} when it is 'release',
    plus ('all', 'all')."""
    out = collections.defaultdict(list)
    for r in rows:
        try:
            e = float(r["error"])
        except (KeyError, ValueError):
            continue
        if by == "architecture":
            key = (architecture(devices_dir, r["device"]), r.get("precision", "?"))
        elif by == "release":
            key = ("%s %s" % (architecture(devices_dir, r["device"]),
                              r.get("cuda_version") or "current"),
                   "%s %s" % (family(models_dir, r["model"]),
                              r.get("priced_as") or r.get("precision", "?")))
        else:
            key = (memory_kind(devices_dir, r["device"]), family(models_dir, r["model"]))
        out[key].append(e)
        out[("all", "all")].append(e)
    return out


def summary(errors):
    a = [abs(x) for x in errors]
    return {"rows": len(errors), "signed_median": statistics.median(errors),
            "abs_median": statistics.median(a), "abs_max": max(a),
            "slow": sum(1 for x in errors if x > 0)}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="poseidon gpu-model check --csv output")
    ap.add_argument("--by", choices=["memory", "architecture", "release"], default="memory",
                    help="group by memory and model family (default), by GPU generation and "
                         "precision, or by generation, CUDA release, family and priced precision")
    ap.add_argument("--devices", default=os.path.join(ROOT, "scenarios", "devices"))
    ap.add_argument("--models", default=os.path.join(ROOT, "scenarios", "models"))
    a = ap.parse_args(argv)
    with open(a.csv) as f:
        rows = list(csv.DictReader(f))
    g = groups(rows, a.devices, a.models, a.by)
    if not g:
        print("%s: no rows with an error column" % a.csv, file=sys.stderr)
        return 1
    heads = {"architecture": ("architecture", "precision"),
             "release": ("arch release", "family prec")}.get(a.by, ("memory", "family"))
    print("%-16s %-16s %5s %14s %11s %9s %6s" % (heads + ("rows", "signed median", "|e| median",
                                                        "|e| max", "slow")))
    for (first, second), errors in sorted(g.items()):
        s = summary(errors)
        print("%-16s %-16s %5d %+13.1f%% %10.1f%% %8.1f%% %6d" % (
            first, second, s["rows"], 100 * s["signed_median"], 100 * s["abs_median"],
            100 * s["abs_max"], s["slow"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
