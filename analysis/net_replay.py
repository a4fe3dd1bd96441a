#!/usr/bin/python3
"""The simulator's network model on a live run's own traffic, per sender and receiver.

`poseidon validate` replays every live run's messages through the scenario's network model, each
sent when it was sent live (sim::ReplayNetwork), and writes them to
WORK_DIR/config-N[/run-R]/net-replay.csv (sent_us, from, to, bytes, clock, live_us, model_us:
time in flight live and in the model). Its `network_error_pct` column is the error of their
summed time in flight. This script breaks that down by sender and receiver and names the pair
whose messages the model gets most wrong, in summed milliseconds:

    /usr/bin/python3 analysis/net_replay.py out/validate/config-6/run-1/net-replay.csv --warmup 2

A network error near zero with an iteration error far from it means the model carries the live
traffic right and the simulated run's schedule is what differs. That can still be the network:
a sum over many messages can be right while the model serves the messages of one link in
another order than TCP did, and the one it finishes late is the one the schedule waits for.
`--messages N` lists the N messages (clock >= warmup) whose time in flight the model gets most
wrong, each with its send time from its clock's first send:

    /usr/bin/python3 analysis/net_replay.py out/validate/config-4/run-1/net-replay.csv \
        --warmup 2 --messages 10
"""
import argparse
import csv
import sys

COLUMNS = {"sent_us", "from", "to", "bytes", "clock", "live_us", "model_us"}


def read(path, warmup):
    """The messages of clocks >= warmup, in file order, as (clock, sent us, sender, receiver,
    bytes, live us, model us); ValueError naming the file (and line) for anything else."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise ValueError(f"{path}: cannot read: {err.strerror}")
    if not rows or not COLUMNS <= set(rows[0]):
        raise ValueError(f"{path}: not a net-replay.csv of `poseidon validate` "
                         f"(columns {', '.join(sorted(COLUMNS))})")
    out = []
    for line, r in enumerate(rows, start=2):
        try:
            m = (int(r["clock"]), float(r["sent_us"]), r["from"], r["to"], int(r["bytes"]),
                 float(r["live_us"]), float(r["model_us"]))
        except ValueError:
            raise ValueError(f"{path}:{line}: not a number in clock, sent_us, bytes, live_us or "
                             "model_us")
        if m[0] >= warmup:
            out.append(m)
    if not out:
        raise ValueError(f"{path}: no message of clock >= {warmup}")
    return out


def pairs(path, warmup):
    """Per (sender, receiver), in first-seen order: [messages, live us, model us] summed over the
    messages of clocks >= warmup."""
    out = {}
    for _, _, src, dst, _, live, model in read(path, warmup):
        s = out.setdefault((src, dst), [0, 0.0, 0.0])
        s[0] += 1
        s[1] += live
        s[2] += model
    return out


def messages(path, warmup, count):
    """The `count` messages of clocks >= warmup whose model - live time in flight is largest in
    magnitude (ties: file order), as (clock, offset us from the clock's first send, sender,
    receiver, bytes, live us, model us)."""
    rows = read(path, warmup)
    first = {}
    for clock, sent, *_ in rows:
        first[clock] = min(first.get(clock, float("inf")), sent)
    out = [(clock, sent - first[clock], src, dst, size, live, model)
           for clock, sent, src, dst, size, live, model in rows]
    out.sort(key=lambda m: -abs(m[6] - m[5]))
    return out[:count]


def report_messages(rows):
    lines = [f"{'clock':>5} {'sent +ms':>9} {'sender -> receiver':<26} {'bytes':>9} "
             f"{'live ms':>9} {'model ms':>9} {'model-live':>10}"]
    for clock, offset, src, dst, size, live, model in rows:
        lines.append(f"{clock:>5} {offset / 1e3:>9.1f} {src + ' -> ' + dst:<26} {size:>9} "
                     f"{live / 1e3:>9.1f} {model / 1e3:>9.1f} {(model - live) / 1e3:>+10.1f}")
    return "\n".join(lines)


def report(by_pair):
    """The table, the total and the pair that differs most (text)."""
    lines = [f"{'sender -> receiver':<26} {'messages':>8} {'live ms':>9} {'model ms':>9} "
             f"{'model/live':>10}"]
    for (src, dst), (n, live, model) in sorted(by_pair.items()):
        lines.append(f"{src + ' -> ' + dst:<26} {n:>8} {live / n / 1e3:>9.3f} "
                     f"{model / n / 1e3:>9.3f} {model / live if live else float('nan'):>10.2f}")
    live = sum(v[1] for v in by_pair.values())
    model = sum(v[2] for v in by_pair.values())
    lines.append(f"all: {sum(v[0] for v in by_pair.values())} messages, {live / 1e3:.1f} ms in "
                 f"flight live, {model / 1e3:.1f} ms in the model "
                 f"({100 * (model - live) / live:+.2f}%)")
    (src, dst), (n, lv, md) = max(by_pair.items(), key=lambda kv: abs(kv[1][2] - kv[1][1]))
    lines.append(f"largest difference: {src} -> {dst} ({(md - lv) / 1e3:+.1f} ms over {n} "
                 f"messages, model/live {md / lv:.2f})")
    return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", help="net-replay.csv from `poseidon validate`")
    p.add_argument("--warmup", type=int, default=0,
                   help="leave out the messages of clocks below this (default 0)")
    p.add_argument("--messages", type=int, default=0, metavar="N",
                   help="also list the N messages the model gets most wrong (default 0: none)")
    a = p.parse_args(argv)
    try:
        print(report(pairs(a.csv, a.warmup)))
        if a.messages > 0:
            print()
            print(report_messages(messages(a.csv, a.warmup, a.messages)))
    except ValueError as err:
        print(f"net_replay.py: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
