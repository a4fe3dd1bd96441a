#!/usr/bin/env bash
# A PyTorch job (scenario 'model: torch') under a real mpirun and a real srun: every rank runs
# `poseidon node ... -- python3 torch_job.py`; the coordinator and shard ranks host their roles,
# the worker ranks become the training script (poseidon.torch reads the job from the
# environment). BSP in float64 gives the one-process losses and parameters to 1e-10.
# Usage: torch_test.sh REPO BIN SLURM_DIR mpirun|srun
. "$(dirname "$0")/lib.sh"
launcher=$4
if [[ $launcher == srun ]]; then need_slurm; else need_mpirun; fi
/usr/bin/python3 -c "import torch" 2>/dev/null || skip "no python3-torch"
export PYTHONPATH="$(cd "$(dirname "$bin")/../../python" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
job=$root/python/tests/torch_job.py
cat >"$work/torch.yaml" <<YAML
schema_version: 1
name: torch-cluster
model: torch
cluster: {workers: 2, servers: 1, placement: colocated,
  network: {model: flow, topology: star, bandwidth_gbps: 1, latency_us: 50}}
protocol: {scheme: auto, consistency: {model: bsp}}
YAML
/usr/bin/python3 "$job" single --out "$work/single" --model mlp || fail "the one-process run failed"
port=$(free_port)
sec=$(secret)
if [[ $launcher == srun ]]; then
  run=(srun -n 4 --overcommit --kill-on-bad-exit=1)
else
  run=(mpirun --allow-run-as-root --oversubscribe -n 4)
fi
timeout 300 "${run[@]}" "$bin" node "$work/torch.yaml" --coordinator "127.0.0.1:$port" \
  --secret-file "$sec" -- /usr/bin/python3 "$job" poseidon --out "$work/job" --model mlp \
  >"$work/job.out" 2>"$work/job.err" || { cat "$work/job.out" "$work/job.err"; fail "$launcher job failed"; }
grep -q "job done: 2 workers, 1 shards, 6 iterations" "$work/job.out" || { cat "$work/job.out"; fail "no 'job done' line"; }
/usr/bin/python3 - "$work" <<'PY' || fail "$launcher: not the one-process result"
import sys, torch
w = sys.argv[1]
ref = torch.load(f"{w}/single.rank0.pt")
runs = [torch.load(f"{w}/job.rank{r}.pt") for r in (0, 1)]
for s, want in enumerate(ref["losses"]):
    got = sum(r["losses"][s] for r in runs) / 2
    assert abs(got - want) <= 1e-10, (s, got, want)
for r in runs:
    for k, v in ref["state"].items():
        assert (r["state"][k] - v).abs().max().item() <= 1e-10, k
print("the one-process losses and parameters to 1e-10")
PY
echo "$launcher: a torch job's losses and parameters are one process's"
