#!/usr/bin/env python3
"""Poseidon against the systems users run instead, on one cluster: a bar per system.

    poseidon compare SCENARIO --format json > compare.json        # or: poseidon compare ... --plot OUT
    /usr/bin/python3 analysis/plot_compare.py compare.json -o out/compare [--title TITLE]

Input: the JSON of `poseidon compare --format json` (sim/compare.h): one object with the scenario's
name, model, machines, devices_per_machine, and "systems", one object per system with its label,
"ran", and when it ran iteration_ms, speedup, poseidon_gain and breakdown_ms {compute, wait,
communication}, or the reason it did not. Each system's bar stacks compute (solid) and wait
(hatched: iteration - compute, the compute stream idle, waiting for parameters: communication not
hidden by compute); a black tick marks the NIC busy time, which overlaps compute and so is not
stacked. Above each bar: its speedup over one device and how much faster Poseidon is. A system that
could not run keeps its place on the axis, marked "cannot run" (the reason is in the table).
Writes OUT.png and OUT.svg.

From Python: plot(data, OUT) draws a path to that JSON or the dict it holds; returns both paths.
"""

import argparse
import collections
import json
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")  # files only, no display; must precede the pyplot import
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

import poseidon_csv  # noqa: E402
import poseidon_plot  # noqa: E402

WAIT_HATCH = "///"
POSEIDON = "poseidon"

# One system's bar; figures are None when it did not run.
Bar = collections.namedtuple("Bar", "system label ran compute wait communication speedup gain "
                                    "reason")


def read(path):
    """Reads a `poseidon compare --format json` file into its dict."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ValueError("cannot read %s: %s" % (path, e.strerror or e)) from None
    except json.JSONDecodeError as e:
        raise ValueError("%s:%d:%d: not JSON (%s); expected the output of "
                         "`poseidon compare --format json`" % (path, e.lineno, e.colno, e.msg)) from None
    except UnicodeDecodeError as e:
        raise ValueError("%s is not a text file: %s" % (path, e)) from None


def _number(entry, key, where):
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("%s.%s is %s; expected a number" % (where, key, json.dumps(value)))
    return float(value)


def bars_of(data, path="the comparison"):
    """The [Bar] of a comparison (the parsed JSON); `path` names it in messages."""
    if not isinstance(data, dict) or not isinstance(data.get("systems"), list):
        raise ValueError("%s has no \"systems\" array; write it with `poseidon compare "
                         "--format json`" % path)
    if not data["systems"]:
        raise ValueError("%s: \"systems\" is empty" % path)
    bars = []
    for i, entry in enumerate(data["systems"]):
        where = "%s: systems[%d]" % (path, i)
        if not isinstance(entry, dict):
            raise ValueError("%s is not an object" % where)
        for key in ("system", "label", "ran"):
            if key not in entry:
                raise ValueError("%s has no '%s'; each system needs system, label, ran" % (where, key))
        if not entry["ran"]:
            bars.append(Bar(str(entry["system"]), str(entry["label"]), False, None, None, None,
                            None, None, str(entry.get("reason", ""))))
            continue
        breakdown = entry.get("breakdown_ms")
        if not isinstance(breakdown, dict):
            raise ValueError("%s has no \"breakdown_ms\" object {compute, wait, communication}"
                             % where)
        gain = entry.get("poseidon_gain")
        bars.append(Bar(str(entry["system"]), str(entry["label"]), True,
                        _number(breakdown, "compute", where + ".breakdown_ms"),
                        max(0.0, _number(breakdown, "wait", where + ".breakdown_ms")),
                        _number(breakdown, "communication", where + ".breakdown_ms"),
                        _number(entry, "speedup", where),
                        None if gain is None else _number(entry, "poseidon_gain", where), ""))
    if not any(b.ran for b in bars):
        raise ValueError("%s: no system ran (each has a reason in `poseidon compare`'s table)" % path)
    return bars


def annotation(bar):
    """The text above a bar: its speedup, and Poseidon's gain over it."""
    text = "speedup %.2fx" % bar.speedup
    if bar.system != POSEIDON and bar.gain is not None:
        text += "\nPoseidon %.2fx faster" % bar.gain
    return text


def draw(data, bars, title=None):
    # Wide enough for the two-line note above each of five bars; the legend goes under the axis.
    fig, ax = plt.subplots(figsize=(poseidon_plot.FIGSIZE[0] + 2.0, poseidon_plot.FIGSIZE[1] + 1.5))
    xs = list(range(len(bars)))
    width = 0.6
    top = max(b.compute + b.wait for b in bars if b.ran)
    top = max(top, max(b.communication for b in bars if b.ran))
    for x, b in zip(xs, bars):
        if not b.ran:
            ax.text(x, top * 0.02, "cannot run\n(see the table)", ha="center", va="bottom",
                    fontsize="small", color="gray")
            continue
        colour = "C2" if b.system == POSEIDON else "C0"
        ax.bar([x], [b.compute], width, color=colour, edgecolor=colour, linewidth=0.5)
        ax.bar([x], [b.wait], width, bottom=[b.compute], color="C1", edgecolor="C1",
               alpha=0.5, hatch=WAIT_HATCH, linewidth=0.5)
        ax.hlines([b.communication], [x - width / 2], [x + width / 2], colors="black",
                  linewidth=2, zorder=3)
        ax.annotate(annotation(b), (x, max(b.compute + b.wait, b.communication)),
                    xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                    fontsize="small")
    ax.set_xticks(xs)
    ax.set_xticklabels(["\n".join(textwrap.wrap(b.label, 16)) for b in bars])
    ax.set_ylim(0, top * 1.25)
    ax.set_ylabel("time per iteration (ms)")
    ax.grid(axis="x", visible=False)
    ax.set_axisbelow(True)
    if title is None:
        what = [str(data[k]) for k in ("name", "model") if isinstance(data.get(k), str)]
        machines = data.get("machines")
        devices = data.get("devices_per_machine")
        if isinstance(machines, int):
            what.append("%d machines" % machines + (" x %d devices" % devices
                                                    if isinstance(devices, int) and devices > 1
                                                    else ""))
        title = ("time per iteration by system, speedup over one device"
                 + (" (%s)" % ", ".join(what) if what else ""))
    ax.set_title(title, fontsize="medium")
    handles = [Patch(color="C2", label="compute\n(Poseidon)"), Patch(color="C0", label="compute"),
               Patch(facecolor="C1", edgecolor="C1", alpha=0.5, hatch=WAIT_HATCH,
                     label="wait: communication\nnot hidden by compute"),
               Line2D([], [], color="black", linewidth=2,
                      label="communication\n(NIC busy, overlaps compute)")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4,
              borderaxespad=0)
    fig.tight_layout()
    return fig


def plot(data, out, title=None):
    """Draws a comparison -- a path to `poseidon compare --format json`'s file, or its dict --
    into OUT.png and OUT.svg; returns the two paths."""
    poseidon_plot.setup()
    if isinstance(data, dict):
        bars = bars_of(data)
    else:
        path = data
        data = read(path)
        bars = bars_of(data, path)
    return poseidon_plot.save(draw(data, bars, title), out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="JSON written by `poseidon compare SCENARIO --format json`")
    parser.add_argument("-o", "--output", required=True, metavar="OUT_STEM",
                        help="writes OUT_STEM.png and OUT_STEM.svg")
    parser.add_argument("--title", help="figure title")
    args = parser.parse_args(argv)
    for path in plot(args.json, args.output, args.title):
        print("wrote %s" % path)


if __name__ == "__main__":
    sys.exit(poseidon_csv.run_cli(main))
