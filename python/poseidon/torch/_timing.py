"""poseidon.torch: per-layer forward and backward times measured inside real training iterations,
and the whole iterations they are checked against.

    t = measure(gm, root, args, optimizer, plan, repetitions=30, warmup=5)
    t.fwd_ms[i], t.bwd_ms[i], t.update_ms, t.whole_ms

Method (the one `poseidon calibrate` uses for its own kernels, calibration/compute_profiler.h,
carried over to PyTorch):

- Every timed iteration is a real training iteration of the model: optimizer.zero_grad(), the
  forward pass, the loss, backward(), optimizer.step(). The parameters change between iterations
  as in training, so no weight stays warm in a cache for the next layer's timing.
- Forward: the traced graph runs as fx's generated Python code with a call to
  _Marker.mark(i, value) after layer i's node (timed_module). The time between two marks is that
  layer's; nodes that are not a layer (a reshape, a size, a scaling folded away, _mapping.py) sit
  between the marks of the layer before and the layer that reads them, and count for the latter.
  So the forward times add up to the whole forward pass, Python and dispatch included.
- Backward: a pre-hook on the autograd node (grad_fn) of each layer's output marks when that
  layer's backward starts. On one thread autograd runs the nodes in the reverse of the order they
  were created, which is the reverse of the forward's layer order, so each layer's backward is the
  time from its mark to the next mark (the last layer's runs to the end of backward(), the first
  interval, autograd's start-up, goes to the first layer whose backward runs: the loss). The
  accumulation of its weight gradients runs inside that interval. Folded nodes' backward falls in
  the interval of the layer that read them, as their forward did. A layer whose output needs no
  gradient (before the first parameter) has no backward, as in PyTorch.
- The update: zero_grad() and step() of the user's optimizer (default SGD with momentum), timed
  in the same iterations: the profile's `update_ms_per_mb` (the simulator's shard update).
- On a GPU the marks are CUDA events on the current stream (the backward's on autograd's device
  thread, which runs on the forward's stream), read after the iteration synchronises: GPU time
  between the marks, which on a launch-bound model includes the gaps the CPU leaves.
- After each timed iteration one whole iteration of the user's own module (not the trace) is
  timed as one, so that both see the same load on a shared machine (calibrate --check's loop).
- Statistics: per layer, the mean over the iterations whose total (every layer + the update) lies
  between the 25th and 75th percentile of the totals. Means over the same iterations add up (the
  simulator adds layer times; per-layer medians would not add up to a typical iteration), and the
  interquartile range drops rare preemptions as a median would. The whole iterations get the
  same statistic (interquartile mean) and their median.

The marks cost time of their own (on this CPU about 3 us a layer in the forward pass, a
registration of the pre-hook included, and a few us a layer in the backward pass, the hook's
Python call): mark_costs() measures both on a chain of trivial products at the start, and each
layer's interval gives one of each back (on a GPU nothing is given back: the marks are events).
What the per-layer times and the whole iteration still do not share is measured rather than
assumed: the whole iteration minus the sum, which profile() records in the provenance and
returns as `unattributed_ms` (the flat traced graph against the user's nested modules, whose
own forward calls it does not make, and whatever the load on the machine did between the two).
"""

import time

import torch
import torch.fx


class _CpuClock:
    def mark(self):
        return time.perf_counter_ns()

    @staticmethod
    def ms(a, b):
        return (b - a) * 1e-6

    def sync(self):
        pass


class _CudaClock:
    def __init__(self, device):
        self.device = device

    def mark(self):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    @staticmethod
    def ms(a, b):
        return a.elapsed_time(b)

    def sync(self):
        torch.cuda.synchronize(self.device)


def clock_for(device):
    return _CudaClock(device) if device.type == "cuda" else _CpuClock()


def _first_tensor(v):
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, (tuple, list)):
        for x in v:
            t = _first_tensor(x)
            if t is not None:
                return t
    return None


class _Marker:
    """Called by the timed graph after each layer's node: marks the clock (the forward time since
    the previous mark is that layer's) and hooks the start of the layer's backward."""

    def __init__(self, clock):
        self.clock = clock
        self.marks = []  # (layer index, mark) after each layer's node
        self.starts = []  # (layer index, mark) when its backward starts

    def reset(self):
        self.marks, self.starts = [], []

    def mark(self, layer, value):
        self.marks.append((layer, self.clock.mark()))
        t = _first_tensor(value)
        if t is not None and t.grad_fn is not None:
            t.grad_fn.register_prehook(self._start(layer))

    def _start(self, layer):
        def hook(grad_outputs):  # pylint: disable=unused-argument -- only the moment matters
            self.starts.append((layer, self.clock.mark()))
        return hook


def timed_module(gm, layer_nodes, clock):
    """A copy of the traced graph that calls _Marker.mark(i, value) after layer i's node, as
    generated Python code like the graph itself: a mark costs a method call and a clock read, not
    an interpreter step per node (which made the sum of the layers 2% slower than the whole
    iteration of a small CNN here). Shares the modules and parameters with `gm`."""
    marker = _Marker(clock)
    graph = torch.fx.Graph()
    env = {}
    out = graph.graph_copy(gm.graph, env)
    first = next(env[n] for n in gm.graph.nodes if n.op != "placeholder")
    with graph.inserting_before(first):
        holder = graph.get_attr("_poseidon_marker")
    for i, node in layer_nodes.items():
        with graph.inserting_after(env[node]):
            graph.call_method("mark", (holder, i, env[node]))
    graph.output(out)
    gm._poseidon_marker = marker  # pylint: disable=protected-access -- read by get_attr
    timed = torch.fx.GraphModule(gm, graph)
    return timed, marker


class Autocast:
    """The forward pass (and the loss) of one iteration in its own autocast region, as a
    training loop runs it, when the caller of profile() was in one (dtype given); backward and
    step outside. Leaving it clears the cache of cast weights, which the caller's enclosing region
    would otherwise keep from one iteration to the next, while the step changes the weights."""

    def __init__(self, device_type, dtype):
        self.device_type, self.dtype, self.region = device_type, dtype, None

    def __enter__(self):
        if self.dtype is not None:
            self.region = torch.autocast(self.device_type, dtype=self.dtype)
            self.region.__enter__()

    def __exit__(self, *exc):
        if self.region is not None:
            self.region.__exit__(*exc)
            self.region = None
            torch.clear_autocast_cache()


class Plan:
    """The timed copy of the graph, the layer count and the autocast of the forward. Nodes that
    are not a layer's output give their time to the next layer's mark (the layer that reads
    them); those after the last layer (the output) to the last."""

    def __init__(self, gm, layer_nodes, n_layers, clock, autocast):
        self.n_layers = n_layers
        self.module, self.marker = timed_module(gm, layer_nodes, clock)
        self.autocast = autocast
        self.mark_cost = mark_costs(clock)


def _backward(out, seed):
    if seed is None:
        out.backward()
    else:
        out.backward(seed)


def seed_gradient(out):
    """The gradient backward() starts from: none for a scalar loss, ones for a model output
    profiled without a loss."""
    return None if out.dim() == 0 else torch.ones_like(out)


class Timings:
    def __init__(self, n):
        self.fwd = [[] for _ in range(n)]
        self.bwd = [[] for _ in range(n)]
        self.update = []
        self.totals = []
        self.whole = []


def _instrumented(plan, args, opt, clock, seed, t):
    marker = plan.marker
    marker.reset()
    t0 = clock.mark()
    opt.zero_grad()
    t1 = clock.mark()
    with plan.autocast:
        out = plan.module(*args)
    b0 = clock.mark()
    _backward(out, seed)
    b1 = clock.mark()
    opt.step()
    t2 = clock.mark()
    clock.sync()
    # Each interval holds one mark's own cost (mark_costs), which the module alone would not
    # spend: taken off.
    cost_fwd, cost_bwd = plan.mark_cost
    fwd = [0.0] * plan.n_layers
    bwd = [0.0] * plan.n_layers
    prev = t1
    for layer, m in marker.marks:
        fwd[layer] += clock.ms(prev, m) - cost_fwd
        prev = m
    fwd[marker.marks[-1][0]] += clock.ms(prev, b0)
    if marker.starts:
        layer, prev = marker.starts[0][0], b0
        for nxt, m in marker.starts:
            bwd[layer] += clock.ms(prev, m) - cost_bwd
            layer, prev = nxt, m
        bwd[layer] += clock.ms(prev, b1)
    fwd = [max(0.0, v) for v in fwd]
    bwd = [max(0.0, v) for v in bwd]
    for i in range(plan.n_layers):
        t.fwd[i].append(fwd[i])
        t.bwd[i].append(bwd[i])
    t.update.append(clock.ms(t0, t1) + clock.ms(b1, t2))
    t.totals.append(sum(fwd) + sum(bwd) + t.update[-1])


def mark_costs(clock, count=200, repetitions=7):
    """The marks' own cost per layer in ms, (forward, backward): a _Marker.mark with its pre-hook
    registration, and one pre-hook call in backward (a chain of `count` products of one value
    with hooks, against the same chain without; medians over `repetitions`). On a GPU the marks
    are events on the stream and their CPU cost is not GPU time: (0, 0)."""
    if isinstance(clock, _CudaClock):
        return 0.0, 0.0
    fwd, bwd = [], []

    def chain():
        links = [torch.zeros(1, requires_grad=True)]
        for _ in range(count):
            links.append(links[-1] * 1.0)
        return links

    with torch.enable_grad():
        for _ in range(repetitions):
            hooked, plain, marker = chain(), chain(), _Marker(clock)
            a = clock.mark()
            for v in hooked[1:]:
                marker.mark(0, v)
            b = clock.mark()
            hooked[-1].backward()
            c = clock.mark()
            plain[-1].backward()
            d = clock.mark()
            fwd.append(clock.ms(a, b) / count)
            bwd.append(max(0.0, clock.ms(b, c) - clock.ms(c, d)) / count)
    return percentile(fwd, 0.5), percentile(bwd, 0.5)


def _whole(root, args, opt, clock, seed, autocast):
    t0 = clock.mark()
    opt.zero_grad()
    with autocast:
        out = root(*args)
    _backward(out, seed)
    opt.step()
    t1 = clock.mark()
    clock.sync()
    return clock.ms(t0, t1)


def measure(plan, root, args, opt, clock, repetitions, warmup, progress=None):
    """Timings of `repetitions` instrumented iterations, each followed by one whole iteration of
    `root` (the module the user runs), after `warmup` of each untimed."""
    with torch.enable_grad():
        with plan.autocast:
            seed = seed_gradient(root(*args))
        t = Timings(plan.n_layers)
        for w in range(warmup):
            _instrumented(plan, args, opt, clock, seed, Timings(plan.n_layers))
            _whole(root, args, opt, clock, seed, plan.autocast)
            if progress:
                progress("warm-up", w + 1, warmup)
        for r in range(repetitions):
            _instrumented(plan, args, opt, clock, seed, t)
            t.whole.append(_whole(root, args, opt, clock, seed, plan.autocast))
            if progress:
                progress("layers + whole iterations", r + 1, repetitions)
    return t


def percentile(samples, q):
    """Linear interpolation between the two nearest ranks (calibration/stats.cc's Percentile)."""
    s = sorted(samples)
    if not s:
        return 0.0
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def interquartile_indices(samples):
    """The samples between the 25th and 75th percentile (calibration/stats.cc)."""
    lo, hi = percentile(samples, 0.25), percentile(samples, 0.75)
    idx = [i for i, v in enumerate(samples) if lo <= v <= hi]
    if not idx:
        mid = percentile(samples, 0.5)
        idx = [min(range(len(samples)), key=lambda i: abs(samples[i] - mid))]
    return idx


def interquartile_mean(samples):
    idx = interquartile_indices(samples)
    return sum(samples[i] for i in idx) / len(idx)


def typical_means(t):
    """(fwd per layer, bwd per layer, update): means over the interquartile iterations by total."""
    idx = interquartile_indices(t.totals)

    def mean(v):
        return sum(v[i] for i in idx) / len(idx)

    return [mean(f) for f in t.fwd], [mean(b) for b in t.bwd], mean(t.update)


def sfb_rebuild_ms(k, m, n, device, dtype, clock, repetitions, warmup):
    """Median time of one sufficient-factor rebuild dW[N, M] = G^T X from K factor pairs (the
    profile's sfb_rebuild_ms; calibrate times kernels::RebuildFcGradient the same way)."""
    g = torch.randn(k, n, device=device, dtype=dtype)
    x = torch.randn(k, m, device=device, dtype=dtype)
    samples = []
    with torch.no_grad():
        for r in range(warmup + repetitions):
            a = clock.mark()
            torch.mm(g.t(), x)
            b = clock.mark()
            clock.sync()
            if r >= warmup:
                samples.append(clock.ms(a, b))
    return percentile(samples, 0.5)


def pcie_gbs(device, clock, repetitions=10):
    """Host<->device copy bandwidth of 64 MiB from and to pinned memory, 1e9 bytes/s (the
    profile's pcie_gbs: PyTorch keeps parameters on the GPU, so the copies a parameter server
    needs are not in the layer times and the simulator adds them at this rate)."""
    count = 16 << 20
    host = torch.ones(count, dtype=torch.float32).pin_memory()
    dev = torch.empty(count, dtype=torch.float32, device=device)
    times = []
    for r in range(2 + repetitions):
        a = clock.mark()
        dev.copy_(host, non_blocking=True)
        b = clock.mark()
        host.copy_(dev, non_blocking=True)
        c = clock.mark()
        clock.sync()
        if r >= 2:
            times.append((clock.ms(a, b) + clock.ms(b, c)) / 2)
    return 4.0 * count / (percentile(times, 0.5) * 1e-3) / 1e9
