"""One training run of a small model, the same in three forms, for test_torch_ddp.py:

    python3 torch_job.py single  --out F ARGS   # one process on the global batch (the reference)
    poseidon launch --torch SC -- python3 torch_job.py poseidon --out F ARGS
    torchrun --nproc-per-node P torch_job.py ddp --out F ARGS   # torch.nn.parallel.DDP over gloo

Every form trains from the same initial parameters (seed 0; Poseidon and DDP then copy worker
1's / rank 0's to every worker anyway) on the same global batches (seeded synthetic data): worker
r of P takes rows [r*B/P, (r+1)*B/P) of every global batch of B rows. Each writes F.rankR.pt with
its per-step losses and final parameters (the single process writes F.rank0.pt); under P workers
the global loss of a step is the mean of the workers' losses.

Models (--model): mlp, cnn, and `features` (an embedding tied to the output layer, a frozen layer,
an unused one, a residual block of linear layers on token sequences [B, T, D] so that SFB sees
3-D inputs and autograd finishes modules out of order).
"""

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 24)
        self.out = nn.Linear(24, 5)

    def forward(self, x):
        return self.out(torch.tanh(self.fc2(torch.relu(self.fc1(x)))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1)
        self.fc1 = nn.Linear(6 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = F.avg_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class Features(nn.Module):
    """Tied weights, a frozen and an unused module, a residual block on [B, T, D]."""

    def __init__(self, vocab=11, d=12, t=6):
        super().__init__()
        self.t = t
        self.embed = nn.Embedding(vocab, d)
        self.frozen = nn.Linear(d, d)
        self.frozen.requires_grad_(False)
        self.block_in = nn.Linear(d, 16)
        self.block_out = nn.Linear(16, d)
        self.norm = nn.LayerNorm(d)
        self.unused = nn.Linear(d, d)  # never called
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, tokens):
        x = self.frozen(self.embed(tokens))                  # [B, T, D]
        x = x + self.block_out(F.gelu(self.block_in(x)))     # residual: out of order in backward
        return self.head(self.norm(x)).flatten(0, 1)         # [B*T, vocab]


class Functional(nn.Module):
    """An nn.Linear whose weight is also applied outside its forward (F.linear): its factors
    alone would miss that part of the gradient."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 20)
        self.out = nn.Linear(20, 5)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        h = h + torch.tanh(F.linear(h, self.fc.weight))  # the same weight, functionally
        return self.out(h)


class BnNet(nn.Module):
    """Batch norm: buffers (running statistics) that DDP and Poseidon copy from worker 0 before
    every forward pass under BSP."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2).flatten(1))


def build(name, dtype):
    torch.manual_seed(0)
    return {"mlp": Mlp, "cnn": Cnn, "features": Features, "functional": Functional,
            "bn": BnNet}[name]().to(dtype)


def batches(name, steps, batch, dtype):
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(20, 5, generator=g, dtype=dtype)  # learnable labels for the MLP
    for _ in range(steps):
        if name in ("mlp", "functional"):
            x = torch.randn(batch, 20, generator=g, dtype=dtype)
            y = (x @ teacher).argmax(1)
        elif name in ("cnn", "bn"):
            x = torch.randn(batch, 1, 16, 16, generator=g, dtype=dtype)
            y = torch.randint(0, 5, (batch,), generator=g)
        else:
            x = torch.randint(0, 11, (batch, 6), generator=g)
            y = torch.randint(0, 11, (batch * 6,), generator=g)
        yield x, y


def loss_of(model, name, x, y):
    out = model(x)
    return F.cross_entropy(out, y)


def optimizer(args, params):
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr)
    return torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["single", "poseidon", "ddp"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=12, help="the global batch")
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--scheme", default="ps")
    ap.add_argument("--consistency", default="bsp")
    ap.add_argument("--gradient-wire", default=None,
                    help="poseidon: DistributedDataParallel(gradient_wire=...)")
    ap.add_argument("--accumulate", type=int, default=1, help="micro-batches per step (no_sync)")
    ap.add_argument("--different", action="store_true", help="worker 2 builds another model")
    ap.add_argument("--longer", action="store_true", help="worker 2 runs one step more")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--fail-at", type=int, default=-1,
                    help="worker 2 raises in the middle of this step (after its forward pass)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    model = build(args.model, dtype).to(args.device)
    rank, size = 0, 1
    wrapped = model
    if args.mode == "poseidon":
        import poseidon.torch as pt
        rank, size = pt.init(), pt.size()
        if args.different and rank == 1:
            model.fc2 = nn.Linear(32, 23).to(dtype)  # another model on worker 2
            model.out = nn.Linear(23, 5).to(dtype)
        wrapped = pt.DistributedDataParallel(model, scheme=args.scheme,
                                             consistency=args.consistency,
                                             gradient_wire=args.gradient_wire)
        opt = optimizer(args, wrapped.parameters())
        if args.consistency != "bsp":
            opt = pt.DistributedOptimizer(opt, wrapped)
    elif args.mode == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
        wrapped = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
        opt = optimizer(args, wrapped.parameters())
    else:
        opt = optimizer(args, model.parameters())
    losses = []
    steps = args.steps + (1 if args.longer and rank == 1 else 0)
    for x, y in batches(args.model, steps, args.batch, dtype):
        b = args.batch // size
        x, y = x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b] if args.model != "features" else y[rank * b * 6:(rank + 1) * b * 6]
        x, y = x.to(args.device), y.to(args.device)
        opt.zero_grad()
        # Gradient accumulation: micro-batches, all but the last without syncing.
        m = args.accumulate
        step_loss = 0.0
        for i in range(m):
            xs = x[i * b // m:(i + 1) * b // m]
            ys = (y[i * b // m:(i + 1) * b // m] if args.model != "features"
                  else y[i * b // m * 6:(i + 1) * b // m * 6])
            sync = (i == m - 1) or args.mode == "single"
            ctx = wrapped.no_sync() if not sync else _Null()
            with ctx:
                loss = loss_of(wrapped, args.model, xs, ys) / m
                if rank == 1 and len(losses) == args.fail_at:
                    raise RuntimeError(f"worker 2 fails in step {args.fail_at} on purpose")
                loss.backward()
            step_loss += loss.item()
        opt.step()
        losses.append(step_loss)
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    saved = {"losses": losses, "state": state, "size": size}
    if args.mode == "poseidon":
        saved["gradient_wire"] = wrapped.job["gradient_wire"]  # as the job ran
    torch.save(saved, f"{args.out}.rank{rank}.pt")
    if args.mode == "poseidon":
        import poseidon.torch as pt
        pt.shutdown()
    elif args.mode == "ddp":
        torch.distributed.destroy_process_group()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    sys.exit(main())
