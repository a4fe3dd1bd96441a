#!/usr/bin/env bash
# A large sweep as a Slurm job array: every array task runs one shard of the sweep, and a last
# job (after the whole array ended) merges the shards' CSVs into the CSV the sweep run whole
# would have written, byte for byte.
#
#   scenarios/cluster/sweep_slurm.sh [--wait] SWEEP.yaml OUT.csv [SHARDS=8] [CPUS_PER_TASK]
#   scenarios/cluster/sweep_slurm.sh scenarios/experiments/paper2015_alexnet_speedup.yaml out/speedup.csv 16
#
# It checks before it submits: the binary runs, every point of the sweep loads (`sweep --check`),
# OUT's folder can be written. It submits two jobs and returns (with --wait: waits for the merge
# and exits with its code). The merged CSV appears at OUT when both are done; if a shard failed,
# the merge job fails too (naming the missing or truncated shard) instead of waiting forever.
# Each task uses CPUS_PER_TASK CPUs (default: the smallest node's CPUs, at most 4) and runs the
# sweep with that many threads. Paths may be relative to the folder it is run from; the jobs get
# absolute ones. POSEIDON=path/to/poseidon picks the binary (default: this checkout's build).
# Extra sbatch options: SBATCH_PARTITION, SBATCH_TIMELIMIT etc. (sbatch reads them itself).
#
# The same without Slurm, on one machine or several with a shared folder, using GNU parallel:
#
#   parallel -j 4 build/apps/poseidon/poseidon sweep SWEEP.yaml -j 1 --shard {}/4 -o shard_{}.csv ::: 0 1 2 3
#   build/apps/poseidon/poseidon sweep --merge shard_*.csv -o all.csv
#
# (--merge orders shards by the index written in their first line, so the glob order does not
# matter, and it fails naming the shard that is missing, doubled, truncated or from another sweep.)
set -euo pipefail
wait_flag=()
if [[ ${1:-} == --wait ]]; then
  wait_flag=(--wait)
  shift
fi
if (($# < 2)); then
  echo "usage: $0 [--wait] SWEEP.yaml OUT.csv [SHARDS=8] [CPUS_PER_TASK]" >&2
  exit 2
fi
fail() {
  echo "sweep_slurm.sh: error: $*" >&2
  exit 2
}
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${POSEIDON:-$here/build/apps/poseidon/poseidon}
[[ -x $bin ]] || fail "no poseidon binary at $bin: build it (scripts/build) or set POSEIDON=path"
bin=$(realpath "$bin")
[[ -r $1 ]] || fail "cannot read the sweep file $1"
sweep=$(realpath "$1")
out=$(realpath -m "$2")
shards=${3:-8}
[[ $shards =~ ^[1-9][0-9]*$ ]] || fail "SHARDS must be a positive number, got '$shards'"
command -v sbatch >/dev/null || fail "sbatch not found: is this a Slurm submit host?"
if [[ -n ${4:-} ]]; then
  cpus=$4
else
  # The smallest node's CPUs (sinfo %c), at most 4: a task that asks for more never starts.
  node_cpus=$(sinfo -h -o %c 2>/dev/null | tr -d '+' | sort -n | head -1)
  [[ $node_cpus =~ ^[0-9]+$ ]] || fail "cannot read the nodes' CPUs from sinfo; give CPUS_PER_TASK"
  cpus=$((node_cpus < 4 ? node_cpus : 4))
fi
[[ $cpus =~ ^[1-9][0-9]*$ ]] || fail "CPUS_PER_TASK must be a positive number, got '$cpus'"
"$bin" sweep "$sweep" --check --shard "0/$shards" >/dev/null || fail "the sweep does not load (above)"
work=$(dirname "$out")/$(basename "$out" .csv).shards
mkdir -p "$work" || fail "cannot create $work"
[[ -w $work ]] || fail "cannot write to $work"
rm -f "$work"/shard_*.csv

array=$(sbatch --parsable --job-name=poseidon-sweep --array=0-$((shards - 1)) \
  --cpus-per-task="$cpus" --output="$work/slurm-%A_%a.log" --chdir="$work" --wrap \
  "\"$bin\" sweep \"$sweep\" -j $cpus --shard \$SLURM_ARRAY_TASK_ID/$shards \
     -o \"$work/shard_\$SLURM_ARRAY_TASK_ID.csv\"")
# afterany: the merge runs whatever the shards did; --merge fails naming the shard that is
# missing or truncated (no shard at all: it cannot read the unexpanded pattern).
merge=$(sbatch --parsable "${wait_flag[@]}" --job-name=poseidon-merge --dependency=afterany:"$array" \
  --output="$work/slurm-merge-%j.log" --chdir="$work" --wrap \
  "\"$bin\" sweep --merge \"$work\"/shard_*.csv -o \"$out\"") && rc=0 || rc=$?
echo "submitted array job $array ($shards shards, $cpus CPUs each) and merge job ${merge%%;*}; the result goes to $out"
if ((${#wait_flag[@]})); then
  if ((rc == 0)); then
    echo "merge done: $out"
  else
    echo "sweep_slurm.sh: error: the merge failed (exit $rc): see $work/slurm-merge-${merge%%;*}.log and $work/slurm-${array}_*.log" >&2
  fi
fi
exit $rc
