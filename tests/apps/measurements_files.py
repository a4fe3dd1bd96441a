#!/usr/bin/python3
"""The published multi-machine measurements (scenarios/measurements/, README.md there): every row
names its source, its place in it, how it was transcribed and its set; a row is one figure
(samples/s or a speedup) on a known setup; every series has one calibration row; and every setup
scenario the files name loads and simulates (one iteration, with the model of a row), and so does
it with each of its `settings` entries' keys, every entry citing where it was read."""
import argparse
import glob
import os
import re
import subprocess
import sys

import yaml

SETS = {"calibration", "fit", "heldout"}
TRANSCRIBED = {"table", "text", "definition"}
REQUIRED = ["set", "model", "setup", "system", "machines", "gpus_per_machine", "gpus",
            "batch_per_gpu", "precision", "source", "ref", "transcribed_from"]


def check_file(path, errors):
    doc = yaml.safe_load(open(path))
    sources, setups, rows = doc.get("sources", {}), doc.get("setups", {}), doc.get("measurements")
    if not rows:
        errors.append(f"{path}: no measurements")
        return []
    for name, src in sources.items():
        for key in ("title", "url", "date"):
            if not src.get(key):
                errors.append(f"{path}: source {name} has no {key}")
    series = {}
    for i, r in enumerate(rows):
        where = f"{path}: measurements[{i}]"
        for key in REQUIRED:
            if key not in r:
                errors.append(f"{where}: no '{key}'")
        if r.get("set") not in SETS:
            errors.append(f"{where}: set {r.get('set')!r} is not one of {sorted(SETS)}")
        if r.get("source") not in sources:
            errors.append(f"{where}: source {r.get('source')!r} is not in the file's sources")
        if r.get("setup") not in setups:
            errors.append(f"{where}: setup {r.get('setup')!r} is not in the file's setups")
        if r.get("transcribed_from") not in TRANSCRIBED:
            errors.append(f"{where}: transcribed_from {r.get('transcribed_from')!r} is not one of "
                          f"{sorted(TRANSCRIBED)}")
        figures = [k for k in ("samples_per_s", "speedup", "iteration_s") if k in r]
        if len(figures) != 1 or not float(r[figures[0]]) > 0:
            errors.append(f"{where}: needs exactly one positive figure, has {figures}")
        if r.get("gpus") != r.get("machines", 0) * r.get("gpus_per_machine", 0):
            errors.append(f"{where}: gpus {r.get('gpus')} != machines x gpus_per_machine")
        key = (r.get("setup"), r.get("model"), r.get("precision"), r.get("batch_per_gpu"),
               r.get("variant"))
        series.setdefault(key, []).append(r)
    for key, members in series.items():
        cal = [r for r in members if r.get("set") == "calibration"]
        if len(cal) != 1:
            errors.append(f"{path}: series {key} has {len(cal)} calibration rows (one expected)")
        elif cal[0].get("gpus") != 1:
            errors.append(f"{path}: series {key}: the calibration row is not the 1-GPU one")
    runs = []
    for name, setup in setups.items():
        scenario = setup.get("scenario", "")
        if not scenario.endswith(".yaml"):
            continue  # "none yet: ..." says why
        target = os.path.normpath(os.path.join(os.path.dirname(path), scenario))
        if not os.path.exists(target):
            errors.append(f"{path}: setup {name}: scenario {scenario} does not exist")
            continue
        runs.append((target, ()))
        for i, entry in enumerate(setup.get("settings") or [], 1):
            where = f"{path}: setup {name} setting {i}"
            keys = entry.get("set") or []
            if not keys or not all("=" in k for k in keys):
                errors.append(f"{where}: 'set' must list KEY=VALUE keys")
                continue
            if not re.search(r"[0-9a-f]{7,40}|v\d+\.\d+", str(entry.get("source", ""))):
                errors.append(f"{where}: its source names no commit or version")
            model = (entry.get("models") or [None])[0]
            extra = tuple(keys) + ((f"model={model}",) if model else ())
            runs.append((target, extra))
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poseidon", required=True)
    args = ap.parse_args()
    errors, scenarios = [], set()
    files = sorted(glob.glob("scenarios/measurements/*.yaml"))
    if not files:
        errors.append("no files in scenarios/measurements/")
    for f in files:
        scenarios.update(check_file(f, errors))
    for s, extra in sorted(scenarios):
        sets = [a for k in extra for a in ("--set", k)]
        r = subprocess.run([args.poseidon, "simulate", s, "--set", "iterations=1",
                            "--set", "warmup_iterations=0", *sets, "--no-baseline", "--format",
                            "json"], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            errors.append(f"{s} {' '.join(extra)}: poseidon simulate failed: {r.stderr.strip()}")
    for e in errors:
        print(e, file=sys.stderr)
    print(f"{len(files)} files, {len(scenarios)} setup scenarios, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
