"""examples/torch/train.py, live with 4 workers (`poseidon launch --torch`, the README's command
on a slice of Fashion-MNIST): it trains, and a job resumed from the checkpoint torch.save wrote
ends with the parameters of the job that was not stopped (BSP sums in worker order: every run with
the same plan is bit-identical; the plan is pinned, as `auto` plans from measured times)."""

import os
import re
import subprocess

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CLI = os.environ.get("POSEIDON_CLI", os.path.join(ROOT, "build", "apps", "poseidon", "poseidon"))
TRAIN = os.path.join(ROOT, "examples", "torch", "train.py")
DATA = "/usr/share/datasets/fashion-mnist"

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CLI), reason=f"no poseidon CLI at {CLI}"),
    pytest.mark.skipif(not os.path.isdir(DATA), reason="dataset-fashion-mnist is not installed"),
]


def launch(tmp, name, *args):
    r = subprocess.run([CLI, "launch", "--torch", "--log-dir", os.path.join(tmp, name), "--",
                        "/usr/bin/python3", TRAIN, "--limit", "1024", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_cnn_trains_and_a_resumed_job_continues_exactly(tmp_path):
    tmp = str(tmp_path)
    straight = os.path.join(tmp, "straight.pt")
    out = launch(tmp, "a", "--model", "cnn", "--epochs", "2", "--final", straight, "--scheme", "sfb")
    assert re.search(r"job done: 4 workers, 2 shards, 32 iterations", out), out
    acc = float(re.search(r"test accuracy ([0-9.]+)", out).group(1))
    assert acc > 0.5, out  # 10 classes: chance is 0.1
    ckpt = os.path.join(tmp, "ckpt.pt")
    launch(tmp, "b", "--model", "cnn", "--epochs", "1", "--save", ckpt, "--scheme", "sfb")
    resumed = os.path.join(tmp, "resumed.pt")
    out = launch(tmp, "c", "--model", "cnn", "--epochs", "2", "--resume", ckpt, "--final", resumed,
                 "--scheme", "sfb")
    assert "epoch 2/2" in out and "epoch 1/2" not in out, out
    a, b = torch.load(straight), torch.load(resumed)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_transformer_trains(tmp_path):
    out = launch(str(tmp_path), "t", "--model", "transformer", "--epochs", "1")
    assert re.search(r"test accuracy ([0-9.]+)", out), out
