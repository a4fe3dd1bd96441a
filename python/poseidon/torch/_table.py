"""A PyTorch module as the core sees it: the layer table (one `module` layer per module that owns
parameters requiring gradients), and the bytes of its state for the initial broadcast.

The table lists modules in registration order (`named_modules()`), each with its own parameters
(`named_parameters(recurse=False)`) that require gradients; a parameter shared by several modules
(tied weights) belongs to the first. Frozen parameters are not in it: nothing syncs them (as DDP).
An nn.Linear whose weight is its own is marked `linear: {in, out, rows}`, so that SACP may send
its gradient as sufficient factors. The job's model is the same table in the order worker 1's
first forward pass ran the modules, with the rows per example its linear layers saw.

Every parameter in the table must have one dtype, float32 or float64 (autocast keeps float32
master weights, which is what runs here), and live on one kind of device.
"""

import json

import torch

_VALUE_WORDS = {torch.float32: 1, torch.float64: 2}


class TableError(ValueError):
    """The module cannot be synced as it is (names the module and what to do)."""


class Entry:
    """One module of the table: its qualified name, the module, its own synced parameters."""

    def __init__(self, index, name, module, params):
        self.index = index
        self.name = name
        self.module = module
        self.params = params  # [(name, Parameter)]
        w = params[0][1]
        # Exactly nn.Linear: a subclass may compute something else (LoRA, quantised, the out
        # projection nn.MultiheadAttention applies functionally), and goes by PS or all-reduce.
        self.linear = (type(module) is torch.nn.Linear and params[0][0] == "weight"
                       and w is module.weight)
        self.in_features = module.in_features if self.linear else 0
        self.out_features = module.out_features if self.linear else 0


class LayerTable:
    def __init__(self, module):
        self.entries = []
        seen = set()
        for name, m in module.named_modules():
            own = []
            for pname, p in m.named_parameters(recurse=False):
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    own.append((pname, p))
            if own:
                self.entries.append(Entry(len(self.entries), name or "(root)", m, own))
        if not self.entries:
            raise TableError("the module has no parameter that requires a gradient: nothing to "
                             "train in parallel")
        first = self.entries[0]
        self.dtype = first.params[0][1].dtype
        self.device_type = first.params[0][1].device.type
        for e in self.entries:
            for pname, p in e.params:
                if p.dtype != self.dtype or p.dtype not in _VALUE_WORDS:
                    raise TableError(
                        f"module '{e.name}': parameter '{pname}' is {p.dtype}, the first one "
                        f"({first.name}.{first.params[0][0]}) {self.dtype}; every parameter must "
                        "be float32 (use torch.autocast for bf16/fp16 compute) or every one "
                        "float64")
                if p.device.type != self.device_type:
                    raise TableError(f"module '{e.name}': parameter '{pname}' is on {p.device}, "
                                     f"others on {self.device_type}; move the whole model first")
        self.value_words = _VALUE_WORDS[self.dtype]
        self.params = [p for e in self.entries for _, p in e.params]

    def yaml(self, order=None, rows=None):
        """The table as a model file: registration order, or `order` (entry indices); `rows`:
        entry index -> rows per example of a linear module's input."""
        rows = rows or {}
        lines = ["schema_version: 1", "name: torch", "input: {tokens: 1}"]
        if self.value_words != 1:
            lines.append(f"value_words: {self.value_words}")
        lines.append("layers:")
        for i in (order if order is not None else range(len(self.entries))):
            e = self.entries[i]
            params = ", ".join(
                f"{{name: {json.dumps(n)}, dims: {json.dumps(list(p.shape))}}}" for n, p in e.params)
            line = f"  - {{name: {json.dumps(e.name)}, type: module, params: [{params}]"
            if e.linear:
                line += (f", linear: {{in: {e.in_features}, out: {e.out_features}, "
                         f"rows: {int(rows.get(i, 1))}}}")
            lines.append(line + "}")
        return "\n".join(lines) + "\n"


def _state_tensors(module, buffers_only=False):
    tensors = [] if buffers_only else [p for p in module.parameters()]
    tensors += [b for b in module.buffers()]
    return tensors


def pack_state(module, buffers_only=False):
    """The bytes of the module's parameters and buffers (or buffers only), in order."""
    parts = []
    for t in _state_tensors(module, buffers_only):
        parts.append(t.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return b"".join(parts)


def unpack_state(module, data, buffers_only=False):
    """Copies pack_state's bytes (another worker's) into the module's tensors."""
    offset = 0
    with torch.no_grad():
        for t in _state_tensors(module, buffers_only):
            n = t.numel() * t.element_size()
            if n == 0:
                continue
            src = torch.frombuffer(bytearray(data[offset:offset + n]), dtype=torch.uint8)
            t.copy_(src.view(t.dtype).reshape(t.shape))
            offset += n
    if offset != len(data):
        raise TableError(f"worker 1's state has {len(data)} bytes, this worker's {offset}")
