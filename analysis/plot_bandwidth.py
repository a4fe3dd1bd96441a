#!/usr/bin/env python3
"""Speedup over one node against NIC bandwidth (log x), one line per series.

    /usr/bin/python3 analysis/plot_bandwidth.py sweep.csv -o out/bandwidth
        [--x cluster.network.bandwidth_gbps] [--title TITLE] [--no-ideal]

Input: the CSV of `poseidon sweep` (from Python: plot(df, "out/bandwidth") with the DataFrame of
poseidon.sweep(), docs/python.md). Series are the rows sharing every axis value except --x
(typically one per cluster size). Where a series has one worker count, a dotted line in its
colour marks its ideal speedup (= workers). Writes OUT.png and OUT.svg.
"""

import argparse
import collections
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display; must precede the pyplot import
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

import poseidon_csv  # noqa: E402
import poseidon_plot  # noqa: E402

# ideal: the series' linear speedup (its worker count), or None where workers vary or are absent.
Line = collections.namedtuple("Line", "label xs ys ideal")


def bandwidth_lines(sweep, x):
    """Returns one Line per series: bandwidths, speedups and the ideal speedup."""
    sweep.require(x, "speedup")
    lines = []
    for s in poseidon_csv.group_series(sweep, x):
        xs = s.numbers(x)
        bad = [r for r, v in zip(s.rows, xs) if v <= 0]
        if bad:
            raise ValueError("%s:%d: column '%s' is %s; a log axis needs values above 0"
                             % (sweep.path, bad[0].line, x, poseidon_csv.format_value(bad[0][x])))
        ideal = None
        if "workers" in sweep.columns:
            workers = set(s.numbers("workers"))
            ideal = workers.pop() if len(workers) == 1 else None
        lines.append(Line(s.label, xs, s.numbers("speedup"), ideal))
    return lines


def default_title(sweep):
    models = sorted({poseidon_csv.format_value(r.get("model")) for r in sweep.rows})
    what = ", ".join(models) if len(models) <= 2 else "Speedup"
    return "%s: speedup against bandwidth" % what


def draw(sweep, x, title=None, ideal=True):
    lines = bandwidth_lines(sweep, x)
    fig, ax = plt.subplots(figsize=poseidon_plot.FIGSIZE)
    handles = []
    for line in lines:
        (handle,) = ax.plot(line.xs, line.ys, marker="o", label=line.label)
        handles.append(handle)
        if ideal and line.ideal is not None:
            ax.axhline(line.ideal, color=handle.get_color(), linestyle=":", linewidth=1.2,
                       zorder=1.5)
    if ideal and any(line.ideal is not None for line in lines):
        handles.append(Line2D([], [], color="gray", linestyle=":", linewidth=1.2,
                              label="ideal (= workers)"))
    ax.set_xscale("log")
    values = sorted({v for line in lines for v in line.xs})
    ax.set_xticks(values)
    ax.set_xticklabels([poseidon_csv.format_value(v) for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())  # only the swept values are labelled
    ax.set_xlabel("NIC bandwidth, Gbit/s (%s)" % x if x.endswith("bandwidth_gbps") else x)
    ax.set_ylabel("speedup over one node")
    # axhline does not take part in autoscaling: leave room above the highest ideal line too.
    top = max([y for line in lines for y in line.ys] +
              [line.ideal for line in lines if ideal and line.ideal is not None])
    ax.set_ylim(0, top * 1.06)
    ax.set_title(title or default_title(sweep))
    ax.legend(handles=handles, loc="best")
    fig.tight_layout()
    return fig


def plot(sweep, out, x="cluster.network.bandwidth_gbps", title=None, ideal=True):
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
    parser.add_argument("--x", default="cluster.network.bandwidth_gbps",
                        help="column holding the bandwidth (default: "
                             "cluster.network.bandwidth_gbps)")
    parser.add_argument("--title", help="figure title (default: the model and what is plotted)")
    parser.add_argument("--no-ideal", action="store_true",
                        help="leave out the dotted ideal-speedup lines")
    args = parser.parse_args(argv)

    for path in plot(args.csv, args.output, args.x, args.title, not args.no_ideal):
        print("wrote %s" % path)


if __name__ == "__main__":
    sys.exit(poseidon_csv.run_cli(main))
