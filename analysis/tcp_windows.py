#!/usr/bin/python3
"""TCP's windows on the emulated cluster while a live job runs: what each connection's sender had.

    sudo /usr/bin/python3 analysis/tcp_windows.py record -o windows.txt -- \\
        build/apps/poseidon/poseidon validate FILE --work-dir out/w
    /usr/bin/python3 analysis/tcp_windows.py summary windows.txt --logs out/w/config-0

`record` runs the command and, until it exits, samples `ss -tin` in every machine namespace of
the emulated clusters `poseidon launch` creates (pnXXXXXX-N) every --every seconds (root: `ip
netns exec`). The sampling costs CPU (each sample runs ss once per namespace): a run recorded
this way may be judged not faithful, and its timings should not be reported as validation.
`summary` prints, per established connection and direction, the congestion window (segments and
KiB: minimum, maximum, last), the slow-start threshold (a loss happened when it is set), the
smoothed round trip, and the bytes sent and retransmitted; with --logs (a live run's folder with
its rank-*.log) each socket is named by the processes it joins, sender first. It shows, for
instance, whether windows exceed what a job has in flight (the queue model's premise,
sim/network/queue_network.h) or are about one message, as on the reno hosts at 100 Mbit/s
(docs/validation.md, "The PS divergences at 100 Mbit/s, named").
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import time

NAMESPACE = re.compile(r"^pn[0-9a-f]+-\d+$")
FIELD = re.compile(r"([a-z_]+):(\S+)")
LISTENING = re.compile(r"rank (\d+): listening on (\S+)")
ACCEPTED = re.compile(r"rank (\d+): connection with rank (\d+) at (\S+) is up \(accepted\)")
ROLE = re.compile(r"\] ((?:worker|shard) \d+|coordinator): ")


def record(out, every, command):
    with open(out, "w") as f:
        proc = subprocess.Popen(command)
        while proc.poll() is None:
            listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
            for ns in sorted(line.split()[0] for line in listing.stdout.splitlines() if line):
                if not NAMESPACE.match(ns):
                    continue
                t = time.time()
                ss = subprocess.run(["ip", "netns", "exec", ns, "ss", "-tin", "state",
                                     "established"], capture_output=True, text=True)
                for line in ss.stdout.splitlines()[1:]:
                    f.write(f"{t:.6f} {ns} {line}\n")
            time.sleep(every)
    return proc.returncode


def parse(path):
    """{(namespace, local, peer): [fields of each sample]} from a `record` file."""
    sockets, current = {}, None
    with open(path) as f:
        for lineno, line in enumerate(f, start=1):
            parts = line.split()
            if len(parts) < 3:
                continue
            if "cwnd:" in line:
                if current is None:
                    raise ValueError(f"{path}:{lineno}: TCP details before any socket line")
                sockets.setdefault(current, []).append(dict(FIELD.findall(line)))
                current = None
            elif len(parts) >= 6 and ":" in parts[-1] and ":" in parts[-2]:
                current = (parts[1], parts[-2], parts[-1])
    if not sockets:
        raise ValueError(f"{path}: no `ss -tin` sample with a congestion window")
    return sockets


def names(logs):
    """{(local address, peer address): 'sender -> receiver'} from a live run's rank-*.log."""
    role, listen, accepted = {}, {}, []
    for path in glob.glob(os.path.join(logs, "rank-*.log")):
        with open(path) as f:
            for line in f:
                m = ROLE.search(line)
                rank = re.search(r"\[rank-(\d+)\]", line)
                if m and rank:
                    role.setdefault(int(rank.group(1)), m.group(1))
                m = LISTENING.search(line)
                if m:
                    listen[int(m.group(1))] = m.group(2)
                m = ACCEPTED.search(line)
                if m:
                    accepted.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    out = {}
    for acceptor, dialer, dialer_addr in accepted:
        if acceptor not in listen:
            continue
        a = role.get(acceptor, f"rank {acceptor}")
        d = role.get(dialer, f"rank {dialer}")
        out[(listen[acceptor], dialer_addr)] = f"{a} -> {d}"
        out[(dialer_addr, listen[acceptor])] = f"{d} -> {a}"
    return out


def summary(sockets, named, min_bytes):
    rows = []
    for (ns, local, peer), samples in sockets.items():
        last = samples[-1]
        sent = int(last.get("bytes_sent", "0"))
        if sent < min_bytes:
            continue
        mss = int(last.get("mss", "1448"))
        cwnd = [int(s["cwnd"]) for s in samples if "cwnd" in s]
        rows.append((sent, named.get((local, peer), f"{local} -> {peer}"), ns, cwnd, mss, last))
    rows.sort(key=lambda r: -r[0])
    lines = [f"{'connection (sender -> receiver)':<34} {'cwnd min/max/last (KiB)':>24} "
             f"{'ssthresh':>8} {'rtt ms':>7} {'sent MB':>8} {'retrans KB':>10}"]
    for sent, name, ns, cwnd, mss, last in rows:
        kib = lambda segs: segs * mss / 1024  # noqa: E731
        lines.append(f"{name:<34} {kib(min(cwnd)):>7.0f}/{kib(max(cwnd)):>7.0f}/"
                     f"{kib(cwnd[-1]):>7.0f}  {last.get('ssthresh', '-'):>8} "
                     f"{float(last.get('rtt', '0/0').split('/')[0]):>7.2f} {sent / 1e6:>8.2f} "
                     f"{int(last.get('bytes_retrans', '0')) / 1e3:>10.1f}")
    return "\n".join(lines)


def command_of(parser, words):
    """The command `record` runs: the words after `--` (tcp_trace.py's record takes it too)."""
    command = words[1:] if words[:1] == ["--"] else words
    if not command:
        parser.error("record: give the command after --")
    return command


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("record", help="run COMMAND and sample ss -tin meanwhile (root)")
    r.add_argument("-o", "--output", required=True)
    r.add_argument("--every", type=float, default=0.1, help="seconds between samples (0.1)")
    r.add_argument("command", nargs=argparse.REMAINDER)
    s = sub.add_parser("summary", help="per connection: windows, round trip, bytes")
    s.add_argument("samples")
    s.add_argument("--logs", help="a live run's folder (rank-*.log) to name the connections")
    s.add_argument("--min-bytes", type=int, default=100000,
                   help="leave out sockets that sent less (default 100000)")
    a = p.parse_args(argv)
    if a.what == "record":
        return record(a.output, a.every, command_of(p, a.command))
    try:
        print(summary(parse(a.samples), names(a.logs) if a.logs else {}, a.min_bytes))
    except (OSError, ValueError) as err:
        print(f"tcp_windows.py: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
