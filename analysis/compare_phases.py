#!/usr/bin/python3
"""Simulated against live, phase by phase: where does the prediction differ most?

    /usr/bin/python3 analysis/compare_phases.py out/validate/config-0/sim.json \\
        out/validate/config-0/live.json --warmup 2

Both files are Chrome traces of the same scenario (`poseidon validate` writes them as sim.json
and live.json per configuration, live.json under run-N/ with --repeat; or `simulate --trace` and
`trace merge`). Each is read once, by analysis/poseidon_trace.py. Per worker and iteration after
the warm-up, averaged:
  iteration  from one iteration's begin to the next's
  compute    forward and backward tasks (the worker's compute lane; on a machine of several
             devices, device 0's)
  wait       iteration - compute: the worker idled for parameters (exposed communication)
  push       time with at least one of the worker's gradient pushes or factors in flight
  pull       time with at least one parameter message to the worker in flight
  update     the shards' optimizer steps, per shard and iteration
and names the phase with the largest absolute difference (iteration aside). A message is in
flight from its send to its delivery in both (live: the receiver records it, on the job's time
base). Then the stagger: per worker, how long after the first worker of its clock it began each
iteration (mean over the clocks after the warm-up). Workers that settle at another stagger live
than simulated run another schedule (one waits for another's parameters), even with every phase
close on average. Last, each worker's own pace: its mean time from one iteration begin to the
next over the clocks after the warm-up. Under SSP and ASP the workers run at paces of their own and
the job's iteration time is its slowest worker's (core/pace.h), so a prediction can be right for
one worker and wrong for the one that sets the pace (docs/validation.md, "One worker sets an ASP
job's pace").
"""
import argparse
import sys
from collections import defaultdict

import poseidon_trace


def load(path):
    """A trace's events (poseidon_trace.read) and each worker's iteration begins
    ({worker index: {clock: ts}})."""
    events = poseidon_trace.read(path)
    begins = defaultdict(dict)
    for e in events:
        if e.kind == "iteration" and e.thread.role == "worker":
            begins[e.thread.index].setdefault(e.iteration, e.ts)
    return events, begins


def phases(trace, warmup, path="trace"):
    """The per-phase means (ms) of a trace load() read."""
    events, begins = trace
    compute = defaultdict(float)
    update = defaultdict(float)
    push = defaultdict(list)
    pull = defaultdict(list)
    for e in events:
        if e.phase != "X" or e.clock < warmup:
            continue
        who = e.thread
        if e.kind == "task" and e.what in ("forward", "backward") and who.role == "worker" \
                and who.device == 0:
            compute[(who.index, e.clock)] += e.dur
        elif e.kind == "task" and e.what == "server_update":
            update[(who.actor, e.clock)] += e.dur
        elif e.kind == "message" and e.what in ("push", "factors") and who.role == "worker":
            push[(who.index, e.clock)].append((e.ts, e.ts + e.dur))
        elif e.kind == "message" and e.what == "params" and e.peer[0] == "worker":
            pull[(e.peer[1], e.clock)].append((e.ts, e.ts + e.dur))
    iters, comp = [], []
    for w, b in begins.items():
        for c in sorted(b):
            if c >= warmup and c + 1 in b:
                iters.append(b[c + 1] - b[c])
                comp.append(compute.get((w, c), 0.0))
    if not iters:
        raise ValueError(f"{path}: no two consecutive iteration begins after warm-up {warmup}")
    n = len(iters)
    mean = lambda v: sum(v) / max(1, len(v)) / 1e3  # noqa: E731  (us -> ms)
    inflight = lambda d: mean([union_length(v) for v in d.values()])  # noqa: E731
    return {"iteration": mean(iters), "compute": mean(comp),
            "wait": (sum(iters) - sum(comp)) / n / 1e3, "push": inflight(push),
            "pull": inflight(pull), "update": mean(list(update.values()))}


def stagger(trace, warmup):
    """Per worker (index), the mean (ms) over clocks >= warmup of its iteration begin minus the
    earliest begin of that clock among the workers. `trace`: what load() returns, or a path."""
    _, begins = load(trace) if isinstance(trace, str) else trace
    by_clock = defaultdict(dict)  # clock -> worker -> ts
    for w, b in begins.items():
        for clock, ts in b.items():
            if clock >= warmup:
                by_clock[clock][w] = ts
    offsets = defaultdict(list)
    for clock in sorted(by_clock):
        first = min(by_clock[clock].values())
        for w, ts in by_clock[clock].items():
            offsets[w].append(ts - first)
    return {w: sum(v) / len(v) / 1e3 for w, v in offsets.items()}


def worker_paces(trace, warmup):
    """Per worker (index), the mean (ms) of its iteration begin-to-begin times over clocks >=
    warmup. `trace`: what load() returns, or a path."""
    _, begins = load(trace) if isinstance(trace, str) else trace
    paces = {}
    for w, b in begins.items():
        steps = [b[c + 1] - b[c] for c in sorted(b) if c >= warmup and c + 1 in b]
        if steps:
            paces[w] = sum(steps) / len(steps) / 1e3
    return paces


def union_length(spans):
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        a = max(a, end)
        if b > a:
            total += b - a
            end = b
    return total


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("simulated")
    p.add_argument("live")
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args(argv)
    try:
        sim_trace, live_trace = load(a.simulated), load(a.live)
        sim, live = phases(sim_trace, a.warmup, a.simulated), phases(live_trace, a.warmup, a.live)
    except ValueError as err:  # poseidon_trace.TraceError among them
        print(f"compare_phases.py: error: {err}", file=sys.stderr)
        return 2
    print(f"{'phase':<8} {'simulated ms':>13} {'live ms':>10} {'difference':>11}")
    worst, worst_diff = None, -1.0
    for phase in ("iteration", "compute", "wait", "push", "pull", "update"):
        s, l = sim.get(phase, 0.0), live.get(phase, 0.0)
        print(f"{phase:<8} {s:>13.3f} {l:>10.3f} {s - l:>+11.3f}")
        if phase != "iteration" and abs(s - l) > worst_diff:
            worst, worst_diff = phase, abs(s - l)
    print(f"largest difference: {worst} ({worst_diff:.3f} ms per worker-iteration)")
    s_st, l_st = stagger(sim_trace, a.warmup), stagger(live_trace, a.warmup)
    print("stagger (ms after the first worker's iteration begin, mean):")
    for w in sorted(set(s_st) | set(l_st)):
        print(f"  worker {w}: simulated {s_st.get(w, float('nan')):+.1f}, "
              f"live {l_st.get(w, float('nan')):+.1f}")
    s_pace, l_pace = worker_paces(sim_trace, a.warmup), worker_paces(live_trace, a.warmup)
    print("each worker's own pace (ms per iteration, mean; under SSP and ASP the slowest sets the "
          "job's):")
    for w in sorted(set(s_pace) | set(l_pace)):
        print(f"  worker {w}: simulated {s_pace.get(w, float('nan')):.3f}, "
              f"live {l_pace.get(w, float('nan')):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
