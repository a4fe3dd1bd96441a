#!/usr/bin/python3
"""How much of each worker's gradient sending DWBP hides behind its backward pass.

Reads Chrome-trace JSON written by `poseidon simulate --trace` or by live processes
(`poseidon launch --trace-dir DIR`: one file per rank; pass them all, or the merged file). Per worker and
iteration: the backward pass spans from its first backward task's start to its last's end; the
sends are the gradient pushes and sufficient factors of that iteration, from send to last byte
out. Overlap is the time during the backward pass in which at least one of them was in flight.

    /usr/bin/python3 analysis/dwbp_overlap.py out/trace/rank-*.json
"""
import argparse
import sys
from collections import defaultdict

import poseidon_trace


def union_length(spans, lo, hi):
    """Length of the union of [a, b) spans, clipped to [lo, hi)."""
    total, end = 0.0, lo
    for a, b in sorted(spans):
        a, b = max(a, end), min(b, hi)
        if b > a:
            total += b - a
            end = b
    return total


def overlap(events):
    """[(worker, clock, backward_us, send_us, overlapped_us)] from poseidon_trace events; the
    backward pass on the worker's own compute lane (device 0's on a machine of several)."""
    bwd = defaultdict(list)
    sends = defaultdict(list)
    for e in events:
        if e.phase != "X" or e.thread.role != "worker":
            continue
        key = (e.thread.index, e.clock)
        span = (e.ts, e.ts + e.dur)
        if e.kind == "task" and e.what == "backward" and e.thread.device == 0:
            bwd[key].append(span)
        elif e.kind == "message" and e.what in ("push", "factors"):
            sends[key].append(span)
    rows = []
    for key in sorted(bwd):
        spans = bwd[key]
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
        s = sends.get(key, [])
        if not s:
            continue
        send_total = union_length(s, float("-inf"), float("inf"))
        rows.append((key[0], key[1], hi - lo, send_total, union_length(s, lo, hi)))
    return rows


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("traces", nargs="+", help="Chrome-trace JSON files")
    p.add_argument("--warmup", type=int, default=1, help="iterations left out (default 1)")
    a = p.parse_args(argv)
    try:
        events = poseidon_trace.read_all(a.traces)
    except poseidon_trace.TraceError as err:
        sys.exit(f"dwbp_overlap: error: {err}")
    # Live, a message is recorded by its receiver (on the sender's lane): read every process.
    rows = overlap(events)
    rows = [r for r in rows if r[1] >= a.warmup]
    if not rows:
        sys.exit("dwbp_overlap: error: no iteration with both a backward pass and sends "
                 "(traces of workers, with --trace / --trace-dir?)")
    n = len(rows)
    bwd = sum(r[2] for r in rows) / n / 1e3
    send = sum(r[3] for r in rows) / n / 1e3
    ov = sum(r[4] for r in rows) / n / 1e3
    print(f"{n} worker-iterations: backward {bwd:.3f} ms, sends in flight {send:.3f} ms, "
          f"overlapped {ov:.3f} ms ({100 * ov / send if send else 0:.1f}% of send time hidden "
          f"behind the backward pass)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
