"""Tests for analysis/: the sweep-CSV reader, the series grouping, and each plotting script run as
a user runs it (a subprocess of /usr/bin/python3, which has matplotlib).

    /usr/bin/python3 -m unittest discover -s tests/analysis -t .     # from the repository root
    /usr/bin/python3 tests/analysis/test_plots.py

The inputs are small CSV and JSON files written here, in the format of `poseidon sweep` and
`poseidon simulate --format json`, so the tests need no build. What is drawn is checked through
the scripts' data functions, not by looking at pixels; the images are checked to exist, to be
PNG / SVG, and to be byte-identical across two runs.
"""

import contextlib
import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANALYSIS = os.path.join(ROOT, "analysis")
sys.path.insert(0, ANALYSIS)

# Matplotlib lives in Debian's Python; the one first on PATH may lack it.
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

import poseidon_csv  # noqa: E402

HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None  # in this interpreter

RESULT_COLUMNS = (
    "name,model,workers,servers,batch_per_worker,iteration_ms,iteration_std_ms,iteration_min_ms,"
    "iteration_max_ms,throughput_img_s,speedup,single_node_iteration_ms,compute_ms,"
    "communication_ms,wait_ms,network_gb_per_iteration,max_link_utilisation,error").split(",")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def result(workers, speedup, wait_ms=0.5, error=""):
    """The result columns of one point, as `poseidon sweep` writes them (values made up)."""
    iteration = 2.5 * workers / speedup
    return {"name": "demo", "model": "cifar10_quick", "workers": workers, "servers": workers,
            "batch_per_worker": 50, "iteration_ms": "%.6f" % iteration,
            "iteration_std_ms": "0.000000", "iteration_min_ms": "%.6f" % iteration,
            "iteration_max_ms": "%.6f" % iteration, "throughput_img_s": "1000.000",
            "speedup": "%.4f" % speedup, "single_node_iteration_ms": "2.500000",
            "compute_ms": "2.490000", "communication_ms": "%.6f" % (wait_ms * 2),
            "wait_ms": "%.6f" % wait_ms, "network_gb_per_iteration": "0.001000",
            "max_link_utilisation": "0.5000", "error": error}


def write_csv(path, axes, points):
    """points: (axis values, result dict) pairs. Quotes only where needed, as csv does."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(list(axes) + RESULT_COLUMNS)
        for values, res in points:
            w.writerow(list(values) + [res[c] for c in RESULT_COLUMNS])


def variant_csv(path):
    """Three variants x three cluster sizes, written out of x order; one failed point."""
    points = []
    for variant, efficiency in (("ps", 0.9), ("sfb, hybrid", 0.95), ("no-dwbp", 0.6)):
        for workers in (4, 1, 2):
            points.append(((variant, workers), result(workers, 1 + (workers - 1) * efficiency)))
    points.append((("ps", 8), result(8, 1, error="deadlock: worker 3 waits\n  for shard 1")))
    write_csv(path, ("variant", "cluster.workers"), points)


def two_axis_csv(path):
    """cluster.workers x cluster.network.bandwidth_gbps, the shape of the demo sweep."""
    points = []
    for workers in (1, 2, 4, 8):
        for bw in (1, 10, 40):
            speedup = workers * min(1.0, bw / (10.0 * workers ** 0.5))
            points.append(((workers, bw), result(workers, max(speedup, 0.5), wait_ms=8.0 / bw)))
    write_csv(path, ("cluster.workers", "cluster.network.bandwidth_gbps"), points)


def run_script(script, *args):
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([PYTHON, os.path.join(ANALYSIS, script)] + list(args),
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="poseidon-analysis-")
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, text):
        """Writes text to the file `name` in the test's folder; returns its path."""
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def assert_refused(self, script, args, message):
        """The script exits 2 and names the problem on stderr."""
        r = run_script(script, *args)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn(message, r.stderr)


class ReadSweepTest(TempDirTest):
    def test_converts_numbers_detects_axes_and_skips_failed_points(self):
        variant_csv(self.path("v.csv"))
        warnings = []
        sweep = poseidon_csv.read_sweep(self.path("v.csv"), warn=warnings.append)
        self.assertEqual(sweep.axes, ["variant", "cluster.workers"])
        self.assertEqual(len(sweep.rows), 9)
        self.assertEqual(sweep.skipped, 1)
        self.assertEqual(len(warnings), 1)
        self.assertIn("deadlock: worker 3 waits for shard 1", warnings[0])
        self.assertIn("v.csv:11:", warnings[0])  # the failed record's first line
        self.assertIn("cluster.workers=8", warnings[0])
        row = sweep.rows[0]
        self.assertIsInstance(row["cluster.workers"], int)
        self.assertIsInstance(row["speedup"], float)
        self.assertEqual(row["model"], "cifar10_quick")
        # A quoted value with a comma in it is one value.
        self.assertIn("sfb, hybrid", {r["variant"] for r in sweep.rows})

    def test_default_warning_goes_to_stderr(self):
        variant_csv(self.path("v.csv"))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            poseidon_csv.read_sweep(self.path("v.csv"))
        self.assertEqual(len(err.getvalue().splitlines()), 1)
        self.assertIn("warning", err.getvalue())

    def test_text_that_only_looks_numeric_stays_text(self):
        self.assertEqual(poseidon_csv.convert("10"), 10)
        self.assertEqual(poseidon_csv.convert("0.5"), 0.5)
        self.assertEqual(poseidon_csv.convert("1e3"), 1000.0)
        self.assertEqual(poseidon_csv.convert("nan"), "nan")
        self.assertEqual(poseidon_csv.convert("inf"), "inf")
        self.assertIsNone(poseidon_csv.convert(""))

    def test_missing_file_and_missing_column_are_one_line_value_errors(self):
        with self.assertRaises(ValueError) as e:
            poseidon_csv.read_sweep(self.path("nope.csv"))
        self.assertIn("nope.csv", str(e.exception))
        two_axis_csv(self.path("s.csv"))
        sweep = poseidon_csv.read_sweep(self.path("s.csv"))
        with self.assertRaises(ValueError) as e:
            sweep.require("speedup", "cluster.servers")
        message = str(e.exception)
        self.assertIn("column 'cluster.servers' not in %s" % self.path("s.csv"), message)
        self.assertIn("columns are: cluster.workers, cluster.network.bandwidth_gbps, name", message)

    def test_all_points_failed_is_an_error(self):
        write_csv(self.path("f.csv"), ("cluster.workers",),
                  [((2,), result(2, 1, error="boom")), ((4,), result(4, 1, error="boom"))])
        with self.assertRaises(ValueError) as e:
            poseidon_csv.read_sweep(self.path("f.csv"), warn=lambda m: None)
        self.assertIn("no successful points", str(e.exception))


class GroupSeriesTest(TempDirTest):
    def test_variants_become_series_labelled_by_variant_sorted_by_x(self):
        variant_csv(self.path("v.csv"))
        sweep = poseidon_csv.read_sweep(self.path("v.csv"), warn=lambda m: None)
        series = poseidon_csv.group_series(sweep, "cluster.workers")
        self.assertEqual([s.label for s in series], ["ps", "sfb, hybrid", "no-dwbp"])
        for s in series:
            self.assertEqual(s.numbers("cluster.workers"), [1.0, 2.0, 4.0])

    def test_several_other_axes_give_k_equals_v_labels(self):
        points = [((v, w, bw), result(w, w * 0.8)) for v in ("a", "b") for w in (2, 1)
                  for bw in (10, 40)]
        write_csv(self.path("m.csv"), ("variant", "cluster.workers",
                                       "cluster.network.bandwidth_gbps"), points)
        sweep = poseidon_csv.read_sweep(self.path("m.csv"))
        labels = [s.label for s in poseidon_csv.group_series(sweep, "cluster.workers")]
        self.assertEqual(labels, ["variant=a, cluster.network.bandwidth_gbps=10",
                                  "variant=a, cluster.network.bandwidth_gbps=40",
                                  "variant=b, cluster.network.bandwidth_gbps=10",
                                  "variant=b, cluster.network.bandwidth_gbps=40"])

    def test_single_axis_is_one_series_named_after_the_scenario(self):
        write_csv(self.path("one.csv"), ("cluster.workers",),
                  [((w,), result(w, w * 0.9)) for w in (8, 1, 4, 2)])
        sweep = poseidon_csv.read_sweep(self.path("one.csv"))
        (series,) = poseidon_csv.group_series(sweep, "cluster.workers")
        self.assertEqual(series.label, "demo")
        self.assertEqual(series.column("cluster.workers"), [1, 2, 4, 8])

    def test_unknown_x_names_the_column(self):
        two_axis_csv(self.path("s.csv"))
        sweep = poseidon_csv.read_sweep(self.path("s.csv"))
        with self.assertRaisesRegex(ValueError, "column 'variant' not in"):
            poseidon_csv.group_series(sweep, "variant")


@unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed for %s" % sys.executable)
class PlotDataTest(TempDirTest):
    """The data behind each figure, through the scripts' own functions."""

    def test_speedup_three_variants_give_three_series_and_the_ideal_line(self):
        import plot_speedup

        variant_csv(self.path("v.csv"))
        sweep = poseidon_csv.read_sweep(self.path("v.csv"), warn=lambda m: None)
        lines = plot_speedup.speedup_lines(sweep, "cluster.workers")
        self.assertEqual([line.label for line in lines],
                         ["ps", "sfb, hybrid", "no-dwbp", plot_speedup.IDEAL_LABEL])
        self.assertEqual([line.ideal for line in lines], [False, False, False, True])
        self.assertEqual(lines[-1].xs, [1.0, 2.0, 4.0])
        self.assertEqual(lines[-1].ys, [1.0, 2.0, 4.0])
        self.assertEqual(lines[0].ys, [1.0, 1.9, 3.7])
        self.assertEqual(len(plot_speedup.speedup_lines(sweep, "cluster.workers", False)), 3)

    def test_speedup_facets_and_two_sweeps_of_machines_of_eight_devices(self):
        import plot_speedup

        # Two sweeps with the same axes (workload, variant, machines), one stopping at 2.
        for name, variants, machines in (("a.csv", ("hybrid",), (1, 2, 4)),
                                         ("b.csv", ("ring",), (1, 2))):
            points = [((w, v, m), result(m, 8 * m * 0.9))
                      for w in ("ResNet-50", "BERT") for v in variants for m in machines]
            write_csv(self.path(name), ("workload", "variant", "cluster.machines"), points)
        merged = poseidon_csv.concat([poseidon_csv.read_sweep(self.path(n)) for n in ("a.csv", "b.csv")])
        self.assertEqual(len(merged.rows), 10)
        panel = poseidon_csv.only(merged, "workload", "BERT")
        self.assertEqual(panel.axes, ["variant", "cluster.machines"])
        lines = plot_speedup.speedup_lines(panel, "cluster.machines", slope=8)
        self.assertEqual([line.label for line in lines], ["hybrid", "ring", "ideal (8 x cluster.machines)"])
        self.assertEqual(lines[-1].ys, [8.0, 16.0, 32.0])
        self.assertEqual(lines[1].xs, [1.0, 2.0])
        # Sweeps of other axes are refused, naming both files.
        write_csv(self.path("c.csv"), ("variant", "cluster.machines"), [(("x", 1), result(1, 1))])
        with self.assertRaises(ValueError) as e:
            poseidon_csv.concat([poseidon_csv.read_sweep(self.path(n)) for n in ("a.csv", "c.csv")])
        self.assertIn("c.csv has variant, cluster.machines", str(e.exception))
        if HAVE_MATPLOTLIB:
            paths = plot_speedup.plot([self.path("a.csv"), self.path("b.csv")], self.path("f"),
                                      x="cluster.machines", facet="workload", slope=8)
            self.assertTrue(all(os.path.getsize(p) > 0 for p in paths))

    def test_bandwidth_series_per_cluster_size_with_their_ideal(self):
        import plot_bandwidth

        two_axis_csv(self.path("s.csv"))
        sweep = poseidon_csv.read_sweep(self.path("s.csv"))
        lines = plot_bandwidth.bandwidth_lines(sweep, "cluster.network.bandwidth_gbps")
        self.assertEqual([line.label for line in lines],
                         ["cluster.workers=%d" % w for w in (1, 2, 4, 8)])
        self.assertEqual([line.ideal for line in lines], [1, 2, 4, 8])
        self.assertEqual(lines[3].xs, [1.0, 10.0, 40.0])

    def test_breakdown_groups_bars_per_series(self):
        import plot_breakdown

        two_axis_csv(self.path("s.csv"))
        sweep = poseidon_csv.read_sweep(self.path("s.csv"))
        categories, bars = plot_breakdown.breakdown_bars(sweep, "cluster.workers")
        self.assertEqual(categories, [1, 2, 4, 8])
        self.assertEqual([b.label for b in bars],
                         ["cluster.network.bandwidth_gbps=%d" % bw for bw in (1, 10, 40)])
        self.assertEqual(bars[0].wait, [8.0] * 4)
        self.assertEqual(bars[0].communication, [16.0] * 4)

    def test_layers_are_read_in_order(self):
        import plot_breakdown

        with open(self.path("run.json"), "w") as f:
            json.dump(layers_run(), f)
        run, layers = plot_breakdown.read_layers(self.path("run.json"))
        self.assertEqual([layer.name for layer in layers], ["conv1", "pool1", "ip1"])
        self.assertEqual([layer.scheme for layer in layers], ["ps", None, None])
        self.assertEqual(layers[2].sync_ms, 1.5)


def layers_run():
    return {"name": "demo", "model": "cifar10_quick", "workers": 8, "iteration_ms": 4.0,
            "layers": [{"name": "conv1", "scheme": "ps", "fwd_ms": 0.3, "bwd_ms": 0.6,
                        "sync_ms": 0.4},
                       {"name": "pool1", "fwd_ms": 0.05, "bwd_ms": 0.1, "sync_ms": 0},
                       {"name": "ip1", "fwd_ms": 0.02, "bwd_ms": 0.04, "sync_ms": 1.5}]}


@unittest.skipUnless(subprocess.run([PYTHON, "-c", "import matplotlib"],
                                    capture_output=True).returncode == 0,
                     "matplotlib is not installed for %s" % PYTHON)
class ScriptTest(TempDirTest):
    """Each script as a user runs it: files written, exit codes, one-line errors."""

    def assert_images(self, stem):
        for ext in (".png", ".svg"):
            path = stem + ext
            self.assertTrue(os.path.isfile(path), path)
            self.assertGreater(os.path.getsize(path), 1000, path)
        with open(stem + ".png", "rb") as f:
            self.assertEqual(f.read(len(PNG_MAGIC)), PNG_MAGIC)
        with open(stem + ".svg", "rb") as f:
            head = f.read(600)
        self.assertTrue(head.startswith(b"<?xml") and b"<svg" in head, stem)

    def assert_ok(self, proc):
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def assert_one_line_error(self, proc, *needles):
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        # Warnings about skipped points may come first; the error itself is one line.
        lines = [line for line in proc.stderr.strip().splitlines() if ": warning: " not in line]
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn(": error: ", lines[0])
        for needle in needles:
            self.assertIn(needle, lines[0])

    def test_each_script_writes_png_and_svg(self):
        variant_csv(self.path("v.csv"))
        two_axis_csv(self.path("s.csv"))
        with open(self.path("run.json"), "w") as f:
            json.dump(layers_run(), f)
        runs = {
            "speedup": ("plot_speedup.py", self.path("v.csv"), "--title", "Variants"),
            "speedup2": ("plot_speedup.py", self.path("s.csv")),
            "bandwidth": ("plot_bandwidth.py", self.path("s.csv")),
            "breakdown": ("plot_breakdown.py", self.path("s.csv")),
            "breakdown_variant": ("plot_breakdown.py", self.path("v.csv"), "--x", "variant"),
            "layers": ("plot_breakdown.py", "--layers", self.path("run.json")),
        }
        for stem, (script, *args) in runs.items():
            with self.subTest(stem):
                proc = run_script(script, *args, "-o", self.path(stem))
                self.assert_ok(proc)
                self.assert_images(self.path(stem))

    def test_failed_point_is_a_warning_not_an_error(self):
        variant_csv(self.path("v.csv"))
        proc = run_script("plot_speedup.py", self.path("v.csv"), "-o", self.path("out"))
        self.assert_ok(proc)
        self.assertIn("warning", proc.stderr)
        self.assertIn("deadlock", proc.stderr)

    def test_output_is_byte_identical_across_runs(self):
        two_axis_csv(self.path("s.csv"))
        for script in ("plot_speedup.py", "plot_bandwidth.py", "plot_breakdown.py"):
            with self.subTest(script):
                for stem in ("a", "b"):
                    self.assert_ok(run_script(script, self.path("s.csv"), "-o", self.path(stem)))
                for ext in (".svg", ".png"):
                    with open(self.path("a" + ext), "rb") as a, open(self.path("b" + ext), "rb") as b:
                        self.assertEqual(a.read(), b.read(), script + ext)

    def test_missing_file_exits_2_naming_it(self):
        missing = self.path("missing.csv")
        for script in ("plot_speedup.py", "plot_bandwidth.py", "plot_breakdown.py"):
            with self.subTest(script):
                proc = run_script(script, missing, "-o", self.path("out"))
                self.assert_one_line_error(proc, missing)
        proc = run_script("plot_breakdown.py", "--layers", self.path("missing.json"),
                          "-o", self.path("out"))
        self.assert_one_line_error(proc, self.path("missing.json"))

    def test_missing_column_exits_2_naming_column_and_file(self):
        variant_csv(self.path("v.csv"))  # has no bandwidth axis
        csv_path = self.path("v.csv")
        proc = run_script("plot_bandwidth.py", csv_path, "-o", self.path("out"))
        self.assert_one_line_error(proc, "column 'cluster.network.bandwidth_gbps' not in "
                                   + csv_path, "columns are: variant, cluster.workers, name")
        proc = run_script("plot_speedup.py", csv_path, "--x", "nodes", "-o", self.path("out"))
        self.assert_one_line_error(proc, "column 'nodes' not in " + csv_path)
        self.assertFalse(os.path.exists(self.path("out.png")))

    def test_result_column_missing_exits_2(self):
        with open(self.path("old.csv"), "w") as f:
            f.write("cluster.workers,name,model,speedup,error\n1,demo,m,1.0,\n2,demo,m,1.8,\n")
        proc = run_script("plot_breakdown.py", self.path("old.csv"), "-o", self.path("out"))
        self.assert_one_line_error(proc, "column 'compute_ms' not in " + self.path("old.csv"))
        # ...while the speedup plot needs only what is there.
        self.assert_ok(run_script("plot_speedup.py", self.path("old.csv"), "-o", self.path("s")))

    def test_not_a_sweep_csv_exits_2(self):
        with open(self.path("x.csv"), "w") as f:
            f.write("a,b\n1,2\n")
        proc = run_script("plot_speedup.py", self.path("x.csv"), "-o", self.path("out"))
        self.assert_one_line_error(proc, "column 'name' not in " + self.path("x.csv"))

    def test_layers_json_without_layers_exits_2(self):
        run = layers_run()
        del run["layers"]
        with open(self.path("run.json"), "w") as f:
            json.dump(run, f)
        proc = run_script("plot_breakdown.py", "--layers", self.path("run.json"),
                          "-o", self.path("out"))
        self.assert_one_line_error(proc, self.path("run.json"), '"layers"')

    def test_layer_without_sync_exits_2(self):
        run = layers_run()
        del run["layers"][1]["sync_ms"]
        with open(self.path("run.json"), "w") as f:
            json.dump(run, f)
        proc = run_script("plot_breakdown.py", "--layers", self.path("run.json"),
                          "-o", self.path("out"))
        self.assert_one_line_error(proc, "layers[1] has no 'sync_ms'")

    def test_output_folder_missing_exits_2(self):
        two_axis_csv(self.path("s.csv"))
        proc = run_script("plot_speedup.py", self.path("s.csv"), "-o",
                          os.path.join(self.dir, "no", "such", "out"))
        self.assert_one_line_error(proc, "does not exist")


if __name__ == "__main__":
    unittest.main()


class DwbpOverlapTest(unittest.TestCase):
    def test_overlap_counts_sends_in_flight_during_the_backward_pass_once(self):
        import dwbp_overlap  # noqa: E402
        import poseidon_trace  # noqa: E402
        ev = [
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 8,
             "args": {"name": "worker 0 compute"}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 11,
             "args": {"name": "worker 0 send"}},
            # worker 0 (compute tid 8, send tid 11), clock 1: backward 0..100 us
            {"ph": "X", "name": "backward fc2", "cat": "compute", "tid": 8, "ts": 0, "dur": 40,
             "args": {"clock": 1}},
            {"ph": "X", "name": "backward fc1", "cat": "compute", "tid": 8, "ts": 40, "dur": 60,
             "args": {"clock": 1}},
            # two overlapping pushes 50..130 and 60..90: union 80, of which 50 during backward
            {"ph": "X", "name": "push fc2 c0 -> shard 0", "cat": "network", "tid": 11, "ts": 50,
             "dur": 80, "args": {"clock": 1}},
            {"ph": "X", "name": "push fc2 c1 -> shard 0", "cat": "network", "tid": 11, "ts": 60,
             "dur": 30, "args": {"clock": 1}},
            # another clock's message and a register do not count
            {"ph": "X", "name": "push fc2 c0 -> shard 0", "cat": "network", "tid": 11, "ts": 5,
             "dur": 10, "args": {"clock": 0}},
            {"ph": "X", "name": "register -> coordinator", "cat": "network", "tid": 11, "ts": 0,
             "dur": 10, "args": {"clock": 1}},
        ]
        events = poseidon_trace.events_of({"traceEvents": ev}, "t.json")
        self.assertEqual(dwbp_overlap.overlap(events), [(0, 1, 100, 80, 50)])


VALIDATE_COLUMNS = ("index,name,variant,workers,measured_ms,measured_std_ms,predicted_ms,"
                    "predicted_std_ms,error_pct")


class PlotValidationTest(TempDirTest):
    def validate_csv(self, name, rows, runs=False):
        """A `poseidon validate` CSV with these data rows (a leading `run` column if runs)."""
        path = self.path(name)
        with open(path, "w", newline="") as f:
            f.write(("run," if runs else "") + VALIDATE_COLUMNS + "\n")
            f.write("".join(r + "\n" for r in rows))
        return path

    def test_writes_scatter_and_error_plots_and_rejects_other_csvs(self):
        src = self.validate_csv("v.csv", ["0,a,mlp,2,100.0,1.0,95.0,0.0,-5.00",
                                          "1,a,cnn,2,50.0,1.0,52.0,0.0,4.00",
                                          "2,a,cifar,2,0.000,0.000,40.0,0.0,"])
        r = run_script("plot_validation.py", src, "-o", self.path("val"))
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("val_scatter.png", "val_scatter.svg", "val_error.png", "val_error.svg"):
            self.assertGreater(os.path.getsize(self.path(name)), 1000, name)
        other = self.path("other.csv")
        with open(other, "w") as f:
            f.write("name,iteration_ms\nx,1\n")
        r = run_script("plot_validation.py", src, other, "-o", self.path("x"))
        self.assertEqual(r.returncode, 2)
        r = run_script("plot_validation.py", other, "-o", self.path("x"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a `poseidon validate` CSV", r.stderr)

    def test_repeated_runs_become_one_configuration_at_their_median(self):
        if not HAVE_MATPLOTLIB:
            self.skipTest("matplotlib is not installed for %s" % sys.executable)
        import plot_validation  # noqa: E402
        src = self.validate_csv("runs.csv", ["1,0,a,mlp,2,100.0,1.0,90.0,0.0,-10.00",
                                             "1,1,a,cnn,2,50.0,1.0,52.0,0.0,4.00",
                                             "2,0,a,mlp,2,95.0,1.0,90.0,0.0,-5.26",
                                             "2,1,a,cnn,2,52.0,1.0,52.0,0.0,0.00",
                                             "3,0,a,mlp,2,90.0,1.0,90.0,0.0,0.00",
                                             "3,1,a,cnn,2,,,52.0,0.0,"], runs=True)
        rows = plot_validation.read(src)
        self.assertEqual([r[0] for r in rows], ["mlp", "cnn"])
        self.assertEqual(rows[0][1:], (95.0, 90.0, -5.26, -10.0, 0.0))
        self.assertEqual(rows[1][1:], (51.0, 52.0, 2.0, 0.0, 4.0))
        scale = self.validate_csv("scale.csv", ["0,b,cifar,8,40.0,1.0,41.0,0.0,2.50"])
        r = run_script("plot_validation.py", src, scale, "-o", self.path("both"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(os.path.getsize(self.path("both_error.png")), 1000)

    def test_table_lists_every_run_and_the_median(self):
        src = self.validate_csv("runs.csv", ["1,0,a,mlp,2,100.0,1.0,90.0,0.0,-10.00",
                                             "2,0,a,mlp,2,95.0,1.0,90.0,0.0,-5.26",
                                             "3,0,a,mlp,2,90.0,1.0,90.0,0.0,0.00",
                                             "1,1,a,cnn,2,,,52.0,0.0,"], runs=True)
        r = run_script("plot_validation.py", "--table", src)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().split("\n")
        self.assertEqual(len(lines), 3, r.stdout)  # header, rule, mlp (cnn has no error)
        self.assertEqual(lines[2], "| mlp | 100.000 / 95.000 / 90.000 | 90.000 | "
                                   "-10.00 / -5.26 / +0.00 (**-5.26**) |")
        r = run_script("plot_validation.py", src)
        self.assertEqual(r.returncode, 2)
        self.assertIn("-o/--output is required", r.stderr)


    def test_network_error_column_is_no_axis_and_joins_the_table(self):
        path = self.path("net.csv")
        with open(path, "w", newline="") as f:
            f.write("run," + VALIDATE_COLUMNS + ",network_error_pct\n")
            f.write("1,0,a,mlp,2,100.0,1.0,90.0,0.0,-10.00,-0.50\n"
                    "2,0,a,mlp,2,95.0,1.0,90.0,0.0,-5.26,\n")
        r = run_script("plot_validation.py", "--table", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().split("\n")
        self.assertTrue(lines[0].endswith("| network model on the live traffic, % |"), lines[0])
        self.assertEqual(lines[2], "| mlp | 100.000 / 95.000 | 90.000 | -10.00 / -5.26 "
                                   "(**-7.63**) | -0.50 / n/a |")


class HostLatencyTest(TempDirTest):
    def trace_folder(self, tasks, arrivals=()):
        folder = self.path("trace")
        os.makedirs(folder)
        events = [{"ph": "X", "cat": "network", "name": f"params l0 c2 -> {to}", "pid": 0,
                   "tid": 27, "ts": at - 5, "dur": 5, "args": {"clock": 2, "bytes": 256}}
                  for at, to in arrivals]
        events += [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 27,
                   "args": {"name": "shard 0 send"}},
                  {"ph": "M", "name": "thread_name", "pid": 0, "tid": 8,
                   "args": {"name": "worker 0 compute"}},
                  {"ph": "M", "name": "thread_name", "pid": 0, "tid": 9,
                   "args": {"name": "worker 0 protocol"}},
                  {"ph": "X", "cat": "compute", "name": "other", "pid": 0, "tid": 9, "ts": 0,
                   "dur": 1, "args": {"clock": 2}}]  # not a compute thread: left out
        for ts, dur, clock in tasks:
            events.append({"ph": "X", "cat": "compute", "name": "forward x", "pid": 0, "tid": 8,
                           "ts": ts, "dur": dur, "args": {"clock": clock}})
        with open(os.path.join(folder, "rank-1.json"), "w") as f:
            json.dump({"traceEvents": events}, f)
        return folder

    def test_reads_one_wake_up_and_one_hand_off(self):
        # a seen at 150; b starts at 100 (absorbed) and its modelled end, c's start (300), lies
        # after a was seen: b's thread slept, seen at 400, a wake-up of 100 us. c's modelled end,
        # d's start (350), had passed when b was seen (400): seen at 420, a hand-off of 20 us.
        folder = self.trace_folder([(-500, 10, 0), (0, 150, 2), (100, 300, 2), (300, 120, 2),
                                    (350, 200, 2)])
        r = run_script("host_latency.py", folder)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wake-up median 100.0 us", r.stdout)
        self.assertIn("hand-off median 20.0 us", r.stdout)
        self.assertIn("mean 100.0, 1 samples", r.stdout)

    def test_samples_with_a_message_arriving_are_kept_apart(self):
        # The tasks above; a message reaches worker 0 at 380 (within the wake-up (300, 400]) and
        # one reaches worker 1 at 410 (within the hand-off (400, 420], but another process).
        folder = self.trace_folder([(-500, 10, 0), (0, 150, 2), (100, 300, 2), (300, 120, 2),
                                    (350, 200, 2)], arrivals=[(380, "worker 0"), (410, "worker 1")])
        r = run_script("host_latency.py", folder)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wake-up median 100.0 us", r.stdout)
        self.assertIn("no message reaching the worker meanwhile: wake-up none; "
                      "hand-off median 20.0 us", r.stdout)

    def test_a_folder_without_traces_is_named(self):
        r = run_script("host_latency.py", self.dir)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no rank-*.json traces there", r.stderr)


class PaperBaselinesTest(TempDirTest):
    HEAD = ("experiment,name,model,machines,devices_per_machine,batch_per_device,system,label,"
            "iteration_ms,throughput_img_s,speedup,single_node_iteration_ms,compute_ms,wait_ms,"
            "communication_ms,network_gb_per_iteration,poseidon_gain,set,reason\n")

    def row(self, machines, system, speedup, reason=""):
        return (f"atc17_vgg19_22k,x,vgg19_22k,{machines},1,32,{system},\"L, a\",1,1,{speedup},1,1,"
                f"0,0,0,1,k,{reason}\n")

    def test_tables_from_a_csv_and_cannot_run(self):
        path = self.path("pb.csv")
        with open(path, "w") as f:
            f.write(self.HEAD)
            f.write(self.row(16, "poseidon", 10.76) + self.row(16, "ddp", 4.73) +
                    self.row(16, "horovod", 0, "DDP all-reduces in lockstep") +
                    self.row(16, "ps_papers", 0.61) + self.row(16, "ps_overlap", 8.07))
            f.write(self.row(2, "poseidon", 2.0) + self.row(2, "ddp", 2.0))
        r = run_script("paper_baselines.py", "--from-csv", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("**ATC'17: VGG19-22K, Titan X, 10 GbE**", lines[0])
        # Rows in machine order; a missing or refused system is "cannot run"; the gain is over
        # the best other system that ran.
        self.assertEqual(lines[4], "| 2 | 2.00x | 2.00x | cannot run | cannot run | cannot run "
                                   "| 1.00x |")
        self.assertEqual(lines[5], "| 16 | 10.76x | 4.73x | cannot run | 0.61x | 8.07x | 1.33x |")
        self.assertEqual(len([x for x in lines if x.startswith("**")]), 1)

    def test_bad_input_is_one_line(self):
        other = self.write("other.csv", "a,b\n1,2\n")
        self.assert_refused("paper_baselines.py", ["--from-csv", other],
                            "not a CSV this script wrote")
        self.assert_refused("paper_baselines.py", ["--only", "nosuch", "--from-csv", other],
                            "unknown experiment")


class StaggerTest(TempDirTest):
    def test_mean_offset_from_the_first_worker_per_clock(self):
        ev = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 8 * w + 4,
               "args": {"name": f"worker {w} protocol"}} for w in range(3)]
        for c in range(4):
            for tid, late in ((4, 0), (12, 3000 if c % 2 else 1000), (20, 500)):
                ev.append({"ph": "i", "s": "t", "name": f"iteration {c}", "cat": "protocol",
                           "tid": tid, "ts": c * 100000 + late, "args": {"clock": c}})
        path = self.path("t.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": ev}, f)
        import compare_phases  # noqa: E402
        # Clocks 1..3: worker 1 at +3, +1, +3 ms; worker 2 at +0.5 ms.
        st = compare_phases.stagger(path, 1)
        self.assertEqual(st[0], 0.0)
        self.assertAlmostEqual(st[1], 7.0 / 3)
        self.assertAlmostEqual(st[2], 0.5)
        # Each worker's own pace over clocks 1..3: worker 1 begins 3, 1 and 3 ms behind its
        # clocks, so its steps are 98 and 102 ms; the others' 100 ms each.
        paces = compare_phases.worker_paces(path, 1)
        self.assertAlmostEqual(paces[0], 100.0)
        self.assertAlmostEqual(paces[1], (98.0 + 102.0) / 2)
        self.assertAlmostEqual(paces[2], 100.0)
        self.assertAlmostEqual(compare_phases.worker_paces(path, 2)[1], 102.0)  # 2 -> 3 alone


def write_run_logs(folder, worker_listen, shard_addr):
    """A live run's rank logs as far as tcp_windows.names reads them: worker 2 (rank 3) listens on
    `worker_listen` and accepts shard 0 (rank 4), which dialed from `shard_addr`."""
    os.makedirs(folder)
    with open(os.path.join(folder, "rank-3-worker.log"), "w") as f:
        f.write(f"[t] [rank-3] [info] rank 3: listening on {worker_listen}\n"
                "[t] [rank-3] [info] worker 2: clock offset to the coordinator 1 us\n"
                f"[t] [rank-3] [info] rank 3: connection with rank 4 at {shard_addr} is up"
                " (accepted)\n")
    with open(os.path.join(folder, "rank-4-shard.log"), "w") as f:
        f.write("[t] [rank-4] [info] rank 4: listening on 10.77.0.1:43597\n"
                "[t] [rank-4] [info] shard 0: clock offset to the coordinator 1 us\n"
                f"[t] [rank-4] [info] rank 4: connection with rank 3 at {worker_listen} is up"
                " (dialed)\n")


class TcpWindowsTest(TempDirTest):
    SAMPLE = ("{t} pn0a1b2c-2 0      0          10.77.0.3:{lport}    10.77.0.1:{pport}\n"
              "{t} pn0a1b2c-2 \t reno wscale:10,10 rto:204 rtt:{rtt}/1.0 mss:1448 cwnd:{cwnd} "
              "{ssthresh}bytes_sent:{sent} bytes_retrans:{retrans} bytes_acked:1\n")

    def test_windows_per_connection_named_by_the_logs(self):
        samples = self.path("windows.txt")
        with open(samples, "w") as f:
            f.write("1.0 pn0a1b2c-2 header line that is not a socket\n")
            f.write(self.SAMPLE.format(t=1.0, lport=39185, pport=45686, rtt=5.0, cwnd=10,
                                       ssthresh="", sent=300000, retrans=0))
            f.write(self.SAMPLE.format(t=1.1, lport=39185, pport=45686, rtt=10.68, cwnd=134,
                                       ssthresh="ssthresh:90 ", sent=3267632, retrans=1448))
            f.write(self.SAMPLE.format(t=1.1, lport=39185, pport=9, rtt=1.0, cwnd=10,
                                       ssthresh="", sent=683, retrans=0))  # below --min-bytes
        logs = os.path.join(self.dir, "run")
        write_run_logs(logs, "10.77.0.3:39185", "10.77.0.1:45686")
        r = run_script("tcp_windows.py", "summary", samples, "--logs", logs)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = r.stdout.splitlines()
        self.assertEqual(len(rows), 2, r.stdout)
        # 10 and 134 segments of 1448 bytes: 14 and 189 KiB.
        self.assertRegex(rows[1], r"^worker 2 -> shard 0 +14/ +189/ +189 +90 +10\.68 +3\.27 +1\.4$")
        r = run_script("tcp_windows.py", "summary", samples)
        self.assertIn("10.77.0.3:39185 -> 10.77.0.1:45686", r.stdout)

    def test_a_file_without_windows_is_named(self):
        empty = self.write("empty.txt", "1.0 pn0a1b2c-2 nothing here\n")
        self.assert_refused("tcp_windows.py", ["summary", empty],
                            "no `ss -tin` sample with a congestion window")


class TcpTraceTest(TempDirTest):
    PROBE = ("  p-1 [000] ..s2. {t}: tcp_probe: family=AF_INET src=10.77.0.1:41043 "
             "dest=10.77.0.3:33282 mark=0x0 data_len=0 snd_nxt=0x10 snd_una={una:#x} "
             "snd_cwnd={cwnd} ssthresh={ss} snd_wnd=65536 srtt={srtt} rcv_wnd=65160 "
             "sock_cookie=1 skbaddr=0 skaddr=0\n")
    STATE = ("  p-1 [000] ..s2. {t}: tcp_cong_state_set: family=AF_INET sport=41043 dport=33282 "
             "saddr=10.77.0.1 daddr=10.77.0.3 saddrv6=::ffff:10.77.0.1 "
             "daddrv6=::ffff:10.77.0.3 cong_state={state}\n")
    RETRANS = ("  p-1 [000] ..s1. {t}: tcp_retransmit_skb: skbaddr=0 skaddr=0 family=AF_INET "
               "sport=41043 dport=33282 saddr=10.77.0.1 daddr=10.77.0.3 saddrv6=::1 daddrv6=::1 "
               "state=TCP_ESTABLISHED err=0\n")

    def trace(self):
        no = 2147483647
        lines = ["# tracer: nop\n",
                 self.STATE.format(t="100.000000", state=0),
                 self.PROBE.format(t="100.100000", una=0xfffff000, cwnd=10, ss=no, srtt=30),
                 self.PROBE.format(t="100.200000", una=0x1000, cwnd=800, ss=no, srtt=90000),
                 self.STATE.format(t="100.300000", state=3),
                 self.RETRANS.format(t="100.300100"),
                 self.PROBE.format(t="100.310000", una=0x2000, cwnd=52, ss=400, srtt=95000),
                 self.RETRANS.format(t="100.320000"),
                 self.STATE.format(t="100.800000", state=0),
                 self.PROBE.format(t="101.000000", una=0x2000 + 2000000, cwnd=400, ss=400,
                                   srtt=12000)]
        return self.write("trace.txt", "".join(lines))

    def test_an_episode_with_its_window_threshold_and_retransmissions(self):
        r = run_script("tcp_trace.py", "episodes", self.trace(), "--at", "0.25")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = r.stdout.splitlines()
        # Acknowledged across the sequence numbers' wrap: 0x2000 + 2,000,000 + 0x1000 bytes.
        self.assertEqual(rows[0], "10.77.0.1:41043 -> 10.77.0.3:33282: 2.01 MB acknowledged, "
                         "2 segments retransmitted")
        self.assertRegex(rows[1], r"^ +0\.300 s recovery window 800 -> threshold 400, "
                         r"2 retransmitted, window down to 52, open at 0\.800 s$")
        self.assertEqual(rows[2], "  at the end: window 400, threshold 400")
        self.assertEqual(rows[3], "  at 0.250 s: window 800, threshold -, round trip 90.0 ms")

    def test_episodes_of_a_receivers_senders_are_grouped_in_time(self):
        other = self.STATE.replace("sport=41043", "sport=50000").replace("10.77.0.1", "10.77.0.2")
        probe2 = self.PROBE.replace("10.77.0.1:41043", "10.77.0.2:50000")
        no = 2147483647
        lines = [probe2.format(t="100.050000", una=0, cwnd=10, ss=no, srtt=30),
                 probe2.format(t="101.000000", una=3000000, cwnd=400, ss=no, srtt=30),
                 other.format(t="100.330000", state=3),   # with the first's 100.300: one group
                 other.format(t="100.400000", state=0),
                 other.format(t="101.000000", state=3),   # alone
                 other.format(t="101.050000", state=0)]
        path = self.trace()
        with open(path, "a") as f:
            f.write("".join(lines))
        r = run_script("tcp_trace.py", "episodes", path, "--group-after", "0.1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("\n  10.77.0.3:33282: 1: 1, 2: 1\n", r.stdout + "\n")
        # From 0.5 s on only the lone episode is left.
        r = run_script("tcp_trace.py", "episodes", path, "--group-after", "0.5")
        self.assertIn("\n  10.77.0.3:33282: 1: 1\n", r.stdout + "\n")

    def test_a_connection_below_min_bytes_and_a_trace_without_probes_are_refused(self):
        self.assert_refused("tcp_trace.py", ["episodes", self.trace(), "--min-bytes", "3000000"],
                            "no connection acknowledged 3000000 bytes or more")
        empty = self.write("empty.txt", "# tracer: nop\n")
        self.assert_refused("tcp_trace.py", ["episodes", empty], "no tcp_probe event")
        bad = self.write("bad.txt", "  p-1 [000] ..s2. 1.000000: tcp_probe: family=AF_INET\n")
        self.assert_refused("tcp_trace.py", ["episodes", bad], "bad.txt:1: a tcp_probe event")


    def test_first_losses_per_run_named_by_each_runs_logs(self):
        # Two runs of one configuration in one trace: run 1's connection (port 41043) lost at
        # 0.3 s with a window of 800; run 2's (port 50000) never did. Each run's logs name its own.
        no = 2147483647
        other = self.PROBE.replace("10.77.0.1:41043", "10.77.0.1:50000")
        lines = [other.format(t="200.000000", una=0, cwnd=10, ss=no, srtt=30),
                 other.format(t="201.000000", una=3000000, cwnd=900, ss=no, srtt=30)]
        path = self.trace()
        with open(path, "a") as f:
            f.write("".join(lines))
        work = os.path.join(self.dir, "config-0")
        for n, port in ((1, 41043), (2, 50000)):
            write_run_logs(os.path.join(work, f"run-{n}"), "10.77.0.3:33282", f"10.77.0.1:{port}")
        paces = self.write("v.csv", "run,index,measured_ms\n1,0,1375.7\n2,0,1057.0\n")
        r = run_script("tcp_trace.py", "first-losses", path, "--runs", work, "--csv", paces)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "run 1: 1375.7 ms", "  shard 0 -> worker 2: lost at 0.300 s, window 800",
            "run 2: 1057.0 ms", "  shard 0 -> worker 2: no loss"])
        # A loss after --within is not a first loss.
        r = run_script("tcp_trace.py", "first-losses", path, "--runs", work, "--within", "0.2")
        self.assertIn("run 1\n  shard 0 -> worker 2: no loss", r.stdout)
        self.assert_refused("tcp_trace.py", ["first-losses", path, "--runs", self.dir],
                            "no run-N folder")
        self.assert_refused("tcp_trace.py", ["first-losses", path, "--runs", work, "--csv",
                                             self.write("x.csv", "a,b\n1,2\n")],
                            "not a CSV `poseidon validate -o` wrote")


    def test_silences_tell_a_timer_from_acknowledgements(self):
        # Port 41043 entered recovery 100 ms after its last acknowledgement (smoothed round trip
        # 90 ms): duplicate acknowledgements. Port 50000 heard nothing for 300 ms, and the
        # acknowledgement that came then opened its recovery (turning into loss: one episode):
        # a timer's.
        no = 2147483647
        probe2 = self.PROBE.replace("10.77.0.1:41043", "10.77.0.2:50000")
        state2 = self.STATE.replace("sport=41043", "sport=50000").replace("saddr=10.77.0.1",
                                                                          "saddr=10.77.0.2")
        lines = [probe2.format(t="100.050000", una=0, cwnd=800, ss=no, srtt=90000),
                 probe2.format(t="100.350000", una=0, cwnd=800, ss=no, srtt=90000),
                 state2.format(t="100.350000", state=3),
                 state2.format(t="100.360000", state=4),
                 state2.format(t="100.600000", state=0),
                 probe2.format(t="101.000000", una=3000000, cwnd=400, ss=400, srtt=30000)]
        path = self.trace()
        with open(path, "a") as f:
            f.write("".join(lines))
        r = run_script("tcp_trace.py", "silences", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "     0.300 s 10.77.0.1:41043 -> 10.77.0.3:33282: recovery after 100.0 ms without an "
            "acknowledgement (smoothed round trip 90.0 ms, window 800): acknowledgements; 2 "
            "retransmitted, open after 500 ms",
            "     0.350 s 10.77.0.2:50000 -> 10.77.0.3:33282: recovery after 300.0 ms without an "
            "acknowledgement (smoothed round trip 90.0 ms, window 800): a timer; 0 "
            "retransmitted, open after 250 ms",
            "2 loss episodes, 1 after a silence of more than 1.5 smoothed round trips and 10 ms"])
        # The rule is a factor of the round trip: at 1.0, 100 ms against 90 is a timer's too.
        r = run_script("tcp_trace.py", "silences", path, "--timer-factor", "1.0")
        self.assertIn("2 loss episodes, 2 after a silence of more than 1 smoothed round trips and "
                      "10 ms", r.stdout)
        self.assert_refused("tcp_trace.py", ["silences", path, "--min-bytes", "5000000"],
                            "no loss episode on a connection that acknowledged 5000000 bytes")

    def test_rates_per_connection_and_receiver(self):
        logs = os.path.join(self.dir, "run-1")
        write_run_logs(logs, "10.77.0.3:33282", "10.77.0.1:41043")
        r = run_script("tcp_trace.py", "rates", self.trace(), "--logs", logs, "--bin", "0.5")
        self.assertEqual(r.returncode, 0, r.stderr)
        # 12,288 bytes acknowledged in the first half second, none in the second, 2,000,000 in
        # the third: 0.0, 0.0 and 4.0 MB/s.
        self.assertEqual(r.stdout.splitlines(), [
            "acknowledged MB/s per 0.5 s, from 0.000 s to 1.500 s (from the first traced event, "
            "as episodes counts)",
            "shard 0 -> worker 2            0.0   0.0   4.0",
            "into worker 2                  0.0   0.0   4.0"])
        self.assert_refused("tcp_trace.py", ["rates", self.trace(), "--bin", "0"],
                            "--bin must be > 0")
        self.assert_refused("tcp_trace.py", ["rates", self.trace(), "--logs", logs,
                                             "--min-bytes", "3000000"],
                            "no connection its logs name acknowledged 3000000 bytes")


class NetReplayTest(TempDirTest):
    def replay_csv(self, rows):
        path = self.path("net-replay.csv")
        with open(path, "w", newline="") as f:
            f.write("sent_us,from,to,bytes,clock,live_us,model_us\n")
            f.write("".join(r + "\n" for r in rows))
        return path

    def test_sums_per_pair_after_warmup_and_names_the_largest_difference(self):
        src = self.replay_csv(["0,worker 0,shard 1,1000,0,900000,100",   # warm-up: left out
                               "10,worker 0,shard 1,1000,1,1000,1100",
                               "20,worker 0,shard 1,1000,2,3000,2900",
                               "30,shard 1,worker 0,1000,1,2000,1000"])
        import net_replay  # noqa: E402
        pairs = net_replay.pairs(src, 1)
        self.assertEqual(pairs, {("worker 0", "shard 1"): [2, 4000.0, 4000.0],
                                 ("shard 1", "worker 0"): [1, 2000.0, 1000.0]})
        r = run_script("net_replay.py", src, "--warmup", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("all: 3 messages, 6.0 ms in flight live, 5.0 ms in the model (-16.67%)",
                      r.stdout)
        self.assertIn("largest difference: shard 1 -> worker 0 (-1.0 ms over 1 messages, "
                      "model/live 0.50)", r.stdout)

    def test_lists_the_messages_the_model_gets_most_wrong(self):
        src = self.replay_csv(["0,worker 0,shard 1,1000,0,900000,100",   # warm-up: left out
                               "1000,worker 0,shard 1,1000,1,1000,1100",
                               "4000,worker 2,shard 0,262144,1,58000,44000",
                               "9000,worker 2,shard 1,204800,1,31000,45000",
                               "20000,shard 1,worker 0,1000,2,2000,2000"])
        import net_replay  # noqa: E402
        rows = net_replay.messages(src, 1, 2)
        # Equal magnitudes keep the file's order.
        self.assertEqual(rows, [(1, 3000.0, "worker 2", "shard 0", 262144, 58000.0, 44000.0),
                                (1, 8000.0, "worker 2", "shard 1", 204800, 31000.0, 45000.0)])
        r = run_script("net_replay.py", src, "--warmup", "1", "--messages", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        at = lines.index(next(x for x in lines if x.startswith("clock")))
        self.assertEqual(len(lines) - at - 1, 3)
        self.assertIn("worker 2 -> shard 0", lines[at + 1])
        self.assertIn("-14.0", lines[at + 1])
        self.assertIn("+14.0", lines[at + 2])
        self.assertIn("+0.1", lines[at + 3])

    def test_rejects_other_files_with_the_reason(self):
        other = self.path("other.csv")
        with open(other, "w") as f:
            f.write("name,iteration_ms\nx,1\n")
        r = run_script("net_replay.py", other)
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a net-replay.csv", r.stderr)
        bad = self.replay_csv(["0,worker 0,shard 1,1000,x,1,1"])
        r = run_script("net_replay.py", bad)
        self.assertEqual(r.returncode, 2)
        self.assertIn("net-replay.csv:2: not a number", r.stderr)
        late = self.replay_csv(["0,worker 0,shard 1,1000,0,1,1"])
        r = run_script("net_replay.py", late, "--warmup", "5")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no message of clock >= 5", r.stderr)


def golden_trace_text():
    """The Chrome trace core/trace.cc wrote for tests/golden/small.yaml (2 workers with co-located
    shards, 2 iterations), kept byte-identical by SimJob.GoldenTrace; the simulator's result JSON
    follows it in that file and is left out."""
    with open(os.path.join(ROOT, "tests", "golden", "small_trace.json")) as f:
        text = f.read()
    return text[:text.index("\n]}\n") + 4]


class PoseidonTraceTest(TempDirTest):
    """analysis/poseidon_trace.py: the one reader the analysis scripts share."""

    def write(self, name, events):
        path = self.path(name)
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)
        return path

    def test_the_golden_trace_reads_as_its_scenario_ran(self):
        import poseidon_trace  # noqa: E402
        trace = json.loads(golden_trace_text())
        events = poseidon_trace.events_of(trace, "small_trace.json")
        begins = sorted((e.thread.actor, e.iteration) for e in events if e.kind == "iteration")
        self.assertEqual(begins, [(("worker", w), c) for w in (0, 1) for c in (0, 1)])
        pushes = [e for e in events if e.kind == "message" and e.what == "push"]
        params = [e for e in events if e.kind == "message" and e.what == "params"]
        self.assertEqual(len(pushes), len(params))
        self.assertGreater(len(pushes), 0)
        self.assertTrue(all(e.thread.role == "worker" and e.thread.lane == "send"
                            and e.peer[0] == "shard" for e in pushes))
        self.assertTrue(all(e.thread.role == "shard" and e.peer[0] == "worker" for e in params))
        updates = {e.thread.lane for e in events if e.what == "server_update"}
        self.assertEqual(updates, {"update"})

    def test_a_machines_other_devices_belong_to_their_worker(self):
        import compare_phases  # noqa: E402
        import poseidon_trace  # noqa: E402
        device1 = 1_000_000_000 + (1 * 1024 + 1) * 8  # worker 0 (actor 1), device 1, compute
        ev = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": label}}
              for tid, label in ((8, "worker 0 compute"), (12, "worker 0 protocol"),
                                 (device1, "worker 0 device 1 compute"))]
        for c in range(3):
            ev.append({"ph": "i", "s": "t", "name": f"iteration {c}", "cat": "protocol",
                       "tid": 12, "ts": c * 1000, "args": {"clock": c}})
            for tid in (8, device1):  # both devices compute 400 us at once
                ev.append({"ph": "X", "name": "forward fc1", "cat": "compute", "tid": tid,
                           "ts": c * 1000, "dur": 400, "args": {"clock": c}})
        path = self.write("t.json", ev)
        threads = {e.thread for e in poseidon_trace.read(path)}
        self.assertIn(poseidon_trace.Thread("worker", 0, 1, "compute"), threads)
        self.assertEqual({t.actor for t in threads}, {("worker", 0)})
        # The worker's compute phase is its own lane's (device 0), not the sum over devices.
        phases = compare_phases.phases(compare_phases.load(path), 1)
        self.assertAlmostEqual(phases["compute"], 0.4)
        self.assertAlmostEqual(phases["iteration"], 1.0)

    def test_a_trace_it_cannot_read_is_one_line_naming_file_and_event(self):
        import poseidon_trace  # noqa: E402
        meta = {"ph": "M", "name": "thread_name", "pid": 0, "tid": 8,
                "args": {"name": "worker 0 compute"}}
        span = {"ph": "X", "name": "forward fc1", "cat": "compute", "tid": 8, "ts": 0,
                "dur": 1, "args": {"clock": 0}}
        cases = {
            "nojson.json": (None, "not JSON"),
            "noevents.json": ({"events": []}, "no 'traceEvents' array"),
            "nometa.json": ({"traceEvents": [dict(span, tid=16)]},
                            "event 0 (forward fc1): thread id 16 has no thread_name"),
            "lane.json": ({"traceEvents": [dict(meta, args={"name": "worker 0 gpu"})]},
                          "thread name 'worker 0 gpu' does not end with a lane"),
            "peer.json": ({"traceEvents": [meta, dict(span, cat="network", name="push fc1")]},
                          "event 1 (push fc1): a message's name 'push fc1' has no ' -> "),
            "ts.json": ({"traceEvents": [meta, {k: v for k, v in span.items() if k != "ts"}]},
                        "event 1 (forward fc1): needs 'tid', 'ts'"),
        }
        for name, (doc, why) in cases.items():
            path = self.path(name)
            with open(path, "w") as f:
                f.write("{" if doc is None else json.dumps(doc))
            with self.assertRaises(poseidon_trace.TraceError) as cm:
                poseidon_trace.read(path)
            self.assertIn(path, str(cm.exception))
            self.assertIn(why, str(cm.exception))
            self.assertNotIn("\n", str(cm.exception))
        with self.assertRaises(poseidon_trace.TraceError) as cm:
            poseidon_trace.read(self.path("missing.json"))
        self.assertIn("missing.json: cannot read", str(cm.exception))
        # The scripts print it and exit 2.
        r = run_script("compare_phases.py", self.path("nometa.json"), self.path("nometa.json"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("thread id 16 has no thread_name", r.stderr)


@unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is in Debian's /usr/bin/python3")
class PlotTimelineTest(TempDirTest):
    def test_one_workers_lanes_from_the_golden_trace(self):
        import plot_timeline  # noqa: E402
        path = self.path("golden.json")
        with open(path, "w") as f:
            f.write(golden_trace_text())
        rows = plot_timeline.spans(path, 1, 0, 1)
        count = lambda lane, kind: sum(1 for r in rows if r[:2] == (lane, kind))  # noqa: E731
        # CIFAR-10 quick: 12 forward and 12 backward tasks an iteration, 2 iterations; worker 1
        # pushes 10 chunks an iteration to the two shards and gets as many back, its own
        # shard's among them.
        self.assertEqual(count("compute", "forward"), 24)
        self.assertEqual(count("compute", "backward"), 24)
        self.assertEqual(count("push / factors", "push"), 20)
        self.assertEqual(count("pull", "params"), 20)
        self.assertEqual(min(r[2] for r in rows), 0.0)  # from worker 1's begin of iteration 0
        with self.assertRaises(ValueError) as cm:
            plot_timeline.spans(path, 2, 0, 1)
        self.assertIn("worker 2 has no iteration 0", str(cm.exception))


class ComparePhasesTest(TempDirTest):
    def trace(self, name, iteration_us, compute_us):
        ev = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 8,
               "args": {"name": "worker 0 compute"}}]
        for c in range(4):
            ev.append({"ph": "i", "s": "t", "name": f"iteration {c}", "cat": "protocol",
                       "tid": 8, "ts": c * iteration_us, "args": {"clock": c}})
            ev.append({"ph": "X", "name": "forward fc1", "cat": "compute", "tid": 8,
                       "ts": c * iteration_us, "dur": compute_us, "args": {"clock": c}})
        path = self.path(name)
        with open(path, "w") as f:
            json.dump({"traceEvents": ev}, f)
        return path

    def test_names_the_phase_that_differs_most(self):
        sim = self.trace("sim.json", 1000, 400)
        live = self.trace("live.json", 1300, 450)
        r = run_script("compare_phases.py", sim, live, "--warmup", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("largest difference: wait (0.250 ms", r.stdout)
        self.assertIn("worker 0: simulated +0.0, live +0.0", r.stdout)
        self.assertIn("worker 0: simulated 1.000, live 1.300", r.stdout)
        r = run_script("compare_phases.py", sim, self.path("missing.json"))
        self.assertEqual(r.returncode, 2)
