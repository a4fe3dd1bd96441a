#!/usr/bin/python3
"""Does SACP's `auto` pick well? For every point of every sweep given, simulates the point with
protocol.scheme set to auto and to each single scheme for all layers (ps, sfb, allreduce; sfb
means SFB for the FC layers and ps for the others), and reports auto's iteration time against the
best of the three.

  /usr/bin/python3 analysis/sacp_check.py --poseidon build/apps/poseidon/poseidon \\
      scenarios/experiments/*_speedup.yaml scenarios/experiments/*_bandwidth.yaml
  # --within 2: exit 1 unless auto is within 2% of the best on every point
  # --auto paper: check `scheme: paper` (the byte rule) instead of auto

Writes nothing but a temporary sweep file per input; prints one line per point and a summary.
"""
import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile

import yaml

SCHEMES = ["ps", "sfb", "allreduce"]


def derived_sweep(path, auto_name):
    """The sweep of `path` with every variant crossed with the four schemes (a sweep without a
    variant axis gets one)."""
    with open(path) as f:
        sweep = yaml.safe_load(f)
    vary = sweep.get("vary") or {}
    variants = vary.pop("variant", None) or [{"name": "base", "set": {}}]
    crossed = []
    for v in variants:
        cons = (v.get("set") or {}).get("protocol.consistency", "bsp")
        model = cons.get("model", "bsp") if isinstance(cons, dict) else cons
        # Ring all-reduce is synchronous: under SSP and ASP the candidates are ps and sfb.
        for scheme in [auto_name] + [x for x in SCHEMES if model == "bsp" or x != "allreduce"]:
            s = dict(v.get("set") or {})
            s["protocol.scheme"] = scheme
            crossed.append({"name": f"{v['name']}|{scheme}", "set": s})
    new_vary = {"variant": crossed}
    new_vary.update(vary)
    sweep["vary"] = new_vary
    base = sweep.get("base")
    if base and not os.path.isabs(base):
        sweep["base"] = os.path.join(os.path.dirname(os.path.abspath(path)), base)
    return sweep


def run(poseidon, sweep, jobs):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(sweep, f, sort_keys=False)
        name = f.name
    try:
        p = subprocess.run([poseidon, "sweep", name, "-j", str(jobs)], capture_output=True,
                           text=True)
        if p.returncode != 0:
            sys.exit(f"analysis/sacp_check.py: poseidon sweep failed on the sweep derived from "
                     f"{sweep.get('name')}:\n{p.stderr}")
        out = p.stdout
    finally:
        os.unlink(name)
    return list(csv.DictReader(io.StringIO(out)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--poseidon", default="build/apps/poseidon/poseidon")
    ap.add_argument("--auto", default="auto", help="the scheme request to judge (auto, paper)")
    ap.add_argument("--within", type=float, default=None,
                    help="exit 1 unless it is within this many percent of the best everywhere")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    a = ap.parse_args()
    worst = 0.0
    points = better_than_all = 0
    beats = {s: 0 for s in SCHEMES}
    for path in a.sweeps:
        rows = run(a.poseidon, derived_sweep(path, a.auto), a.jobs)
        groups = {}
        for r in rows:
            if r.get("error"):
                print(f"{path}: {r['variant']}: error: {r['error']}", file=sys.stderr)
                continue
            variant, scheme = r["variant"].rsplit("|", 1)
            # The point: the variant and every swept axis (the columns before `name`).
            keys = list(r.keys())
            point = (variant,) + tuple(r[k] for k in keys[1:keys.index("name")])
            groups.setdefault(point, {})[scheme] = float(r["iteration_ms"])
        for point, t in groups.items():
            cands = [s for s in SCHEMES if s in t]
            if a.auto not in t or not cands:
                continue
            best_s = min(cands, key=lambda s: t[s])
            gap = 100.0 * (t[a.auto] / t[best_s] - 1.0)
            worst = max(worst, gap)
            points += 1
            for s in cands:
                beats[s] += t[a.auto] < t[s] * (1 - 1e-9)
            better_than_all += all(t[a.auto] < t[s] * (1 - 1e-9) for s in cands)
            flag = "  <-- over" if a.within is not None and gap > a.within else ""
            print(f"{os.path.basename(path)} {' '.join(point)}: {a.auto} {t[a.auto]:.1f} ms, "
                  + ", ".join(f"{s} {t[s]:.1f}" for s in cands)
                  + f"; best {best_s}; {a.auto} {gap:+.2f}%{flag}")
    print(f"{points} points; {a.auto} at most {worst:+.2f}% from the best single scheme; "
          f"strictly faster than ps on {beats['ps']}, sfb on {beats['sfb']}, allreduce on "
          f"{beats['allreduce']}, every candidate on {better_than_all}")
    if a.within is not None and worst > a.within:
        sys.exit(1)


if __name__ == "__main__":
    main()
