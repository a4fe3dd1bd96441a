"""The Python module against the command-line program: same scenario, same results.

    PYTHONPATH=build/python POSEIDON_CLI=build/apps/poseidon/poseidon \
        /usr/bin/python3 -m pytest -q python/tests        # from the repository root

(ctest runs it as `python_module`, with both variables pointing into its build folder.) Each
test runs the CLI as a user would and compares its output with the module's result: the JSON
of `simulate --format json` field for field, the CSV of `sweep` as pandas reads it, the text of
`plan` and `models`, and the error message of a bad scenario (file:line:column).
"""

import io
import json
import os
import subprocess

import pandas
import pytest

import poseidon

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("POSEIDON_CLI") or os.path.join(ROOT, "build", "apps", "poseidon", "poseidon")
DEMO = "scenarios/demo.yaml"
SWEEP = "scenarios/sweeps/demo_sweep.yaml"  # 12 points of CIFAR-10 quick, under a second
PLAN = "scenarios/experiments/paper2015_alexnet.yaml"

needs_cli = pytest.mark.skipif(not os.access(CLI, os.X_OK),
                               reason="no poseidon binary at %s (set POSEIDON_CLI)" % CLI)


@pytest.fixture(autouse=True)
def repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the scenarios' documented paths are relative to the root


def cli(*args, check=True):
    p = subprocess.run([CLI, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError("poseidon %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    return p


def bad_scenario(tmp_path):
    """A copy of the demo scenario with an unknown key on line 3 (column 1) and the model found
    in the built-in library."""
    text = open(DEMO, encoding="utf-8").read().replace(
        "schema_version: 1\n", "schema_version: 1\nbatch_per_wroker: 50\n", 1)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = text.splitlines().index("batch_per_wroker: 50") + 1
    return str(path), line


# --- simulate ---------------------------------------------------------------------------------

@needs_cli
@pytest.mark.parametrize("overrides", [[], ["cluster.workers=4", "protocol.scheme=auto"]])
def test_simulate_equals_cli_json(overrides):
    args = ["simulate", DEMO, "--format", "json"]
    for o in overrides:
        args += ["--set", o]
    expected = json.loads(cli(*args).stdout)
    got = poseidon.simulate(DEMO, set=overrides)
    assert got == expected
    assert got["iteration_ms"] > 0


def test_set_mapping_is_the_cli_set():
    by_dict = poseidon.simulate(DEMO, set={"cluster.workers": 4, "protocol.dwbp": False})
    by_list = poseidon.simulate(DEMO, set=["cluster.workers=4", "protocol.dwbp=false"])
    assert by_dict == by_list
    assert by_dict["workers"] == 4


@needs_cli
def test_simulate_defaults_and_no_baseline():
    assert poseidon.simulate() == json.loads(cli("simulate", "--format", "json").stdout)
    got = poseidon.simulate(DEMO, baseline=False)
    assert got == json.loads(cli("simulate", DEMO, "--format", "json", "--no-baseline").stdout)


def test_simulate_writes_the_trace(tmp_path):
    out = tmp_path / "trace.json"
    poseidon.simulate(DEMO, set={"iterations": 3}, trace=out)
    assert "traceEvents" in json.loads(out.read_text())


def test_simulate_progress_fractions():
    seen = []
    poseidon.simulate(DEMO, progress=seen.append)
    assert all(0 <= f <= 1 for f in seen)
    assert seen == sorted(seen)


# --- sweep ------------------------------------------------------------------------------------

@needs_cli
def test_sweep_equals_cli_csv(tmp_path):
    out = tmp_path / "sweep.csv"
    cli("sweep", SWEEP, "-j", "2", "-o", str(out))
    expected = pandas.read_csv(out)
    got = poseidon.sweep(SWEEP, jobs=2)
    pandas.testing.assert_frame_equal(got, expected)
    assert list(got.columns[:2]) == ["cluster.workers", "cluster.network.bandwidth_gbps"]
    assert poseidon.sweep_csv(SWEEP, jobs=1) == out.read_text()


def test_sweep_progress_is_called_once_per_point():
    calls = []
    df = poseidon.sweep(SWEEP, jobs=2, progress=lambda done, total: calls.append((done, total)))
    total = len(df)  # the demo sweep's 12 points are all distinct
    assert calls == [(i, total) for i in range(1, total + 1)]


def test_sweep_progress_exception_is_raised_after_the_sweep():
    calls = []

    def progress(done, total):
        calls.append(done)
        raise KeyError("stop")

    with pytest.raises(KeyError, match="stop"):
        poseidon.sweep(SWEEP, jobs=2, progress=progress)
    assert calls == [1]  # not called again once it failed


@needs_cli
def test_sweep_shard_equals_cli_shard():
    expected = cli("sweep", SWEEP, "-j", "1", "--shard", "1/3").stdout
    assert poseidon.sweep_csv(SWEEP, jobs=1, shard="1/3") == expected
    df = poseidon.sweep(SWEEP, jobs=1, shard="1/3")
    pandas.testing.assert_frame_equal(df, pandas.read_csv(io.StringIO(expected), skiprows=1))


# --- errors -----------------------------------------------------------------------------------

@needs_cli
def test_config_error_has_the_cli_message(tmp_path):
    path, line = bad_scenario(tmp_path)
    p = cli("simulate", path, check=False)
    assert p.returncode == 2
    with pytest.raises(poseidon.ConfigError) as e:
        poseidon.simulate(path)
    assert isinstance(e.value, ValueError)
    message = str(e.value)
    assert message.startswith("%s:%d:1: error: " % (path, line))
    assert p.stderr == "poseidon: %s\n" % message


@needs_cli
def test_bad_override_and_bad_sweep_raise_config_error(tmp_path):
    with pytest.raises(poseidon.ConfigError) as e:
        poseidon.simulate(DEMO, set={"cluster.workers": "many"})
    p = cli("simulate", DEMO, "--set", "cluster.workers=many", check=False)
    assert p.returncode == 2 and p.stderr == "poseidon: %s\n" % e.value
    sweep = tmp_path / "s.yaml"
    sweep.write_text("schema_version: 1\nname: s\nbase: %s\nvary:\n  cluster.wrokers: [1, 2]\n"
                     % os.path.abspath(DEMO))
    with pytest.raises(poseidon.ConfigError) as e:
        poseidon.sweep(sweep)
    assert "unknown key 'wrokers'" in str(e.value)
    p = cli("sweep", str(sweep), check=False)
    assert p.returncode == 2 and p.stderr == "poseidon: %s\n" % e.value
    with pytest.raises(poseidon.ConfigError):
        poseidon.sweep(SWEEP, shard="3/3")


@needs_cli
def test_set_of_either_machines_name_replaces_the_files(tmp_path):
    """`machines` replaced `workers` (the demo says `machines:`): `--set` of either name replaces
    the file's under either name; the file giving both, or `--set` of both, is an error."""
    text = open(DEMO, encoding="utf-8").read()
    assert "\n  machines: 8\n" in text
    older = tmp_path / "older.yaml"
    older.write_text(text.replace("\n  machines: 8\n", "\n  workers: 8\n"))
    expected = json.loads(cli("simulate", DEMO, "--format", "json").stdout)
    assert json.loads(cli("simulate", str(older), "--format", "json").stdout) == expected
    four = json.loads(cli("simulate", DEMO, "--format", "json", "--set", "cluster.machines=4").stdout)
    assert four["workers"] == 4 and four != expected
    for path in (DEMO, str(older)):
        for key in ("cluster.machines", "cluster.workers"):
            p = cli("simulate", path, "--format", "json", "--set", key + "=4")
            assert json.loads(p.stdout) == four, (path, key)
            assert poseidon.simulate(path, set={key: 4}) == four
    p = cli("simulate", str(older), "--set", "cluster.machines=4", "--set", "cluster.workers=2",
            check=False)
    assert p.returncode == 2
    assert p.stderr == ("poseidon: --set cluster.workers=2: error: give 'machines' or its older "
                        "name 'workers', not both (--set cluster.machines=4 gave it)\n")
    both = tmp_path / "both.yaml"
    both.write_text(text.replace("\n  machines: 8\n", "\n  machines: 8\n  workers: 8\n"))
    line = both.read_text().splitlines().index("  machines: 8") + 1
    for sets in ([], ["--set", "cluster.workers=4"]):
        p = cli("simulate", str(both), *sets, check=False)
        assert p.returncode == 2
        assert p.stderr.startswith("poseidon: %s:%d:13: error: give 'machines' or its older name "
                                   "'workers', not both" % (both, line)), p.stderr


def test_model_error_is_a_config_error(tmp_path):
    model = tmp_path / "m.yaml"
    model.write_text("schema_version: 1\nname: m\ninput: {c: 1, h: 4, w: 4}\nnum_classes: 2\n"
                     "layers:\n  - {name: fc, type: fc, outputs: 2, input: nowhere}\n")
    with pytest.raises(poseidon.ConfigError):
        poseidon.models.show(str(model))


# --- plan and models --------------------------------------------------------------------------

@needs_cli
def test_plan_equals_cli():
    overrides = ["cluster.network.bandwidth_gbps=1"]
    text = cli("plan", PLAN, "--set", overrides[0]).stdout
    assert poseidon.plan_text(PLAN, set=overrides) == text
    plan = poseidon.plan(PLAN, set=overrides)
    layers = plan["layers"]
    rows = [line.split() for line in text.splitlines()[3:3 + len(layers)]]
    assert list(layers["name"]) == [r[0] for r in rows]
    assert list(layers["choice"]) == [r[7] for r in rows]
    assert "plan %.3f MB vs all-ps %.3f MB" % (plan["total_bytes"] / 1e6,
                                               plan["all_ps_bytes"] / 1e6) in text
    assert plan["total_bytes"] == sum(
        row[row["choice"] + "_bytes"] for _, row in layers.iterrows())
    assert "plan %.3f" % plan["estimated_iteration_ms"]["plan"] in text.splitlines()[-1]


@needs_cli
def test_plan_lists_a_baselines_buckets_with_nccls_choice():
    """protocol.baseline ddp with allreduce_algorithm auto: DDP's buckets, each with NCCL's price
    of ring and tree and the cheaper of the two as the algorithm it runs, as the CLI prints."""
    overrides = ["protocol.baseline=ddp", "protocol.scheme=null", "protocol.allreduce_algorithm=auto"]
    plan = poseidon.plan(PLAN, set=overrides)
    assert poseidon.plan(PLAN)["baseline"] is None
    b = plan["baseline"]
    assert (b["kind"], b["allreduce_algorithm"]) == ("ddp", "auto")
    assert set(plan["layers"]["choice"]) == {"allreduce"}
    buckets = b["collectives"]
    assert len(buckets) > 0
    for _, row in buckets.iterrows():
        cheaper = "tree" if row["nccl_tree_us"] <= row["nccl_ring_us"] else "ring"
        assert row["algorithm"] == cheaper, row
    assert buckets["bytes"].sum() == sum(plan["layers"]["params"]) * 4
    text = cli("plan", PLAN, *[x for o in overrides for x in ("--set", o)]).stdout
    assert text == poseidon.plan_text(PLAN, set=overrides)
    assert "DDP's buckets from iteration 1 on" in text


@needs_cli
@pytest.mark.parametrize("overrides", [[], ["cluster.placement=dedicated", "cluster.servers=3"]])
def test_plan_prices_a_16bit_gradient_wire(overrides):
    """protocol.gradient_wire fp16: a PS push is half of fp32's, its pull the same (fp32: push =
    pull = half the PS bytes), a ring step half, as the simulator prices the messages; the
    paper's rule chooses as in fp32; the header names the wire, fp32's does not."""
    base = overrides + ["protocol.scheme=paper"]
    fp32 = poseidon.plan(PLAN, set=base)
    fp16 = poseidon.plan(PLAN, set=base + ["protocol.gradient_wire=fp16"])
    assert (fp32["gradient_wire"], fp16["gradient_wire"]) == ("fp32", "fp16")
    for (_, a), (_, b) in zip(fp32["layers"].iterrows(), fp16["layers"].iterrows()):
        pull = a["ps_bytes"] / 2
        assert abs((b["ps_bytes"] - pull) - pull / 2) <= 1, a["name"]
        assert abs(b["allreduce_bytes"] - a["allreduce_bytes"] / 2) <= 1, a["name"]
        if a["type"] == "fc":
            assert b["sfb_bytes"] < a["sfb_bytes"], a["name"]
        assert a["choice"] == b["choice"], a["name"]
    assert fp16["total_bytes"] < fp32["total_bytes"]
    text = cli("plan", PLAN, *[x for o in base + ["protocol.gradient_wire=fp16"]
                               for x in ("--set", o)]).stdout
    assert text == poseidon.plan_text(PLAN, set=base + ["protocol.gradient_wire=fp16"])
    assert "gradients on the wire as fp16 (protocol.gradient_wire)" in text.splitlines()[1]
    assert "gradient_wire" not in poseidon.plan_text(PLAN, set=base).splitlines()[1]


@needs_cli
def test_models_equal_cli():
    assert poseidon.models.list_text() == cli("models", "list").stdout
    assert poseidon.models.show_text("googlenet", without=["aux"]) == \
        cli("models", "show", "googlenet", "--without", "aux").stdout
    listed = poseidon.models.list()
    assert "alexnet" in set(listed["name"])
    alexnet = poseidon.models.show("alexnet")
    row = listed[listed["name"] == "alexnet"].iloc[0]
    assert alexnet["totals"]["parameters"] == row["parameters"] == alexnet["layers"]["params"].sum()
    assert alexnet["totals"]["layers"] == row["layers"] == len(alexnet["layers"])
    text = cli("models", "show", "alexnet").stdout
    for _, layer in alexnet["layers"].iterrows():
        assert " %s " % layer["output"] in text


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(poseidon.ConfigError) as e:
        poseidon.models.show("alexnte")
    assert "alexnet" in str(e.value)
