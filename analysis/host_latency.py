#!/usr/bin/python3
"""The host latencies of a live run that replays compute, read from its traces.

A replayed task sleeps to its modelled end on its stream thread; the process's protocol thread
records the task as ending when it learns of it (real_runtime/node_compute.cc), and a task handed
over within sim::kReplayAbsorbNs of its predecessor's modelled end starts at that end. So for
three consecutive compute tasks a, b, c of one worker, where b and c started before their
predecessor was seen (both absorbed), b's modelled end is c's start, and:

- if b's modelled end lay after the moment a was seen (when b was handed over), b's stream thread
  slept to it: seen(b) - end(b) is one wake-up (the simulator's host_wakeup_us);
- otherwise b had ended already when it was handed over: seen(b) - seen(a) is one hand-off
  between awake threads (host_handoff_us).

Usage: analysis/host_latency.py WORK_DIR/config-N/run-R/trace [...] [--warmup 2]
Prints the median, p10 and p90 of both, per trace folder and over all.
"""
import argparse
import glob
import json
import os
import statistics


def worker_tasks(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    out = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "compute":
            continue
        if not names.get(e["tid"], "").endswith(" compute"):
            continue
        out.setdefault(e["tid"], []).append(e)
    return [sorted(v, key=lambda e: e["ts"]) for v in out.values()]


def samples(folder, warmup):
    wake, handoff = [], []
    for path in sorted(glob.glob(os.path.join(folder, "rank-*.json"))):
        for tasks in worker_tasks(path):
            tasks = [t for t in tasks if t.get("args", {}).get("clock", 0) >= warmup]
            for a, b, c in zip(tasks, tasks[1:], tasks[2:]):
                seen_a = a["ts"] + a["dur"]
                seen_b = b["ts"] + b["dur"]
                if not (b["ts"] < seen_a and c["ts"] < seen_b):
                    continue  # b or c started when handed over, not absorbed: no modelled end
                end_b = c["ts"]
                if end_b > seen_a:
                    wake.append(seen_b - end_b)
                else:
                    handoff.append(seen_b - seen_a)
    return wake, handoff


def summary(xs):
    if not xs:
        return "none"
    q = statistics.quantiles(xs, n=10) if len(xs) > 1 else [xs[0]] * 9
    return (f"median {statistics.median(xs):.1f} us (p10 {q[0]:.1f}, p90 {q[8]:.1f}, mean "
            f"{statistics.mean(xs):.1f}, {len(xs)} samples)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", help="trace folders (WORK_DIR/config-N/run-R/trace)")
    ap.add_argument("--warmup", type=int, default=2, help="clocks to skip (default 2)")
    args = ap.parse_args()
    all_w, all_h = [], []
    for folder in args.folders:
        if not glob.glob(os.path.join(folder, "rank-*.json")):
            raise SystemExit(f"host_latency: {folder}: no rank-*.json traces there; give "
                             "WORK_DIR/config-N/run-R/trace of a validate run")
        w, h = samples(folder, args.warmup)
        all_w += w
        all_h += h
        print(f"{folder}: wake-up {summary(w)}; hand-off {summary(h)}")
    if len(args.folders) > 1:
        print(f"all: wake-up {summary(all_w)}; hand-off {summary(all_h)}")


if __name__ == "__main__":
    main()
