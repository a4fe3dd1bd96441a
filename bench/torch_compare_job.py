"""One run of bench/torch_compare.py: trains --steps steps and prints worker 0's steady-state
throughput ("images/s X": the global images of the steps after --warmup over their time).

    python3 torch_compare_job.py single --workers 4 ...   # one process, the global batch
    python3 torch_compare_job.py ddp ...                  # torch DDP over gloo (RANK, WORLD_SIZE)
    python3 torch_compare_job.py poseidon --scheme auto --consistency bsp   # under launch --torch
    VENV/bin/python torch_compare_job.py horovod ...      # Horovod over gloo (see _horovod_init)
"""

import argparse
import os
import socket
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def model_of(name):
    torch.manual_seed(0)
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048),
                             nn.ReLU(), nn.Linear(2048, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, 10))


def _horovod_init():
    """hvd.init() without horovodrun, so that each rank may live in its own network namespace:
    rank 0 serves Horovod's gloo rendezvous (what horovodrun does in the launcher) on a free port
    and writes the port to $HVD_PORT_FILE; the others wait for the file and for the port to
    accept. Every rank is its own host on emulated links ($HVD_HOSTS, one address per rank) and
    all ranks are one host on loopback ($HVD_HOSTS unset). Environment: RANK, WORLD_SIZE,
    MASTER_ADDR (rank 0's address), HVD_PORT_FILE, HVD_IFACE (lo or eth0)."""
    import horovod.torch as hvd
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port_file = os.environ["MASTER_ADDR"], os.environ["HVD_PORT_FILE"]
    hosts = os.environ.get("HVD_HOSTS", "").split()
    if rank == 0:
        from horovod.runner.common.util import hosts as hvd_hosts
        from horovod.runner.http.http_server import RendezvousServer
        spec = ",".join(f"{h}:1" for h in hosts) if hosts else f"localhost:{size}"
        server = RendezvousServer()
        port = server.start()
        server.init(hvd_hosts.get_host_assignments(hvd_hosts.parse_hosts(spec), size))
        with open(port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.rename(port_file + ".tmp", port_file)  # whole or absent
    deadline = time.monotonic() + 120
    while True:
        try:
            with open(port_file) as f:
                port = int(f.read())
            socket.create_connection((addr, port), timeout=1).close()
            break
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise SystemExit(f"rank {rank}: no Horovod rendezvous at {addr} ({port_file})")
            time.sleep(0.05)  # polling for rank 0's server; not a timing assumption
    os.environ.update({
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": addr, "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": os.environ.get("HVD_IFACE", "lo"),
        "HOROVOD_HOSTNAME": hosts[rank] if hosts else "localhost",
        "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": "0" if hosts else str(rank),
        "HOROVOD_LOCAL_SIZE": "1" if hosts else str(size),
        "HOROVOD_CROSS_RANK": str(rank) if hosts else "0",
        "HOROVOD_CROSS_SIZE": str(size) if hosts else "1"})
    hvd.init()
    return hvd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["single", "ddp", "poseidon", "horovod"])
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=1, help="single: the workers it stands for")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--scheme", default="auto")
    ap.add_argument("--consistency", default="bsp")
    a = ap.parse_args()
    torch.set_num_threads(1)
    net = model_of(a.model)
    size, rank = 1, 0
    model = net
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    if a.mode == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        size, rank = dist.get_world_size(), dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(net)
    elif a.mode == "horovod":
        hvd = _horovod_init()
        size, rank = hvd.size(), hvd.rank()
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters())
    elif a.mode == "poseidon":
        import poseidon.torch as pt
        rank, size = pt.init(), pt.size()
        model = pt.DistributedDataParallel(net, scheme=a.scheme, consistency=a.consistency)
        if model.consistency != "bsp":
            opt = pt.DistributedOptimizer(opt, model)
    batch = a.batch * (a.workers if a.mode == "single" else 1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(batch, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    t0 = None
    for step in range(a.steps):
        if step == a.warmup:
            t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    seconds = time.perf_counter() - t0
    if rank == 0:
        global_batch = batch * (1 if a.mode == "single" else size)
        print(f"images/s {(a.steps - a.warmup) * global_batch / seconds:.2f}", flush=True)
    if a.mode == "poseidon":
        import poseidon.torch as pt
        pt.shutdown()
    elif a.mode == "ddp":
        torch.distributed.destroy_process_group()
    elif a.mode == "horovod":
        hvd.shutdown()


if __name__ == "__main__":
    main()
