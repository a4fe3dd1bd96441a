"""Fashion-MNIST for the examples: Debian's dataset-fashion-mnist (IDX files, gzipped) as tensors,
read with numpy (no torchvision). `images(split)` is [N, 1, 28, 28] float32, normalised;
`labels(split)` [N] int64."""

import gzip
import os

import numpy as np
import torch

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def _read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                data = f.read()
            break
    else:
        raise FileNotFoundError(f"{path}(.gz): no Fashion-MNIST file there; install Debian's "
                                "dataset-fashion-mnist (scripts/install-deps) or give --data-dir")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, data_dir=None):
    """(images, labels) of `split` ("train" or "test")."""
    d = data_dir or os.environ.get("POSEIDON_DATA_DIR", DEFAULT_DIR)
    img_file, lab_file = _FILES[split]
    x = torch.from_numpy(_read_idx(os.path.join(d, img_file)).astype(np.float32) / 255.0)
    x = ((x - 0.2860) / 0.3530).unsqueeze(1)  # the training set's mean and deviation
    y = torch.from_numpy(_read_idx(os.path.join(d, lab_file)).astype(np.int64))
    return x, y
