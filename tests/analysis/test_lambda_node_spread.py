"""Tests for analysis/lambda_node_spread.py: the campaign's figure of a log, the spread, and a run
on a tiny git repository laid out as Lambda's results_v2.

    /usr/bin/python3 -m unittest tests.analysis.test_lambda_node_spread   # from the repository root
"""

import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "analysis", "lambda_node_spread.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
sys.path.insert(0, os.path.join(ROOT, "analysis"))

import lambda_node_spread  # noqa: E402

SSD = "PyTorch_SSD_AMP"


class FigureTest(unittest.TestCase):
    def test_the_last_matching_line_wins(self):
        text = "Average images/sec: 10\nnoise\nAverage images/sec: 12.5\n"
        _, pattern, field = lambda_node_spread.TESTS[SSD]
        self.assertEqual(lambda_node_spread.log_figure(text, pattern, field), 12.5)

    def test_a_failed_log_has_no_figure(self):
        _, pattern, field = lambda_node_spread.TESTS[SSD]
        self.assertEqual(lambda_node_spread.log_figure("Traceback ...\nOOM\n", pattern, field), 0)
        self.assertEqual(lambda_node_spread.log_figure("Average images/sec: n/a\n", pattern, field),
                         0)

    def test_spread(self):
        s = lambda_node_spread.spread([90.0, 100.0, 110.0, 100.0])
        self.assertEqual(s["nodes"], 4)
        self.assertEqual(s["median"], 100.0)
        self.assertAlmostEqual(s["min"], 0.9)
        self.assertAlmostEqual(s["max"], 1.1)
        self.assertAlmostEqual(s["median_dev"], 0.05)
        self.assertAlmostEqual(s["max_dev"], 0.1)


class RunTest(unittest.TestCase):
    def test_nodes_of_a_small_mirror(self):
        with tempfile.TemporaryDirectory() as d:
            def write(node, name, text):
                folder = os.path.join(d, "pytorch", "results_v2", node, SSD)
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, name), "w") as f:
                    f.write(text)
            write("A_1xH100_80GB_SXM5_1_v2", "r1.txt", "Average images/sec: 100\n")
            write("A_1xH100_80GB_SXM5_1_v2", "r2.txt", "Average images/sec: 102\n")
            write("B_1xH100_80GB_SXM5_2_v2", "r1.txt", "Average images/sec: 99\n")
            write("B_1xH100_80GB_SXM5_2_v2", "r2.txt", "RuntimeError: out of memory\n")
            write("C_8xH100_80GB_SXM5_3_v2", "r1.txt", "Average images/sec: 700\n")
            for cmd in (["init", "-q"], ["add", "."],
                        ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "t"]):
                subprocess.run(["git", "-C", d, *cmd], check=True)
            out = subprocess.run([PYTHON, SCRIPT, d], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            line = [l for l in out.stdout.splitlines() if l.startswith("ssd amp")]
            self.assertEqual(len(line), 1, out.stdout)
            fields = line[0].split()
            # Two 1-GPU nodes (101 and 99; the 8-GPU node is not one), median 100.
            self.assertEqual(fields[2], "2")
            self.assertEqual(fields[3], "100.0")
            self.assertEqual(fields[4:6], ["0.990", "1.010"])
            bad = subprocess.run([PYTHON, SCRIPT, d, "--systems", "H200"], capture_output=True,
                                 text=True)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("no results_v2 logs match --systems 'H200'", bad.stderr)


if __name__ == "__main__":
    unittest.main()
