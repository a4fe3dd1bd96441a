"""poseidon.torch.profile: from a PyTorch module to the simulator, without ONNX.

    import poseidon, poseidon.torch
    r = poseidon.torch.profile(model, images, target=labels, out_dir="sim", name="mycnn")
    r["iteration_ms"], r["predicted_iteration_ms"]          # measured here, simulated (1 worker)
    poseidon.simulate(r["scenario"], set={"cluster.machines": 64})

writes, from one batch and the model as it is (its device, dtype, autocast and thread settings):

- a model file (scenarios/models/README.md's schema): the layers torch.fx traces, mapped one by
  one (_mapping.py); checked with the project's loader (poseidon.models.show: parameter total =
  PyTorch's trainable parameters, one layer per mapped call, shapes = PyTorch's);
- a measured profile (config/compute_loader.h): per-layer forward and backward times inside real
  training iterations with the user's loss and optimizer (_timing.py), the optimizer's update as
  `update_ms_per_mb`, provenance (device, torch, threads, dtype, autocast, date, command, host);
- a scenario: one worker on that profile, which `poseidon simulate` runs as it is and
  `--set cluster.machines=N` scales.

The user's model and optimizer are not touched: profile() trains a deep copy (its weights,
batch-norm statistics and optimizer state change while it is measured). See docs/torch.md.
"""

import copy
import datetime
import math
import os
import platform
import shlex
import socket
import sys
import types

import torch
import torch.fx

from .. import models as _models
from .. import simulate as _simulate
from . import _files, _mapping, _timing, _trace


def profile(model, example_batch, target=None, *, loss_fn=None, optimizer=None, out_dir=".",
            name=None, model_path=None, profile_path=None, scenario_path=None, iterations=30,
            warmup=5, threads=None, progress=None):
    """Profiles `model` training on `example_batch` and writes a model file, a measured
    per-layer profile and a one-worker scenario for `poseidon simulate`.

    model: a torch.nn.Module that torch.fx can trace, on the device and in the dtype to
        profile (cpu or cuda). It is deep-copied; the copy is trained, the model is not.
    example_batch: the model's input for one batch, a tensor whose first dimension is the
        batch (images [B, C, H, W], token ids [B, S], sequences [B, S, D], vectors [B, F]); moved
        to the model's device. The profile is for this batch size.
    target: the labels for the loss (moved to the model's device). With a target and no
        loss_fn the loss is torch.nn.CrossEntropyLoss().
    loss_fn: loss_fn(output, target) -> scalar (loss_fn(output) without a target): an
        nn.CrossEntropyLoss / NLLLoss, F.cross_entropy / nll_loss, or a function of those and
        reshapes (`lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten())`); it becomes
        the model file's `softmax_loss` layer `loss`. None and no target: no loss; the backward
        starts from a gradient of ones on the output (its cost is then not in the profile).
    optimizer: whose step is the update cost: an optimizer over `model`'s parameters (rebuilt
        with the same class and settings on the copy; its state is not copied) or a function
        params -> optimizer. Default torch.optim.SGD(lr=0.01, momentum=0.9), the update
        Poseidon's parameter-server shards run.
    out_dir, name: the files are OUT_DIR/NAME.yaml (model), OUT_DIR/NAME_profile.yaml and
        OUT_DIR/NAME_scenario.yaml; name defaults to the model's class name in lower case.
        model_path, profile_path, scenario_path replace one of these paths each.
    iterations, warmup: timed and untimed training iterations (each timed one is followed by
        one whole iteration of the model, timed as one, for the comparison).
    threads: torch.set_num_threads(threads) while profiling (restored after); default: the
        current setting, which is recorded.
    progress: progress(phase, done, total) now and then.

    Returns a dict: name, model, profile, scenario (the paths written), batch, device,
    parameters, layers (a pandas DataFrame: name, type, source, params, fwd_ms, bwd_ms),
    update_ms, layers_sum_ms (forward + backward + update), iteration_ms and iteration_median_ms
    (the whole iterations: interquartile mean, median), unattributed_ms (iteration_ms -
    layers_sum_ms) and predicted_iteration_ms (`poseidon simulate` of the scenario, one worker,
    DWBP off: the same work as one PyTorch iteration).

    Raises ValueError naming the module (its qualified name) or the call when the model cannot
    be traced or has a part the model file cannot describe, TypeError for arguments of the
    wrong kind. Timing noise is the machine's: see the returned figures and docs/torch.md.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError("model must be a torch.nn.Module, got %s" % type(model).__name__)
    x = _one_tensor(example_batch)
    if iterations < 1 or warmup < 0:
        raise ValueError("iterations must be >= 1 and warmup >= 0, got %r and %r"
                         % (iterations, warmup))
    device, dtype = _device_and_dtype(model, x)
    backend = {"cpu": "cpu", "cuda": "cuda"}.get(device.type)
    if backend is None:
        raise ValueError("the model is on a '%s' device; the profile format knows cpu and cuda; "
                         "move the model to one of them" % device.type)
    if x.dim() < 2:
        raise ValueError("example_batch must have a batch dimension first (got shape %s)"
                         % (tuple(x.shape),))
    batch = x.shape[0]
    name = name or type(model).__name__.lower()
    if os.sep in name:
        raise ValueError("name %r: it names the files and the model; give a name without '%s'"
                         % (name, os.sep))
    paths = _paths(out_dir, name, model_path, profile_path, scenario_path)

    # The caller's autocast applies to each iteration's forward pass (_timing.Autocast), not to
    # the shape runs and the rest of profile(): its cache of cast weights must not outlive an
    # iteration.
    job = types.SimpleNamespace(
        model=model, x=x, target=target, loss_fn=loss_fn, optimizer=optimizer, name=name,
        paths=paths, iterations=iterations, warmup=warmup, threads=threads, progress=progress,
        device=device, dtype=dtype, backend=backend, batch=batch,
        amp_dtype=_autocast_dtype(device))
    with torch.autocast(device.type, enabled=False):
        return _run(job)


def _run(job):
    """profile() once its arguments are checked: trace, map, write and check the model file,
    measure, write the profile and the scenario, simulate one worker."""
    model, x, target, loss_fn, name, paths = (job.model, job.x, job.target, job.loss_fn,
                                              job.name, job.paths)
    device, dtype, batch, amp_dtype = job.device, job.dtype, job.batch, job.amp_dtype
    work = _copy(model)
    work.train()
    if target is not None and loss_fn is None:
        loss_fn = torch.nn.CrossEntropyLoss()
    args = [x.detach().to(device)] + ([target.detach().to(device)] if target is not None else [])
    root = _trace.wrap(work, loss_fn, target is not None)
    gm = _trace.trace(root)
    facts = _trace.record(gm, args, batch)
    _check_output(gm, facts, loss_fn)
    layers, input_yaml = _mapping.map_graph(gm, facts, work)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)

    header = ["Written by poseidon.torch.profile from %s (PyTorch %s) on a batch of %s %s."
              % (_qualified(type(model)), torch.__version__, "x".join(map(str, x.shape)),
                 str(x.dtype).replace("torch.", "")),
              "Layer names are the modules' qualified names (or the traced calls'); "
              "docs/torch.md."]
    _write(paths["model"], _files.model_yaml(
        name, "%s, traced by poseidon.torch.profile" % type(model).__name__, input_yaml, layers,
        header))
    shown = _check_model_file(paths["model"], layers, trainable)

    opt, opt_text = _optimizer(job.optimizer, model, work)
    previous_threads = torch.get_num_threads()
    if job.threads is not None:
        torch.set_num_threads(int(job.threads))
    try:
        clock = _timing.clock_for(device)
        plan = _timing.Plan(gm, {i: l.node for i, l in enumerate(layers) if l.node is not None},
                            len(layers), clock, _timing.Autocast(device.type, amp_dtype))
        t = _timing.measure(plan, root, args, opt, clock, job.iterations, job.warmup,
                            job.progress)
        fwd, bwd, update_ms = _timing.typical_means(t)
        rows = _rows(layers, shown, t, fwd, bwd, batch, device, dtype, clock, job.warmup)
        pcie = _timing.pcie_gbs(device, clock) if device.type == "cuda" else 0
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous_threads)

    whole_iqm = _timing.interquartile_mean(t.whole)
    sum_ms = sum(fwd) + sum(bwd) + update_ms
    param_mb = 4.0 * trainable / 1e6
    provenance = _provenance(model, x, device, dtype, amp_dtype, used_threads, loss_fn,
                             opt_text, job.iterations, job.warmup, whole_iqm,
                             _timing.percentile(t.whole, 0.5), sum_ms)
    provenance["mark_cost_us"] = "forward %.2f, backward %.2f per layer (subtracted)" % tuple(
        1e3 * c for c in plan.mark_cost)
    _write(paths["profile"], _files.profile_yaml(
        name, batch, _device_text(device), job.backend,
        update_ms / param_mb if param_mb > 0 else 0, pcie, provenance, rows))
    scenario_dir = os.path.dirname(os.path.abspath(paths["scenario"]))
    _write(paths["scenario"], _files.scenario_yaml(
        name, os.path.relpath(os.path.abspath(paths["model"]), scenario_dir),
        os.path.relpath(os.path.abspath(paths["profile"]), scenario_dir), batch))
    predicted = _simulate(paths["scenario"], set={"protocol.dwbp": False}, baseline=False)

    import pandas

    frame = pandas.DataFrame(
        [dict(name=l.name, type=l.type, source=l.source, params=l.params, fwd_ms=fwd[i],
              bwd_ms=bwd[i]) for i, l in enumerate(layers)],
        columns=["name", "type", "source", "params", "fwd_ms", "bwd_ms"])
    return dict(name=name, model=paths["model"], profile=paths["profile"],
                scenario=paths["scenario"], batch=batch, device=_device_text(device),
                parameters=trainable, layers=frame, update_ms=update_ms, layers_sum_ms=sum_ms,
                iteration_ms=whole_iqm, iteration_median_ms=_timing.percentile(t.whole, 0.5),
                unattributed_ms=whole_iqm - sum_ms,
                predicted_iteration_ms=predicted["iteration_ms"],
                warnings=predicted["warnings"])


# --- arguments --------------------------------------------------------------------------------

def _one_tensor(example_batch):
    if isinstance(example_batch, (tuple, list)):
        if len(example_batch) != 1:
            raise ValueError(
                "example_batch holds %d tensors; the model file has one input (an image, a "
                "sequence or token ids per sample): give the model's input alone, and the labels "
                "as target=" % len(example_batch))
        example_batch = example_batch[0]
    if not isinstance(example_batch, torch.Tensor):
        raise TypeError("example_batch must be a tensor (the model's input for one batch), got "
                        "%s" % type(example_batch).__name__)
    return example_batch


def _device_and_dtype(model, x):
    for p in model.parameters():
        return p.device, p.dtype
    return x.device, x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()


def _paths(out_dir, name, model_path, profile_path, scenario_path):
    def default(suffix):
        return os.path.join(out_dir, name + suffix)

    return dict(model=model_path or default(".yaml"),
                profile=profile_path or default("_profile.yaml"),
                scenario=scenario_path or default("_scenario.yaml"))


def _copy(model):
    try:
        return copy.deepcopy(model)
    except Exception as e:
        raise ValueError("cannot deep-copy the model (%s: %s); profile() trains a copy so that "
                         "the model's weights and statistics stay as they are: make the model "
                         "copyable (copy.deepcopy)" % (type(e).__name__, e)) from e


def _optimizer(optimizer, model, work):
    params = list(work.parameters())
    if optimizer is None:
        return (torch.optim.SGD(params, lr=0.01, momentum=0.9),
                "torch.optim.SGD(lr=0.01, momentum=0.9) (the default)")
    if isinstance(optimizer, torch.optim.Optimizer):
        # The same class and settings, per parameter group, on the copy's parameters (matched
        # by their place in model.parameters(), which deepcopy keeps).
        place = {id(p): i for i, p in enumerate(model.parameters())}
        groups = []
        for g in optimizer.param_groups:
            missing = [p for p in g["params"] if id(p) not in place]
            if missing:
                raise ValueError("the optimizer holds a parameter %s that is not the model's; "
                                 "give an optimizer over model.parameters(), or a function "
                                 "params -> optimizer" % (tuple(missing[0].shape),))
            group = {k: v for k, v in g.items() if k != "params"}
            group["params"] = [params[place[id(p)]] for p in g["params"]]
            groups.append(group)
        try:
            opt = type(optimizer)(groups, **optimizer.defaults)
        except TypeError as e:
            raise TypeError("cannot rebuild %s from its defaults (%s); pass optimizer=lambda "
                            "params: %s(params, ...) instead" % (
                                type(optimizer).__name__, e, type(optimizer).__name__)) from e
        return opt, "%s(%s)" % (_qualified(type(optimizer)), _settings(optimizer.defaults))
    if callable(optimizer):
        opt = optimizer(params)
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError("optimizer(params) returned %s, not a torch.optim.Optimizer"
                            % type(opt).__name__)
        return opt, "%s(%s)" % (_qualified(type(opt)), _settings(opt.defaults))
    raise TypeError("optimizer must be a torch.optim.Optimizer or a function params -> "
                    "optimizer, got %s" % type(optimizer).__name__)


def _settings(defaults):
    return ", ".join("%s=%s" % (k, defaults[k]) for k in sorted(defaults)
                     if isinstance(defaults[k], (int, float, bool, tuple, str)))


# --- checks -----------------------------------------------------------------------------------

def _check_output(gm, facts, loss_fn):
    """What backward() starts from must be one tensor: the loss, or the model's output."""
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    f = facts.get(out) if isinstance(out, torch.fx.Node) else None
    if f is None or f.shape is None:
        raise ValueError("the %s is not one tensor but %s; give a loss_fn that reduces it to the "
                         "loss (loss_fn=lambda out, y: F.cross_entropy(out[0], y), ...)"
                         % ("loss" if loss_fn is not None else "model's output",
                            "a " + type(out).__name__ if f is None else "a tuple"))


def _check_model_file(path, layers, trainable):
    """The written file through the project's loader (core::Model::Build): it must build, hold
    the mapped layers by name, PyTorch's parameters layer by layer and in total, and PyTorch's
    per-sample shapes. Returns poseidon.models.show's dict."""
    try:
        shown = _models.show(path)
    except ValueError as e:  # ConfigError, ModelError
        raise ValueError("the model file written for the model does not build (%s); this is a "
                         "case poseidon.torch maps wrongly: please report it with the model"
                         % e) from e
    rows = shown["layers"].to_dict("records")
    names = [r["name"] for r in rows]
    if sorted(names) != sorted(l.name for l in layers):
        raise AssertionError("model file layers %s != mapped layers %s"
                             % (names, [l.name for l in layers]))
    by_name = {r["name"]: r for r in rows}
    for l in layers:
        r = by_name[l.name]
        if r["params"] != l.params:
            raise ValueError("%s: the model file's layer '%s' (%s) has %d parameters, PyTorch's "
                             "module %d; poseidon.torch maps it wrongly: please report it"
                             % (l.source, l.name, l.type, r["params"], l.params))
        if not _same_shape(l.sample, (r["out_c"], r["out_h"], r["out_w"])):
            raise ValueError("%s: the model file's layer '%s' (%s) gives %s per sample, PyTorch "
                             "%s; poseidon.torch maps it wrongly: please report it"
                             % (l.source, l.name, l.type, r["output"],
                                "x".join(map(str, l.sample))))
    total = shown["totals"]["parameters"]
    if total != trainable:
        raise ValueError("the model file counts %d parameters, PyTorch %d trainable ones"
                         % (total, trainable))
    return shown


def _same_shape(sample, chw):
    if sample is None:  # a scalar loss
        return True
    t = tuple(sample)
    if len(t) > 3:
        return False
    if len(t) == 1 and chw == (t[0], 1, 1):  # fc, and a mean over the plane: [N] = Nx1x1
        return True
    return (1,) * (3 - len(t)) + t == tuple(chw)


# --- the profile's rows and provenance ---------------------------------------------------------

def _rows(layers, shown, t, fwd, bwd, batch, device, dtype, clock, warmup):
    by_name = {r["name"]: r for r in shown["layers"].to_dict("records")}
    rows = []
    for i, l in enumerate(layers):
        r = dict(fwd_ms=fwd[i], bwd_ms=bwd[i],
                 fwd_p10_ms=_timing.percentile(t.fwd[i], 0.1),
                 fwd_p90_ms=_timing.percentile(t.fwd[i], 0.9),
                 bwd_p10_ms=_timing.percentile(t.bwd[i], 0.1),
                 bwd_p90_ms=_timing.percentile(t.bwd[i], 0.9))
        if l.type in ("fc", "linear") and not any(k == "tie" for k, _ in l.keys):
            # The sufficient factors of this layer: K = batch x rows per sample pairs of an
            # M-input, N-output GEMM (core::Layer::fc_rows).
            m = _fc_inputs(l, shown, by_name)
            n = by_name[l.name]["out_w"] if l.type == "linear" else by_name[l.name]["out_c"]
            k = batch * (1 if l.type == "fc" else math.prod(l.sample[:-1]))
            r["sfb_rebuild_ms"] = _timing.sfb_rebuild_ms(k, m, n, device, dtype, clock,
                                                          repetitions=10, warmup=min(warmup, 3))
        rows.append((l.name, r))
    return rows


def _fc_inputs(layer, shown, by_name):
    """M of an fc (its flattened input) or linear (its input's last dimension) layer."""
    b = layer.bottoms[0]
    c, h, w = shown["input"] if b == "data" else (by_name[b]["out_c"], by_name[b]["out_h"],
                                                  by_name[b]["out_w"])
    return c * h * w if layer.type == "fc" else w


def _provenance(model, x, device, dtype, amp_dtype, threads, loss_fn, opt_text, iterations,
                warmup, whole_iqm, whole_median, sum_ms):
    p = {
        "label": "%s profile (PyTorch)" % ("GPU" if device.type == "cuda" else "CPU"),
        "tool": "poseidon.torch.profile",
        "module": _qualified(type(model)),
        "input": "%s %s" % ("x".join(map(str, x.shape)), str(x.dtype).replace("torch.", "")),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "dtype": str(dtype).replace("torch.", ""),
        "autocast": "off" if amp_dtype is None else "on (%s, the forward pass and the loss)"
                    % str(amp_dtype).replace("torch.", ""),
        "threads": str(threads),
        "interop_threads": str(torch.get_num_interop_threads()),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
        "host": socket.gethostname(),
        "kernel": "%s %s" % (platform.system(), platform.release()),
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "loss": _loss_text(loss_fn),
        "optimizer": opt_text,
        "method": ("fwd_ms, bwd_ms, update: mean over the interquartile iterations (by total "
                   "time) of %d timed training iterations after %d warm-up; p10, p90 over all; "
                   "forward: a mark after every traced node (folded nodes count for the layer "
                   "reading them), backward: from the pre-hook of each layer's output grad_fn "
                   "to the next; update: zero_grad + step; each timed iteration followed by one "
                   "whole iteration of the module, timed as one; sfb: median of G^T X"
                   % (iterations, warmup)),
        "whole_iteration_ms": "%.4f (interquartile mean; median %.4f)" % (whole_iqm,
                                                                          whole_median),
        "layers_sum_ms": "%.4f (forward + backward + update)" % sum_ms,
    }
    if device.type == "cuda":
        p["device_name"] = torch.cuda.get_device_name(device)
        p["cuda"] = str(torch.version.cuda)
        p["cudnn"] = str(torch.backends.cudnn.version())
    return p


def _autocast_dtype(device):
    """The dtype of the caller's autocast region for the device, None outside one."""
    if device.type == "cuda":
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
    if hasattr(torch, "is_autocast_cpu_enabled") and torch.is_autocast_cpu_enabled():
        return torch.get_autocast_cpu_dtype()
    return None


def _loss_text(loss_fn):
    if loss_fn is None:
        return "none (backward from a gradient of ones on the output)"
    if isinstance(loss_fn, torch.nn.Module):
        return _qualified(type(loss_fn))
    return getattr(loss_fn, "__qualname__", repr(loss_fn))


def _device_text(device):
    if device.type == "cuda":
        return "cuda: %s" % torch.cuda.get_device_name(device)
    return "cpu: %s (%d logical cores)" % (_cpu_model(), os.cpu_count())


def _cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def _qualified(cls):
    return "%s.%s" % (cls.__module__, cls.__qualname__)


def _write(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
