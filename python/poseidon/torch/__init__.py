"""poseidon.torch: PyTorch models in Poseidon (docs/torch.md).

Training, as DDP does it (the wrapper and init() are the only new lines):

    import poseidon.torch as pt
    pt.init()                                           # the job `poseidon launch --torch` started
    model = pt.DistributedDataParallel(net, scheme="auto", consistency="bsp")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)   # any torch.optim optimizer
    ...

and profiling, for the simulator: profile() writes a module's model file, a measured per-layer
profile and a scenario for `poseidon simulate`.

The C++ half (poseidon._torch) is imported by init(), so `import poseidon.torch` is cheap.
"""

from ._ddp import DistributedDataParallel
from ._env import ConfigError, init, initialized, rank, size
from ._optim import DistributedOptimizer
from ._profile import profile
from ._table import TableError


def shutdown():
    """Ends this worker's part of the job (also done at exit); returns the exit code."""
    from . import _env
    m = _env.model()
    return m.shutdown() if m is not None else 0


def __getattr__(name):
    if name == "JobError":  # the C++ exception, once the extension is loaded
        from .. import _torch
        return _torch.JobError
    raise AttributeError(name)


__all__ = ["ConfigError", "DistributedDataParallel", "DistributedOptimizer", "JobError",
           "TableError", "init", "initialized", "profile", "rank", "shutdown", "size"]
