#!/usr/bin/env python3
"""Where an iteration's time goes: compute and stall per sweep point, or per layer of one run.

    /usr/bin/python3 analysis/plot_breakdown.py sweep.csv -o out/breakdown [--x cluster.workers]
        [--title TITLE]
    /usr/bin/python3 analysis/plot_breakdown.py --layers run.json -o out/layers [--title TITLE]

Sweep mode (input: the CSV of `poseidon sweep`): for each value of --x, one bar per series
(grouped), stacking compute_ms and wait_ms (the stall: time a worker waits for parameters), which
add up to about the iteration time; a black tick on each bar marks communication_ms, the time the
NIC is busy, which overlaps compute and so is not stacked. --x may be a text column (`variant`).

Layers mode (input: the JSON of `poseidon simulate --format json`, which must hold a "layers" array
of {name, fwd_ms, bwd_ms, sync_ms} and optionally scheme): a pair of horizontal bars per layer,
first layer on top, labelled "name (scheme)": compute (forward then backward, stacked) and sync
(from the layer's backward end until its parameters are fresh again). Writes OUT.png and OUT.svg.

From Python (docs/python.md): plot(df, OUT) draws the DataFrame of poseidon.sweep(), and
plot_layers(run, OUT) the dict of poseidon.simulate().
"""

import argparse
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display; must precede the pyplot import
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

import poseidon_csv  # noqa: E402
import poseidon_plot  # noqa: E402

BAR_GROUP_WIDTH = 0.8  # of the space between two x categories
WAIT_HATCH = "///"

# One series' bars: x values (categories) and, per point, milliseconds per iteration.
Bars = collections.namedtuple("Bars", "label xs compute wait communication")
Layer = collections.namedtuple("Layer", "name fwd_ms bwd_ms sync_ms scheme")  # scheme: optional
LAYER_KEYS = ("name", "fwd_ms", "bwd_ms", "sync_ms")


def breakdown_bars(sweep, x):
    """Returns (categories, [Bars per series]); categories are the distinct x values in order."""
    sweep.require(x, "compute_ms", "wait_ms", "communication_ms")
    bars = [Bars(s.label, s.column(x), s.numbers("compute_ms"), s.numbers("wait_ms"),
                 s.numbers("communication_ms"))
            for s in poseidon_csv.group_series(sweep, x)]
    order = poseidon_csv.value_order(sweep.rows, x)
    categories = sorted({v for b in bars for v in b.xs}, key=order.get)
    return categories, bars


def draw_sweep(sweep, x, title=None):
    categories, bars = breakdown_bars(sweep, x)
    position = {v: i for i, v in enumerate(categories)}
    width = BAR_GROUP_WIDTH / len(bars)
    # Wider than the other figures: the legend goes on the right, where no bar can be under it.
    fig, ax = plt.subplots(figsize=(poseidon_plot.FIGSIZE[0] + 2.5, poseidon_plot.FIGSIZE[1]))
    single = len(bars) == 1
    for i, b in enumerate(bars):
        offset = (i - (len(bars) - 1) / 2) * width
        centres = [position[v] + offset for v in b.xs]
        # One series: two plain colours. Several: the series' colour, the stall hatched and pale.
        colour = "C0" if single else "C%d" % (i % 10)
        ax.bar(centres, b.compute, width, color=colour, edgecolor=colour, linewidth=0.5)
        ax.bar(centres, b.wait, width, bottom=b.compute, linewidth=0.5,
               color="C1" if single else colour, alpha=1.0 if single else 0.4,
               hatch=None if single else WAIT_HATCH, edgecolor="C1" if single else colour)
        ax.hlines(b.communication, [c - width / 2 for c in centres],
                  [c + width / 2 for c in centres], colors="black", linewidth=2, zorder=3)
    if single:
        handles = [Patch(color="C0", label="compute"), Patch(color="C1", label="stall (wait)")]
    else:
        handles = [Patch(color="C%d" % (i % 10), label=b.label) for i, b in enumerate(bars)]
        handles += [Patch(facecolor="white", edgecolor="gray", label="compute (solid)"),
                    Patch(facecolor="white", edgecolor="gray", hatch=WAIT_HATCH,
                          label="stall (wait, hatched)")]
    handles.append(Line2D([], [], color="black", linewidth=2,
                          label="communication\n(NIC busy, overlaps compute)"))
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels([poseidon_csv.format_value(v) for v in categories])
    ax.set_xlabel("nodes (%s)" % x if x == "cluster.workers" else x)
    ax.set_ylabel("time per iteration (ms)")
    ax.grid(axis="x", visible=False)
    ax.set_axisbelow(True)
    if title is None:
        models = sorted({poseidon_csv.format_value(r.get("model")) for r in sweep.rows})
        what = ", ".join(models) + ": " if len(models) <= 2 else ""
        title = what + "time per iteration: compute and stall"
    ax.set_title(title)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def read_layers(path):
    """Reads the "layers" of a `poseidon simulate --format json` file; returns (run, [Layer])."""
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
    except OSError as e:
        raise ValueError("cannot read %s: %s" % (path, e.strerror or e)) from None
    except json.JSONDecodeError as e:
        raise ValueError("%s:%d:%d: not JSON (%s); expected the output of "
                         "`poseidon simulate --format json`" % (path, e.lineno, e.colno, e.msg)) from None
    except UnicodeDecodeError as e:
        raise ValueError("%s is not a text file: %s" % (path, e)) from None
    return run, layers_of(run, path)


def layers_of(run, path):
    """The [Layer] of a run, the JSON of `poseidon simulate --format json` already parsed (or
    the dict poseidon.simulate() returns); `path` names it in messages."""
    if not isinstance(run, dict) or "layers" not in run:
        raise ValueError("%s has no \"layers\" array; write it with `poseidon simulate "
                         "--format json` from a build that reports per-layer times" % path)
    if not isinstance(run["layers"], list) or not run["layers"]:
        raise ValueError("%s: \"layers\" is empty or not an array; expected one object per "
                         "layer with name, fwd_ms, bwd_ms, sync_ms" % path)
    layers = []
    for i, entry in enumerate(run["layers"]):
        if not isinstance(entry, dict):
            raise ValueError("%s: layers[%d] is not an object" % (path, i))
        for key in LAYER_KEYS:
            if key not in entry:
                raise ValueError("%s: layers[%d] has no '%s'; each layer needs name, fwd_ms, "
                                 "bwd_ms, sync_ms" % (path, i, key))
        for key in LAYER_KEYS[1:]:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError("%s: layers[%d].%s is %s; expected a number of milliseconds"
                                 % (path, i, key, json.dumps(value)))
        scheme = entry.get("scheme")  # ps or sfb (SACP's choice), where the run reports it
        layers.append(Layer(str(entry["name"]), float(entry["fwd_ms"]), float(entry["bwd_ms"]),
                            float(entry["sync_ms"]), scheme if isinstance(scheme, str) else None))
    return layers


def draw_layers(run, layers, title=None):
    height = 0.4  # each of the two bars of a layer
    fig_height = max(poseidon_plot.FIGSIZE[1], 1.5 + 0.3 * len(layers))
    fig, ax = plt.subplots(figsize=(poseidon_plot.FIGSIZE[0], fig_height))
    ys = list(range(len(layers)))
    fwd = [layer.fwd_ms for layer in layers]
    bwd = [layer.bwd_ms for layer in layers]
    ax.barh([y - height / 2 for y in ys], fwd, height, color="#9ecae1", label="forward")
    ax.barh([y - height / 2 for y in ys], bwd, height, left=fwd, color="C0", label="backward")
    ax.barh([y + height / 2 for y in ys], [layer.sync_ms for layer in layers], height,
            color="C1", label="sync (backward end to fresh parameters)")
    ax.set_yticks(ys)
    ax.set_yticklabels([layer.name + (" (%s)" % layer.scheme if layer.scheme else "")
                        for layer in layers])
    ax.set_ylim(len(layers) - 0.5, -0.5)  # first layer on top
    ax.grid(axis="y", visible=False)
    ax.set_axisbelow(True)
    ax.set_xlabel("ms per iteration")
    if title is None:
        what = [str(run[k]) for k in ("name", "model") if isinstance(run.get(k), str)]
        if isinstance(run.get("workers"), int):
            what.append("%d workers" % run["workers"])
        title = "per-layer compute and sync" + (" (%s)" % ", ".join(what) if what else "")
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="best")
    fig.tight_layout()
    return fig


def plot(sweep, out, x="cluster.workers", title=None):
    """Sweep mode: draws a sweep -- a CSV path, or a DataFrame such as poseidon.sweep() returns
    -- into OUT.png and OUT.svg; returns the two paths."""
    poseidon_plot.setup()
    return poseidon_plot.save(draw_sweep(poseidon_csv.read(sweep), x, title), out)


def plot_layers(run, out, title=None):
    """Layers mode: draws one run -- a JSON path, or the dict poseidon.simulate() returns --
    into OUT.png and OUT.svg; returns the two paths."""
    poseidon_plot.setup()
    if isinstance(run, dict):
        layers = layers_of(run, "the run")
    else:
        run, layers = read_layers(run)
    return poseidon_plot.save(draw_layers(run, layers, title), out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="?", help="CSV written by `poseidon sweep SWEEP.yaml -o CSV`")
    parser.add_argument("--layers", metavar="JSON",
                        help="plot per-layer times from `poseidon simulate --format json` instead")
    parser.add_argument("-o", "--output", required=True, metavar="OUT_STEM",
                        help="writes OUT_STEM.png and OUT_STEM.svg")
    parser.add_argument("--x", default="cluster.workers",
                        help="sweep mode: column along the x axis (default: cluster.workers)")
    parser.add_argument("--title", help="figure title")
    args = parser.parse_args(argv)
    if (args.csv is None) == (args.layers is None):
        parser.error("give either a sweep CSV or --layers JSON, not both or neither")

    if args.layers is not None:
        paths = plot_layers(args.layers, args.output, args.title)
    else:
        paths = plot(args.csv, args.output, args.x, args.title)
    for path in paths:
        print("wrote %s" % path)


if __name__ == "__main__":
    sys.exit(poseidon_csv.run_cli(main))
