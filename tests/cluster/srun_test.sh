#!/usr/bin/env bash
# A live job under a real srun: every rank from SLURM_PROCID, one OpenMP thread each from the
# node's cores and ranks, the same losses as launch; a rank that fails at start ends the job
# (the others time out of the rendezvous) instead of leaving rank 0 waiting.
. "$(dirname "$0")/lib.sh"
need_slurm
port=$(free_port)
sec=$(secret)
# 4 ranks on a node with fewer CPUs: --overcommit, as docs/live.md says.
timeout 300 srun -n 4 --overcommit --kill-on-bad-exit=1 "$bin" node "$scenario" "${job_sets[@]}" \
  "${train_flags[@]}" --coordinator "127.0.0.1:$port" --secret-file "$sec" --csv "$work/srun.csv" \
  >"$work/srun.out" 2>"$work/srun.err" || { cat "$work/srun.out" "$work/srun.err"; fail "srun job failed"; }
grep -q "job done: 2 workers, 1 shards, 30 iterations" "$work/srun.out" || fail "no 'job done' line"
n=$(grep -c "kernels use 1 OpenMP thread: .* / 4 ranks on this machine (SLURM_STEP_TASKS_PER_NODE)" "$work/srun.err" || true)
cores=$(srun -n 1 nproc)
if ((cores < 8)); then
  ((n == 4)) || { cat "$work/srun.err"; fail "want 4 ranks saying they use 1 thread, got $n"; }
fi
same_losses "$work/srun.csv" "srun"

# Rank 2 fails at start; no --kill-on-bad-exit, so only the rendezvous bound ends the others.
port=$(free_port)
rc=0
timeout 120 srun -n 4 --overcommit bash -c \
  'if [ "$SLURM_PROCID" = 2 ]; then echo "rank 2 fails at start on purpose" >&2; exit 1; fi; exec "$0" "$@"' \
  "$bin" node "$scenario" "${job_sets[@]}" "${train_flags[@]}" --coordinator "127.0.0.1:$port" \
  --secret-file "$sec" --rendezvous-timeout 5 >"$work/fail.out" 2>&1 || rc=$?
((rc != 0 && rc != 124)) || { cat "$work/fail.out"; fail "a failed rank: srun rc $rc (want a failure, not 0 or a hang)"; }
grep -q "rendezvous not done after 5 s" "$work/fail.out" || { cat "$work/fail.out"; fail "nobody named the missing rank"; }
grep -q "worker 1 (rank 2)" "$work/fail.out" || { cat "$work/fail.out"; fail "the missing rank is not named"; }
echo "a failed rank ended the srun job (rc $rc)"

# The batch recipe (scenarios/cluster/train_sbatch.sh, docs/live.md): the same job, the same losses.
cd "$work"
timeout 300 env POSEIDON="$bin" sbatch --wait --ntasks=4 --overcommit --output="$work/sbatch.log" \
  "$root/scenarios/cluster/train_sbatch.sh" "$scenario" "${job_sets[@]}" "${train_flags[@]}" \
  --csv "$work/sbatch.csv" >/dev/null || { cat "$work/sbatch.log"; fail "the sbatch job failed"; }
grep -q "job done: 2 workers, 1 shards, 30 iterations" "$work/sbatch.log" || { cat "$work/sbatch.log"; fail "no 'job done' line in the batch log"; }
same_losses "$work/sbatch.csv" "sbatch"
ls "$work"/.poseidon-job-*.secret >/dev/null 2>&1 && fail "the batch job left its secret behind"
echo ok
