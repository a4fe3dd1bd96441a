"""One run of bench/torch_compare.py: trains --steps steps and prints worker 0's steady-state
throughput ("images/s X": the global images of the steps after --warmup over their time).

    python3 torch_compare_job.py single --workers 4 ...   # one process, the global batch
    python3 torch_compare_job.py ddp ...                  # torch DDP over gloo (RANK, WORLD_SIZE)
    python3 torch_compare_job.py poseidon --scheme auto --consistency bsp   # under launch --torch
"""

import argparse
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["single", "ddp", "poseidon"])
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


if __name__ == "__main__":
    main()
