#!/usr/bin/env bash
# A large sweep as a Slurm job array: every array task runs one shard of the sweep, and a last
# job (after the whole array succeeded) merges the shards' CSVs into the CSV the sweep run whole
# would have written, byte for byte.
#
#   scenarios/cluster/sweep_slurm.sh scenarios/experiments/paper2015_alexnet_speedup.yaml out/speedup.csv 16
#
# It submits two jobs and returns; the merged CSV appears at OUT when both are done. Each task
# uses all the CPUs Slurm gives it (-j $SLURM_CPUS_PER_TASK). The same without Slurm, on one
# machine or several with a shared folder, using GNU parallel:
#
#   parallel -j 4 build/apps/poseidon/poseidon sweep SWEEP.yaml -j 1 --shard {}/4 -o shard_{}.csv ::: 0 1 2 3
#   build/apps/poseidon/poseidon sweep --merge shard_*.csv -o all.csv
#
# (--merge orders shards by the index written in their first line, so the glob order does not
# matter, and it fails naming the shard that is missing, doubled, truncated or from another sweep.)
set -euo pipefail
if (($# < 2)); then
  echo "usage: $0 SWEEP.yaml OUT.csv [SHARDS=8] [CPUS_PER_TASK=4]" >&2
  exit 2
fi
sweep=$1
out=$2
shards=${3:-8}
cpus=${4:-4}
bin=${POSEIDON:-$(pwd)/build/apps/poseidon/poseidon}
work=$(dirname "$out")/$(basename "$out" .csv).shards
mkdir -p "$work"

array=$(sbatch --parsable --job-name=poseidon-sweep --array=0-$((shards - 1)) \
  --cpus-per-task="$cpus" --output="$work/slurm-%A_%a.log" --wrap \
  "\"$bin\" sweep \"$sweep\" -j \$SLURM_CPUS_PER_TASK --shard \$SLURM_ARRAY_TASK_ID/$shards \
     -o \"$work/shard_\$SLURM_ARRAY_TASK_ID.csv\"")
sbatch --parsable --job-name=poseidon-merge --dependency=afterok:"$array" \
  --output="$work/slurm-merge-%j.log" --wrap \
  "\"$bin\" sweep --merge \"$work\"/shard_*.csv -o \"$out\""
echo "submitted array job $array ($shards shards) and its merge; the result goes to $out"
