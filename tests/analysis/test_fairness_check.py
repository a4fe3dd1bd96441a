"""Tests for scripts/fairness-check's arithmetic and argument checks (no namespaces, no root).

    /usr/bin/python3 -m unittest discover -s tests/analysis -t .     # from the repository root

--reverse turns a measured share ratio x_A / x_B into the simulator's ack_path_weight k. In its
set-up machine 0's downlink (C and D, half each) is priced above machine 2's, so the weight counts
k times A's forward price and x_A / x_B = (1 + k)^(-1/alpha): k = ratio^(-alpha) - 1, the closed
form tests/sim/flow_network_test.cc checks the simulator against.
"""

import math
import os
import subprocess
import sys
import unittest
from importlib.machinery import SourceFileLoader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "fairness-check")
fc = SourceFileLoader("fairness_check", SCRIPT).load_module()


class ReverseWeight(unittest.TestCase):
    def test_inverts_the_closed_form(self):
        for alpha in (0.72, 1.0, 2.0):
            for k in (0.05, 0.41, 0.65, 2.0, 10.0):
                ratio = (1 + k) ** (-1 / alpha)
                self.assertAlmostEqual(fc.reverse_weight(ratio, alpha), k, places=6,
                                       msg=f"alpha {alpha}, k {k}")

    def test_measured_ratios(self):
        # The rounds of docs/validation.md: 0.6 at alpha 0.72 is k 0.445; half is 2^0.72 - 1.
        self.assertAlmostEqual(fc.reverse_weight(0.6, 0.72), 0.6 ** -0.72 - 1, places=6)
        self.assertAlmostEqual(fc.reverse_weight(0.5, 0.72), 2 ** 0.72 - 1, places=6)

    def test_no_penalty_and_out_of_range(self):
        self.assertEqual(fc.reverse_weight(1.0, 0.72), 0.0)
        self.assertEqual(fc.reverse_weight(1.3, 0.72), 0.0)  # A faster than B: no cost seen
        self.assertTrue(math.isinf(fc.reverse_weight(1e-9, 0.72)))  # beyond k = 64


class Arguments(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                              timeout=60)

    def test_reverse_excludes_flows(self):
        r = self.run_script("--reverse", "--flows", "0-1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--reverse and --flows exclude each other", r.stderr)

    def test_alpha_must_be_positive(self):
        r = self.run_script("--reverse", "--alpha", "0")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--alpha must be in (0, 50]", r.stderr)


    def test_start_needs_flows(self):
        r = self.run_script("--start", "A=10")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--start needs --flows", r.stderr)

    def test_start_names_a_flow_and_a_time(self):
        for bad in ("C=10", "A=-5", "A", "a=3"):
            r = self.run_script("--flows", "1-0,0-1", "--start", bad)
            self.assertNotEqual(r.returncode, 0, bad)
            self.assertIn("is not FLOW=MS with FLOW one of A, B", r.stderr, bad)

    def test_parse_starts(self):
        self.assertEqual(fc.parse_starts("B=150, A=0.5", {"A": (1, 0), "B": (0, 1)}),
                         {"B": 150.0, "A": 0.5})
        self.assertEqual(fc.parse_starts("", {"A": (1, 0)}), {})


class SenderSplit(unittest.TestCase):
    """--sender-split: c = (x_A / x_other) / b, the queue model's congested_flow_weight."""

    FLOWS = {"A": (2, 0), "B": (2, 1), "C": (1, 0), "D": (3, 0)}

    def test_roles(self):
        into, mine = fc.split_roles(self.FLOWS)
        self.assertEqual((into, mine), (["C", "D"], ["B"]))

    def test_inverts_the_queue_model(self):
        # The queue model with weight c: host 2 gives A c/(1+c) of its link and B 1/(1+c); host 0's
        # FIFO serves A, C and D in proportion to what they bring (C and D their full link).
        for c in (0.3, 0.6, 1.0):
            a, b = c / (1 + c), 1 / (1 + c)
            served = 1 / (a + 2)
            x = {"A": a * served, "B": b, "C": served, "D": served}
            self.assertAlmostEqual(fc.split_weight(x, ["C", "D"], ["B"]), c, places=9, msg=c)

    def test_flows_that_do_not_isolate_the_split_are_refused(self):
        for flows in ({"A": (2, 0), "B": (2, 1)},                          # nobody else into 0
                      {"A": (2, 0), "B": (1, 0)},                          # A's sender sends nothing else
                      {"A": (2, 0), "B": (2, 1), "C": (1, 0), "D": (1, 3)},  # C's sender sends more
                      {"A": (2, 0), "B": (2, 1), "C": (3, 0), "D": (3, 1)}):
            with self.assertRaises(SystemExit, msg=flows):
                fc.split_roles(flows)


if __name__ == "__main__":
    unittest.main()
