"""poseidon.torch: the text of the three files profile() writes -- the model file
(scenarios/models/README.md), the profile (config/compute_loader.h) and a one-worker scenario --
in the layouts the project's own writers use (one flow mapping per layer, units in key names,
strings double-quoted, numbers in their shortest exact form: Python's repr of a float, what
config::YamlScalarNumber writes too). Pure text: no I/O, no torch.
"""

import json


def quote(s):
    """A YAML double-quoted scalar (JSON's escapes are YAML's)."""
    return json.dumps(str(s))


def number(v):
    return repr(float(v))


def model_yaml(name, description, input_yaml, layers, header):
    lines = ["# %s" % line for line in header]
    lines += ["schema_version: 1",
              "name: %s" % quote(name),
              "description: %s" % quote(description),
              "input: %s" % input_yaml,
              "layers:"]
    for l in layers:
        b = l.bottoms
        bottom = quote(b[0]) if len(b) == 1 else "[%s]" % ", ".join(quote(x) for x in b)
        keys = "".join(", %s: %s" % kv for kv in l.keys)
        lines.append("  - {name: %s, type: %s, bottom: %s%s}   # %s"
                     % (quote(l.name), l.type, bottom, keys, l.source))
    return "\n".join(lines) + "\n"


def profile_yaml(model, batch, device, backend, update_ms_per_mb, pcie_gbs, provenance, rows):
    """rows: [(name, {key: ms})] in forward order; keys in calibrate's order."""
    lines = ["# Per-layer compute profile: times in ms for one pass over the whole batch.",
             "# Format: config/compute_loader.h. Written by poseidon.torch.profile.",
             "schema_version: 1",
             "model: %s" % quote(model),
             "batch: %d" % batch,
             "device: %s" % quote(device),
             "backend: %s" % backend]
    if update_ms_per_mb > 0:
        lines.append("update_ms_per_mb: %s" % number(update_ms_per_mb))
    if pcie_gbs:
        lines.append("pcie_gbs: %s" % number(pcie_gbs))
    lines.append("provenance:")
    lines += ["  %s: %s" % (quote(k), quote(provenance[k])) for k in sorted(provenance)]
    lines.append("layers:")
    order = ("fwd_ms", "bwd_ms", "fwd_p10_ms", "fwd_p90_ms", "bwd_p10_ms", "bwd_p90_ms",
             "sfb_rebuild_ms")
    for name, t in rows:
        keys = "".join(", %s: %s" % (k, number(t[k])) for k in order if k in t)
        lines.append("  - {name: %s%s}" % (quote(name), keys))
    return "\n".join(lines) + "\n"


def scenario_yaml(name, model_ref, profile_ref, batch):
    """One worker with a colocated shard on the measured profile; `--set cluster.machines=N`
    scales it (one shard per worker machine, the schema's default)."""
    return "\n".join([
        "# Written by poseidon.torch.profile: %s on its measured profile, one worker." % name,
        "#   poseidon simulate THIS_FILE --set cluster.machines=8",
        "#   --set cluster.network.bandwidth_gbps=1   (or any other key; docs/torch.md)",
        "schema_version: 1",
        "name: %s" % quote(name + "-torch-profile"),
        "model: %s" % quote(model_ref),
        "batch_per_worker: %d" % batch,
        "iterations: 10",
        "warmup_iterations: 1",
        "cluster:",
        "  machines: 1",
        "  placement: colocated",
        "  profile: %s" % quote(profile_ref),
        "  network: {bandwidth_gbps: 10, latency_us: 5}",
    ]) + "\n"
