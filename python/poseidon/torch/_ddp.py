"""poseidon.torch.DistributedDataParallel: the user's module trained by Poseidon's protocol.

    import poseidon.torch as pt
    pt.init()
    model = pt.DistributedDataParallel(net, scheme="auto", consistency="bsp")
    opt = torch.optim.Adam(model.parameters())          # the user's optimizer, unchanged
    for x, y in loader:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()          # DWBP: each layer syncs as it is ready
        opt.step()

What happens, in the core's terms (docs/torch.md):

- Construction: every worker's layer table (_table.py) is compared by the coordinator (a worker
  whose model differs fails at once, naming the module); worker 1's parameters and buffers are
  copied to every worker.
- Forward (with gradients enabled): the clock's gate (BSP: the mean gradient of every earlier clock
  is in; SSP(s): all but the last s), then the module runs; hooks report each module's forward
  (the trace) and, for nn.Linear modules synced by sufficient factors, keep their inputs X and,
  through a hook on their output, the output gradients G.
- Backward: as autograd accumulates a module's parameters' gradients, the module is reported
  ready and the core pushes it (PS chunks, SFB factors, ring steps) while the backward pass goes
  on: distributed wait-free backpropagation. At the end of the backward pass (an autograd
  callback, inside loss.backward(), as DDP's) modules that got no gradient are reported with
  zeros and, under BSP, the workers' mean gradient replaces each parameter's .grad: the user's
  optimizer then steps exactly as one process on the global batch would. Under SSP/ASP the mean
  gradients are applied in clock order by DistributedOptimizer.step (_optim.py).
- Iteration 0 runs before the job is planned: worker 1 measures every module's forward and
  backward time and its linear layers' rows, plans the schemes (SACP's auto) and starts the job.
- no_sync(): forward and backward passes inside it accumulate gradients (and SFB rows) locally;
  the next pass outside it syncs them all, as DDP's no_sync.
- A parameter no worker used keeps .grad None; one some worker used gets the mean (DDP's
  find_unused_parameters, always on).
"""

import atexit
import contextlib
import time

import torch

from . import _env
from . import _table


def _consistency(consistency):
    if isinstance(consistency, (tuple, list)) and len(consistency) == 2:
        name, staleness = consistency
    elif isinstance(consistency, str) and ":" in consistency:
        name, _, staleness = consistency.partition(":")
    else:
        name, staleness = consistency, 0
    name = str(name).lower()
    try:
        staleness = int(staleness)
    except (TypeError, ValueError):
        raise ValueError(f"consistency={consistency!r}: the staleness must be an integer") from None
    if name not in ("bsp", "ssp", "asp") or staleness < 0 or (name != "ssp" and staleness):
        raise ValueError(f"consistency={consistency!r}: expected 'bsp', 'asp', ('ssp', s) or "
                         "'ssp:s' with s >= 0")
    return name, staleness


_WIRES = ("fp32", "fp16", "bf16")


def _gradient_wire(wire):
    name = wire.lower() if isinstance(wire, str) else wire
    if name not in _WIRES:
        raise ValueError(f"gradient_wire={wire!r}: expected 'fp32', 'fp16' or 'bf16'")
    return name


def _words(t):
    """A contiguous CPU view of `t`'s values for the C++ side (float32 or float64 numpy)."""
    return t.detach().numpy()


class DistributedDataParallel(torch.nn.Module):
    """Wraps `module` (its `.module`) for data-parallel training with Poseidon.

    scheme: how every module's gradient is synced unless `layer_schemes` names it (default: the
        job's scenario's protocol.scheme, `auto` in scenarios/live/torch.yaml): "auto"
        (SACP, in time, with the measured layer times and the scenario's network), "ps",
        "sfb" (nn.Linear modules by sufficient factors, the others by ps), "allreduce" (ring;
        BSP only) or "paper" (the 2015 paper's byte rule).
    consistency (default: the scenario's): "bsp" (exactly the single-process result), ("ssp", s)
        or "ssp:s"
        (clock c may start with the mean gradients of the last s clocks still missing; needs
        DistributedOptimizer), or "asp" (no bound; needs DistributedOptimizer).
    layer_schemes: {module name: scheme} overrides, module names as named_modules() gives them.
    gradient_wire (default: the scenario's protocol.gradient_wire, fp32 unless it says otherwise):
        "fp32", or "fp16" / "bf16": the gradients, sufficient factors and ring steps travel as
        16-bit values (DDP's fp16/bf16 compression hooks); the means come back in float32.
        16-bit forms need float32 parameters.
    broadcast_buffers: worker 1's buffers (batch-norm statistics) go to every worker before each
        forward pass under BSP, as DDP's default; always at construction.
    """

    def __init__(self, module, scheme=None, consistency=None, *, layer_schemes=None,
                 broadcast_buffers=True, gradient_wire=None):
        super().__init__()
        # A bad keyword is an error before anything else (no job needed to hear it).
        wire = _gradient_wire(gradient_wire) if gradient_wire is not None else None
        self.module = module
        self._s = _env.session()
        if _env.model() is not None:
            raise RuntimeError("poseidon.torch: this process already wraps a model; one job, one "
                               "DistributedDataParallel")
        scenario = self._s.protocol  # what the job's scenario says, unless told otherwise
        self.scheme = scheme if scheme is not None else scenario["scheme"]
        self.layer_schemes = dict(scenario["layer_schemes"])
        self.layer_schemes.update(layer_schemes or {})
        if consistency is None:
            consistency = ((scenario["consistency"], scenario["staleness"])
                           if scenario["consistency"] == "ssp" else scenario["consistency"])
        self.consistency, self.staleness = _consistency(consistency)
        self.gradient_wire = wire if wire is not None else scenario["gradient_wire"]
        self.broadcast_buffers = broadcast_buffers
        self._table = _table.LayerTable(module)
        self._words = self._table.value_words
        if wire not in (None, "fp32") and self._table.dtype != torch.float32:
            # The runtime refuses it too, once the job starts, naming the scenario's key (which is
            # what it says when the scenario asked for it); the keyword's error names the keyword.
            raise ValueError(f"gradient_wire={self.gradient_wire!r} sends gradients as 16-bit "
                             f"values, which needs float32 parameters; this model's are "
                             f"{str(self._table.dtype).replace('torch.', '')}: use "
                             "gradient_wire='fp32' or model.float()")
        self._rank = _env.rank()
        # Every worker built the same model, or all of them stop here, naming the module.
        self._s.agree_table(self._table.yaml())
        state = self._s.share_values(0, _table.pack_state(module))
        if self._rank != 0:
            _table.unpack_state(module, state)
        _env.set_model(self)
        self._clock = 0            # clocks synced so far: the next synced backward's clock
        self._in_clock = False     # the current clock's gate passed
        self._require_sync = True  # False inside no_sync()
        self._sync_pending = False  # a synced forward ran: its backward syncs
        self._backward_started = False
        self._optimizer = None
        self._applied = 0          # SSP/ASP: clocks whose mean gradient the optimizer stepped on
        self._job = None
        self._finished = False
        self._sfb = None           # entry indices synced by sufficient factors (None: not planned)
        # Per clock: which entries reported, the gradients held for the core, SFB pairs.
        self._reported = set()
        self._held = []
        self._pairs = {}           # entry index -> [[X, G or None], ...]
        self._ready_params = {}    # entry index -> set of param positions whose grad is in
        self._grad_none = set()    # params whose .grad was None at the end of the backward pass
        self._host_copy = {}       # id(param) -> (param, the contiguous copy reported for it)
        # Iteration 0's measurements (worker 1 plans with them).
        self._t_forward_start = 0.0
        self._t_fwd_end = {}       # entry index -> time its forward ended (first call)
        self._t_ready = {}         # entry index -> time its gradients were ready
        self._order = []           # entry indices in the order the first forward ran them
        self._rows = {}            # entry index -> rows of the linear's input (first forward)
        self._batch = 1
        self._hooks = []
        self._grad_accs = []       # AccumulateGrad nodes: held, or their hooks would vanish
        self._staging = None       # CUDA parameters: gradients staged to the host (_staging.py)
        self._install_hooks()
        atexit.register(self._atexit)

    # --- hooks ---

    def _install_hooks(self):
        for e in self._table.entries:
            self._hooks.append(e.module.register_forward_hook(self._make_forward_hook(e)))
            for pos, (_, p) in enumerate(e.params):
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._make_grad_hook(e, pos, p))
                self._grad_accs.append(acc)

    def _make_forward_hook(self, e):
        def hook(module, inputs, output):
            if not torch.is_grad_enabled() or not self._in_clock:
                return
            if self._clock == 0 and e.index not in self._t_fwd_end:
                self._t_fwd_end[e.index] = time.perf_counter()
                self._order.append(e.index)
            self._s.forward_done(e.index)
            if e.linear and self._wants_factors(e) and isinstance(output, torch.Tensor):
                x = inputs[0].detach() if inputs and isinstance(inputs[0], torch.Tensor) else None
                if x is None:
                    return
                pair = [x, None]
                self._pairs.setdefault(e.index, []).append(pair)
                if self._clock == 0 and e.index not in self._rows:
                    self._rows[e.index] = max(1, (x.numel() // e.in_features) // self._batch)
                if output.requires_grad:
                    def grad_hook(g, pair=pair):
                        pair[1] = g.detach()
                    output.register_hook(grad_hook)
        return hook

    def _make_grad_hook(self, e, pos, p):
        def hook(*_):
            if not self._sync_pending:
                return  # a no_sync() backward: gradients accumulate locally
            if not self._backward_started:
                self._backward_started = True
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_end)
            ready = self._ready_params.setdefault(e.index, set())
            ready.add(pos)
            if len(ready) == len(e.params) and e.index not in self._reported:
                if self._clock == 0:
                    self._t_ready[e.index] = time.perf_counter()
                self._report(e)
        return hook

    def _wants_factors(self, e):
        # Before the plan, every linear module that might go by SFB; after it, the planned ones.
        if self._sfb is not None:
            return e.index in self._sfb
        return (self.layer_schemes.get(e.name, self.scheme) in ("auto", "sfb", "paper"))

    # --- the clock ---

    def forward(self, *inputs, **kwargs):
        if not torch.is_grad_enabled():
            return self.module(*inputs, **kwargs)  # evaluation: the protocol is not involved
        if self._finished:
            raise RuntimeError("poseidon.torch: the job has finished (shutdown was called)")
        if not self._in_clock:
            self._begin_clock()
        if self._clock == 0 and not self._t_forward_start:
            self._t_forward_start = time.perf_counter()
            first = inputs[0] if inputs else next(iter(kwargs.values()), None)
            if isinstance(first, torch.Tensor) and first.dim() > 0:
                self._batch = max(1, first.shape[0])
        if self._require_sync:
            self._sync_pending = True
        out = self.module(*inputs, **kwargs)
        self._s.forward_ended()
        return out

    def _begin_clock(self):
        if self.consistency != "bsp" and self._clock > self.staleness and self._optimizer is None:
            raise RuntimeError(
                f"poseidon.torch: consistency {self.consistency} applies the workers' mean "
                "gradients in clock order through poseidon.torch.DistributedOptimizer(optimizer, "
                "model); wrap your optimizer with it")
        self._s.begin_clock(self._clock)
        if (self.consistency == "bsp" and self.broadcast_buffers and self._clock > 0
                and any(True for _ in self.module.buffers())):
            mine = _table.pack_state(self.module, buffers_only=True)
            got = self._s.share_values(self._clock + 1, mine)
            if self._rank != 0:
                _table.unpack_state(self.module, got, buffers_only=True)
        self._in_clock = True

    def _report(self, e):
        grads = []
        on_device = False
        for _, p in e.params:
            if p.grad is None:
                # Unused here: zeros go out, and the workers' mean (BSP: in place) comes back.
                self._grad_none.add(id(p))
                p.grad = torch.zeros_like(p)
            g = p.grad.detach()
            if g.is_sparse:
                raise _table.TableError(
                    f"module '{e.name}': a sparse gradient (nn.Embedding(sparse=True)); Poseidon "
                    "syncs dense gradients: build the module with sparse=False")
            if g.device.type == "cuda":
                on_device = True
            elif not g.is_contiguous():
                g = g.contiguous()
                self._host_copy[id(p)] = (p, g)  # BSP: the mean lands here, then in p.grad
            self._held.append(g)
            grads.append((p, g))
        factors, rows = None, 0
        if e.linear and self._wants_factors(e):
            factors, rows = self._factors(e)
        self._reported.add(e.index)
        if on_device:
            # Poseidon's network path is host memory: staged on a side stream (_staging.py).
            if self._staging is None:
                from ._staging import CudaStaging
                self._staging = CudaStaging(self._report_host)
            self._staging.stage(e.index, self._clock, grads, factors, rows)
        else:
            self._report_host(e.index, self._clock, [g for _, g in grads], factors, rows)

    def _report_host(self, index, clock, grads, factors, rows):
        self._s.layer_ready(index, clock, [_words(g) for g in grads], factors, rows, self._words)

    def _factors(self, e):
        pairs = [(x, g) for x, g in self._pairs.get(e.index, []) if g is not None]
        if not pairs:
            return None, 0  # the core sends the gradient itself (the identity form)
        dtype = self._table.dtype
        xs = [x.reshape(-1, e.in_features).to("cpu", dtype) for x, _ in pairs]
        gs = [g.reshape(-1, e.out_features).to("cpu", dtype) for _, g in pairs]
        rows = sum(x.shape[0] for x in xs)
        if rows > min(e.in_features, e.out_features):
            return None, rows  # the core sends the gradient itself (the identity form)
        f = torch.cat([torch.cat(gs).reshape(-1), torch.cat(xs).reshape(-1)]).contiguous()
        self._held.append(f)
        return _words(f), rows

    def _backward_end(self):
        """Autograd's callback at the end of a synced backward pass (inside loss.backward())."""
        clock = self._clock
        for e in self._table.entries:
            if e.index not in self._reported:
                self._report(e)
        if self._staging is not None:
            self._staging.flush()  # every CUDA module's gradients are on the host and reported
        if clock == 0:
            self._start_job()
        self._s.backward_done(clock)
        if self.consistency == "bsp":
            self._s.wait_complete(clock)
            self._mean_in_place()
        self._clock = clock + 1
        self._in_clock = False
        self._sync_pending = False
        self._backward_started = False
        self._reported.clear()
        self._held.clear()
        self._pairs.clear()
        self._ready_params.clear()
        self._grad_none.clear()

    def _mean_in_place(self):
        """BSP: the workers' mean gradient is in the buffers this worker reported (its .grad
        tensors, in place); those that were copies (a non-contiguous .grad, a CUDA gradient's
        pinned host buffer) go back into .grad."""
        for p, host in self._host_copy.values():
            p.grad.copy_(host)
        if self._staging is not None:
            for p in self._table.params:
                if p.grad is not None and p.grad.device.type == "cuda":
                    p.grad.copy_(self._staging.host_buffer(p), non_blocking=True)
        self._host_copy.clear()
        # No worker used it: it stays without a gradient, as in one process.
        for p in self._table.params:
            if id(p) in self._grad_none and not p.grad.any():
                p.grad = None
        self._grad_none.clear()

    def _take_mean(self, clock):
        """SSP/ASP: the workers' mean gradient of `clock`, one tensor per parameter (table
        order, the parameter's shape, on the CPU): views of the buffer the worker filled."""
        return [torch.from_numpy(m).view(p.shape)
                for p, m in zip(self._table.params, self._s.take_mean(clock))]

    def _start_job(self):
        """Iteration 0 measured; worker 1 plans the job from it and starts it."""
        disagree = self._factors_disagree() if self._rank == 0 else []
        self._sfb = set()
        if self._rank == 0:
            schemes = {str(k): str(v) for k, v in self.layer_schemes.items()}
            for name in disagree:
                # Its weight's gradient is not the sum of its factors (the weight is also used
                # outside its forward): sufficient factors would lose part of it.
                import warnings
                warnings.warn(f"poseidon.torch: module '{name}': its weight's gradient is not "
                              "the sum of G^T X over its calls; it goes by ps, not sfb")
                schemes[name] = "ps"
            entries = self._table.entries
            order = self._order + [e.index for e in entries if e.index not in self._order]
            fwd, bwd = {}, {}
            t = self._t_forward_start
            for i in order:  # forward: the time since the previous module ended
                end = self._t_fwd_end.get(i, t)
                fwd[i] = max(end - t, 0.0)
                t = end
            prev = None
            for i in sorted(self._t_ready, key=self._t_ready.get):  # backward: since the previous
                bwd[i] = self._t_ready[i] - prev if prev is not None else 2 * fwd.get(i, 0.0)
                prev = self._t_ready[i]
            self._s.start_job(self._table.yaml(order, self._rows), str(self.scheme), schemes,
                              self.consistency, self.staleness, int(self._batch),
                              [fwd.get(i, 0.0) for i in order], [bwd.get(i, 0.0) for i in order],
                              self.gradient_wire)
        self._job = self._s.job()
        names = {e.name: e.index for e in self._table.entries}
        self._sfb = {names[n] for n, s in self._job["schemes"].items() if s == "sfb"}

    def _factors_disagree(self):
        """Iteration 0 (worker 0): the linear modules whose captured (X, G) do not rebuild their
        weight's gradient (sum of G^T X over the calls against .grad), which SFB must not take."""
        bad = []
        for e in self._table.entries:
            if not (e.linear and self._wants_factors(e)):
                continue
            w = e.params[0][1]
            pairs = [(x, g) for x, g in self._pairs.get(e.index, []) if g is not None]
            if w.grad is None:
                continue
            rebuilt = torch.zeros_like(w.grad)
            for x, g in pairs:
                rebuilt += (g.reshape(-1, e.out_features).to(w.dtype).t()
                            @ x.reshape(-1, e.in_features).to(w.dtype))
            half = any(g.dtype in (torch.float16, torch.bfloat16) for _, g in pairs)
            tol = 3e-2 if half else 1e-3 if w.dtype == torch.float32 else 1e-8
            if not torch.allclose(rebuilt, w.grad, rtol=tol, atol=tol * float(w.grad.abs().max())):
                bad.append(e.name)
        return bad

    # --- the user's side ---

    @contextlib.contextmanager
    def no_sync(self):
        """Forward and backward passes inside accumulate gradients without syncing; the next
        pass outside syncs the accumulated gradients (DDP's no_sync)."""
        old = self._require_sync
        self._require_sync = False
        try:
            yield
        finally:
            self._require_sync = old

    @property
    def job(self):
        """The job as planned (schemes per module, consistency, gradient_wire), once iteration 0
        ended."""
        return self._job

    def _attach_optimizer(self, optimizer):
        self._optimizer = optimizer

    def _apply_pending(self, optimizer, closure=None):
        """SSP/ASP: steps `optimizer` on each complete mean gradient in clock order, first
        waiting for those the next clock's bound needs (SSP: clocks < next - s)."""
        loss = None
        need = self._clock - self.staleness if self.consistency == "ssp" else 0
        while self._applied < need:
            self._s.wait_complete(self._applied)
            loss = self._step_on(self._applied, optimizer, closure)
        while self._applied < self._s.complete():
            loss = self._step_on(self._applied, optimizer, closure)
        return loss

    def _step_on(self, clock, optimizer, closure):
        """One optimizer step on `clock`'s mean gradient. A CPU parameter's .grad is the mean
        itself for the step (no copy) and its own gradient again after it; a CUDA parameter's
        .grad, and every .grad when the optimizer is given a closure (which computes gradients
        into .grad), gets a copy of the mean and keeps it."""
        means = self._take_mean(clock)
        self._applied = clock + 1
        swapped = []
        for p, m in zip(self._table.params, means):
            if closure is None and p.device.type == "cpu":
                swapped.append((p, p.grad))
                p.grad = m
            elif p.grad is None:
                p.grad = m.to(p.device, copy=True)
            else:
                p.grad.copy_(m)
        try:
            return optimizer.step(closure) if closure is not None else optimizer.step()
        finally:
            for p, g in swapped:
                p.grad = g

    def shutdown(self):
        """Ends this worker's part of the job after the clocks it synced (every worker must have
        synced as many); the job ends when every worker has. Called at exit if not before.
        Returns the process's exit code (0: the job ended well). Called in the middle of an
        iteration (the script failed there), it gives up instead: the job cannot be finished
        without that iteration's gradients, and the other processes hear this one is gone."""
        if self._finished:
            return 0
        self._finished = True
        for h in self._hooks:
            h.remove()
        if self._in_clock:
            self._s.abort(4, f"the training script ended in the middle of iteration {self._clock}")
            self._s.close()
            _env._forget()
            raise RuntimeError(f"poseidon.torch: this worker left the job in the middle of "
                               f"iteration {self._clock}")
        code = self._s.finish(self._clock)
        if self._staging is not None:
            self._staging.close()
        _env._forget()
        if code != 0:
            raise RuntimeError(f"poseidon.torch: the job ended with exit code {code}")
        return code

    def _atexit(self):
        if not self._finished:
            try:
                self.shutdown()
            except Exception as e:  # noqa: BLE001 (at exit: say it, the process ends anyway)
                import sys
                print(e, file=sys.stderr)
