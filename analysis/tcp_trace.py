#!/usr/bin/python3
"""TCP's loss episodes on the emulated cluster, from the kernel's own tracepoints: every ACK's window.

    sudo /usr/bin/python3 analysis/tcp_trace.py record -o trace.txt -- \\
        build/apps/poseidon/poseidon validate FILE --repeat 1 --work-dir out/w
    /usr/bin/python3 analysis/tcp_trace.py episodes trace.txt --logs out/w/config-0

`record` runs the command with the kernel's TCP tracepoints on (tcp:tcp_probe at every ACK a
sender takes in: its congestion window, slow-start threshold, smoothed round trip and what is
acknowledged; tcp:tcp_cong_state_set at every change of congestion state; tcp:tcp_retransmit_skb
at every retransmission), in all network namespaces, and copies the trace buffer to -o when the
command exits. It needs root and tracefs; the kernel writes the events into a ring buffer, so the
run costs little CPU (unlike `tcp_windows.py record`, which runs ss), but it says so and fails
when the buffer overran and events were lost.

`episodes` prints, per connection that carried at least --min-bytes (sender first, named by the
processes it joins with --logs, a live run's folder with its rank-*.log), each loss episode: when
the sender entered recovery or loss (seconds from the first traced event), its window then
(segments), the threshold it set, how many segments it retransmitted, how low the window fell and
when it was open again; then the window and threshold at the end. With --at it also prints each
connection's window at the given times, and with --group-after how many connections each
receiver's loss episodes hit together. This is what `docs/validation.md` ("The first overshoot,
ACK by ACK") reads: which connection a drop-tail queue's losses hit, and when each halved.

`first-losses` reads one trace of several runs of one configuration (`validate --repeat N` under
`record`): for every run-N folder of --runs (a validate work dir's config-N), the connections its
logs name, each with its first loss episode within --within seconds of that run's first traced
event (when, and its window then) or "no loss"; with --csv (validate's -o) each run's measured
pace too. Which connections slow start's overshoot hits is what sets some jobs' pace
(`docs/validation.md`, "Which parameters connection loses at start-up").

`silences` prints every loss episode of the connections that carried at least --min-bytes, in
time order, with how long the sender had heard no acknowledgement when it began: a loss with
packets after it delivered is reported by the duplicate acknowledgements they cause, within a
round trip; one with nothing after it delivered (a connection's last packets, or a burst dropped
whole) only by a timer, about two smoothed round trips or more later. An episode that began after
a silence of more than --timer-factor (1.5) smoothed round trips, and of 10 ms at least, is
counted as a timer's (`docs/validation.md`, "d35, connection by connection").

`rates` prints, per connection its logs name (--logs; without, every connection), the bytes
acknowledged per --bin seconds (MB/s), in seconds from the trace's first event as `episodes`
counts them, and per receiver their sum: which sender stalled while the others took its share.
"""
import argparse
import csv
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tcp_windows import command_of, names  # noqa: E402  (the same rank-*.log reader)

TRACEFS = "/sys/kernel/tracing"
EVENTS = ("tcp_probe", "tcp_cong_state_set", "tcp_retransmit_skb")
STAMP = re.compile(r"\s(\d+\.\d+): (tcp_\w+): (.*)$")
PROBE = re.compile(r"src=(\S+) dest=(\S+) .*snd_una=(0x[0-9a-f]+) snd_cwnd=(\d+) "
                   r"ssthresh=(\d+) .*srtt=(\d+)")
STATE = re.compile(r"sport=(\d+) dport=(\d+) saddr=(\S+) daddr=(\S+) .*cong_state=(\d+)")
RETRANS = re.compile(r"sport=(\d+) dport=(\d+) saddr=(\S+) daddr=(\S+) ")
STATES = {0: "open", 1: "disorder", 2: "cwr", 3: "recovery", 4: "loss"}
NO_THRESHOLD = 0x7FFFFFFF  # TCP_INFINITE_SSTHRESH: no loss yet
TIMER_FLOOR_S = 0.010  # silences: a shorter one is never a timer's (a loopback's round trip)


def write(path, value):
    with open(os.path.join(TRACEFS, path), "w") as f:
        f.write(value)


def record(out, buffer_kib, command):
    if not os.path.isdir(os.path.join(TRACEFS, "events", "tcp")):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], check=False,
                       stderr=subprocess.DEVNULL)
    if not os.path.isdir(os.path.join(TRACEFS, "events", "tcp")):
        raise OSError(f"{TRACEFS}/events/tcp: no TCP tracepoints (run as root on a kernel with "
                      "tracefs; `mount -t tracefs nodev /sys/kernel/tracing`)")
    if not os.access(os.path.join(TRACEFS, "tracing_on"), os.W_OK):
        raise OSError(f"{TRACEFS}/tracing_on: not writable: run `record` as root (sudo)")
    with open(os.path.join(TRACEFS, "buffer_size_kb")) as f:
        old_buffer = f.read().split()[0]
    write("tracing_on", "0")
    write("trace", "")
    try:
        write("buffer_size_kb", str(buffer_kib))
        write("trace_clock", "global")
        for e in EVENTS:
            write(f"events/tcp/{e}/enable", "1")
        write("tracing_on", "1")
        try:
            rc = subprocess.run(command).returncode
        finally:
            write("tracing_on", "0")
            for e in EVENTS:
                write(f"events/tcp/{e}/enable", "0")
        with open(os.path.join(TRACEFS, "trace")) as src, open(out, "w") as dst:
            for line in src:
                dst.write(line)
        lost = 0
        cpus = os.path.join(TRACEFS, "per_cpu")
        for cpu in sorted(os.listdir(cpus)):
            with open(os.path.join(cpus, cpu, "stats")) as f:
                for line in f:
                    if line.startswith("overrun:"):
                        lost += int(line.split()[1])
    finally:  # the kernel's buffer as it was, whatever happened
        write("trace", "")
        write("buffer_size_kb", old_buffer)
    if lost:
        raise OSError(f"{out}: the trace buffer overran, {lost} events lost: record again with "
                      f"a larger --buffer-kib (now {buffer_kib} per CPU)")
    return rc


def parse(path):
    """{(sender, receiver): [(t, kind, ...)]} from a `record` file, in time order."""
    conns = {}
    with open(path) as f:
        for lineno, line in enumerate(f, start=1):
            if line.startswith("#"):
                continue
            m = STAMP.search(line)
            if not m:
                continue
            t, event, rest = float(m.group(1)), m.group(2), m.group(3)
            if event == "tcp_probe":
                p = PROBE.search(rest)
                if not p:
                    raise ValueError(f"{path}:{lineno}: a tcp_probe event without the fields "
                                     "src, dest, snd_una, snd_cwnd, ssthresh, srtt")
                conns.setdefault((p.group(1), p.group(2)), []).append(
                    (t, "probe", int(p.group(4)), int(p.group(5)), int(p.group(6)),
                     int(p.group(3), 16)))
            elif event in ("tcp_cong_state_set", "tcp_retransmit_skb"):
                p = (STATE if event == "tcp_cong_state_set" else RETRANS).search(rest)
                if not p:
                    raise ValueError(f"{path}:{lineno}: a {event} event without its addresses")
                key = (f"{p.group(3)}:{p.group(1)}", f"{p.group(4)}:{p.group(2)}")
                if event == "tcp_cong_state_set":
                    conns.setdefault(key, []).append((t, "state", int(p.group(5))))
                else:
                    conns.setdefault(key, []).append((t, "retrans"))
    if not any(e[1] == "probe" for events in conns.values() for e in events):
        raise ValueError(f"{path}: no tcp_probe event (was it written by `tcp_trace.py record`?)")
    for events in conns.values():
        events.sort(key=lambda e: e[0])
    return conns


def probes_of(events):
    """A connection's tcp_probe events (one per ACK it took in), in time order."""
    return [e for e in events if e[1] == "probe"]


def first_event(conns):
    """The time of the first traced event of `conns`: what every report counts seconds from."""
    return min(e[0] for events in conns.values() for e in events)


def name_of(named, key):
    """The connection's name from its run's logs (`names`), else its addresses."""
    return named.get(key, f"{key[0]} -> {key[1]}")


def acked_bytes(events):
    unas = [e[5] for e in probes_of(events)]
    return sum((b - a) % 2**32 for a, b in zip(unas, unas[1:]))


def threshold(value):
    return "-" if value >= NO_THRESHOLD else str(value)


def episodes(conns, named, min_bytes, at, group_after=None, group_within=0.1):
    t0 = first_event(conns)
    starts = []  # (when, receiver, connection) of every episode
    rows = [(acked_bytes(ev), key, ev) for key, ev in conns.items()]
    rows = sorted((r for r in rows if r[0] >= min_bytes), key=lambda r: -r[0])
    if not rows:
        raise ValueError(f"no connection acknowledged {min_bytes} bytes or more (--min-bytes)")
    lines = []
    for acked, (src, dst), events in rows:
        name = name_of(named, (src, dst))
        receiver = name.split(" -> ")[-1]
        retrans = sum(1 for e in events if e[1] == "retrans")
        lines.append(f"{name}: {acked / 1e6:.2f} MB acknowledged, {retrans} segments "
                     "retransmitted")
        cwnd, ssthresh, episode = None, NO_THRESHOLD, None
        for e in events:
            if e[1] == "probe":
                cwnd, ssthresh = e[2], e[3]
                if episode is not None:
                    episode["low"] = min(episode["low"], cwnd)
                    if episode["threshold"] is None and ssthresh != episode["before_ss"]:
                        episode["threshold"] = ssthresh
            elif e[1] == "retrans" and episode is not None:
                episode["retrans"] += 1
            elif e[1] == "state" and e[2] in (3, 4) and (episode is None or
                                                        e[2] != episode["state"]):
                if episode is not None:
                    lines.append(episode_line(episode, e[0] - t0, "then"))
                episode = {"t": e[0] - t0, "state": e[2], "cwnd": cwnd, "before_ss": ssthresh,
                           "threshold": None, "retrans": 0, "low": cwnd or 0}
                starts.append((e[0] - t0, receiver, name))
            elif e[1] == "state" and e[2] == 0 and episode is not None:
                lines.append(episode_line(episode, e[0] - t0, "open at"))
                episode = None
        if episode is not None:
            lines.append(episode_line(episode, None, "open at"))
        lines.append(f"  at the end: window {cwnd}, threshold {threshold(ssthresh)}")
        for t in at:
            probes = [e for e in events if e[1] == "probe" and e[0] - t0 <= t]
            if probes:
                lines.append(f"  at {t:.3f} s: window {probes[-1][2]}, threshold "
                             f"{threshold(probes[-1][3])}, round trip {probes[-1][4] / 1000:.1f} "
                             "ms")
    if group_after is not None:
        lines += grouped(starts, group_after, group_within)
    return "\n".join(lines)


def grouped(starts, after, within):
    """Per receiver, its senders' loss episodes from `after` s on, grouped while each starts
    within `within` s of its group's first: how many groups hit one connection, two, ..."""
    lines = [f"loss episodes from {after:g} s on, grouped within {within:g} s, per receiver "
             "(connections hit: groups)"]
    for receiver in sorted({r for _, r, _ in starts}):
        times = sorted((t, c) for t, r, c in starts if r == receiver and t >= after)
        sizes, first, hit = {}, None, set()
        for t, c in times + [(None, None)]:
            if t is None or first is None or t - first > within:
                if hit:
                    sizes[len(hit)] = sizes.get(len(hit), 0) + 1
                first, hit = t, set()
            hit.add(c)
        counts = ", ".join(f"{n}: {sizes[n]}" for n in sorted(sizes)) or "none"
        lines.append(f"  {receiver}: {counts}")
    return lines


def episode_line(ep, end, how):
    ss = ep["threshold"] if ep["threshold"] is not None else ep["before_ss"]
    ended = "not before the trace ended" if end is None else f"{how} {end:.3f} s"
    return (f"  {ep['t']:8.3f} s {STATES[ep['state']]:<8} window {ep['cwnd']} -> threshold "
            f"{threshold(ss)}, {ep['retrans']} retransmitted, window down to {ep['low']}, "
            f"{ended}")


def first_losses(conns, runs_dir, within, min_bytes, paces):
    runs = sorted(glob.glob(os.path.join(runs_dir, "run-*")),
                  key=lambda p: int(p.rsplit("-", 1)[1]) if p.rsplit("-", 1)[1].isdigit() else -1)
    runs = [r for r in runs if r.rsplit("-", 1)[1].isdigit()]
    if not runs:
        raise ValueError(f"{runs_dir}: no run-N folder (--runs takes a validate work dir's "
                         "config-N)")
    lines = []
    for run in runs:
        n = int(run.rsplit("-", 1)[1])
        named = names(run)
        ours = {k: ev for k, ev in conns.items() if k in named}
        mine = {k: ev for k, ev in ours.items() if acked_bytes(ev) >= min_bytes}
        pace = f": {paces[n]:.1f} ms" if n in paces else ""
        if not mine:
            lines.append(f"run {n}{pace}: no traced connection of its logs carried {min_bytes} "
                         "bytes")
            continue
        t0 = first_event(ours)
        lines.append(f"run {n}{pace}")
        for key in sorted(mine, key=lambda k: named[k]):
            cwnd, hit = None, None
            for e in mine[key]:
                if e[0] - t0 > within:
                    break
                if e[1] == "probe":
                    cwnd = e[2]
                elif e[1] == "state" and e[2] in (3, 4):
                    hit = (e[0] - t0, cwnd)
                    break
            lines.append(f"  {named[key]}: " + (f"lost at {hit[0]:.3f} s, window {hit[1]}"
                                                 if hit else "no loss"))
    return "\n".join(lines)


def silence_before(probes, t):
    """Seconds without an acknowledgement when a state change at `t` happened: from the probe
    before the one that brought it (an ACK at `t`), or from the last probe before `t` (a timer)."""
    before = [p for p in probes if p[0] <= t + 1e-6]
    if not before:
        return None, None
    last = before[-1]
    if last[0] >= t - 1e-4:  # the acknowledgement that started the episode
        if len(before) < 2:
            return None, last
        return last[0] - before[-2][0], before[-2]
    return t - last[0], last


def silences(conns, named, min_bytes, factor):
    t0 = first_event(conns)
    rows = []
    for key, events in conns.items():
        if acked_bytes(events) < min_bytes:
            continue
        probes = probes_of(events)
        previous = None  # the last congestion state: recovery turning into loss is one episode
        for i, e in enumerate(events):
            if e[1] != "state":
                continue
            starts = e[2] in (3, 4) and previous not in (3, 4)
            previous = e[2]
            if not starts:
                continue
            silence, before = silence_before(probes, e[0])
            end = next((x[0] for x in events[i + 1:] if x[1] == "state" and x[2] == 0), None)
            retrans = sum(1 for x in events[i:] if x[1] == "retrans" and
                          (end is None or x[0] <= end))
            rows.append((e[0] - t0, name_of(named, key), e[2], silence,
                         before, retrans, None if end is None else end - e[0]))
    if not rows:
        raise ValueError(f"no loss episode on a connection that acknowledged {min_bytes} bytes or "
                         "more (--min-bytes)")
    rows.sort(key=lambda r: r[0])
    lines, timers = [], 0
    for t, name, state, silence, before, retrans, lasted in rows:
        if silence is None:
            heard = "with no acknowledgement before it"
            how = "?"
        else:
            srtt_s = before[4] / 1e6
            timer = silence > factor * srtt_s and silence >= TIMER_FLOOR_S
            timers += timer
            heard = (f"after {silence * 1000:.1f} ms without an acknowledgement (smoothed round "
                     f"trip {srtt_s * 1000:.1f} ms, window {before[2]})")
            how = "a timer" if timer else "acknowledgements"
        ended = "not open before the trace ended" if lasted is None else \
            f"open after {lasted * 1000:.0f} ms"
        lines.append(f"  {t:8.3f} s {name}: {STATES[state]} {heard}: {how}; {retrans} "
                     f"retransmitted, {ended}")
    lines.append(f"{len(rows)} loss episodes, {timers} after a silence of more than {factor:g} "
                 f"smoothed round trips and {TIMER_FLOOR_S * 1000:g} ms")
    return "\n".join(lines)


def rates(conns, named, min_bytes, bin_s):
    if bin_s <= 0:
        raise ValueError(f"--bin must be > 0, got {bin_s:g}")
    mine = {k: ev for k, ev in conns.items() if (not named or k in named) and
            acked_bytes(ev) >= min_bytes}
    if not mine:
        raise ValueError(f"no connection{' its logs name' if named else ''} acknowledged "
                         f"{min_bytes} bytes or more (--min-bytes)")
    t0 = first_event(conns)  # as episodes counts
    series = {}
    for key, events in mine.items():
        bins = {}
        probes = probes_of(events)
        for a, b in zip(probes, probes[1:]):
            k = int((b[0] - t0) / bin_s)
            bins[k] = bins.get(k, 0) + (b[5] - a[5]) % 2**32
        series[name_of(named, key)] = bins
    if not any(series.values()):
        raise ValueError("no connection has two acknowledgements to measure a rate between")
    first = min(k for bins in series.values() for k in bins)
    last = max(k for bins in series.values() for k in bins)

    def row(label, bins):
        return f"{label:<28} " + " ".join(f"{bins.get(k, 0) / bin_s / 1e6:5.1f}"
                                           for k in range(first, last + 1))
    lines = [f"acknowledged MB/s per {bin_s:g} s, from {first * bin_s:.3f} s to "
             f"{(last + 1) * bin_s:.3f} s (from the first traced event, as episodes counts)"]
    receivers = {}
    for name in sorted(series):
        lines.append(row(name, series[name]))
        total = receivers.setdefault(name.split(" -> ")[-1], {})
        for k, v in series[name].items():
            total[k] = total.get(k, 0) + v
    for receiver in sorted(receivers):
        lines.append(row(f"into {receiver}", receivers[receiver]))
    return "\n".join(lines)


def run_paces(path):
    paces = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or not {"run", "measured_ms"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: not a CSV `poseidon validate -o` wrote (no run and "
                             "measured_ms columns)")
        for row in reader:
            paces[int(row["run"])] = float(row["measured_ms"])
    return paces


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("record", help="run COMMAND with TCP's tracepoints on (root)")
    r.add_argument("-o", "--output", required=True)
    r.add_argument("--buffer-kib", type=int, default=131072,
                   help="trace buffer per CPU, KiB (131072)")
    r.add_argument("command", nargs=argparse.REMAINDER)
    s = sub.add_parser("episodes", help="per connection: its loss episodes and windows")
    s.add_argument("trace")
    s.add_argument("--logs", help="a live run's folder (rank-*.log) to name the connections")
    s.add_argument("--min-bytes", type=int, default=1000000,
                   help="leave out connections that had less acknowledged (1000000)")
    s.add_argument("--at", type=float, action="append", default=[],
                   help="also print each window at this many seconds (repeatable)")
    s.add_argument("--group-after", type=float,
                   help="also count, per receiver, its senders' loss episodes from this many "
                        "seconds on, grouped in time: how many connections each group hit")
    s.add_argument("--group-within", type=float, default=0.1,
                   help="with --group-after: episodes starting within this many seconds of a "
                        "group's first are one group (0.1)")
    f = sub.add_parser("first-losses", help="per run of a repeated validate: each connection's "
                       "first loss")
    f.add_argument("trace")
    f.add_argument("--runs", required=True, help="a validate work dir's config-N (its run-N "
                   "folders name the connections)")
    f.add_argument("--within", type=float, default=1.5,
                   help="seconds from each run's first traced event (1.5)")
    f.add_argument("--min-bytes", type=int, default=1000000,
                   help="leave out connections that had less acknowledged (1000000)")
    f.add_argument("--csv", help="validate's -o CSV: each run's measured pace")
    g = sub.add_parser("silences", help="every loss episode: how long the sender had heard "
                       "nothing when it began")
    g.add_argument("trace")
    g.add_argument("--logs", help="a live run's folder (rank-*.log) to name the connections")
    g.add_argument("--min-bytes", type=int, default=1000000,
                   help="leave out connections that had less acknowledged (1000000)")
    g.add_argument("--timer-factor", type=float, default=1.5,
                   help="a silence longer than this many smoothed round trips is a timer's (1.5)")
    q = sub.add_parser("rates", help="per connection: bytes acknowledged per time bin")
    q.add_argument("trace")
    q.add_argument("--logs", help="a live run's folder (rank-*.log): its connections only, named")
    q.add_argument("--min-bytes", type=int, default=1000000,
                   help="leave out connections that had less acknowledged (1000000)")
    q.add_argument("--bin", type=float, default=0.05, help="seconds per bin (0.05)")
    a = p.parse_args(argv)
    try:
        if a.what == "record":
            return record(a.output, a.buffer_kib, command_of(p, a.command))
        if a.what == "silences":
            print(silences(parse(a.trace), names(a.logs) if a.logs else {}, a.min_bytes,
                           a.timer_factor))
            return 0
        if a.what == "rates":
            print(rates(parse(a.trace), names(a.logs) if a.logs else {}, a.min_bytes, a.bin))
            return 0
        if a.what == "first-losses":
            print(first_losses(parse(a.trace), a.runs, a.within, a.min_bytes,
                               run_paces(a.csv) if a.csv else {}))
            return 0
        print(episodes(parse(a.trace), names(a.logs) if a.logs else {}, a.min_bytes, a.at,
                       a.group_after, a.group_within))
    except (OSError, ValueError) as err:
        print(f"tcp_trace.py: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
