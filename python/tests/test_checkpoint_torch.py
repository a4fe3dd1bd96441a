"""docs/checkpoints.md's PyTorch snippet, run as written, on a checkpoint `poseidon train` wrote:
it loads the .npy blobs into torch.nn modules of the same architecture and must score the test
set as `poseidon evaluate` does. Skipped where PyTorch is absent (Debian: python3-torch,
which scripts/install-deps installs).
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("POSEIDON_CLI") or os.path.join(ROOT, "build", "apps", "poseidon", "poseidon")
DATA = "/usr/share/datasets/fashion-mnist"

torch = pytest.importorskip("torch", reason="no PyTorch (apt-get install python3-torch)")


def doc_snippet():
    """The one ```python block of docs/checkpoints.md."""
    with open(os.path.join(ROOT, "docs", "checkpoints.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 1, "docs/checkpoints.md should hold exactly one python block"
    return blocks[0]


def accuracy(text, what):
    m = re.search(r"test accuracy ([0-9.]+)", text)
    assert m, "%s printed no test accuracy:\n%s" % (what, text)
    return float(m.group(1))


@pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="no poseidon binary (set POSEIDON_CLI)")
@pytest.mark.skipif(not os.path.isdir(DATA), reason="no Fashion-MNIST (dataset-fashion-mnist)")
@pytest.mark.parametrize("model,iterations", [("fmnist_mlp", 60), ("fmnist_cnn", 40)])
def test_the_docs_pytorch_loader_scores_as_evaluate_does(tmp_path, model, iterations):
    subprocess.run([CLI, "train", "--model", model, "--iterations", str(iterations), "--batch", "32",
                    "--lr", "0.05", "--save", str(tmp_path / "ckpt")],
                   check=True, capture_output=True, text=True)
    ev = subprocess.run([CLI, "evaluate", "--params", str(tmp_path / "ckpt")], check=True,
                        capture_output=True, text=True)
    want = accuracy(ev.stdout + ev.stderr, "evaluate")
    (tmp_path / "load.py").write_text(doc_snippet())
    run = subprocess.run([sys.executable, "load.py"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    got = accuracy(run.stdout, "the snippet")
    # Another library's float rounding may move an argmax or two of the 10,000 images.
    assert abs(got - want) <= 0.002, (got, want)
    assert want > 0.3, "the checkpoint should have learned something (%.4f)" % want
