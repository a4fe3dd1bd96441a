"""Tests for analysis/torch_gpu_bench.py without a GPU: the plan's errors, and a CPU run of the
two-layer `tiny` model (Debian's PyTorch) whose file is a measurement file, row for row.

    /usr/bin/python3 -m unittest tests.analysis.test_torch_gpu_bench     # from the repository root
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "analysis", "torch_gpu_bench.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
sys.path.insert(0, os.path.join(ROOT, "analysis"))

import torch_gpu_bench  # noqa: E402


def run(*args):
    return subprocess.run([PYTHON, SCRIPT, *args], capture_output=True, text=True, check=False)


class PlanTest(unittest.TestCase):
    def test_rows_parse(self):
        rows = torch_gpu_bench.parse_plan("resnet50:256:bf16:nhwc,bert_large:32:128:tf32:nchw")
        self.assertEqual(rows, [("resnet50", 256, None, "bf16", "nhwc"),
                                ("bert_large", 32, 128, "tf32", "nchw")])

    def test_bad_rows_say_which_and_why(self):
        cases = {
            "resnet50:256:fp8:nchw": "unknown precision 'fp8'",
            "resnet50:256:bf16:nwhc": "unknown layout 'nwhc'",
            "alexnet:16:fp32:nchw": "unknown model 'alexnet'",
            "bert_large:32:fp32:nchw": "transformers take TOKENS",
            "resnet50:64:128:fp32:nchw": "transformers take TOKENS, CNNs do not",
            "bert_large:32:128:fp32:nhwc": "nhwc is for CNNs",
            "resnet50:x:fp32:nchw": "must be integers",
            "resnet50:0:fp32:nchw": "must be >= 1",
            "resnet50:fp32": "is not MODEL:BATCH",
        }
        for text, says in cases.items():
            with self.subTest(text=text):
                with self.assertRaises(torch_gpu_bench.BenchError) as e:
                    torch_gpu_bench.parse_plan(text)
                self.assertIn(says, str(e.exception))

    def test_the_default_plan_is_valid(self):
        text = ",".join(f"{m}:{b}:{t}:{p}:{l}" if t else f"{m}:{b}:{p}:{l}"
                        for m, b, t, p, l in torch_gpu_bench.DEFAULT_PLAN)
        self.assertEqual(torch_gpu_bench.parse_plan(text), list(torch_gpu_bench.DEFAULT_PLAN))

    def test_errors_are_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as d:
            r = run("--device-name", "h200", "-o", os.path.join(d, "x.yaml"), "--only", "lenet")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip().count("\n"), 0)
        self.assertIn("unknown model 'lenet'", r.stderr)


@unittest.skipUnless(importlib.util.find_spec("torch"), "this Python has no torch")
class CpuRunTest(unittest.TestCase):
    def test_a_cpu_run_writes_a_measurement_file(self):
        import yaml  # Debian's python3-yaml, as the rest of analysis/ uses
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "m.yaml")
            r = run("--device-name", "h200", "-o", out, "--torch-device", "cpu", "--warmup", "1",
                    "--steps", "2", "--blocks", "2", "--plan", "tiny:16:fp32:nchw,tiny:8:bf16:nhwc")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out, encoding="utf-8") as f:
                doc = yaml.safe_load(f)
        self.assertEqual(doc["schema_version"], 1)
        rows = doc["measurements"]
        self.assertEqual([(m["batch"], m["precision"], m["memory_format"]) for m in rows],
                         [(16, "fp32", "nchw"), (8, "bf16", "nhwc")])
        for m in rows:
            self.assertEqual((m["device"], m["set"], m["optimizer"]), ("h200", "heldout", "sgd"))
            self.assertGreater(m["samples_per_s"], 0)
            self.assertEqual(m["ref"].count(","), 1)  # two blocks, each a figure
        self.assertIn("PyTorch", doc["framework"])

    def test_no_gpu_is_one_clear_error(self):
        import torch
        if torch.cuda.is_available():
            self.skipTest("this machine has a GPU")
        with tempfile.TemporaryDirectory() as d:
            r = run("--device-name", "h200", "-o", os.path.join(d, "x.yaml"), "--plan",
                    "tiny:4:fp32:nchw")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no CUDA device visible to PyTorch", r.stderr)


if __name__ == "__main__":
    unittest.main()
