#!/usr/bin/python3
"""Data-parallel PyTorch on this machine, side by side in one run: one process, PyTorch's own
DistributedDataParallel over gloo, and poseidon.torch with every scheme under BSP and SSP, on
loopback and on emulated links (network namespaces, tc tbf; root); and Horovod over gloo where
bench/install-horovod has built it.

    sudo bench/torch_compare.py --nets loopback,1gbit,100mbit --model mlp      # docs/performance.md
    bench/torch_compare.py --nets loopback --runs single,ddp,auto --steps 30   # quick, no root

Every run trains the same model on the same synthetic Fashion-MNIST-shaped batches (W workers of
--batch rows each; one process takes the global batch) and reports the images per second of its
steady state: the steps after --warmup, timed by worker 0 from its first timed step to its last,
median over --repeat runs. Poseidon runs `poseidon launch --torch` (W workers, S shards co-located
on the workers' machines, each machine its own namespace with --emulate); DDP and Horovod run W processes,
each in its own namespace on the same shaped links (scripts/netns-run), rank 0's address as
MASTER_ADDR. Every process uses one thread (OMP_NUM_THREADS=1). SACP's auto plans with the
emulated rate, and on loopback with scenarios/live/torch.yaml's 1 Gbit/s.

Models: mlp (FC-heavy: 784-2048-2048-10, 5.8 M parameters, where SACP's SFB pays) and cnn (the
examples' CNN). Output: a table on stdout, and --csv.
"""

import argparse
import csv
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOB = os.path.join(HERE, "torch_compare_job.py")
PY = "/usr/bin/python3"
NETNS = os.path.join(ROOT, "scripts", "netns-run")

POSEIDON_RUNS = {
    f"{scheme}-{c}": (scheme, c)
    for scheme in ("ps", "sfb", "allreduce", "auto") for c in ("bsp", "ssp:2")
    if not (scheme == "allreduce" and c != "bsp")  # ring all-reduce is BSP only
}
RATES = {"loopback": None, "10gbit": "10gbit", "1gbit": "1gbit", "100mbit": "100mbit"}


def _images_per_s(out):
    m = re.findall(r"images/s ([0-9.]+)", out)
    if not m:
        raise RuntimeError("no 'images/s' line in:\n" + out[-3000:])
    return float(m[-1])


def _job_args(a, mode, extra=()):
    return [PY, JOB, mode, "--model", a.model, "--batch", str(a.batch), "--steps", str(a.steps),
            "--warmup", str(a.warmup), *extra]


def run_single(a, tmp):
    args = _job_args(a, "single", ["--workers", str(a.workers)])
    r = subprocess.run(args, capture_output=True, text=True, timeout=3600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    return _images_per_s(r.stdout + r.stderr)


def _run_ranks(a, tmp, net, python, mode, env, own_hostname=False):
    """W processes of the job (rank 0's address as MASTER_ADDR), on loopback or each in its own
    namespace on the shaped links (with own_hostname, in its own UTS namespace too, its hostname
    its address); worker 0's throughput."""
    job = " ".join([python] + _job_args(a, mode)[1:])
    env = dict(env, WORLD_SIZE=str(a.workers), OMP_NUM_THREADS="1")
    if RATES[net] is None:
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", **env)
        procs = [subprocess.Popen(job.split(), env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for r in range(a.workers)]
        outs = [p.communicate(timeout=3600)[0] for p in procs]
        return _images_per_s(outs[0])
    env = dict(env, MASTER_ADDR="10.77.0.1")
    exports = " ".join(f"{k}='{v}'" for k, v in env.items())
    if own_hostname:
        job = f'unshare --uts bash -c "hostname $NETNS_ADDR && exec {job}"'
    cmd = f"{exports} RANK=$NETNS_INDEX {job} > {tmp}/{mode}-$NETNS_INDEX.out 2>&1"
    r = subprocess.run(["/bin/bash", NETNS, "-n", str(a.workers), "--rate", RATES[net], "--",
                        "bash", "-c", cmd], timeout=3600)
    with open(os.path.join(tmp, f"{mode}-0.out")) as f:
        out = f.read()
    if r.returncode != 0:
        raise RuntimeError(f"{mode} on {net} exited {r.returncode}:\n{out[-3000:]}")
    return _images_per_s(out)


def run_ddp(a, tmp, net):
    return _run_ranks(a, tmp, net, PY, "ddp", {
        "MASTER_PORT": "29611", "GLOO_SOCKET_IFNAME": "lo" if RATES[net] is None else "eth0"})


def run_horovod(a, tmp, net):
    """Horovod's DistributedOptimizer over gloo, from the Python of --horovod-python (a venv with
    Debian's torch and Horovod built against it: bench/install-horovod). On emulated links every
    rank's hostname is its namespace's address: Horovod 0.28.1 builds the Gloo device of its
    process sets (the global one included) from the hostname, not from HOROVOD_GLOO_IFACE
    (GlooContext::InitializeForProcessSet reads its own, empty, interface), and this machine's
    hostname resolves to 127.0.0.1, which no other namespace reaches."""
    hosts = "" if RATES[net] is None else " ".join(f"10.77.0.{i + 1}" for i in range(a.workers))
    return _run_ranks(a, tmp, net, a.horovod_python, "horovod", {
        "HVD_PORT_FILE": os.path.join(tmp, "horovod-port"), "HVD_HOSTS": hosts,
        "HVD_IFACE": "lo" if RATES[net] is None else "eth0"}, own_hostname=bool(hosts))


def run_poseidon(a, tmp, net, scheme, consistency):
    cmd = [a.poseidon, "launch", "--torch", os.path.join(ROOT, "scenarios", "live", "torch.yaml"),
           "--workers", str(a.workers), "--servers", str(a.servers),
           "--log-dir", os.path.join(tmp, "logs"), "--progress-timeout", "600"]
    if RATES[net] is not None:
        gbps = {"10gbit": 10, "1gbit": 1, "100mbit": 0.1}[net]
        # The links, and the network SACP's auto plans with.
        cmd += ["--emulate", "--emulate-gbps", str(gbps),
                "--set", f"cluster.network.bandwidth_gbps={gbps}"]
    cmd += ["--"] + _job_args(a, "poseidon", ["--scheme", scheme, "--consistency", consistency])
    # The workers import poseidon.torch from the build (scripts/build's build/python) unless
    # PYTHONPATH already names one.
    pythonpath = os.pathsep.join(p for p in (os.path.join(ROOT, "build", "python"),
                                             os.environ.get("PYTHONPATH")) if p)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600,
                       env=dict(os.environ, PYTHONPATH=pythonpath))
    if r.returncode != 0:
        logs = ""
        for name in sorted(glob.glob(os.path.join(tmp, "logs", "*.log"))):
            with open(name) as f:
                logs += f"--- {name}\n{f.read()[-2000:]}"
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}\n"
                           + logs)
    return _images_per_s(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16, help="rows per worker per step")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nets", default="loopback,1gbit,100mbit")
    ap.add_argument("--runs", default="single,ddp,horovod," + ",".join(POSEIDON_RUNS))
    ap.add_argument("--poseidon", default=os.path.join(ROOT, "build", "apps", "poseidon",
                                                         "poseidon"))
    ap.add_argument("--horovod-python", default=os.path.join(ROOT, "build", "horovod-venv", "bin",
                                                              "python"),
                    help="a Python that imports horovod.torch (bench/install-horovod makes one)")
    ap.add_argument("--csv")
    a = ap.parse_args()
    runs = a.runs.split(",")
    if "horovod" in runs and not os.access(a.horovod_python, os.X_OK):
        print(f"horovod: skipped ({a.horovod_python} does not exist: bench/install-horovod "
              "builds Horovod against Debian's torch)", flush=True)
        runs.remove("horovod")
    rows = []
    for net in a.nets.split(","):
        if net not in RATES:
            sys.exit(f"--nets: unknown '{net}' (loopback, 10gbit, 1gbit, 100mbit)")
        for run in runs:
            if run == "single" and net != "loopback":
                continue  # one process has no network
            values = []
            for _ in range(a.repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    if run == "single":
                        values.append(run_single(a, tmp))
                    elif run == "ddp":
                        values.append(run_ddp(a, tmp, net))
                    elif run == "horovod":
                        values.append(run_horovod(a, tmp, net))
                    else:
                        values.append(run_poseidon(a, tmp, net, *POSEIDON_RUNS[run]))
            rows.append({"net": net, "run": run, "images_per_s": statistics.median(values),
                         "runs": " ".join(f"{v:.1f}" for v in values)})
            print(f"{net:9} {run:15} {rows[-1]['images_per_s']:9.1f} images/s  ({rows[-1]['runs']})",
                  flush=True)
    print()
    for net in a.nets.split(","):
        ddp = next((r["images_per_s"] for r in rows if r["net"] == net and r["run"] == "ddp"), None)
        for r in rows:
            if r["net"] == net and ddp:
                r["vs_ddp"] = r["images_per_s"] / ddp
                print(f"{net:9} {r['run']:15} {r['vs_ddp']:6.2f} x DDP")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["net", "run", "images_per_s", "vs_ddp", "runs"])
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
