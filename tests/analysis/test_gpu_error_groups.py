"""Tests for analysis/gpu_error_groups.py: rows fall into the memory and family of their device and
model files, and the summaries are those of the rows.

    /usr/bin/python3 -m unittest tests.analysis.test_gpu_error_groups   # from the repository root
"""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "analysis"))

import gpu_error_groups  # noqa: E402


class GroupsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        os.makedirs(os.path.join(d, "devices"))
        os.makedirs(os.path.join(d, "models"))
        files = {
            "devices/hbm.yaml": 'name: hbm\ndescription: "X (HBM2e)"\narchitecture: hopper\n',
            "devices/gddr.yaml": 'name: gddr\ndescription: "Y (GDDR6X)"\narchitecture: ampere\n',
            "models/cnn.yaml": "layers:\n  - {name: c, type: conv}\n",
            "models/tx.yaml": "layers:\n  - {name: a, type: attention, heads: 2}\n",
            "check.csv": "set,model,device,precision,error\n"
                         "fit,cnn,gddr,fp16,0.30\nheldout,cnn,gddr,fp32,0.50\nfit,cnn,gddr,fp16,-0.10\n"
                         "fit,tx,hbm,fp16,-0.05\nfit,cnn,hbm,fp16,0.10\nfit,cnn,unknown,fp16,0.2\n",
        }
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)

    def tearDown(self):
        self.tmp.cleanup()

    def test_rows_are_grouped_by_memory_and_family(self):
        d = self.tmp.name
        self.assertEqual(gpu_error_groups.memory_kind(os.path.join(d, "devices"), "gddr"), "GDDR")
        self.assertEqual(gpu_error_groups.memory_kind(os.path.join(d, "devices"), "nope"), "?")
        self.assertEqual(gpu_error_groups.family(os.path.join(d, "models"), "tx"), "transformer")
        self.assertEqual(gpu_error_groups.family(os.path.join(d, "models"), "cnn"), "cnn")
        import csv
        with open(os.path.join(d, "check.csv")) as f:
            rows = list(csv.DictReader(f))
        g = gpu_error_groups.groups(rows, os.path.join(d, "devices"), os.path.join(d, "models"))
        self.assertEqual(sorted(g[("GDDR", "cnn")]), [-0.10, 0.30, 0.50])
        self.assertEqual(g[("HBM", "transformer")], [-0.05])
        self.assertEqual(g[("?", "cnn")], [0.2])
        self.assertEqual(len(g[("all", "all")]), 6)
        s = gpu_error_groups.summary(g[("GDDR", "cnn")])
        self.assertAlmostEqual(s["signed_median"], 0.30)
        self.assertAlmostEqual(s["abs_median"], 0.30)
        self.assertAlmostEqual(s["abs_max"], 0.50)
        self.assertEqual(s["slow"], 2)

    def test_rows_are_grouped_by_architecture_and_precision(self):
        d = self.tmp.name
        self.assertEqual(gpu_error_groups.architecture(os.path.join(d, "devices"), "hbm"), "hopper")
        self.assertEqual(gpu_error_groups.architecture(os.path.join(d, "devices"), "nope"), "?")
        import csv
        with open(os.path.join(d, "check.csv")) as f:
            rows = list(csv.DictReader(f))
        g = gpu_error_groups.groups(rows, os.path.join(d, "devices"), os.path.join(d, "models"),
                                    by="architecture")
        self.assertEqual(sorted(g[("ampere", "fp16")]), [-0.10, 0.30])
        self.assertEqual(g[("ampere", "fp32")], [0.50])
        self.assertEqual(sorted(g[("hopper", "fp16")]), [-0.05, 0.10])
        self.assertEqual(g[("?", "fp16")], [0.2])
        self.assertEqual(len(g[("all", "all")]), 6)
        out = io.StringIO()
        with redirect_stdout(out):
            rc = gpu_error_groups.main([os.path.join(d, "check.csv"), "--by", "architecture",
                                        "--devices", os.path.join(d, "devices"), "--models",
                                        os.path.join(d, "models")])
        self.assertEqual(rc, 0)
        lines = out.getvalue().splitlines()
        self.assertTrue(lines[0].startswith("architecture"))
        self.assertEqual(len(lines), 1 + 5)  # header, ?/fp16, all, ampere/fp16, ampere/fp32, hopper

    def test_rows_are_grouped_by_release(self):
        d = self.tmp.name
        rows = [{"model": "cnn", "device": "hbm", "precision": "fp32", "priced_as": "tf32",
                 "cuda_version": "11.8", "error": "0.10"},
                {"model": "cnn", "device": "hbm", "precision": "fp32", "priced_as": "tf32",
                 "cuda_version": "11.8", "error": "0.20"},
                {"model": "tx", "device": "hbm", "precision": "fp16", "priced_as": "fp16",
                 "cuda_version": "", "error": "-0.05"}]
        g = gpu_error_groups.groups(rows, os.path.join(d, "devices"), os.path.join(d, "models"),
                                    by="release")
        self.assertEqual(g[("hopper 11.8", "cnn tf32")], [0.10, 0.20])
        self.assertEqual(g[("hopper current", "transformer fp16")], [-0.05])
        self.assertEqual(len(g[("all", "all")]), 3)

    def test_the_command_prints_one_line_per_group(self):
        d = self.tmp.name
        out = io.StringIO()
        with redirect_stdout(out):
            rc = gpu_error_groups.main([os.path.join(d, "check.csv"), "--devices",
                                        os.path.join(d, "devices"), "--models",
                                        os.path.join(d, "models")])
        self.assertEqual(rc, 0)
        lines = out.getvalue().splitlines()
        self.assertEqual(len(lines), 1 + 5)  # header, ?/cnn, GDDR/cnn, HBM/cnn, HBM/tx, all
        gddr = [l for l in lines if l.startswith("GDDR")][0]
        self.assertIn("+30.0%", gddr)
        self.assertTrue(gddr.rstrip().endswith("2"))


if __name__ == "__main__":
    unittest.main()
