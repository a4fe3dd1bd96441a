"""poseidon.torch: a PyTorch module and its loss as one torch.fx graph, and what each value of
that graph is (its per-sample shape, whether it comes from the data, the labels or neither).

    gm = trace(model, loss_fn, has_target=True)          # torch.fx.GraphModule
    facts = record(gm, (x, y), batch=64)                  # {node: Fact}

The traced root is a small wrapper, `forward(x[, target])` = `loss_fn(model(x)[, target])`, so
the model, the loss and the training step's backward are one graph: the loss maps to a layer like
any other call, and one interpreter times them all (_timing.py). Qualified names in the graph are
"model.<the user's name>" and "loss_fn[.<name>]".

Per-sample shapes. The model file describes one sample (scenarios/models/README.md), PyTorch
tensors carry the batch in some dimension (dim 0 mostly, dim 1 in sequence-first attention, merged
with the tokens after `view(-1, V)`). record() runs the graph twice, at the batch given and at one
sample more: the one dimension that grows is the batch, and dividing it by the batch gives the
per-sample shape (tokens x vocabulary for a merged [B*S, V]). This needs no convention from the
user's code, and a model that hard-codes its batch size fails there with its own error, which is
reported as such.
"""

import torch
import torch.fx

# The wrapper's placeholders: the model input and the loss's target.
DATA, LABEL, CONST = "data", "label", "const"


class TraceFailure(ValueError):
    """torch.fx could not trace the model; the message names the module it was inside."""


class _WithLoss(torch.nn.Module):
    def __init__(self, model, loss_fn):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, x, target):
        return self.loss_fn(self.model(x), target)


class _LossOnOutput(_WithLoss):
    def forward(self, x):  # pylint: disable=arguments-differ -- a loss of the output alone
        return self.loss_fn(self.model(x))


class _NoLoss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)


def _encoder_layer_forward(layer, src, src_mask=None, src_key_padding_mask=None):
    """nn.TransformerEncoderLayer.forward as it runs in training (PyTorch 1.13's slow path,
    which its forward takes whenever `training` is set): its fast-path checks branch on tensor
    properties, which fx cannot trace."""
    x = src
    if layer.norm_first:
        x = x + layer._sa_block(layer.norm1(x), src_mask, src_key_padding_mask)
        x = x + layer._ff_block(layer.norm2(x))
    else:
        x = layer.norm1(x + layer._sa_block(x, src_mask, src_key_padding_mask))
        x = layer.norm2(x + layer._ff_block(x))
    return x


def _encoder_forward(encoder, src, mask=None, src_key_padding_mask=None):
    """nn.TransformerEncoder.forward in training (no nested-tensor conversion: that is for
    inference only)."""
    out = src
    for layer in encoder.layers:
        out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
    return encoder.norm(out) if encoder.norm is not None else out


# torch.nn modules traced through (fx keeps the others as leaves), by the forward to trace.
_TRACED_THROUGH = {torch.nn.TransformerEncoderLayer: _encoder_layer_forward,
                   torch.nn.TransformerEncoder: _encoder_forward}


class _Tracer(torch.fx.Tracer):
    """fx's tracer (torch.nn modules are leaves, the rest is traced through; the transformer
    encoder modules are traced through in their training form) that remembers which module it is
    inside, so that a failure can name it."""

    def __init__(self):
        super().__init__()
        self.stack = []
        self.failed_in = None

    def is_leaf_module(self, m, module_qualified_name):
        return type(m) not in _TRACED_THROUGH and super().is_leaf_module(m, module_qualified_name)

    def call_module(self, m, forward, args, kwargs):
        self.stack.append((self.path_of_module(m), type(m)))
        through = _TRACED_THROUGH.get(type(m))
        if through is not None:
            forward = lambda *a, **k: through(m, *a, **k)  # noqa: E731
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:
            if self.failed_in is None:
                self.failed_in = self.stack[-1]
            raise
        finally:
            self.stack.pop()


def wrap(model, loss_fn, has_target):
    """The root to trace and to run: the model with its loss, or alone."""
    if loss_fn is None:
        return _NoLoss(model)
    return _WithLoss(model, loss_fn) if has_target else _LossOnOutput(model, loss_fn)


def trace(root):
    """A GraphModule of `root` (see wrap()). Raises TraceFailure naming the module fx failed in
    and fx's reason."""
    tracer = _Tracer()
    try:
        graph = tracer.trace(root)
    except Exception as e:  # fx raises TraceError, TypeError, NotImplementedError, ...
        where = "the model's forward"
        if tracer.failed_in is not None:
            qual, cls = tracer.failed_in
            where = "%s (%s.%s)" % ("module '%s'" % user_name(qual) if qual != "model" else
                                    "the model's forward", cls.__module__, cls.__qualname__)
        raise TraceFailure(
            "torch.fx cannot trace %s: %s: %s. poseidon.torch.profile reads the model's layers "
            "from a torch.fx trace: make that forward traceable (no Python control flow on "
            "tensor values or shapes, no data-dependent iteration; see the torch.fx "
            "documentation's 'Limitations of Symbolic Tracing'), or export the model to ONNX "
            "and use `poseidon models import`" % (where, type(e).__name__, e)) from e
    return torch.fx.GraphModule(root, graph, class_name=type(root).__name__)


def user_name(qualname):
    """A qualified name in the traced root -> the name the user knows ('model.layer1.0' ->
    'layer1.0'; 'loss_fn' stays)."""
    return qualname[len("model."):] if qualname.startswith("model.") else qualname


class Fact:
    """What one node's value is. kind: DATA (computed from the model input), LABEL (from the
    target only) or CONST (neither: parameters, shapes, masks built from sizes). shape: the
    full shape at the batch given (a tensor), a tuple of Facts (a tuple of tensors) or None (not
    a tensor). sample: the per-sample shape (a tuple), None when the value has no batch
    dimension. batch_dim: the dimension holding the batch, None without one; merged: that
    dimension holds the batch times something (sample[batch_dim] is that something).
    value: a CONST tensor's value (masks, index tensors), when small."""

    __slots__ = ("kind", "shape", "sample", "batch_dim", "merged", "value", "dtype",
                 "requires_grad", "items")

    def __init__(self):
        self.kind = CONST
        self.shape = None
        self.sample = None
        self.batch_dim = None
        self.merged = False
        self.value = None
        self.dtype = None
        self.requires_grad = False
        self.items = None  # for tuples: a Fact per element


def _larger_batch(args, batch):
    """The example inputs with one sample more (the first one repeated), along dim 0."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() > 0 and a.shape[0] == batch:
            a = torch.cat([a, a[:1]], dim=0)
        out.append(a)
    return out


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm, garbage_collect_values=True)
        self.values = {}

    def run_node(self, n):
        v = super().run_node(n)
        self.values[n] = _summary(v)
        return v


def _summary(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), v.dtype, v.requires_grad,
                v.detach().clone() if v.numel() <= (1 << 20) else None)
    if isinstance(v, (tuple, list)) and any(isinstance(x, torch.Tensor) for x in v):
        return ("tuple", [_summary(x) for x in v])
    return ("other",)


def _per_sample(s1, s2, batch):
    """(sample shape, batch dim, merged) from the shapes at `batch` and `batch + 1`, or None
    when no single dimension grows with the batch."""
    if len(s1) != len(s2):
        return None
    grown = [i for i in range(len(s1)) if s1[i] != s2[i]]
    if len(grown) != 1:
        return None
    i = grown[0]
    if s1[i] % batch or s2[i] != s1[i] // batch * (batch + 1):
        return None
    per = s1[i] // batch
    sample = list(s1)
    if per == 1:
        del sample[i]
    else:
        sample[i] = per
    return tuple(sample), i, per != 1


def _fact(kind, a, b, batch):
    f = Fact()
    if a[0] == "tuple":
        f.kind = kind
        f.items = [_fact(kind, x, y, batch) for x, y in zip(a[1], b[1])]
        return f
    if a[0] != "tensor":
        return f  # sizes, dims, None: shape information is a constant here
    f.kind = kind
    f.shape, f.dtype, f.requires_grad = a[1], a[2], a[3]
    per = _per_sample(a[1], b[1], batch) if kind != CONST else None
    if per is not None:
        f.sample, f.batch_dim, f.merged = per
    if kind == CONST:
        f.value = a[4]
    return f


def record(gm, args, batch):
    """{node: Fact} for every node of `gm`, from two runs without gradients in eval mode (so that
    batch normalisation's running statistics and the weights stay as they are)."""
    was_training = gm.training
    gm.eval()
    try:
        with torch.no_grad():
            r1 = _Recorder(gm)
            r1.run(*args)
            r2 = _Recorder(gm)
            r2.run(*_larger_batch(args, batch))
    finally:
        gm.train(was_training)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    facts = {}
    for n in gm.graph.nodes:
        if n.op == "output":
            continue
        if n.op == "placeholder":
            kind = DATA if n is placeholders[0] else LABEL
        else:
            kinds = {facts[a].kind for a in n.all_input_nodes}
            kind = DATA if DATA in kinds else LABEL if LABEL in kinds else CONST
            if r1.values[n][0] == "other":
                kind = CONST
        facts[n] = _fact(kind, r1.values[n], r2.values[n], batch)
    return facts
