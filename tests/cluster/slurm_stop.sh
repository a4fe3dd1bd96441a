#!/usr/bin/env bash
# Fixture cleanup: stops what slurm_start.sh started, by PID, whatever the tests did.
set -euo pipefail
[[ -d $3 ]] || exit 0
exec "$1/scripts/slurm-local" stop "$3"
