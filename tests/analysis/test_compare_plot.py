"""Tests for analysis/plot_compare.py: the bars read from `poseidon compare --format json`, and the
script run as a user runs it (a subprocess of /usr/bin/python3, which has matplotlib).

    /usr/bin/python3 -m unittest discover -s tests/analysis -t .     # from the repository root

The input is a small JSON file written here in the format of sim/compare.h, so no build is needed.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANALYSIS = os.path.join(ROOT, "analysis")
sys.path.insert(0, ANALYSIS)

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def ran(system, label, iteration, compute, speedup, gain):
    return {"system": system, "label": label, "detail": "", "set": [], "ran": True,
            "iteration_ms": iteration, "throughput_img_s": 1000.0, "speedup": speedup,
            "breakdown_ms": {"compute": compute, "wait": iteration - compute,
                             "communication": 0.5 * iteration},
            "network_gb_per_iteration": 0.01, "poseidon_gain": gain}


def comparison():
    """Poseidon, DDP that cannot run (an SSP scenario), and a parameter server."""
    return {"scenario": "scenarios/demo.yaml", "set": [], "name": "demo", "model": "cifar10_quick",
            "machines": 8, "devices_per_machine": 1, "batch_per_device": 50,
            "bandwidth_gbps": 10, "consistency": "ssp (staleness 2)",
            "single_node_iteration_ms": 5.0,
            "systems": [ran("poseidon", "Poseidon (DWBP + SACP auto)", 5.5, 5.0, 7.27, 1.0),
                        {"system": "ddp", "label": "PyTorch DDP", "detail": "", "set": [],
                         "ran": False, "reason": "DDP ... needs BSP"},
                        ran("ps_papers", "PS, whole tensors, no overlap", 11.0, 5.0, 3.64, 2.0)]}


def run_script(*args):
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([PYTHON, os.path.join(ANALYSIS, "plot_compare.py")] + list(args),
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="poseidon-compare-plot-")
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, data):
        with open(self.path(name), "w", encoding="utf-8") as f:
            f.write(data if isinstance(data, str) else json.dumps(data))
        return self.path(name)


@unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed for %s" % sys.executable)
class BarsTest(TempDirTest):
    def test_every_system_keeps_its_place_and_its_figures(self):
        import plot_compare
        bars = plot_compare.bars_of(comparison())
        self.assertEqual([b.system for b in bars], ["poseidon", "ddp", "ps_papers"])
        self.assertEqual([b.ran for b in bars], [True, False, True])
        self.assertEqual(bars[1].reason, "DDP ... needs BSP")
        self.assertEqual((bars[2].compute, bars[2].wait, bars[2].communication), (5.0, 6.0, 5.5))
        self.assertEqual(plot_compare.annotation(bars[0]), "speedup 7.27x")
        self.assertEqual(plot_compare.annotation(bars[2]), "speedup 3.64x\nPoseidon 2.00x faster")

    def test_bad_input_is_one_value_error(self):
        import plot_compare
        with self.assertRaisesRegex(ValueError, "has no \"systems\" array"):
            plot_compare.bars_of({"layers": []}, "x.json")
        data = comparison()
        del data["systems"][0]["breakdown_ms"]
        with self.assertRaisesRegex(ValueError, r"x.json: systems\[0\] has no \"breakdown_ms\""):
            plot_compare.bars_of(data, "x.json")
        data = comparison()
        data["systems"] = [data["systems"][1]]
        with self.assertRaisesRegex(ValueError, "no system ran"):
            plot_compare.bars_of(data, "x.json")


class ScriptTest(TempDirTest):
    def test_png_and_svg_byte_identical_across_runs(self):
        src = self.write("c.json", comparison())
        for stem in ("a", "b"):
            proc = run_script(src, "-o", self.path(stem))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertEqual(proc.stdout, "wrote %s.png\nwrote %s.svg\n"
                             % (self.path(stem), self.path(stem)))
        with open(self.path("a.png"), "rb") as f:
            png = f.read()
        self.assertTrue(png.startswith(PNG_MAGIC))
        with open(self.path("b.png"), "rb") as f:
            self.assertEqual(png, f.read())
        with open(self.path("a.svg"), "rb") as f, open(self.path("b.svg"), "rb") as g:
            self.assertEqual(f.read(), g.read())

    def assert_one_line_error(self, proc, *needles):
        self.assertEqual(proc.returncode, 2, proc.stderr)
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertTrue(lines[0].startswith("plot_compare.py: error: "), lines[0])
        for needle in needles:
            self.assertIn(needle, lines[0])

    def test_missing_file_and_not_json_exit_2(self):
        self.assert_one_line_error(run_script(self.path("nope.json"), "-o", self.path("o")),
                                   "cannot read", "nope.json")
        bad = self.write("bad.json", "{\"systems\": [\n")
        self.assert_one_line_error(run_script(bad, "-o", self.path("o")), "bad.json:2:",
                                   "poseidon compare --format json")

    def test_sweep_json_is_refused_naming_what_to_give(self):
        src = self.write("run.json", {"name": "demo", "layers": []})
        self.assert_one_line_error(run_script(src, "-o", self.path("o")),
                                   "has no \"systems\" array")


if __name__ == "__main__":
    unittest.main()
