"""Fashion-MNIST with PyTorch, the same script in one process or with Poseidon across workers.

    python3 examples/torch/train.py --model cnn                    # one process
    poseidon launch --torch -- python3 examples/torch/train.py --model cnn   # 4 workers, 2 shards

It is a DDP script in every line but the wrapper: a DistributedSampler shards the data (after
poseidon.torch.init() it reads the job's rank and size), the user's optimizer steps, torch.save
checkpoints, worker 0 reports. With P workers and --batch B per worker, the DistributedSampler's
global batches are exactly one process's batches of P x B (same permutation), so BSP follows the
one-process run with --batch P x B (docs/torch.md has the figures).

Models: cnn (two conv/relu/pool stages, two linear layers: FC-heavy at the end, where SFB pays)
and transformer (7x7 patches, learned positions, two pre-norm encoder layers, mean pooling).
"""

import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist  # noqa: E402


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 512)
        self.fc2 = nn.Linear(512, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class Transformer(nn.Module):
    def __init__(self, d=64, heads=4, layers=2, patch=7):
        super().__init__()
        self.patch = nn.Conv2d(1, d, patch, stride=patch)
        tokens = (28 // patch) ** 2
        self.pos = nn.Parameter(torch.zeros(1, tokens, d))
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 10)
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos  # [B, 16, d]
        return self.head(self.norm(self.encoder(x)).mean(1))


def accuracy(model, x, y, batch=1000):
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            right += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return right / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["cnn", "transformer"], default="cnn")
    ap.add_argument("--epochs", type=int, default=None, help="default: cnn 2, transformer 3")
    ap.add_argument("--batch", type=int, default=None,
                    help="per worker (default: 64 / workers for the CNN, 128 / workers for the "
                         "transformer, so that every run has the same global batch)")
    ap.add_argument("--lr", type=float, default=None, help="default: SGD 0.05 / Adam 1e-3")
    ap.add_argument("--scheme", default=None, help="ps | sfb | allreduce | auto (the scenario's)")
    ap.add_argument("--consistency", default=None, help="bsp | ssp:S | asp (the scenario's)")
    ap.add_argument("--gradient-wire", default=None,
                    help="fp32 | fp16 | bf16: gradients on the wire (the scenario's)")
    ap.add_argument("--save", help="worker 0 writes a checkpoint here after every epoch")
    ap.add_argument("--resume", help="continue from a checkpoint --save wrote")
    ap.add_argument("--limit", type=int, default=0, help="train on the first N images (tests)")
    ap.add_argument("--final", help="worker 0 writes the final parameters here (torch.save)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    distributed = "POSEIDON_RANK" in os.environ or "POSEIDON_COORDINATOR" in os.environ
    if distributed:
        import poseidon.torch as pt
        pt.init()
        rank, size = pt.rank(), pt.size()
    else:
        rank, size = 0, 1
    epochs = args.epochs or (2 if args.model == "cnn" else 3)
    batch = args.batch or (64 if args.model == "cnn" else 128) // size
    torch.manual_seed(args.seed)
    net = Cnn() if args.model == "cnn" else Transformer()
    if args.model == "cnn":
        opt = torch.optim.SGD(net.parameters(), lr=args.lr or 0.05, momentum=0.9)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=args.lr or 1e-3)
    start_epoch = 0
    if args.resume:
        ckpt = torch.load(args.resume)
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        start_epoch = ckpt["epoch"]
    model = net
    if distributed:
        model = pt.DistributedDataParallel(net, scheme=args.scheme, consistency=args.consistency,
                                           gradient_wire=args.gradient_wire)
        if model.consistency != "bsp":
            opt = pt.DistributedOptimizer(opt, model)

    x, y = fmnist.load("train", args.data_dir)
    if args.limit:
        x, y = x[:args.limit], y[:args.limit]
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=batch, sampler=sampler, drop_last=True)
    test_x, test_y = fmnist.load("test", args.data_dir)
    t0 = time.time()
    images = 0
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        total, n = 0.0, 0
        for xb, yb in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item()
            n += 1
            images += len(xb) * size
        if rank == 0:
            print(f"epoch {epoch + 1}/{epochs}: loss {total / max(n, 1):.4f}, "
                  f"{images / (time.time() - t0):.0f} images/s", flush=True)
            if args.save:
                torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(),
                            "epoch": epoch + 1}, args.save)
    if rank == 0:
        print(f"test accuracy {accuracy(net, test_x, test_y):.4f}", flush=True)
        if args.final:
            torch.save(net.state_dict(), args.final)


if __name__ == "__main__":
    main()
