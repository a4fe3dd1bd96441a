#!/usr/bin/python3
"""`poseidon models show NAME` of every model in tests/golden/models_show/ prints exactly the
reviewed file (the output of the build before token-sequence shapes and transformer layers were
added: the image models must not change by a byte). The model file's path in the first line is
written relative to the repository root. Regenerate (and review the diff) with --update.

  models_show_golden.py --poseidon build/apps/poseidon/poseidon [--update]
"""
import argparse
import os
import subprocess
import sys

from golden import check_goldens

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "models_show")


def show(poseidon, name):
    out = subprocess.run([poseidon, "models", "show", name], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    if out.stderr:
        raise SystemExit("%s: unexpected stderr: %s" % (name, out.stderr))
    return out.stdout.replace("(" + os.path.join(ROOT, "scenarios", "models") + "/",
                              "(scenarios/models/")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poseidon", required=True)
    ap.add_argument("--update", action="store_true")
    a = ap.parse_args()
    names = sorted(f[:-4] for f in os.listdir(GOLDEN) if f.endswith(".txt"))
    cases = {n: ("poseidon models show " + n, lambda n=n: show(a.poseidon, n)) for n in names}
    return check_goldens(GOLDEN, cases, a.update, "models")


if __name__ == "__main__":
    sys.exit(main())
