#!/usr/bin/env bash
# Fixture: a one-node Slurm for the `cluster` tests ($1 repo, $2 binary, $3 its folder).
set -euo pipefail
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: needs root"; exit 77; fi
command -v slurmd >/dev/null || [[ -x /usr/sbin/slurmd ]] || { echo "SKIPPED: no slurm-wlm (scripts/install-deps)"; exit 77; }
rm -rf "$3"
exec "$1/scripts/slurm-local" start "$3"
