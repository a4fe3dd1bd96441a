"""poseidon.torch.DistributedDataParallel, live (`poseidon launch --torch`), against one process
on the same global batch and against torch.nn.parallel.DistributedDataParallel over gloo.

Each case runs python/tests/torch_job.py three ways (see its doc): float64 runs must give the
single process's per-step losses and final parameters to 1e-10, float32 runs to 1e-5. Needs the
built `poseidon` CLI (POSEIDON_CLI, set by the python_module ctest) and Debian's python3-torch.
"""

import glob
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed")

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "torch_job.py")
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "analysis"))
import poseidon_trace  # noqa: E402  (the analysis scripts' trace reader)
CLI = os.environ.get("POSEIDON_CLI", os.path.join(ROOT, "build", "apps", "poseidon", "poseidon"))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

pytestmark = pytest.mark.skipif(not os.path.exists(CLI), reason=f"no poseidon CLI at {CLI}")


def _scenario(tmp, workers, servers, scheme="ps"):
    path = os.path.join(tmp, "torch.yaml")
    with open(path, "w") as f:
        f.write("schema_version: 1\nname: torch-test\nmodel: torch\n"
                f"cluster: {{workers: {workers}, servers: {servers}, placement: colocated,\n"
                "  network: {model: flow, topology: star, bandwidth_gbps: 1, latency_us: 50}}\n"
                f"protocol: {{scheme: {scheme}, consistency: {{model: bsp}}}}\n")
    return path


def run_single(tmp, **kw):
    out = os.path.join(tmp, "single")
    subprocess.run([PY, JOB, "single", "--out", out] + _args(kw), check=True, timeout=120)
    return [torch.load(out + ".rank0.pt")]


def run_poseidon(tmp, workers=2, servers=2, extra_launch=(), expect_ok=True, **kw):
    out = os.path.join(tmp, "poseidon")
    logs = os.path.join(tmp, "logs")
    cmd = [CLI, "launch", "--torch", _scenario(tmp, workers, servers), "--log-dir", logs,
           *extra_launch, "--", PY, JOB, "poseidon", "--out", out] + _args(kw)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if not expect_ok:
        return r, logs
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}\n" + _logs(logs)
    return [torch.load(f) for f in sorted(glob.glob(out + ".rank*.pt"))]


def run_ddp(tmp, workers=2, **kw):
    """torch.nn.parallel.DistributedDataParallel over gloo, `workers` processes (torchrun's
    variables set by hand: Debian's torchrun 1.13 fails on Python 3.11)."""
    out = os.path.join(tmp, "ddp")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29400 + os.getpid() % 500),
               WORLD_SIZE=str(workers), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([PY, JOB, "ddp", "--out", out] + _args(kw),
                              env=dict(env, RANK=str(r))) for r in range(workers)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    return [torch.load(f) for f in sorted(glob.glob(out + ".rank*.pt"))]


def _args(kw):
    a = []
    for k, v in kw.items():
        if v is True:
            a.append("--" + k)
        else:
            a += ["--" + k, str(v)]
    return a


def _logs(folder):
    text = ""
    for f in sorted(glob.glob(os.path.join(folder, "*.log"))):
        with open(f) as fh:
            text += f"--- {f}\n" + fh.read()[-3000:]
    return text


def assert_same(ref, runs, tol):
    """Per-step global losses (the workers' mean) and every worker's final parameters."""
    (single,) = ref
    for step, want in enumerate(single["losses"]):
        got = sum(r["losses"][step] for r in runs) / len(runs)
        assert abs(got - want) <= tol * max(1.0, abs(want)), f"step {step}: {got} vs {want}"
    for i, r in enumerate(runs):
        for k, v in single["state"].items():
            if not v.is_floating_point():
                continue
            d = (r["state"][k] - v).abs().max().item()
            assert d <= tol, f"worker {i}: {k} differs by {d}"


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("scheme", ["ps", "sfb", "allreduce", "auto"])
def test_bsp_float64_is_the_single_process(tmp_path, model, scheme):
    tmp = str(tmp_path)
    ref = run_single(tmp, model=model)
    runs = run_poseidon(tmp, workers=2, servers=2, model=model, scheme=scheme)
    assert len(runs) == 2
    assert_same(ref, runs, 1e-10)


def test_bsp_float32_three_workers(tmp_path):
    tmp = str(tmp_path)
    ref = run_single(tmp, model="cnn", dtype="float32")
    # A --set right before '--' (as bench/torch_compare.py gives the emulated rate): the words
    # after '--' stay the script's (CLI11 alone would end --set there and parse them as ours).
    runs = run_poseidon(tmp, workers=3, servers=2, model="cnn", dtype="float32", scheme="auto",
                        extra_launch=("--set", "cluster.network.bandwidth_gbps=0.1"))
    assert_same(ref, runs, 1e-5)


def test_adam_sfb(tmp_path):
    tmp = str(tmp_path)
    ref = run_single(tmp, model="mlp", optimizer="adam", lr=0.01)
    runs = run_poseidon(tmp, model="mlp", optimizer="adam", lr=0.01, scheme="sfb")
    assert_same(ref, runs, 1e-10)


def test_tied_frozen_unused_residual_3d_sfb_and_no_sync(tmp_path):
    """An embedding tied to the output layer, a frozen module, an unused one, a residual block
    of linear layers on token sequences (SFB on 3-D inputs, past min(M, N) rows: the identity
    form), two micro-batches per step through no_sync(): all as one process computes them, and
    as torch's DDP over gloo does."""
    tmp = str(tmp_path)
    kw = dict(model="features", accumulate=2)
    ref = run_single(tmp, **kw)
    runs = run_poseidon(tmp, scheme="sfb", extra_launch=("--decisions-dir",
                                                         os.path.join(tmp, "decisions")), **kw)
    assert_same(ref, runs, 1e-10)
    assert_same(ref, run_ddp(tmp, **kw), 1e-10)
    with open(os.path.join(tmp, "decisions", "rank-1.txt")) as f:
        decisions = f.read()
    assert "send factors to 2 layer" in decisions  # SFB did run
    # The unused and frozen parameters: no gradient, untouched (weight decay would move them).
    state = runs[0]["state"]
    assert torch.equal(state["unused.weight"], ref[0]["state"]["unused.weight"])


def test_ddp_gloo_matches_too(tmp_path):
    tmp = str(tmp_path)
    assert_same(run_single(tmp, model="cnn"), run_ddp(tmp, model="cnn"), 1e-10)


def test_ssp_keeps_its_bound_and_converges(tmp_path):
    """SSP(1) with DistributedOptimizer: from the workers' traces, no iteration c began before
    every layer held the mean gradients of clocks < c - 1; the loss falls."""
    tmp = str(tmp_path)
    trace = os.path.join(tmp, "trace")
    runs = run_poseidon(tmp, workers=3, servers=2, model="mlp", steps=30, lr=0.1,
                        consistency="ssp:1", scheme="ps", extra_launch=("--trace-dir", trace))
    for rank in (1, 2, 3):
        events = poseidon_trace.read(os.path.join(trace, f"rank-{rank}.json"))
        begins = {e.iteration: e.ts for e in events if e.kind == "iteration"}
        synced = [(e.ts, e.name[len("synced "):], e.clock) for e in events if e.kind == "synced"]
        layers = {name for _, name, _ in synced}
        # (A 31st may have begun: the core asks for the next clock before the loop ends.)
        assert set(range(30)) <= set(begins) and layers
        for c, ts in begins.items():
            for layer in layers:
                have = max([k for t, n, k in synced if n == layer and t <= ts], default=-1)
                assert have >= c - 2, f"worker {rank} began clock {c} with {layer} at {have}"
    first = sum(r["losses"][0] for r in runs) / 3
    last = sum(sum(r["losses"][-5:]) / 5 for r in runs) / 3
    assert last < 0.8 * first, (first, last)


def test_a_worker_with_another_model_fails_in_seconds_naming_the_module(tmp_path):
    tmp = str(tmp_path)
    r, logs = run_poseidon(tmp, model="mlp", different=True, expect_ok=False)
    assert r.returncode != 0
    text = _logs(logs)
    assert "built different models at module 'fc2'" in text, text
    assert "worker 0" in text and "worker 1" in text


def test_workers_whose_loops_run_different_lengths_fail_naming_both(tmp_path):
    r, logs = run_poseidon(str(tmp_path), model="mlp", longer=True, expect_ok=False)
    assert r.returncode != 0
    text = _logs(logs)
    assert "worker 0 ended the job after 6 iterations, but worker 1 has run 7" in text, text
    assert "JobError" in text  # worker 1's script hears it (it does not hang)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="this PyTorch has no CUDA device")
@pytest.mark.parametrize("scheme", ["ps", "sfb"])
def test_cuda_parameters_staged_through_the_host(tmp_path, scheme):
    """CUDA gradients go to the host on a side stream (_staging.py) and the mean comes back:
    still the one-process result (scripts/gpu-check runs it where PyTorch has CUDA)."""
    tmp = str(tmp_path)
    ref = run_single(tmp, model="cnn", device="cuda")
    runs = run_poseidon(tmp, model="cnn", device="cuda", scheme=scheme)
    assert_same(ref, runs, 1e-10)


def test_a_weight_used_outside_its_module_goes_by_ps_not_sfb(tmp_path):
    """The fc weight is also applied with F.linear: its factors would miss that part, so worker 0
    plans it on PS (with a warning naming it) and the result is still one process's."""
    tmp = str(tmp_path)
    ref = run_single(tmp, model="functional")
    runs = run_poseidon(tmp, model="functional", scheme="sfb")
    assert_same(ref, runs, 1e-10)
    text = _logs(os.path.join(tmp, "logs"))
    assert "module 'fc': its weight's gradient is not the sum of G^T X" in text, text


def test_batch_norm_buffers_as_ddp_broadcasts_them(tmp_path):
    """Batch-norm statistics: under BSP worker 0's buffers reach every worker before each forward
    pass, as DDP's broadcast_buffers does; parameters and running statistics match DDP's."""
    tmp = str(tmp_path)
    runs = run_poseidon(tmp, model="bn", scheme="ps")
    ddp = run_ddp(tmp, model="bn")
    assert len(runs) == len(ddp) == 2
    for r, d in zip(runs, ddp):  # worker r's buffers: worker 0's, updated by r's last batch
        for k, v in d["state"].items():
            if v.is_floating_point():
                assert (r["state"][k] - v).abs().max().item() <= 1e-10, k
    assert "bn.running_mean" in runs[0]["state"]


def test_asp_converges(tmp_path):
    """ASP: every answer is the gradients applied since this worker's last one, over P; the
    workers' SGD steps on them as they come, and the loss falls."""
    runs = run_poseidon(str(tmp_path), workers=3, servers=2, model="mlp", steps=30, lr=0.1,
                        consistency="asp", scheme="ps")
    first = sum(r["losses"][0] for r in runs) / 3
    last = sum(sum(r["losses"][-5:]) / 5 for r in runs) / 3
    assert last < 0.8 * first, (first, last)


def test_a_script_that_fails_mid_iteration_ends_the_job_naming_it(tmp_path):
    """Worker 2's script raises between its forward and backward pass: it leaves the job (exit
    code 1, its error in its log) instead of waiting at exit for an iteration it will never
    finish; every other process ends having lost a peer (3), and launch names the cause."""
    r, logs = run_poseidon(str(tmp_path), model="mlp", expect_ok=False, **{"fail-at": 3})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "worker 1 (rank 2) exited with code 1; stopping the others" in r.stderr, r.stderr
    text = _logs(logs)
    assert "worker 2 fails in step 3 on purpose" in text, text
    assert "the training script ended in the middle of iteration 3" in text, text


def test_the_command_lines_that_cannot_start_a_torch_job_say_why(tmp_path):
    sc = _scenario(str(tmp_path), 2, 1)
    cases = [
        ([CLI, "simulate", os.path.join(ROOT, "scenarios", "demo.yaml"), "--", PY, "x.py"],
         "only 'poseidon launch --torch' and 'poseidon node' run a command given after '--'"),
        ([CLI, "launch", "--torch", sc, "--set", "cluster.workers=2"],
         "--torch needs the workers' command after '--'"),
        ([CLI, "launch", sc, "--", PY, "x.py", "--lr", "0.1"], "add --torch"),
    ]
    for cmd, why in cases:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                           cwd=str(tmp_path))
        assert r.returncode != 0 and why in r.stderr, f"{cmd}: {r.returncode}\n{r.stderr}"


def test_ssp0_steps_on_the_means_as_one_process_does(tmp_path):
    """SSP(0) through DistributedOptimizer (each clock's mean handed to the optimizer as numpy
    views of the worker's buffer, not written over .grad) is BSP: one process's trajectory, with
    a CNN (several blobs per module, the table's order not the job's) and Adam's state."""
    tmp = str(tmp_path)
    ref = run_single(tmp, model="cnn", optimizer="adam", lr=0.01)
    runs = run_poseidon(tmp, workers=2, servers=2, model="cnn", optimizer="adam", lr=0.01,
                        scheme="auto", consistency="ssp:0")
    assert_same(ref, runs, 1e-10)


@pytest.mark.parametrize("scheme,wire,how", [("sfb", "fp16", "keyword"),
                                             ("allreduce", "bf16", "keyword"),
                                             ("ps", "fp16", "scenario")])
def test_a_16bit_gradient_wire_stays_close_and_keeps_replicas_identical(tmp_path, scheme, wire,
                                                                        how):
    """protocol.gradient_wire: the gradients travel as 16-bit values (the means the optimizers
    step on come back in fp32); every worker keeps what it sends as its peers decode it, so the
    replicas stay bit-identical, within the format's rounding of the single process. Asked for by
    DistributedDataParallel(gradient_wire=...) or by the scenario's key (--set)."""
    tmp = str(tmp_path)
    ref = run_single(tmp, model="mlp", dtype="float32")
    if how == "keyword":
        runs = run_poseidon(tmp, model="mlp", dtype="float32", scheme=scheme,
                            **{"gradient-wire": wire})
    else:
        runs = run_poseidon(tmp, model="mlp", dtype="float32", scheme=scheme,
                            extra_launch=("--set", f"protocol.gradient_wire={wire}"))
    assert len(runs) == 2
    assert [r["gradient_wire"] for r in runs] == [wire, wire]
    assert_same(ref, runs, 1e-2)
    (single,) = ref
    rounded = 0.0
    for k, v in runs[0]["state"].items():
        if v.is_floating_point():
            assert torch.equal(v, runs[1]["state"][k]), f"{k}: the replicas differ"
            rounded = max(rounded, (v - single["state"][k]).abs().max().item())
    assert rounded > 1e-6, "nothing was rounded"


def test_a_16bit_gradient_wire_refuses_float64_values(tmp_path):
    r, logs = run_poseidon(str(tmp_path), model="mlp", scheme="ps", expect_ok=False,
                           extra_launch=("--set", "protocol.gradient_wire=fp16"))
    assert r.returncode != 0
    text = r.stdout + r.stderr + _logs(logs)
    assert "protocol.gradient_wire fp16 sends gradients as 16-bit values, which needs fp32 values" \
        in text, text


def test_the_gradient_wire_keyword_refuses_float64_values(tmp_path):
    r, logs = run_poseidon(str(tmp_path), model="mlp", scheme="ps", expect_ok=False,
                           **{"gradient-wire": "bf16"})
    assert r.returncode != 0
    text = r.stdout + r.stderr + _logs(logs)
    assert ("ValueError: gradient_wire='bf16' sends gradients as 16-bit values, which needs "
            "float32 parameters; this model's are float64") in text, text


def test_the_gradient_wire_keyword_overrides_the_scenarios(tmp_path):
    """The scenario says fp16 (every process of the job loaded it so, the shards too); the
    keyword says fp32, and worker 1's job tells every process: float64 runs, exactly."""
    tmp = str(tmp_path)
    ref = run_single(tmp, model="mlp")
    runs = run_poseidon(tmp, model="mlp", scheme="ps", **{"gradient-wire": "fp32"},
                        extra_launch=("--set", "protocol.gradient_wire=fp16"))
    assert [r["gradient_wire"] for r in runs] == ["fp32", "fp32"]
    assert_same(ref, runs, 1e-10)


@pytest.mark.parametrize("wire", ["fp8", "FP64", 16, ""])
def test_an_unknown_gradient_wire_is_one_clear_error(wire):
    """Before anything else, without a job: the value and the allowed ones."""
    pt = pytest.importorskip("poseidon.torch")
    with pytest.raises(ValueError) as e:
        pt.DistributedDataParallel(torch.nn.Linear(2, 2), gradient_wire=wire)
    assert str(e.value) == f"gradient_wire={wire!r}: expected 'fp32', 'fp16' or 'bf16'"
