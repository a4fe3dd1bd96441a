#!/usr/bin/python3
"""One worker's timeline, simulated above live: compute passes, pushes and pulls per iteration.

    /usr/bin/python3 analysis/plot_timeline.py out/validate/config-0/sim.json \\
        out/validate/config-0/live.json --worker 0 --iterations 3 5 -o out/timeline

Reads two Chrome traces of the same scenario (`poseidon validate` leaves sim.json and live.json
per configuration). Each panel starts at the worker's begin of the first iteration shown.
"""
import argparse
import sys

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402

import poseidon_plot  # noqa: E402
import poseidon_trace  # noqa: E402

LANES = (("forward", "compute"), ("backward", "compute"), ("push", "push / factors"),
         ("params", "pull"))
COLORS = {"forward": "tab:blue", "backward": "tab:orange", "push": "tab:green",
          "factors": "tab:green", "params": "tab:red"}


def spans(path, worker, first, last):
    """[(lane, kind, start_ms, dur_ms)] of `worker` (index) for iterations first..last; its
    compute on its own lane (device 0's on a machine of several devices)."""
    events = poseidon_trace.read(path)
    me = ("worker", worker)
    begin = None
    for e in events:
        if e.kind == "iteration" and e.iteration == first and e.thread.actor == me:
            begin = e.ts
    if begin is None:
        raise ValueError(f"{path}: worker {worker} has no iteration {first}")
    out = []
    for e in events:
        if e.phase != "X" or not first <= e.clock <= last:
            continue
        mine = e.thread.actor == me
        if e.kind == "task" and e.what in ("forward", "backward") and mine \
                and e.thread.device == 0:
            lane = "compute"
        elif e.kind == "message" and e.what in ("push", "factors") and mine:
            lane = "push / factors"
        elif e.kind == "message" and e.what == "params" and e.peer == me:
            lane = "pull"
        else:
            continue
        out.append((lane, e.what, (e.ts - begin) / 1e3, e.dur / 1e3))
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("simulated")
    p.add_argument("live")
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--iterations", type=int, nargs=2, default=(2, 3), metavar=("FIRST", "LAST"))
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args(argv)
    try:
        panels = [(title, spans(path, a.worker, *a.iterations))
                  for title, path in (("simulated", a.simulated), ("live", a.live))]
    except ValueError as err:  # poseidon_trace.TraceError among them
        print(f"plot_timeline.py: error: {err}", file=sys.stderr)
        return 2
    poseidon_plot.setup()
    fig, axes = plt.subplots(2, 1, figsize=(9.0, 4.5), sharex=True)
    lanes = ["compute", "push / factors", "pull"]
    for ax, (title, rows) in zip(axes, panels):
        for lane, kind, start, dur in rows:
            ax.broken_barh([(start, max(dur, 0.01))], (lanes.index(lane) - 0.35, 0.7),
                           color=COLORS[kind], alpha=0.55 if lane != "compute" else 0.9,
                           linewidth=0)
        ax.set_yticks(range(len(lanes)))
        ax.set_yticklabels(lanes)
        ax.invert_yaxis()
        ax.set_title(f"{title}: worker {a.worker}, iterations {a.iterations[0]}-{a.iterations[1]}",
                     fontsize="medium")
    axes[-1].set_xlabel("ms from the first iteration's begin")
    fig.tight_layout()
    poseidon_plot.save(fig, poseidon_plot.stem_of(a.output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
