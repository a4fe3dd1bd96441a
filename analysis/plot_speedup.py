#!/usr/bin/env python3
"""Speedup over one node against the number of nodes, one line per series, and the ideal y = x.

    /usr/bin/python3 analysis/plot_speedup.py sweep.csv [more.csv ...] -o out/speedup
        [--x cluster.workers] [--title TITLE] [--no-ideal] [--facet COLUMN] [--ideal-slope S]

Input: the CSV of `poseidon sweep` (from Python: plot(df, "out/speedup") with the DataFrame of
poseidon.sweep(), docs/python.md); several CSVs with the same axes are drawn together. Series are
the rows sharing every axis value except --x (see poseidon_csv.group_series). --facet draws one
panel per value of an axis (a workload, say); --ideal-slope S draws y = S x (machines of S
devices, whose speedup is over one device). Writes OUT.png and OUT.svg.
"""

import argparse
import collections
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display; must precede the pyplot import
from matplotlib import pyplot as plt  # noqa: E402

import poseidon_csv  # noqa: E402
import poseidon_plot  # noqa: E402

IDEAL_LABEL = "ideal (linear)"

Line = collections.namedtuple("Line", "label xs ys ideal")


def speedup_lines(sweep, x, ideal=True, slope=1):
    """Returns the lines to draw: one per series, then (when `ideal`) y = slope x over the node
    counts."""
    sweep.require(x, "speedup")
    lines = [Line(s.label, s.numbers(x), s.numbers("speedup"), False)
             for s in poseidon_csv.group_series(sweep, x)]
    if ideal:
        nodes = sorted({v for line in lines for v in line.xs})
        label = IDEAL_LABEL if slope == 1 else "ideal (%s x %s)" % (poseidon_csv.format_value(slope), x)
        lines.append(Line(label, nodes, [slope * v for v in nodes], True))
    return lines


def default_title(sweep):
    models = sorted({poseidon_csv.format_value(r.get("model")) for r in sweep.rows})
    return "%s: speedup over one node" % ", ".join(models) if len(models) <= 2 else "Speedup"


def _draw_panel(ax, sweep, x, ideal, slope):
    lines = speedup_lines(sweep, x, ideal, slope)
    for line in lines:
        style = poseidon_plot.IDEAL_STYLE if line.ideal else dict(marker="o")
        ax.plot(line.xs, line.ys, label=line.label, **style)
    nodes = sorted({v for line in lines for v in line.xs})
    ax.set_xticks(nodes)
    ax.set_xticklabels([poseidon_csv.format_value(v) for v in nodes])
    ax.set_xlabel("nodes (%s)" % x if x == "cluster.workers" else x)
    ax.set_ylabel("speedup over one node" if slope == 1 else "speedup over one device")
    ax.set_ylim(bottom=0)


def draw(sweep, x, title=None, ideal=True, facet=None, slope=1):
    if facet is None:
        fig, ax = plt.subplots(figsize=poseidon_plot.FIGSIZE)
        _draw_panel(ax, sweep, x, ideal, slope)
        ax.set_title(title or default_title(sweep))
        ax.legend(loc="upper left")
        fig.tight_layout()
        return fig
    sweep.require(facet)
    values = sorted(poseidon_csv.value_order(sweep.rows, facet).items(), key=lambda kv: kv[1])
    cols = 2 if len(values) > 1 else 1
    rows = (len(values) + cols - 1) // cols
    width, height = poseidon_plot.FIGSIZE
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols * 0.8, height * rows * 0.8),
                             squeeze=False)
    for i, (value, _) in enumerate(values):
        ax = axes[i // cols][i % cols]
        _draw_panel(ax, poseidon_csv.only(sweep, facet, value), x, ideal, slope)
        ax.set_title(poseidon_csv.format_value(value))
    for j in range(len(values), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 2))
    fig.suptitle(title or "Speedup")
    fig.tight_layout(rect=(0, 0.06 * (1 + len(labels) // 2), 1, 1))
    return fig


def plot(sweep, out, x="cluster.workers", title=None, ideal=True, facet=None, slope=1):
    """Draws a sweep -- a CSV path, a DataFrame such as poseidon.sweep() returns in a notebook,
    or a list of them with the same axes -- into OUT.png and OUT.svg (what the command line
    does); returns the two paths."""
    poseidon_plot.setup()
    sources = sweep if isinstance(sweep, (list, tuple)) else [sweep]
    merged = poseidon_csv.concat([poseidon_csv.read(s) for s in sources])
    fig = draw(merged, x, title, ideal, facet, slope)
    return poseidon_plot.save(fig, out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+",
                        help="CSV written by `poseidon sweep SWEEP.yaml -o CSV` (several: the "
                             "same axes, drawn together)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT_STEM",
                        help="writes OUT_STEM.png and OUT_STEM.svg")
    parser.add_argument("--x", default="cluster.workers",
                        help="column holding the node count (default: cluster.workers)")
    parser.add_argument("--title", help="figure title (default: the model and 'speedup')")
    parser.add_argument("--no-ideal", action="store_true", help="leave out the y = x line")
    parser.add_argument("--facet", metavar="COLUMN",
                        help="one panel per value of this axis (e.g. workload)")
    parser.add_argument("--ideal-slope", type=float, default=1, metavar="S",
                        help="the ideal line is y = S x (machines of S devices; default 1)")
    args = parser.parse_args(argv)
    if args.ideal_slope <= 0:
        raise ValueError("--ideal-slope must be > 0, got %g" % args.ideal_slope)
    slope = int(args.ideal_slope) if args.ideal_slope == int(args.ideal_slope) else args.ideal_slope
    for path in plot(args.csv, args.output, args.x, args.title, not args.no_ideal, args.facet,
                     slope):
        print("wrote %s" % path)


if __name__ == "__main__":
    sys.exit(poseidon_csv.run_cli(main))
