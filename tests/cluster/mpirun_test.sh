#!/usr/bin/env bash
# A live job under a real mpirun (Open MPI): ranks from OMPI_COMM_WORLD_RANK, one OpenMP thread
# each from OMPI_COMM_WORLD_LOCAL_SIZE, the same losses as launch; a rank that fails at start
# ends the whole job.
. "$(dirname "$0")/lib.sh"
need_mpirun
mpi=(mpirun --allow-run-as-root --oversubscribe -n 4)
port=$(free_port)
sec=$(secret)
timeout 300 "${mpi[@]}" "$bin" node "$scenario" "${job_sets[@]}" "${train_flags[@]}" \
  --coordinator "127.0.0.1:$port" --secret-file "$sec" --csv "$work/mpi.csv" \
  >"$work/mpi.out" 2>"$work/mpi.err" || { cat "$work/mpi.out" "$work/mpi.err"; fail "mpirun job failed"; }
grep -q "job done: 2 workers, 1 shards, 30 iterations" "$work/mpi.out" || fail "no 'job done' line"
n=$(grep -c "kernels use .* / 4 ranks on this machine (OMPI_COMM_WORLD_LOCAL_SIZE)" "$work/mpi.err" || true)
((n == 4)) || { cat "$work/mpi.err"; fail "want 4 ranks saying their thread count, got $n"; }
same_losses "$work/mpi.csv" "mpirun"

port=$(free_port)
rc=0
timeout 120 "${mpi[@]}" bash -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then echo "rank 2 fails at start on purpose" >&2; exit 1; fi; exec "$0" "$@"' \
  "$bin" node "$scenario" "${job_sets[@]}" "${train_flags[@]}" --coordinator "127.0.0.1:$port" \
  --secret-file "$sec" --rendezvous-timeout 30 >"$work/fail.out" 2>&1 || rc=$?
((rc != 0 && rc != 124)) || { cat "$work/fail.out"; fail "a failed rank: mpirun rc $rc (want a failure, not 0 or a hang)"; }
echo "a failed rank ended the mpirun job (rc $rc)"
