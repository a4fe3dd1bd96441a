"""poseidon.torch.DistributedOptimizer: the user's optimizer, stepping on the workers' mean
gradients in clock order (what SSP and ASP need; under BSP a plain optimizer does the same).

    opt = pt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-3), model)

Under SSP(s) every worker applies the same sequence of mean gradients g(0), g(1), ... with its own
copy of the optimizer, so every worker's optimizer state (Adam's moments, momentum) is the same
and the parameters follow one trajectory; what SSP relaxes is when a worker reads it: clock c may
compute its gradient with the updates of clocks c-s..c-1 still missing. step() applies every mean
gradient that is complete (one optimizer step each), and first waits for those clock c+1 needs.
Under ASP each answer is the sum of every worker's gradients (over P) that reached the shard
since this worker's last one, and the optimizer steps on it as it arrives: plain SGD then follows
the parameter server's SGD exactly; a stateful optimizer's moments are this worker's view.
"""


class DistributedOptimizer:
    """Wraps `optimizer` for the job `model` (a poseidon.torch.DistributedDataParallel) runs.
    Everything but step() is the wrapped optimizer's (param_groups, state_dict, zero_grad, ...)."""

    def __init__(self, optimizer, model):
        from ._ddp import DistributedDataParallel
        if not isinstance(model, DistributedDataParallel):
            raise TypeError("DistributedOptimizer(optimizer, model): model must be the "
                            "poseidon.torch.DistributedDataParallel its parameters belong to")
        self.optimizer = optimizer
        self.model = model
        model._attach_optimizer(optimizer)

    def step(self, closure=None):
        if self.model.consistency == "bsp":
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        return self.model._apply_pending(self.optimizer, closure)

    def zero_grad(self, *args, **kwargs):
        return self.optimizer.zero_grad(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.optimizer, name)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        return self.optimizer.load_state_dict(state)
