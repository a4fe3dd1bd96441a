"""Poseidon from Python: simulate, sweep, plan and the model library, for notebooks.

    import poseidon
    r = poseidon.simulate("scenarios/demo.yaml", set={"cluster.workers": 4})
    r["iteration_ms"], r["speedup"]
    df = poseidon.sweep("scenarios/sweeps/demo_sweep.yaml", jobs=2,
                        progress=lambda done, total: print(done, "/", total))
    poseidon.plan("scenarios/experiments/paper2015_alexnet.yaml")["layers"]
    poseidon.models.show("alexnet")["totals"]

Every function runs the same C++ code as the `poseidon` command-line program, in this process
(the extension poseidon._ext): simulate() returns what `poseidon simulate --format json` prints,
sweep() the CSV of `poseidon sweep` as a DataFrame. Relative paths are read from the current
folder and, inside a scenario, next to the scenario file, then in the built-in data folder
(data_dir()), as the CLI does. Bad input raises ConfigError (a ValueError) whose message is the
CLI's "FILE:LINE:COLUMN: error: ..."; a model error is a ModelError (a ConfigError). See
docs/python.md.
"""

import io
import json
import os

from . import _ext
from . import _frames
from . import models
from ._ext import ConfigError, ModelError, SimulationError

__all__ = ["ConfigError", "ModelError", "SimulationError", "data_dir", "models", "plan",
           "plan_text", "simulate", "sweep", "sweep_csv"]

PLAN_COLUMNS = ["name", "type", "shape", "params", "ps_bytes", "sfb_bytes", "allreduce_bytes",
                "choice", "reason"]
COLLECTIVE_COLUMNS = ["first_layer", "last_layer", "tensors", "bytes", "nccl_ring_us",
                      "nccl_tree_us", "algorithm"]


def data_dir():
    """The folder of the built-in models, devices and profiles (the repository's scenarios/)."""
    return _ext.default_data_dir()


def _scenario(scenario):
    if scenario is None:
        return os.path.join(data_dir(), "demo.yaml")  # `poseidon simulate` with no argument
    return _frames.path(scenario)


def simulate(scenario=None, set=None, *, baseline=True, trace=None, progress=None):  # noqa: A002
    """Simulates one scenario; returns `poseidon simulate SCENARIO --set K=V --format json` as a
    dict (iteration_ms, throughput, speedup, breakdown, per-layer and per-link figures ...).

    scenario: a scenario YAML path (default: the built-in scenarios/demo.yaml).
    set: overrides, {"cluster.workers": 4, "protocol.scheme": "auto"} or ["cluster.workers=4"].
    baseline: False is --no-baseline (no one-node run, no speedup).
    trace: a path: writes the Chrome-trace JSON timeline there, as --trace does.
    progress: progress(fraction) now and then during the run, fraction in [0, 1].
    Raises ConfigError for bad input, SimulationError when the simulated job deadlocks.
    """
    text, chrome_trace = _ext.simulate_json(_scenario(scenario), _frames.overrides(set),
                                            bool(baseline), trace is not None, progress)
    if trace is not None:
        with open(trace, "w", encoding="utf-8", newline="") as f:
            f.write(chrome_trace)
    return json.loads(text)


def sweep_csv(sweep, jobs=None, progress=None, shard=None):
    """The CSV text `poseidon sweep SWEEP -j JOBS [--shard I/N]` writes (see sweep())."""
    if jobs is None:
        jobs = os.cpu_count() or 1
    return _ext.sweep_csv(_frames.path(sweep), int(jobs), shard or "", progress)


def sweep(sweep, jobs=None, progress=None, shard=None):  # noqa: F811 -- the argument's name
    """Simulates every point of a sweep; returns its CSV (`poseidon sweep SWEEP -o x.csv`) as a
    pandas DataFrame, read by pandas.read_csv: the sweep's axes (columns named by their dotted
    scenario path, or `variant`), then the result columns, last `error` (NaN where the point
    succeeded).

    jobs: threads (default: every core, as the CLI); the values do not depend on it.
    progress: progress(done, total) after each point computed; points whose inputs are
        identical are computed once and counted once. Called with the GIL held, one call at a
        time; an exception it raises is re-raised when the sweep has ended.
    shard: "I/N" runs that block of the points only (the shard line is not part of the frame).
    """
    import pandas

    text = sweep_csv(sweep, jobs, progress, shard)
    return pandas.read_csv(io.StringIO(text), skiprows=1 if shard else 0)


def plan(scenario=None, set=None):  # noqa: A002
    """SACP's per-layer plan for a scenario, as `poseidon plan SCENARIO --set K=V` reports it.

    Returns a dict: scenario, model, workers, servers, placement, batch_per_worker, scheme,
    layer_overrides, gradient_wire (protocol.gradient_wire: with fp16 or bf16 the bytes count
    pushes, factors and ring steps at 2 bytes a value, pulls at 4), sfb_thresholds ({fc layer: 2MN/(K(M+N))}), layers (a DataFrame: name,
    type, shape, params, ps_bytes, sfb_bytes, allreduce_bytes -- per iteration through the
    busiest NIC, NaN where the scheme does not apply -- choice, reason), total_bytes,
    all_ps_bytes, ratio_to_all_ps, layers_by_scheme, compute_source, estimated_iteration_ms
    ({"plan": ms, "all ps": ms, ...}), and baseline: None, or for a scenario with
    protocol.baseline a dict of kind (ddp | horovod), allreduce_algorithm, nccl_processes,
    nccl_machines, nccl_ring_from_bytes (the power of two from which NCCL's model keeps to the
    ring: 0 on one machine, -1 never) and collectives (a DataFrame of DDP's buckets from
    iteration 1: first_layer, last_layer, tensors, bytes, nccl_ring_us, nccl_tree_us -- NCCL's
    price of each, NaN for the tree on one machine -- and the algorithm each runs; empty for
    Horovod, whose fusions depend on readiness).
    """
    info = _ext.plan(_scenario(scenario), _frames.overrides(set))
    info["layers"] = _frames.frame(info["layers"], PLAN_COLUMNS)
    if info["baseline"] is not None:
        info["baseline"]["collectives"] = _frames.frame(info["baseline"]["collectives"],
                                                        COLLECTIVE_COLUMNS)
    return info


def plan_text(scenario=None, set=None):  # noqa: A002
    """The text `poseidon plan SCENARIO --set K=V` prints."""
    return _ext.plan_text(_scenario(scenario), _frames.overrides(set))
