#!/usr/bin/env bash
# A live training job as one Slurm batch job: srun starts every rank (rank = SLURM_PROCID: 0 the
# coordinator, 1..P the workers, P+1.. the shards) on the allocation's nodes; rank 0 listens on
# the first node. --ntasks must be 1 + workers + shards of the scenario (node says so if not).
#
#   sbatch --ntasks=7 scenarios/cluster/train_sbatch.sh scenarios/live/fmnist_mlp.yaml \
#       --set cluster.machines=4 --set cluster.servers=2 --csv curve.csv
#   sbatch --ntasks=4 --overcommit ...     # more ranks than the node has CPUs (one machine)
#
# Every argument after the scenario goes to `poseidon node` (docs/live.md). The job's secret is a
# fresh owner-only file in the submit folder (it must be shared by the nodes: the submit folder
# of a cluster usually is), removed at the end. POSEIDON=path picks the binary; POSEIDON_PORT
# the coordinator's port (default: 20000 + the job id mod 20000). A rank that fails ends the job
# (--kill-on-bad-exit); one that never starts makes the others give up after the rendezvous
# timeout (node --rendezvous-timeout, 120 s by default).
#SBATCH --job-name=poseidon-live
#SBATCH --output=poseidon-live-%j.log
set -euo pipefail
if (($# < 1)); then
  echo "usage: sbatch --ntasks=N $0 SCENARIO.yaml [node flags...]" >&2
  exit 2
fi
: "${SLURM_JOB_ID:?run it with sbatch (or inside salloc)}"
scenario=$1
shift
bin=${POSEIDON:-poseidon}
command -v "$bin" >/dev/null || { echo "train_sbatch.sh: error: no poseidon binary '$bin': set POSEIDON=path" >&2; exit 2; }
coordinator=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
port=${POSEIDON_PORT:-$((20000 + SLURM_JOB_ID % 20000))}
secret=${SLURM_SUBMIT_DIR:-$PWD}/.poseidon-job-$SLURM_JOB_ID.secret
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret")
trap 'rm -f "$secret"' EXIT
srun --kill-on-bad-exit=1 "$bin" node "$scenario" --coordinator "$coordinator:$port" \
  --secret-file "$secret" --job-id "slurm-$SLURM_JOB_ID" "$@"
