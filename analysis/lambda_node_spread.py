#!/usr/bin/python3
"""How far apart identical GPUs measure: Lambda's v2 campaign ran the same single-GPU benchmarks
on many H100 SXM5 nodes (pytorch/results_v2/*_1xH100_80GB_SXM5_*). Each node's figure is taken
by the campaign's own rule (scripts/compile_results_pytorch_v2.py: per log, the last matching
line's field; the mean over the node's logs), then each benchmark's spread across nodes is
printed: the floor below which no model can be judged against one published row.

    /usr/bin/python3 analysis/lambda_node_spread.py MIRROR [--commit REV] [--systems REGEX]

MIRROR is a git directory of lambdal/deeplearning-benchmark (no work tree needed).
"""

import argparse
import collections
import re
import statistics
import subprocess
import sys

# Test folder -> (column, line pattern, field), as compile_results_pytorch_v2.py has them.
TESTS = {
    "PyTorch_SSD_FP32": ("ssd fp32", r"^.*Average images/sec:.*$", -1),
    "PyTorch_SSD_AMP": ("ssd amp", r"^.*Average images/sec:.*$", -1),
    "PyTorch_resnet50_FP32": ("resnet50 fp32", r"^.*Summary: train.loss.*$", 11),
    "PyTorch_resnet50_AMP": ("resnet50 amp", r"^.*Summary: train.loss.*$", 11),
    "PyTorch_bert_base_squad_FP32": ("bert_base fp32", r"^.*training_sequences_per_second :.*$", -6),
    "PyTorch_bert_base_squad_FP16": ("bert_base fp16", r"^.*training_sequences_per_second :.*$", -6),
    "PyTorch_bert_large_squad_FP32": ("bert_large fp32", r"^.*training_sequences_per_second :.*$",
                                      -6),
    "PyTorch_bert_large_squad_FP16": ("bert_large fp16", r"^.*training_sequences_per_second :.*$",
                                      -6),
}


def log_figure(text, pattern, field):
    """The figure of one log: the last line matching `pattern`, split on spaces, at `field`
    (0 when no line has a number there: the compile script counts such a log as failed)."""
    figure = 0.0
    regex = re.compile(pattern)
    for line in text.split("\n"):
        for m in regex.finditer(line):
            try:
                figure = float(m.group().split(" ")[field])
            except (IndexError, ValueError):
                pass
    return figure


def spread(per_node):
    """Median, min and max over the median, and the median and largest |x / median - 1|."""
    med = statistics.median(per_node)
    dev = [abs(x / med - 1) for x in per_node]
    return {"nodes": len(per_node), "median": med, "min": min(per_node) / med,
            "max": max(per_node) / med, "median_dev": statistics.median(dev), "max_dev": max(dev)}


def git(mirror, *args):
    out = subprocess.run(["git", "-C", mirror, *args], capture_output=True, text=True,
                         errors="replace")
    if out.returncode != 0:
        sys.exit(f"lambda_node_spread.py: git {' '.join(args)} in {mirror}: {out.stderr.strip()}")
    return out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mirror", help="git directory of lambdal/deeplearning-benchmark")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--systems", default=r"_1xH100_80GB_SXM5_",
                    help="regex a results_v2 system folder must match (default: 1x H100 SXM5)")
    a = ap.parse_args()
    path = re.compile(r"pytorch/results_v2/([^/]+)/(PyTorch_[^/]+)/[^/]+\.txt$")
    systems = re.compile(a.systems)
    figures = collections.defaultdict(lambda: collections.defaultdict(list))
    for f in git(a.mirror, "ls-tree", "-r", "--name-only", a.commit, "pytorch/results_v2").split():
        m = path.match(f)
        if not m or m.group(2) not in TESTS or not systems.search(m.group(1)):
            continue
        column, pattern, field = TESTS[m.group(2)]
        x = log_figure(git(a.mirror, "show", f"{a.commit}:{f}"), pattern, field)
        if x > 0:
            figures[column][m.group(1)].append(x)
    if not figures:
        sys.exit(f"lambda_node_spread.py: no results_v2 logs match --systems '{a.systems}'")
    print(f"{'benchmark':<16} {'nodes':>5} {'median':>9} {'min/med':>8} {'max/med':>8} "
          f"{'med|dev|':>9} {'max|dev|':>9}")
    for column in sorted(figures):
        s = spread([statistics.mean(v) for v in figures[column].values()])
        print(f"{column:<16} {s['nodes']:>5} {s['median']:>9.1f} {s['min']:>8.3f} {s['max']:>8.3f} "
              f"{s['median_dev']:>9.3f} {s['max_dev']:>9.3f}")


if __name__ == "__main__":
    main()
