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

Each sample is also counted apart when no message reached the worker while it lasted (from b's
modelled end, or from seen(a) for a hand-off, to seen(b)): the simulator charges a message's CPU
on its receiving process apart from both keys (validation/testbed_keys.h, AddHostLatencies).

Usage: analysis/host_latency.py WORK_DIR/config-N/run-R/trace [...] [--warmup 2]
Prints the median, p10 and p90 of both, and of their quiet samples, per trace folder and over all.
"""
import bisect
import argparse
import glob
import os
import statistics

import poseidon_trace


def worker_tasks(path):
    """Each compute lane's tasks (poseidon_trace events) by start, with the times messages
    reached the lane's process."""
    events = poseidon_trace.read(path)
    arrivals = {}
    for e in events:
        if e.kind == "message":
            arrivals.setdefault(e.peer, []).append(e.ts + e.dur)
    for times in arrivals.values():
        times.sort()
    out = {}
    for e in events:
        if e.kind == "task" and e.thread.lane == "compute":
            out.setdefault(e.thread, []).append(e)
    return [(sorted(tasks, key=lambda e: e.ts), arrivals.get(thread.actor, []))
            for thread, tasks in out.items()]


def quiet(delivered, start, end):
    """No message reached the process in (start, end]."""
    i = bisect.bisect_right(delivered, start)
    return i == len(delivered) or delivered[i] > end


def samples(folder, warmup):
    wake, handoff, wake_quiet, handoff_quiet = [], [], [], []
    for path in sorted(glob.glob(os.path.join(folder, "rank-*.json"))):
        for tasks, delivered in worker_tasks(path):
            tasks = [t for t in tasks if t.clock >= warmup]
            for a, b, c in zip(tasks, tasks[1:], tasks[2:]):
                seen_a = a.ts + a.dur
                seen_b = b.ts + b.dur
                if not (b.ts < seen_a and c.ts < seen_b):
                    continue  # b or c started when handed over, not absorbed: no modelled end
                end_b = c.ts
                if end_b > seen_a:
                    wake.append(seen_b - end_b)
                    if quiet(delivered, end_b, seen_b):
                        wake_quiet.append(seen_b - end_b)
                else:
                    handoff.append(seen_b - seen_a)
                    if quiet(delivered, seen_a, seen_b):
                        handoff_quiet.append(seen_b - seen_a)
    return wake, handoff, wake_quiet, handoff_quiet


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
    total = [[], [], [], []]
    for folder in args.folders:
        if not glob.glob(os.path.join(folder, "rank-*.json")):
            raise SystemExit(f"host_latency: {folder}: no rank-*.json traces there; give "
                             "WORK_DIR/config-N/run-R/trace of a validate run")
        try:
            got = samples(folder, args.warmup)
        except poseidon_trace.TraceError as err:
            raise SystemExit(f"host_latency: {err}") from None
        for t, g in zip(total, got):
            t += g
        report(folder, got)
    if len(args.folders) > 1:
        report("all", total)


def report(what, got):
    w, h, wq, hq = got
    print(f"{what}: wake-up {summary(w)}; hand-off {summary(h)}")
    print(f"  no message reaching the worker meanwhile: wake-up {summary(wq)}; hand-off {summary(hq)}")


if __name__ == "__main__":
    main()
