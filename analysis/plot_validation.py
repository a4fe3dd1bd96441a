#!/usr/bin/python3
"""Plots of `poseidon validate` output: predicted against measured iteration time (with the
identity line) and the error of every configuration.

    /usr/bin/python3 analysis/plot_validation.py docs/validation_matrix.csv -o out/validation
    # writes out/validation_scatter.{png,svg} and out/validation_error.{png,svg}
    /usr/bin/python3 analysis/plot_validation.py --table docs/validation_matrix.csv
    # prints a Markdown table: per configuration each run's measured ms and error, the median

Several CSVs are drawn together. A CSV with a `run` column holds repeated runs of the same
configurations: each configuration is drawn once, at the median over its runs (measured time
and error), with the smallest and largest error of its runs as an error bar.
"""
import argparse
import csv
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402

import poseidon_plot  # noqa: E402

FIXED = {"run", "index", "name", "workers", "measured_ms", "measured_std_ms", "predicted_ms",
         "predicted_std_ms", "error_pct", "network_error_pct"}


def runs_of(path):
    """Per configuration label, in first-seen order: [(measured ms, predicted ms, error %,
    network model's error % on the live traffic or None)] of its runs (rows without an error
    are skipped; CSVs from before the network_error_pct column give None)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise ValueError(f"{path}: cannot read: {err.strerror}")
    if not rows or "error_pct" not in rows[0]:
        raise ValueError(f"{path}: not a `poseidon validate` CSV (no error_pct column)")
    runs = {}
    for r in rows:
        if not r["error_pct"]:
            continue
        label = " ".join(r[k] for k in r if k not in FIXED) or r["name"]
        net = r.get("network_error_pct") or None
        runs.setdefault(label, []).append(
            (float(r["measured_ms"]), float(r["predicted_ms"]), float(r["error_pct"]),
             float(net) if net is not None else None))
    if not runs:
        raise ValueError(f"{path}: no configuration has both a measured and a predicted time")
    return runs


def table(paths):
    """Markdown: per configuration its runs' measured ms and errors, bold the median error;
    with a network_error_pct column, also the network model's error on each run's traffic."""
    data = [runs_of(path) for path in paths]
    with_net = any(n is not None for runs in data for v in runs.values() for *_, n in v)
    head = ("| configuration | measured ms, each run | predicted ms | error %, each run (median) |"
            + (" network model on the live traffic, % |" if with_net else ""))
    lines = [head, "|---|---|---|---|" + ("---|" if with_net else "")]
    for runs in data:
        for label, v in runs.items():
            errs = [e for _, _, e, _ in v]
            line = (f"| {label} | {' / '.join(f'{m:.3f}' for m, _, _, _ in v)} | "
                    f"{statistics.median(p for _, p, _, _ in v):.3f} | "
                    f"{' / '.join(f'{e:+.2f}' for e in errs)} "
                    f"(**{statistics.median(errs):+.2f}**) |")
            if with_net:
                line += " " + " / ".join("n/a" if n is None else f"{n:+.2f}" for *_, n in v) + " |"
            lines.append(line)
    return "\n".join(lines)


def read(path):
    """Per configuration, in first-seen order: (label, measured ms, predicted ms, error %,
    lowest error %, highest error %), medians over the runs of that configuration; rows
    without an error are skipped."""
    runs = runs_of(path)
    out = []
    for label, v in runs.items():
        errs = [e for _, _, e, _ in v]
        out.append((label, statistics.median(m for m, _, _, _ in v),
                    statistics.median(p for _, p, _, _ in v), statistics.median(errs), min(errs),
                    max(errs)))
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", nargs="+", help="`poseidon validate` CSVs")
    p.add_argument("-o", "--output", help="output stem (required unless --table)")
    p.add_argument("--table", action="store_true",
                   help="print a Markdown table of the runs instead of drawing")
    p.add_argument("--bound", type=float, default=8.0, help="error band drawn, in %% (default 8)")
    a = p.parse_args(argv)
    if a.table:
        try:
            print(table(a.csv))
        except ValueError as err:
            print(f"plot_validation.py: error: {err}", file=sys.stderr)
            return 2
        return 0
    if not a.output:
        p.error("-o/--output is required unless --table")
    try:
        rows = [r for path in a.csv for r in read(path)]
    except ValueError as err:
        print(f"plot_validation.py: error: {err}", file=sys.stderr)
        return 2
    poseidon_plot.setup()
    stem = poseidon_plot.stem_of(a.output)

    fig, ax = plt.subplots(figsize=poseidon_plot.FIGSIZE)
    meas = [r[1] for r in rows]
    pred = [r[2] for r in rows]
    lo, hi = min(meas + pred) * 0.8, max(meas + pred) * 1.25
    ax.plot([lo, hi], [lo, hi], label="predicted = measured", **poseidon_plot.IDEAL_STYLE)
    ax.fill_between([lo, hi], [lo * (1 - a.bound / 100), hi * (1 - a.bound / 100)],
                    [lo * (1 + a.bound / 100), hi * (1 + a.bound / 100)], alpha=0.15,
                    label=f"within {a.bound:g}%")
    ax.scatter(meas, pred, zorder=3, label="configurations")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured iteration time, live (ms)")
    ax.set_ylabel("predicted iteration time, simulator (ms)")
    ax.set_title("simulator vs live, per configuration")
    ax.legend()
    poseidon_plot.save(fig, stem + "_scatter")

    fig, ax = plt.subplots(figsize=(max(7.0, 0.35 * len(rows)), 4.5))
    x = range(len(rows))
    err = [r[3] for r in rows]
    ax.bar(x, err, zorder=3)
    if any(r[4] != r[5] for r in rows):
        ax.errorbar(x, err, yerr=[[r[3] - r[4] for r in rows], [r[5] - r[3] for r in rows]],
                    fmt="none", ecolor="black", elinewidth=0.8, capsize=2, zorder=4,
                    label="lowest to highest of the runs")
        ax.legend(fontsize="small")
    ax.axhline(a.bound, **poseidon_plot.IDEAL_STYLE)
    ax.axhline(-a.bound, **poseidon_plot.IDEAL_STYLE)
    ax.set_xticks(list(x))
    ax.set_xticklabels([r[0] for r in rows], rotation=70, ha="right", fontsize="x-small")
    ax.set_ylabel("error of the prediction (%)")
    ax.set_title("(predicted - measured) / measured" +
                 (", median of the runs" if any(r[4] != r[5] for r in rows) else ""))
    fig.tight_layout()
    poseidon_plot.save(fig, stem + "_error")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
