#!/usr/bin/env python3
"""Speedup over one node against the number of nodes, one line per series, and the ideal y = x.

    /usr/bin/python3 analysis/plot_speedup.py sweep.csv -o out/speedup [--x cluster.workers]
        [--title TITLE] [--no-ideal]

Input: the CSV of `poseidon sweep` (from Python: plot(df, "out/speedup") with the DataFrame of
poseidon.sweep(), docs/python.md). Series are the rows sharing every axis value except --x
(see poseidon_csv.group_series). Writes OUT.png and OUT.svg.
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


def speedup_lines(sweep, x, ideal=True):
    """Returns the lines to draw: one per series, then (when `ideal`) y = x over the node counts."""
    sweep.require(x, "speedup")
    lines = [Line(s.label, s.numbers(x), s.numbers("speedup"), False)
             for s in poseidon_csv.group_series(sweep, x)]
    if ideal:
        nodes = sorted({v for line in lines for v in line.xs})
        lines.append(Line(IDEAL_LABEL, nodes, list(nodes), True))
    return lines


def default_title(sweep):
    models = sorted({poseidon_csv.format_value(r.get("model")) for r in sweep.rows})
    return "%s: speedup over one node" % ", ".join(models) if len(models) <= 2 else "Speedup"


def draw(sweep, x, title=None, ideal=True):
    lines = speedup_lines(sweep, x, ideal)
    fig, ax = plt.subplots(figsize=poseidon_plot.FIGSIZE)
    for line in lines:
        style = poseidon_plot.IDEAL_STYLE if line.ideal else dict(marker="o")
        ax.plot(line.xs, line.ys, label=line.label, **style)
    nodes = sorted({v for line in lines for v in line.xs})
    ax.set_xticks(nodes)
    ax.set_xticklabels([poseidon_csv.format_value(v) for v in nodes])
    ax.set_xlabel("nodes (%s)" % x if x == "cluster.workers" else x)
    ax.set_ylabel("speedup over one node")
    ax.set_ylim(bottom=0)
    ax.set_title(title or default_title(sweep))
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def plot(sweep, out, x="cluster.workers", title=None, ideal=True):
    """Draws a sweep -- a CSV path, or a DataFrame such as poseidon.sweep() returns in a notebook
    -- into OUT.png and OUT.svg (what the command line does); returns the two paths."""
    poseidon_plot.setup()
    fig = draw(poseidon_csv.read(sweep), x, title, ideal)
    return poseidon_plot.save(fig, out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="CSV written by `poseidon sweep SWEEP.yaml -o CSV`")
    parser.add_argument("-o", "--output", required=True, metavar="OUT_STEM",
                        help="writes OUT_STEM.png and OUT_STEM.svg")
    parser.add_argument("--x", default="cluster.workers",
                        help="column holding the node count (default: cluster.workers)")
    parser.add_argument("--title", help="figure title (default: the model and 'speedup')")
    parser.add_argument("--no-ideal", action="store_true", help="leave out the y = x line")
    args = parser.parse_args(argv)

    for path in plot(args.csv, args.output, args.x, args.title, not args.no_ideal):
        print("wrote %s" % path)


if __name__ == "__main__":
    sys.exit(poseidon_csv.run_cli(main))
