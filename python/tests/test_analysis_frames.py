"""analysis/ from a notebook: the plot scripts take the DataFrame of poseidon.sweep() (and the
dict of poseidon.simulate()) as well as the CLI's files, and draw the same figure from either."""

import importlib.util
import json
import os
import subprocess
import sys

import pandas
import pytest

import poseidon

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "analysis"))
SWEEP = os.path.join(ROOT, "scenarios", "sweeps", "demo_sweep.yaml")

import poseidon_csv  # noqa: E402

needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib is not installed")


@pytest.fixture(scope="module")
def sweep_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    csv = folder / "sweep.csv"
    csv.write_text(poseidon.sweep_csv(SWEEP, jobs=2))
    return csv, pandas.read_csv(csv)


def test_read_frame_equals_read_sweep(sweep_files):
    csv, frame = sweep_files
    from_csv = poseidon_csv.read_sweep(str(csv))
    for source in (frame, poseidon.sweep(SWEEP, jobs=2)):
        from_frame = poseidon_csv.read(source)
        assert from_frame.columns == from_csv.columns
        assert from_frame.axes == from_csv.axes
        assert [dict(r) for r in from_frame.rows] == [dict(r) for r in from_csv.rows]
        assert [r.line for r in from_frame.rows] == [r.line for r in from_csv.rows]


def test_read_frame_skips_failed_points(sweep_files):
    _, frame = sweep_files
    frame = frame.copy()
    frame.loc[3, "error"] = "deadlock: who waits for what"
    warnings = []
    sweep = poseidon_csv.read(frame, warn=warnings.append)
    assert len(sweep.rows) == len(frame) - 1 and sweep.skipped == 1
    assert warnings == ["<DataFrame>:5: skipping failed point cluster.workers=2, "
                        "cluster.network.bandwidth_gbps=1: deadlock: who waits for what"]


@needs_matplotlib
@pytest.mark.parametrize("script", ["plot_speedup", "plot_bandwidth", "plot_breakdown"])
def test_plot_of_a_frame_is_the_cli_figure(sweep_files, tmp_path, script):
    csv, _ = sweep_files
    module = __import__(script)
    paths = module.plot(poseidon.sweep(SWEEP, jobs=2), str(tmp_path / "frame"))
    assert [os.path.basename(p) for p in paths] == ["frame.png", "frame.svg"]
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "analysis", script + ".py"), str(csv),
                    "-o", str(tmp_path / "cli")], check=True, capture_output=True)
    for ext in ("png", "svg"):
        frame = (tmp_path / ("frame." + ext)).read_bytes()
        assert frame == (tmp_path / ("cli." + ext)).read_bytes()


@needs_matplotlib
def test_plot_layers_of_a_run_is_the_cli_figure(tmp_path):
    import plot_breakdown

    run = poseidon.simulate(os.path.join(ROOT, "scenarios", "demo.yaml"))
    (tmp_path / "run.json").write_text(json.dumps(run))
    plot_breakdown.plot_layers(run, str(tmp_path / "dict"))
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "analysis", "plot_breakdown.py"),
                    "--layers", str(tmp_path / "run.json"), "-o", str(tmp_path / "cli")],
                   check=True, capture_output=True)
    for ext in ("png", "svg"):
        from_dict = (tmp_path / ("dict." + ext)).read_bytes()
        assert from_dict == (tmp_path / ("cli." + ext)).read_bytes()
