# tests/cluster/lib.sh: what the `cluster` tests share (sourced). Each test is a bash script run
# by ctest from the build folder with: $1 = the repository, $2 = the poseidon binary, $3 = the
# one-node Slurm's folder (scripts/slurm-local, started by the fixture cluster_slurm_start).
# A test that cannot run here (not root, no Slurm or Open MPI) exits 77: ctest reports it skipped.
set -euo pipefail
root=$1
bin=$2
slurm_dir=${3:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/poseidon-cluster-XXXXXX")
trap 'rm -rf "$work"' EXIT

skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
need_root() { [[ $(id -u) -eq 0 ]] || skip "needs root (slurmd, mpirun --allow-run-as-root)"; }
need_slurm() {
  need_root
  [[ -s $slurm_dir/env ]] || skip "no one-node Slurm in $slurm_dir (the fixture cluster_slurm_start did not start it)"
  # shellcheck disable=SC1091
  . "$slurm_dir/env"
  sinfo -h >/dev/null 2>&1 || fail "the one-node Slurm in $slurm_dir does not answer: see its logs"
}
need_mpirun() {
  need_root
  command -v mpirun >/dev/null || skip "no mpirun (scripts/install-deps installs openmpi-bin)"
}
# A port for a coordinator that another process binds later. Not one the kernel hands out (bind
# to port 0 gives one from the ephemeral range, and between our close and the coordinator's bind
# any outgoing connection, mpirun's own among them, may take it: CI once saw "bind: Address
# already in use"), but a random free one below net.ipv4.ip_local_port_range, which connect()
# never picks.
free_port() {
  /usr/bin/python3 - <<'PY'
import random, socket
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = (int(x) for x in f.read().split())
except OSError:
    lo, hi = 32768, 60999
spans = [r for r in (range(10000, lo), range(hi + 1, 65536)) if len(r) > 1000]
if not spans:
    raise SystemExit("free_port: no port range outside ip_local_port_range " f"{lo}-{hi}")
for _ in range(200):
    port = random.choice(random.choice(spans))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit("free_port: 200 random ports outside the ephemeral range were all taken")
PY
}
# A job secret (owner-only), as launch writes one.
secret() {
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/job.secret"
  chmod 600 "$work/job.secret"
  echo "$work/job.secret"
}
# The live job every test runs: fmnist_mlp, 2 workers, 1 shard, 30 iterations, loss every one.
scenario=$root/scenarios/live/fmnist_mlp.yaml
job_sets=(--set cluster.workers=2 --set cluster.servers=1 --set iterations=30)
train_flags=(--no-test --print-interval 1)
# The reference curve: the same job under `poseidon launch`.
reference_curve() {
  "$bin" launch "$scenario" "${job_sets[@]}" "${train_flags[@]}" --log-dir "$work/launch" \
    --csv "$work/launch.csv" >"$work/launch.out" 2>&1 || { cat "$work/launch.out"; fail "launch failed"; }
  cut -d, -f1-2 "$work/launch.csv"
}
# Compares a curve file's iteration,loss columns with the reference; prints both on a mismatch.
same_losses() {
  local got=$1 what=$2
  [[ -s $got ]] || fail "$what wrote no learning curve ($got)"
  if ! diff <(cut -d, -f1-2 "$got") <(reference_curve) >"$work/diff.txt"; then
    cat "$work/diff.txt"
    fail "$what trained a different curve from launch's"
  fi
  [[ $(wc -l <"$got") -ge 30 ]] || fail "$what: fewer than 30 iterations in $got"
  echo "$what: the same $(($(wc -l <"$got") - 1)) losses as launch"
}
