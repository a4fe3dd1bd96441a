#!/usr/bin/python3
"""How well `poseidon simulate` predicts a PyTorch training iteration from a profile written by
poseidon.torch.profile: per model, profile on this machine, simulate one worker with the profile
(the CLI, DWBP off: one PyTorch process does forward, backward, then the step), and compare with
the real single-process iteration of the model (zero_grad, forward, loss, backward, SGD step),
same process and threads: the whole iterations profile() times one after each profiled one
(the same seconds, as `poseidon calibrate --check` does), and a separate run after profiling.
A benchmark: it measures and asserts nothing (docs/torch.md records its output).

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_profile_check.py
    OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/torch_profile_check.py
    ... --models fmnist_cnn --batch 64 --threads 2 --iterations 40 --measure 200

The models are PyTorch twins of the shipped scenarios/models/fmnist_{cnn,mlp,vit}.yaml (same
layers, so the files profile() writes have the shipped files' parameter and MAC totals, which the
script prints next to them, and python/tests checks).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import poseidon
import poseidon.torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FmnistCnn(nn.Module):
    """scenarios/models/fmnist_cnn.yaml: three conv(5x5, pad 2) + pool(3x3, stride 2, ceil)
    stages, two fc layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(32, 32, 5, padding=2)
        self.pool2 = nn.AvgPool2d(3, 2, ceil_mode=True)
        self.conv3 = nn.Conv2d(32, 64, 5, padding=2)
        self.pool3 = nn.AvgPool2d(3, 2, ceil_mode=True)
        self.ip1 = nn.Linear(64 * 3 * 3, 64)
        self.ip2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.pool1(self.conv1(x)))
        x = self.pool2(F.relu(self.conv2(x)))
        x = self.pool3(F.relu(self.conv3(x)))
        return self.ip2(self.ip1(x.flatten(1)))


class FmnistMlp(nn.Module):
    """scenarios/models/fmnist_mlp.yaml: 784-1024-1024-10."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


class VitBlock(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class FmnistVit(nn.Module):
    """scenarios/models/fmnist_vit.yaml: 7x7 patches, D = 64, a class token, learned positions,
    4 pre-LN blocks of 4 heads and a GELU MLP 64-128-64, the class token through the head."""

    def __init__(self, d=64, heads=4, blocks=4):
        super().__init__()
        self.patch = nn.Conv2d(1, d, 7, stride=7)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, 17, d))
        self.blocks = nn.Sequential(*[VitBlock(d, heads, 2 * d) for _ in range(blocks)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.ln(self.blocks(x))[:, 0])


TWINS = {"fmnist_cnn": FmnistCnn, "fmnist_mlp": FmnistMlp, "fmnist_vit": FmnistVit}


def measure_iterations(model, x, y, iterations, warmup):
    """Times whole training iterations as a user's loop runs them (same optimizer as profile()'s
    default); ms per iteration."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for i in range(warmup + iterations):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append((t1 - t0) * 1e3)
    return times


def simulate_one_worker(cli, scenario):
    """`poseidon simulate` of the written scenario, one worker, DWBP off (the CLI if there is
    one, else the module: the same C++)."""
    args = ["--set", "protocol.dwbp=false", "--no-baseline", "--format", "json"]
    if cli and os.access(cli, os.X_OK):
        out = subprocess.run([cli, "simulate", scenario] + args, check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out)["iteration_ms"], " ".join([cli, "simulate", scenario] + args)
    r = poseidon.simulate(scenario, set={"protocol.dwbp": False}, baseline=False)
    return r["iteration_ms"], "poseidon.simulate(%r, set={'protocol.dwbp': False})" % scenario


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="fmnist_cnn,fmnist_mlp,fmnist_vit")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads (default: torch's, printed)")
    ap.add_argument("--iterations", type=int, default=40, help="profile's timed iterations")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--measure", type=int, default=200, help="whole iterations timed after")
    ap.add_argument("--out", default=None, help="folder for the written files (default: temp)")
    ap.add_argument("--cli", default=os.environ.get("POSEIDON_CLI") or
                    os.path.join(ROOT, "build", "apps", "poseidon", "poseidon"))
    o = ap.parse_args()
    if o.threads:
        torch.set_num_threads(o.threads)
    out = o.out or tempfile.mkdtemp(prefix="torch_profile_check.")
    print("torch %s, threads %d (OMP_NUM_THREADS=%s), batch %d, profile %d+%d iterations, "
          "measured %d iterations; files in %s" % (
              torch.__version__, torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS",
                                                                        "unset"), o.batch,
              o.warmup, o.iterations, o.measure, out))
    print("%-11s %9s %9s | %10s | %10s %10s %8s %8s | %26s %8s" % (
        "model", "params", "shipped", "predicted", "median", "iqm", "err_med", "err_iqm",
        "separate: median (p10,p90)", "err"))
    for name in o.models.split(","):
        torch.manual_seed(0)
        model = TWINS[name]()
        x = torch.randn(o.batch, 1, 28, 28)
        y = torch.randint(0, 10, (o.batch,))
        r = poseidon.torch.profile(model, x, target=y, out_dir=out, name=name + "_torch",
                                   iterations=o.iterations, warmup=o.warmup)
        predicted, command = simulate_one_worker(o.cli, r["scenario"])
        t = measure_iterations(model, x, y, o.measure, warmup=10)
        med = statistics.median(t)
        q = statistics.quantiles(t, n=20)  # 5% steps: q[1] = p10, q[17] = p90
        shipped = poseidon.models.show(name)["totals"]
        print("%-11s %9d %9d | %10.3f | %10.3f %10.3f %+7.2f%% %+7.2f%% | %26s %+7.2f%%" % (
            name, r["parameters"], shipped["parameters"], predicted, r["iteration_median_ms"],
            r["iteration_ms"], 100 * (predicted / r["iteration_median_ms"] - 1),
            100 * (predicted / r["iteration_ms"] - 1), "%.3f (%.3f, %.3f)" % (med, q[1], q[17]),
            100 * (predicted / med - 1)))
        sys.stdout.flush()
    print("predicted: %s (one worker, each model's scenario)"
          % command.replace(r["scenario"], "SCENARIO"))
    print("median, iqm: the %d whole training iterations of the model itself (zero_grad, forward, "
          "loss, backward, step) that profile() times one after each profiled iteration, in the "
          "same seconds; separate: %d more, timed after profiling (on a shared machine the load "
          "may have changed in between)" % (o.iterations, o.measure))


if __name__ == "__main__":
    main()
