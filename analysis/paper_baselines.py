#!/usr/bin/python3
"""The papers' experiments with the systems users run instead, beside Poseidon (docs/paper.md).

    /usr/bin/python3 analysis/paper_baselines.py --poseidon build/apps/poseidon/poseidon \\
        --csv docs/paper_baselines.csv > tables.md
    /usr/bin/python3 analysis/paper_baselines.py --from-csv docs/paper_baselines.csv   # tables only

For every experiment of scenarios/experiments/ that docs/paper.md reports (the 2015 paper's three
networks, ATC'17's VGG19-22K, ResNet-152 and Inception-V3, the transformers, the machines of 8
GPUs) and each machine count, runs `poseidon compare SCENARIO --set cluster.machines=N --format
csv` (Poseidon, PyTorch DDP, Horovod, a parameter server as the papers ran it, one with balanced
chunks and overlap: docs/compare.md) and prints one Markdown table per experiment: the speedup of
each system over one device of single-machine training, and how much faster Poseidon is than the
best of the others. A system that cannot run keeps its cell with "cannot run". --csv keeps every
row compare printed (with the experiment's name first), from which --from-csv rebuilds the tables
without simulating again. Same input, same bytes.
"""
import argparse
import csv
import io
import subprocess
import sys

# (name, title, scenario, machine counts). The counts are the papers' (1-8 nodes in 2015, up to
# 32 in ATC'17) or, for the machines of 8 GPUs, two that stay under a minute each.
EXPERIMENTS = [
    ("paper2015_alexnet", "2015: AlexNet, K20, 40 GbE", "paper2015_alexnet.yaml", [2, 4, 8]),
    ("paper2015_googlenet", "2015: GoogLeNet, K20, 40 GbE", "paper2015_googlenet.yaml",
     [2, 4, 8]),
    ("paper2015_cifar10", "2015: CIFAR-10 quick, K20, 40 GbE", "paper2015_cifar10.yaml",
     [2, 4, 8]),
    ("atc17_vgg19_22k", "ATC'17: VGG19-22K, Titan X, 10 GbE", "atc17_vgg19_22k.yaml",
     [2, 4, 8, 16, 32]),
    ("atc17_resnet152", "ATC'17: ResNet-152, Titan X, 10 GbE", "atc17_resnet152.yaml",
     [2, 4, 8, 16, 32]),
    ("atc17_inception_v3", "ATC'17: Inception-V3, Titan X, 40 GbE", "atc17_inception_v3.yaml",
     [2, 4, 8, 16, 32]),
    ("bert_large", "BERT-large, Titan X, 10 GbE", "bert_large.yaml", [4, 16, 32]),
    ("gpt2_medium", "GPT-2 medium, Titan X, 10 GbE", "gpt2_medium.yaml", [4, 16, 32]),
    ("hybrid_v100_25g", "ResNet-50, machines of 8 V100 (DGX-1), 25 GbE", "hybrid_v100_25g.yaml",
     [2, 8]),
    ("hybrid_a100_100g", "ResNet-50, machines of 8 A100 (DGX A100), 100 GbE",
     "hybrid_a100_100g.yaml", [2, 8]),
    ("hybrid_h100_400g", "ResNet-50, machines of 8 H100 (DGX H100), 400 GbE",
     "hybrid_h100_400g.yaml", [2, 8]),
]
SYSTEMS = [("poseidon", "Poseidon"), ("ddp", "DDP"), ("horovod", "Horovod"),
           ("ps_papers", "PS, whole tensors, no overlap"),
           ("ps_overlap", "PS, balanced chunks, overlap")]


def run(poseidon, experiments, jobs):
    """Every compare row, as dicts, with the experiment's name under 'experiment'."""
    rows = []
    for name, _, scenario, counts in experiments:
        for n in counts:
            out = subprocess.run([poseidon, "compare", f"scenarios/experiments/{scenario}",
                                  "--set", f"cluster.machines={n}", "--format", "csv",
                                  "-j", str(jobs)], capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"{scenario} at {n} machines: {out.stderr.strip()}")
            for r in csv.DictReader(io.StringIO(out.stdout)):
                rows.append(dict(r, experiment=name))
    return rows


def tables(rows, experiments):
    by = {}
    for r in rows:
        by.setdefault(r["experiment"], {}).setdefault(int(r["machines"]), {})[r["system"]] = r
    out = []
    for name, title, scenario, _ in experiments:
        if name not in by:
            continue
        first = next(iter(next(iter(by[name].values())).values()))
        devices = int(first["devices_per_machine"])
        out.append(f"**{title}** (`{scenario}`, {first['model']}, batch {first['batch_per_device']} "
                   f"per device; speedup over one device)\n")
        head = ["machines" + (f" (x {devices} GPUs)" if devices > 1 else "")]
        head += [label for _, label in SYSTEMS] + ["Poseidon over the best other"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for n in sorted(by[name]):
            cells, best = [str(n)], 0.0
            for key, _ in SYSTEMS:
                r = by[name][n].get(key)
                if r is None or r.get("reason"):
                    cells.append("cannot run")
                    continue
                cells.append(f"{float(r['speedup']):.2f}x")
                if key != "poseidon":
                    best = max(best, float(r["speedup"]))
            p = by[name][n].get("poseidon")
            gain = float(p["speedup"]) / best if p and not p.get("reason") and best > 0 else None
            cells.append(f"{gain:.2f}x" if gain else "-")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--poseidon", default="build/apps/poseidon/poseidon")
    p.add_argument("--csv", help="also write every compare row here")
    p.add_argument("--from-csv", help="rebuild the tables from such a CSV, simulating nothing")
    p.add_argument("--only", nargs="*", help="experiment names (default: all)")
    p.add_argument("-j", "--jobs", type=int, default=2)
    a = p.parse_args(argv)
    experiments = [e for e in EXPERIMENTS if not a.only or e[0] in a.only]
    if a.only and len(experiments) != len(a.only):
        known = ", ".join(e[0] for e in EXPERIMENTS)
        print(f"paper_baselines.py: error: unknown experiment in {a.only} (known: {known})",
              file=sys.stderr)
        return 2
    try:
        if a.from_csv:
            with open(a.from_csv, newline="") as f:
                rows = list(csv.DictReader(f))
            if not rows or "experiment" not in rows[0] or "speedup" not in rows[0]:
                raise ValueError(f"{a.from_csv}: not a CSV this script wrote (experiment, "
                                 "speedup, ... columns)")
        else:
            rows = run(a.poseidon, experiments, a.jobs)
    except (OSError, ValueError, RuntimeError) as err:
        print(f"paper_baselines.py: error: {err}", file=sys.stderr)
        return 2
    if a.csv:
        fields = ["experiment"] + [k for k in rows[0] if k != "experiment"]
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    print(tables(rows, experiments))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
