"""poseidon.torch: the nodes of a traced model (_trace.py) -> the layers of a Poseidon model file
(scenarios/models/README.md's schema).

    layers, input_yaml = map_graph(gm, facts)      # [Layer], "{channels: 1, height: 28, ...}"

Each call of a module or function becomes one layer, is folded into its neighbours (shape-only
operations, scaling by a constant, identities: no parameters and no cost of their own in the
model file; their measured time goes to the layer that consumes them), or is refused with
UnsupportedModel naming the module (its qualified name) or the function and what to do. Nothing
is guessed: a module is mapped by its exact type and every option that changes the layer's shape,
parameters or work is checked (a dilated convolution, a LayerNorm without affine parameters, an
attention between two different inputs are refused, not approximated).

Parameters: every mapped layer claims the parameters it owns in the model file; a parameter
claimed twice (shared weights, other than a linear head tied to an embedding), or trainable and
claimed by no layer, is refused, so that the file's parameter total is PyTorch's (profile() checks
it again on the written file with the project's loader).

Where the model input feeds a layer with several inputs (a residual add on the input), a
`dropout` of ratio 0 named `input` is put in between, as `poseidon models import` does: the schema
wants the input as a layer's only bottom.
"""

import inspect
import operator

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._files import quote
from ._trace import CONST, DATA, LABEL, user_name


class UnsupportedModel(ValueError):
    """A module or function of the model has no layer in the model file's schema."""


# How a refusal ends: where the alternatives are.
_ALTERNATIVES = ("change the model (docs/torch.md lists what maps to what), export it to ONNX and "
                 "use `poseidon models import`, or write its model file by hand "
                 "(scenarios/models/README.md)")


class Layer:
    """One layer of the model file. keys: [(key, YAML text)] after name, type and bottom.
    node: the fx node whose value is the layer's output (its backward starts there). source:
    what it came from, for messages. sample: PyTorch's per-sample output shape. params: the
    number of trainable PyTorch parameter values it owns."""

    def __init__(self, name, type_, bottoms, node, source, sample, keys=(), params=0):
        self.name = name
        self.type = type_
        self.bottoms = list(bottoms)
        self.node = node
        self.source = source
        self.sample = sample
        self.keys = list(keys)
        self.params = params
        self.patch = None  # conv: the patch size when kernel = stride and no padding
        self.conv_sample = None


class _Ref:
    """A value computed from the model input: the layer that produced it (or "data"), its
    per-sample shape now, and the folded operations that changed its layout since that layer:
    `steps`, one (per-sample shape after it, "reshape" or "permute") each. A layer other than fc
    or a loss cannot read a value with steps (the schema has no reshape), except a conv's patches
    turned into tokens (patch_tokens)."""

    __slots__ = ("layer", "sample", "steps")

    def __init__(self, layer, sample, steps=()):
        self.layer, self.sample, self.steps = layer, sample, steps

    @property
    def moved(self):
        return bool(self.steps)


class _Param:
    """A constant derived from one parameter (get_attr, then slicing, expand, view)."""

    __slots__ = ("name", "param")

    def __init__(self, name, param):
        self.name, self.param = name, param


class _Table:
    """The output of an nn.Embedding looked up with constant indices 0..S-1: learned positions."""

    __slots__ = ("module_name", "module")

    def __init__(self, module_name, module):
        self.module_name, self.module = module_name, module


class _Refused:
    """A value no layer may read (attention weights); reading it is refused with `why`."""

    __slots__ = ("why",)

    def __init__(self, why):
        self.why = why


def _hw(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _window_keys(prefix, v):
    h, w = _hw(v)
    return [(prefix, str(h))] if h == w else [(prefix + "_h", str(h)), (prefix + "_w", str(w))]


def _qualified(cls):
    return "%s.%s" % (cls.__module__, cls.__qualname__)


def _fn_name(target):
    if isinstance(target, str):
        return "Tensor." + target
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", repr(target))
    if mod.startswith("torch._C._nn") or mod == "torch.nn.functional":
        mod = "torch.nn.functional"
    elif mod in ("_operator", "operator"):
        mod = "operator"
    elif mod.startswith("torch"):
        mod = "torch"
    return "%s.%s" % (mod, name) if mod else name


_SHAPE_METHODS = {"view", "reshape", "flatten", "contiguous", "transpose", "permute", "squeeze",
                  "unsqueeze", "float", "half", "bfloat16", "double", "to", "type", "type_as",
                  "detach", "clone", "view_as", "reshape_as"}
_SHAPE_FUNCTIONS = {torch.flatten, torch.reshape, torch.transpose, torch.permute, torch.squeeze,
                    torch.unsqueeze, torch.clone, torch.detach}
_RELU = {F.relu, torch.relu, torch.relu_}
_TANH = {torch.tanh, F.tanh}
_ADD = {operator.add, torch.add, "add", "add_", operator.iadd}
_SCALE = {operator.mul, operator.truediv, operator.sub, torch.mul, torch.div, torch.sub,
          operator.imul, operator.itruediv, operator.isub, "mul", "div", "sub", "mul_", "div_",
          "sub_"}
_MEAN = {torch.mean, "mean"}
_CAT = {torch.cat, torch.concat} if hasattr(torch, "concat") else {torch.cat}
_LOSSES = {F.cross_entropy: "cross_entropy", F.nll_loss: "nll_loss"}


def _bind(fn, args, kwargs):
    """Arguments of a Python-level function by name (F.dropout, F.softmax, ...)."""
    b = inspect.signature(fn).bind(*args, **kwargs)
    b.apply_defaults()
    return b.arguments


class _Mapper:
    def __init__(self, gm, facts, model):
        self.gm = gm
        self.model = model
        self.facts = facts
        self.env = {}  # node -> _Ref | _Param | _Table | _Refused | tuple | None (a constant)
        self.layers = []
        self.by_name = {}
        self.names = {"data"}
        self.claims = {}  # id(parameter) -> layer name
        self.calls = {}  # module qualname -> number of calls so far
        self.input_yaml = None
        self.input_sample = None
        self.tied = {}  # id(embedding weight) -> embedding layer name

    # --- messages -----------------------------------------------------------------------------

    def where(self, n):
        if n.op == "call_module":
            m = self.gm.get_submodule(n.target)
            name = user_name(n.target)
            if name == "loss_fn":
                return "the loss (%s)" % _qualified(type(m))
            return "module '%s' (%s)" % (name, _qualified(type(m)))
        if n.op == "call_method":
            return "call '%s' (Tensor.%s)" % (n.name, n.target)
        return "call '%s' (%s)" % (n.name, _fn_name(n.target))

    def refuse(self, n, why, todo=None):
        raise UnsupportedModel("%s: %s; %s" % (self.where(n), why, todo or _ALTERNATIVES))

    # --- helpers ------------------------------------------------------------------------------

    def ref(self, n, arg, what="input"):
        """The _Ref a layer reads from `arg`, refusing what a layer cannot read."""
        v = self.env.get(arg) if isinstance(arg, torch.fx.Node) else None
        if isinstance(v, _Refused):
            self.refuse(n, v.why)
        if not isinstance(v, _Ref):
            self.refuse(n, "its %s is not computed from the model input (a constant, a "
                           "parameter or the target), which no layer of the schema reads" % what)
        if v.sample is None:
            self.refuse(n, "its %s has no batch dimension (it was reduced over the batch)" % what)
        return v

    def plain(self, n, r, kind):
        """Refuses a value whose layout a folded reshape or transposition changed (only fc and
        the loss flatten their input), unless it is a patch conv's output made tokens."""
        if r.moved and self.patch_tokens(r):
            return _Ref(r.layer, r.sample)
        if r.moved:
            self.refuse(n, "its input was reshaped or transposed (to %s per sample) after layer "
                           "'%s', and a %s layer would see that layer's shape: the schema has no "
                           "reshape layer" % (_shape(r.sample), r.layer, kind),
                        "reshape only where an fc layer (nn.Linear on a flattened input) or the "
                        "loss follows, or " + _ALTERNATIVES)
        return r

    def patch_tokens(self, r):
        """A conv with kernel = stride = P and no padding whose [D, h, w] output was made the
        sequence [h w, D] (`.flatten(2).transpose(1, 2)`, or `.permute(0, 2, 3, 1)` and a
        flatten): the schema's patch_embed (ViT). The conv layer becomes one."""
        layer = self.by_name.get(r.layer)
        if layer is None or layer.type not in ("conv", "patch_embed") or layer.patch is None:
            return False
        d, h, w = layer.conv_sample
        if r.sample != (h * w, d) or [op for _, op in r.steps] not in (
                ["reshape", "permute"], ["permute", "reshape"]):
            return False
        first = r.steps[0][0]
        if first not in ((d, h * w), (h, w, d)):
            return False
        if layer.type == "conv":
            layer.type = "patch_embed"
            layer.keys = [("num_output", str(d)), ("patch", str(layer.patch))] + [
                kv for kv in layer.keys if kv[0] == "bias"]
            layer.sample = (h * w, d)
        return True

    def sample_dim(self, n, x_node, dim):
        """A dimension of a full tensor -> the dimension of its per-sample shape."""
        f = self.facts[x_node]
        rank = len(f.shape)
        d = dim + rank if dim < 0 else dim
        if f.merged:
            self.refuse(n, "it works on a dimension of a tensor whose batch is merged with "
                           "another dimension (%s)" % (tuple(f.shape),))
        if d == f.batch_dim:
            self.refuse(n, "it works along the batch dimension, which the model file does not "
                           "describe (it holds one sample)")
        return d if d < f.batch_dim else d - 1

    def unique(self, base):
        """`base`, or `base_2`, `base_3`, ... when taken (as `poseidon models import` names)."""
        name, k = base, 2
        while name in self.names:
            name, k = "%s_%d" % (base, k), k + 1
        self.names.add(name)
        return name

    def claim(self, n, layer_name, params):
        total = 0
        for pname, p in params:
            if not p.requires_grad:
                self.refuse(n, "its parameter '%s' is frozen (requires_grad=False); the model "
                               "file counts every parameter as trained and synchronised"
                            % pname, "unfreeze it for the profile, or " + _ALTERNATIVES)
            other = self.claims.get(id(p))
            if other is not None:
                self.refuse(n, "its parameter '%s' is also layer '%s''s (shared weights); the "
                               "model file gives each layer its own parameters (only a linear "
                               "head tied to an embedding is supported)" % (pname, other))
            self.claims[id(p)] = layer_name
            total += p.numel()
        return total

    def emit(self, n, type_, bottoms, keys=(), params=(), name=None):
        if name is None:
            name = self.layer_name(n)
        layer = Layer(name, type_, [b.layer for b in bottoms], n, self.where(n),
                      self.out_sample(n), keys)
        layer.params = self.claim(n, name, params)
        self.layers.append(layer)
        self.by_name[name] = layer
        self.env[n] = _Ref(name, layer.sample)
        return layer

    def out_sample(self, n):
        f = self.facts[n]
        if f.items is not None:
            f = f.items[0]
        return f.sample

    def layer_name(self, n):
        if n.op == "call_module":
            base = user_name(n.target)
            calls = self.calls.get(n.target, 0) + 1
            self.calls[n.target] = calls
            if base == "loss_fn":
                base = "loss"
            elif calls > 1 and any(True for _ in self.gm.get_submodule(n.target).parameters()):
                self.refuse(n, "it is called %d times in one forward pass (its weights are "
                               "shared between the calls); the model file gives each layer its "
                               "own weights" % calls)
            return self.unique(base)
        return self.unique(n.name)

    def params_of(self, n, m):
        prefix = user_name(n.target)
        return [("%s.%s" % (prefix, k), p) for k, p in m.named_parameters()]

    # --- the walk -----------------------------------------------------------------------------

    def run(self):
        for n in self.gm.graph.nodes:
            if n.op == "output":
                continue
            f = self.facts[n]
            if n.op == "placeholder":
                self.env[n] = self.placeholder(n, f) if f.kind == DATA else None
            elif n.op == "get_attr":
                obj = _get_attr(self.gm, n.target)
                self.env[n] = _Param(user_name(n.target), obj) if isinstance(
                    obj, nn.Parameter) else None
            elif f.kind == LABEL:
                self.env[n] = None  # the target's own reshapes: no layer
            elif n.op == "call_module":
                self.module(n, self.gm.get_submodule(n.target))
            else:
                self.function(n)
        self.check_unclaimed()
        self.insert_input_layer()
        return self.layers

    def placeholder(self, n, f):
        s = f.sample
        if f.batch_dim != 0 or f.merged:
            self.refuse_input("its first dimension must be the batch (shape %s)" % (f.shape,))
        integer = not (f.dtype.is_floating_point or f.dtype.is_complex)
        if integer and len(s) == 1:
            self.input_yaml = "{tokens: %d}" % s[0]
        elif integer:
            self.refuse_input("token ids must be [batch, tokens], got %s" % (f.shape,))
        elif len(s) == 3:
            self.input_yaml = "{channels: %d, height: %d, width: %d}" % s
        elif len(s) == 2:
            self.input_yaml = "{shape: [%d, %d]}" % s
        elif len(s) == 1:
            self.input_yaml = "{channels: %d, height: 1, width: 1}" % s
        else:
            self.refuse_input("the model file's input is an image [C, H, W], a sequence [S, D] "
                              "or token ids [S] per sample, got %s per sample" % (s,))
        self.input_sample = s
        return _Ref("data", s)

    @staticmethod
    def refuse_input(why):
        raise UnsupportedModel("the model input: %s; %s" % (why, _ALTERNATIVES))

    # --- modules ------------------------------------------------------------------------------

    def module(self, n, m):
        handler = _MODULES.get(type(m))
        if handler is None:
            if type(m) in _FOLDED_MODULES:
                self.env[n] = self.fold(n, n.args[0])
                return
            if isinstance(m, nn.modules.loss._Loss):  # pylint: disable=protected-access
                self.refuse_loss(n)
            self.refuse(n, "no layer type of the model file corresponds to it (mapped modules: "
                           "%s)" % ", ".join(sorted(c.__name__ for c in _MODULES
                                                    if c.__module__.startswith("torch.nn")
                                                    and c is not _MHA_LINEAR)))
        handler(self, n, m)

    def refuse_loss(self, n):
        self.refuse(n, "the model file's only loss is softmax_loss (cross-entropy)",
                    "use nn.CrossEntropyLoss, nn.NLLLoss, F.cross_entropy or F.nll_loss, or "
                    "profile without a loss (no loss_fn, no target: the backward then starts "
                    "from a gradient of ones and the loss's cost is left out)")

    def conv(self, n, m):
        x = self.plain(n, self.ref(n, n.args[0]), "conv")
        if _hw(m.dilation) != (1, 1):
            self.refuse(n, "it is dilated (dilation=%s); the schema's conv is not" % (m.dilation,))
        if m.padding_mode != "zeros":
            self.refuse(n, "padding_mode '%s': the schema's conv pads with zeros" % m.padding_mode)
        kh, kw = _hw(m.kernel_size)
        if m.padding == "valid":
            pad = (0, 0)
        elif m.padding == "same":
            if (kh - 1) % 2 or (kw - 1) % 2:
                self.refuse(n, "padding='same' with an even kernel pads one side more than the "
                               "other; the schema's padding is symmetric")
            pad = ((kh - 1) // 2, (kw - 1) // 2)
        else:
            pad = _hw(m.padding)
        if len(x.sample) != 3:
            self.refuse(n, "its input is %s per sample, not an image [C, H, W]" % (x.sample,))
        keys = [("num_output", str(m.out_channels))] + _window_keys("kernel", (kh, kw))
        if _hw(m.stride) != (1, 1):
            keys += _window_keys("stride", m.stride)
        if pad != (0, 0):
            keys += _window_keys("pad", pad)
        if m.groups != 1:
            keys.append(("groups", str(m.groups)))
        if m.bias is None:
            keys.append(("bias", "false"))
        layer = self.emit(n, "conv", [x], keys, self.params_of(n, m))
        _, hi, wi = x.sample
        if (kh == kw == _hw(m.stride)[0] == _hw(m.stride)[1] and pad == (0, 0) and m.groups == 1
                and hi % kh == 0 and wi % kw == 0):
            layer.patch = kh  # a patch_embed if its output becomes tokens (patch_tokens)
        layer.conv_sample = layer.sample

    def linear(self, n, m):
        x = self.ref(n, n.args[0])
        params = self.params_of(n, m)
        keys = [("num_output", str(m.out_features))]
        if m.bias is None:
            keys.append(("bias", "false"))
        # On a flattened vector the schema's fc (which flattens its input itself); on a sequence
        # or any other rank the schema's linear, over the last dimension.
        kind = "fc" if len(x.sample) == 1 else "linear"
        if kind == "linear":
            self.plain(n, x, "linear")
        tied = self.tied.get(id(m.weight))
        if tied is not None:
            if kind != "linear":
                self.refuse(n, "its weight is embedding '%s''s, which the schema ties to a linear "
                               "layer on a sequence only" % tied)
            keys.append(("tie", quote(tied)))
            params = [(k, p) for k, p in params if p is not m.weight]
        self.emit(n, kind, [x], keys, params)

    def batchnorm(self, n, m):
        x = self.plain(n, self.ref(n, n.args[0]), "batchnorm")
        if len(x.sample) != 3:
            self.refuse(n, "its input is %s per sample; the schema's batchnorm normalises "
                           "images [C, H, W]" % (x.sample,))
        self.emit(n, "batchnorm", [x], [] if m.affine else [("affine", "false")],
                  self.params_of(n, m))

    def layernorm(self, n, m):
        x = self.plain(n, self.ref(n, n.args[0]), "layernorm")
        if len(m.normalized_shape) != 1 or m.normalized_shape[0] != x.sample[-1]:
            self.refuse(n, "it normalises over %s; the schema's layernorm normalises the last "
                           "dimension only" % (tuple(m.normalized_shape),))
        if not m.elementwise_affine:
            self.refuse(n, "it has no affine parameters (elementwise_affine=False); the schema's "
                           "layernorm has a scale and a shift")
        if len(x.sample) != 2:
            self.refuse(n, "its input is %s per sample; the schema's layernorm reads a sequence "
                           "[S, D]" % (x.sample,))
        self.emit(n, "layernorm", [x], [], self.params_of(n, m))

    def unary(self, n, type_, arg=None, keys=()):
        """relu, gelu, tanh, dropout: element by element, so they may read a reshaped value
        (torchvision's flatten, dropout, linear): the model file's layer keeps the shape of the
        layer before the reshape, and the reshape moves past it to the layer after (which must
        be one that may read it, an fc)."""
        x = self.ref(n, n.args[0] if arg is None else arg)
        if x.moved and self.patch_tokens(x):
            x = _Ref(x.layer, x.sample)
        layer = self.emit(n, type_, [x], keys)
        if x.moved:
            layer.sample = (self.by_name[x.layer].sample if x.layer != "data" else
                            self.input_sample)
            self.env[n] = _Ref(layer.name, self.out_sample(n), x.steps)

    def dropout(self, n, m):
        if m.p >= 1:
            self.refuse(n, "p=%s drops everything" % m.p)
        self.unary(n, "dropout", keys=[("ratio", repr(float(m.p)))])

    def softmax_module(self, n, m):
        self.softmax(n, n.args[0], m.dim if m.dim is not None else -1)

    def pool(self, n, m):
        x = self.plain(n, self.ref(n, n.args[0]), "pool")
        method = "max" if isinstance(m, nn.MaxPool2d) else "avg"
        if method == "max" and (_hw(m.dilation) != (1, 1) or m.return_indices):
            self.refuse(n, "dilation or return_indices: the schema's pool has neither")
        self.window_pool(n, x, method, m.kernel_size, m.stride or m.kernel_size, m.padding,
                         m.ceil_mode)

    def window_pool(self, n, x, method, kernel, stride, padding, ceil_mode):
        if len(x.sample) != 3:
            self.refuse(n, "its input is %s per sample, not an image [C, H, W]" % (x.sample,))
        keys = [("method", method)] + _window_keys("kernel", kernel)
        keys += _window_keys("stride", stride)
        if _hw(padding) != (0, 0):
            keys += _window_keys("pad", padding)
        keys.append(("round", "ceil" if ceil_mode else "floor"))
        self.emit(n, "pool", [x], keys)

    def functional_pool(self, n, method):
        # F.max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
        # return_indices=False); F.avg_pool2d(input, kernel_size, stride=None, padding=0,
        # ceil_mode=False, ...): by name, as neither has a signature inspect can read.
        names = (["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode",
                  "return_indices"] if method == "max" else
                 ["input", "kernel_size", "stride", "padding", "ceil_mode"])
        a = dict(zip(names, n.args))
        a.update(n.kwargs)
        if _hw(a.get("dilation", 1)) != (1, 1) or a.get("return_indices"):
            self.refuse(n, "dilation or return_indices: the schema's pool has neither")
        x = self.plain(n, self.ref(n, a["input"]), "pool")
        self.window_pool(n, x, method, a["kernel_size"], a.get("stride") or a["kernel_size"],
                         a.get("padding", 0), bool(a.get("ceil_mode", False)))

    def adaptive_pool(self, n, m):
        method = "max" if isinstance(m, nn.AdaptiveMaxPool2d) else "avg"
        if method == "max" and m.return_indices:
            self.refuse(n, "return_indices: the schema's pool has none")
        self.adaptive(n, n.args[0], m.output_size, method)

    def adaptive(self, n, arg, size, method):
        x = self.plain(n, self.ref(n, arg), "pool")
        if len(x.sample) != 3:
            self.refuse(n, "its input is %s per sample, not an image [C, H, W]" % (x.sample,))
        oh, ow = _hw(size)
        _, h, w = x.sample
        oh, ow = oh or h, ow or w
        if (oh, ow) == (1, 1):
            self.emit(n, "pool", [x], [("method", method), ("global", "true")])
        elif h % oh == 0 and w % ow == 0:
            k = (h // oh, w // ow)
            self.window_pool(n, x, method, k, k, 0, False)
        else:
            self.refuse(n, "an adaptive pool from %dx%d to %dx%d has windows of different "
                           "sizes, which the schema's pool has not" % (h, w, oh, ow))

    def embedding(self, n, m):
        arg = n.args[0]
        params = self.params_of(n, m)
        if isinstance(arg, torch.fx.Node) and self.facts[arg].kind == CONST:
            self.env[n] = self.position_table(n, m, arg)
            return
        x = self.ref(n, arg)
        if len(x.sample) != 1 or x.layer != "data":
            self.refuse(n, "it looks up %s per sample from '%s'; the schema's embedding looks up "
                           "the model input's token ids [S]" % (x.sample, x.layer))
        layer = self.emit(n, "embedding", [x], [("vocab", str(m.num_embeddings)),
                                                ("num_output", str(m.embedding_dim))], params)
        self.tied[id(m.weight)] = layer.name

    def position_table(self, n, m, index_node):
        idx = self.facts[index_node].value
        if idx is None or idx.numel() == 0:
            self.refuse(n, "it looks up constant indices that are not 0, 1, ..., S-1")
        flat = idx.reshape(-1, idx.shape[-1]) if idx.dim() > 1 else idx.reshape(1, -1)
        want = torch.arange(flat.shape[1], device=flat.device, dtype=flat.dtype)
        if not bool((flat == want).all()):
            self.refuse(n, "it looks up constant indices that are not 0, 1, ..., S-1 (learned "
                           "positions are the only constant lookup the schema has: "
                           "pos_embedding)")
        return _Table(user_name(n.target), m)

    def attention(self, n, m):
        b = _bind(m.forward, n.args, n.kwargs)
        q, k, v = b["query"], b["key"], b["value"]
        if not (q is k is v) and not (self.env.get(q) is not None and
                                      self.env.get(q) is self.env.get(k) is self.env.get(v)):
            self.refuse(n, "query, key and value are not the same tensor: the schema's attention "
                           "is self-attention")
        x = self.plain(n, self.ref(n, q), "attention")
        if len(x.sample) != 2:
            self.refuse(n, "its input is %s per sample, not a sequence [S, D]" % (x.sample,))
        if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
            self.refuse(n, "kdim/vdim other than embed_dim, add_bias_kv or add_zero_attn: the "
                           "schema's attention has none of them")
        if (m.in_proj_bias is None) != (m.out_proj.bias is None):
            self.refuse(n, "its input and output projections differ in having a bias")
        keys = [("heads", str(m.num_heads))]
        mask = b.get("attn_mask")
        if mask is not None:
            if not (isinstance(mask, torch.fx.Node) and self.facts[mask].kind == CONST
                    and _is_causal(self.facts[mask].value)):
                self.refuse(n, "its attn_mask is not the causal mask (True or -inf above the "
                               "diagonal, nothing else): the schema's attention is full or "
                               "causal")
            keys.append(("causal", "true"))
        if m.in_proj_bias is None:
            keys.append(("bias", "false"))
        layer = self.emit(n, "attention", [x], keys, self.params_of(n, m))
        self.env[n] = (_Ref(layer.name, layer.sample),
                       _Refused("it reads the attention weights of '%s', which the schema's "
                                "attention does not output" % layer.name))

    def loss_module(self, n, m):
        self.loss(n, n.args[0])

    def loss(self, n, arg):
        x = self.ref(n, arg, "input (the logits)")
        self.emit(n, "softmax_loss", [x], name=self.unique("loss"))

    # --- functions and methods ----------------------------------------------------------------

    def function(self, n):
        t = n.target
        args = n.args
        if t is operator.getitem:
            return self.getitem(n)
        if self.facts[n].kind == CONST:  # sizes, masks, index tensors, a parameter's slice
            self.env[n] = self.constant(n)
            return
        if t in _SHAPE_METHODS or t in _SHAPE_FUNCTIONS:
            self.env[n] = self.fold(n, args[0])
        elif t in _RELU or t in ("relu", "relu_"):
            self.unary(n, "relu")
        elif t is F.gelu or t == "gelu":
            self.unary(n, "gelu")
        elif t in _TANH or t == "tanh":
            self.unary(n, "tanh")
        elif t in (F.softmax, torch.softmax, "softmax", F.log_softmax, torch.log_softmax,
                   "log_softmax"):
            dim = n.kwargs.get("dim", args[1] if len(args) > 1 else None)
            self.softmax(n, args[0], -1 if dim is None else dim)
        elif t is F.dropout:
            b = _bind(F.dropout, args, n.kwargs)
            if not b["training"] or b["p"] == 0:
                self.env[n] = self.fold(n, args[0])
            else:
                self.unary(n, "dropout", arg=args[0], keys=[("ratio", repr(float(b["p"])))])
        elif t in _ADD:
            self.add(n)
        elif t in _SCALE:
            self.scale(n)
        elif t in _CAT:
            self.cat(n)
        elif t in _MEAN:
            self.mean(n)
        elif t is F.max_pool2d or t is F.avg_pool2d:
            self.functional_pool(n, "max" if t is F.max_pool2d else "avg")
        elif t is F.adaptive_avg_pool2d or t is F.adaptive_max_pool2d:
            method = "avg" if t is F.adaptive_avg_pool2d else "max"
            size = n.kwargs.get("output_size", args[1] if len(args) > 1 else None)
            self.adaptive(n, args[0], size, method)
        elif t in _LOSSES:
            self.loss(n, args[0])
        elif "loss" in getattr(t, "__name__", ""):
            self.refuse_loss(n)
        else:
            self.refuse(n, "no layer type of the model file corresponds to it")

    def constant(self, n):
        """A node computed without the model input: a parameter's slice or view stays that
        parameter; anything else is a plain constant (sizes, masks, index tensors)."""
        if n.op in ("call_method", "call_function") and (
                n.target in _SHAPE_METHODS or n.target in _SHAPE_FUNCTIONS or
                n.target in ("expand", "expand_as", "repeat")):
            src = self.env.get(n.args[0]) if isinstance(n.args[0], torch.fx.Node) else None
            if isinstance(src, _Param):
                return src
        return None

    def fold(self, n, arg):
        x = self.ref(n, arg)
        sample = self.out_sample(n)
        if sample is None:
            self.refuse(n, "it merges the batch with another dimension of its input, or drops "
                           "it, so its output describes no single sample")
        steps = x.steps
        if self.permutes(n, arg):
            steps += ((sample, "permute"),)
        elif sample != x.sample:
            steps += ((sample, "reshape"),)
        return _Ref(x.layer, sample, steps)

    def permutes(self, n, arg):
        """Whether a transpose or permute reorders per-sample dimensions (moving only the batch
        dimension, as sequence-first attention does, changes no sample's layout)."""
        if n.target not in ("transpose", "permute", torch.transpose, torch.permute):
            return False
        f_in, f_out = self.facts[arg], self.facts[n]
        if f_in.batch_dim is None or f_out.batch_dim is None:
            return True
        if n.target in ("transpose", torch.transpose):
            rank = len(f_in.shape)
            d0, d1 = [d + rank if d < 0 else d for d in n.args[1:3]]
            order = list(range(rank))
            order[d0], order[d1] = order[d1], order[d0]
        else:
            order = list(n.args[1:])
            if len(order) == 1 and isinstance(order[0], (tuple, list)):
                order = list(order[0])
            order = [d + len(f_in.shape) if d < 0 else d for d in order]
        kept = [d for d in order if d != f_in.batch_dim]
        return kept != sorted(kept)

    def getitem(self, n):
        src, index = n.args
        v = self.env.get(src)
        if isinstance(v, tuple):  # an attention's (output, weights)
            self.env[n] = v[index]
        elif isinstance(v, _Ref):
            self.token_pool_first(n, v, index)
        else:
            self.env[n] = v if isinstance(v, (_Param, _Refused)) else None

    def token_pool_first(self, n, x, index):
        # x[:, 0] on [B, S, D]: the first token (BERT's pooler, ViT's class token).
        f = self.facts[src_node(n)]
        ok = (isinstance(index, tuple) and len(index) == 2 and index[0] == slice(None)
              and index[1] == 0 and f.batch_dim == 0 and not f.merged and x.sample is not None
              and len(x.sample) == 2)
        if not ok:
            self.refuse(n, "indexing or slicing a tensor computed from the input (%s) has no "
                           "layer in the schema; only x[:, 0] on a sequence (the first token: "
                           "token_pool) has" % (index,))
        self.emit(n, "token_pool", [self.plain(n, x, "token_pool")], [("method", "first")])

    def softmax(self, n, arg, dim):
        x = self.plain(n, self.ref(n, arg), "softmax")
        if self.sample_dim(n, arg, dim) != len(x.sample) - 1:
            self.refuse(n, "it normalises over dimension %s, not the last one, which is the "
                           "schema's softmax" % dim)
        self.emit(n, "softmax", [x])

    def add(self, n):
        operands = [a for a in n.args[:2]]
        values = [self.env.get(a) if isinstance(a, torch.fx.Node) else a for a in operands]
        refs = [v for v in values if isinstance(v, _Ref)]
        others = [v for v in values if not isinstance(v, _Ref)]
        if len(refs) == 2:
            a, b = (self.plain(n, self.ref(n, o), "add") for o in operands)
            if a.sample != b.sample:
                self.refuse(n, "it broadcasts %s and %s per sample; the schema's add needs equal "
                               "shapes" % (a.sample, b.sample))
            self.emit(n, "add", [a, b])
            return
        if len(refs) == 1 and isinstance(others[0], (int, float)):
            self.scale(n)
            return
        data_arg = operands[values.index(refs[0])] if refs else None
        other = others[0] if refs else None
        if isinstance(other, (_Param, _Table)):
            return self.position_add(n, data_arg, other)
        self.refuse(n, "it adds a tensor that is neither computed from the input nor a learned "
                       "position table (a parameter [S, D] or an nn.Embedding of 0..S-1)")

    def position_add(self, n, data_arg, table):
        x = self.plain(n, self.ref(n, data_arg), "pos_embedding")
        if len(x.sample) != 2:
            self.refuse(n, "it adds learned positions to %s per sample, not a sequence [S, D]"
                        % (x.sample,))
        if isinstance(table, _Table):
            m = table.module
            rows, width = m.num_embeddings, m.embedding_dim
            name, params = table.module_name, [("%s.weight" % table.module_name, m.weight)]
        else:
            p = table.param
            shape = [d for d in p.shape if d != 1] or [1]
            rows, width = (shape[0], shape[1]) if len(shape) == 2 else (0, 0)
            name, params = table.name, [(table.name, p)]
        if width != x.sample[1] or rows < x.sample[0]:
            self.refuse(n, "its position table is %dx%d, not at least %dx%d (sequence x width)"
                        % (rows, width, x.sample[0], x.sample[1]))
        self.emit(n, "pos_embedding", [x], [("max_len", str(rows))], params,
                  name=self.unique(name))

    def scale(self, n):
        # x * c, x / c, x - c, x + c with c a number (or a constant without gradient): folded,
        # as `poseidon models import` folds scaling by a constant (no parameters; the time goes
        # to the next layer).
        refs = [a for a in n.args[:2] if isinstance(self.env.get(a) if isinstance(
            a, torch.fx.Node) else None, _Ref)]
        others = [a for a in n.args[:2] if a not in refs]
        for o in others:
            v = self.env.get(o) if isinstance(o, torch.fx.Node) else o
            f = self.facts.get(o) if isinstance(o, torch.fx.Node) else None
            scalar = isinstance(o, (int, float)) or (
                f is not None and v is None and f.shape is not None and
                int(torch.tensor(f.shape).prod()) == 1)
            if isinstance(v, _Param) or not scalar:
                what = ("parameter '%s'" % v.name if isinstance(v, _Param) else
                        "'%s'" % o.name if isinstance(o, torch.fx.Node) else repr(o))
                self.refuse(n, "it multiplies or offsets by a tensor (%s), which no layer of the "
                               "schema does (only scaling by a constant is folded away)" % what)
        if len(refs) != 1:
            self.refuse(n, "it combines two tensors computed from the input element by element, "
                           "which no layer of the schema does except add")
        self.env[n] = self.fold(n, refs[0])

    def cat(self, n):
        tensors = n.args[0] if n.args else n.kwargs["tensors"]
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else 0)
        values = [self.env.get(t) for t in tensors]
        params = [v for v in values if isinstance(v, _Param)]
        data = [t for t, v in zip(tensors, values) if isinstance(v, _Ref)]
        if params and len(values) == 2 and isinstance(values[0], _Param) and data:
            return self.cls_token(n, values[0], data[0], dim)
        if len(data) != len(tensors):
            self.refuse(n, "it concatenates tensors that are not all computed from the input")
        refs = [self.plain(n, self.ref(n, t), "concat") for t in tensors]
        if len(refs[0].sample) != 3 or self.sample_dim(n, tensors[0], dim) != 0:
            self.refuse(n, "it concatenates %s per sample along dimension %s; the schema's "
                           "concat joins images along channels" % (refs[0].sample, dim))
        self.emit(n, "concat", refs)

    def cls_token(self, n, param, data_arg, dim):
        # torch.cat([cls.expand(B, -1, -1), x], dim=1): a learned class token before the
        # sequence (ViT).
        x = self.plain(n, self.ref(n, data_arg), "cls_token")
        p = param.param
        if len(x.sample) != 2 or self.sample_dim(n, data_arg, dim) != 0 or p.numel() != x.sample[1]:
            self.refuse(n, "it puts parameter '%s' %s before %s per sample; the schema's "
                           "cls_token prepends one learned token [1, D] to a sequence [S, D]"
                        % (param.name, tuple(p.shape), x.sample))
        self.emit(n, "cls_token", [x], [], [(param.name, p)], name=self.unique(param.name))

    def mean(self, n):
        arg = n.args[0]
        dims = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else None)
        x = self.plain(n, self.ref(n, arg), "pool")
        if dims is None:
            self.refuse(n, "a mean over every dimension (the batch too)")
        dims = sorted(self.sample_dim(n, arg, d) for d in (
            dims if isinstance(dims, (tuple, list)) else [dims]))
        if len(x.sample) == 3 and dims == [1, 2]:
            self.emit(n, "pool", [x], [("method", "avg"), ("global", "true")])
        elif len(x.sample) == 2 and dims == [0]:
            self.emit(n, "token_pool", [x], [("method", "mean")])
        else:
            self.refuse(n, "a mean over per-sample dimensions %s of %s: the schema has the mean "
                           "over an image's plane (global pool) and over a sequence's tokens "
                           "(token_pool)" % (dims, x.sample))

    # --- the end ------------------------------------------------------------------------------

    def check_unclaimed(self):
        # The user's model, not the GraphModule's copy of it (which holds only what the trace
        # used).
        for name, p in self.model.named_parameters():
            if p.requires_grad and id(p) not in self.claims:
                readers = [u.name for a in self.gm.graph.nodes if a.op == "get_attr"
                           and _get_attr(self.gm, a.target) is p for u in a.users]
                raise UnsupportedModel(
                    "parameter '%s' %s is trained but no mapped layer owns it (%s); the model "
                    "file's parameter total would not be PyTorch's; %s"
                    % (name, tuple(p.shape), "read by " + ", ".join(readers) if readers else
                       "the forward pass does not use it", _ALTERNATIVES if readers else
                       "set requires_grad=False on it or delete it, or " + _ALTERNATIVES))

    def insert_input_layer(self):
        """A dropout of ratio 0 named `input` between the model input and layers with several
        inputs (the schema wants the input as a layer's only bottom)."""
        if not any(len(l.bottoms) > 1 and "data" in l.bottoms for l in self.layers):
            return
        name = self.unique("input")
        for l in self.layers:
            if len(l.bottoms) > 1:
                l.bottoms = [name if b == "data" else b for b in l.bottoms]
        first = self.env[next(n for n in self.gm.graph.nodes if n.op == "placeholder")]
        self.layers.insert(0, Layer(name, "dropout", ["data"], None, "the model input",
                                    first.sample, [("ratio", "0")]))


def src_node(n):
    return n.args[0]


def _get_attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _is_causal(mask):
    if mask is None or mask.dim() != 2 or mask.shape[0] != mask.shape[1]:
        return False
    s = mask.shape[0]
    above = torch.ones(s, s, dtype=torch.bool, device=mask.device).triu(1)
    if mask.dtype == torch.bool:
        return bool((mask == above).all())
    blocked = torch.isinf(mask) & (mask < 0)
    return bool((blocked == above).all()) and bool((mask[~above] == 0).all())


def _shape(s):
    return "x".join(str(d) for d in s)


# MultiheadAttention's out_proj class, an nn.Linear (met when a user's model calls it alone).
_MHA_LINEAR = nn.modules.linear.NonDynamicallyQuantizableLinear
_MODULES = {
    nn.Conv2d: _Mapper.conv,
    nn.Linear: _Mapper.linear,
    _MHA_LINEAR: _Mapper.linear,
    nn.BatchNorm2d: _Mapper.batchnorm,
    nn.LayerNorm: _Mapper.layernorm,
    nn.ReLU: lambda self, n, m: self.unary(n, "relu"),
    nn.Tanh: lambda self, n, m: self.unary(n, "tanh"),
    nn.GELU: lambda self, n, m: self.unary(n, "gelu"),
    nn.Dropout: _Mapper.dropout,
    nn.Softmax: _Mapper.softmax_module,
    nn.LogSoftmax: _Mapper.softmax_module,
    nn.MaxPool2d: _Mapper.pool,
    nn.AvgPool2d: _Mapper.pool,
    nn.AdaptiveAvgPool2d: _Mapper.adaptive_pool,
    nn.AdaptiveMaxPool2d: _Mapper.adaptive_pool,
    nn.Embedding: _Mapper.embedding,
    nn.MultiheadAttention: _Mapper.attention,
    nn.CrossEntropyLoss: _Mapper.loss_module,
    nn.NLLLoss: _Mapper.loss_module,
}
_FOLDED_MODULES = {nn.Identity, nn.Flatten}


def map_graph(gm, facts, model):
    """([Layer] in forward order, the model file's `input:` value) of `gm`, traced from `model`.
    Raises UnsupportedModel."""
    m = _Mapper(gm, facts, model)
    layers = m.run()
    return layers, m.input_yaml
