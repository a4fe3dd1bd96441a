"""Tests for analysis/bn_rates.py: a profile row's batch-norm time becomes values per SM per clock
the way the framework model counts them (8 touches per output value; in NCHW, layers of few
channels keep only part of the GPU busy), bf16 rows are ATen's kernels and others cuDNN's, and the
nvidia-smi clock is read from the profile.

    /usr/bin/python3 -m unittest tests.analysis.test_bn_rates   # from the repository root
"""

import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "analysis"))

import bn_rates  # noqa: E402


def profile(rows):
    return {
        "environment": {
            "sm_count": 10,
            "nvidia_smi": "name,driver_version,power.limit,clocks.max.sm,clocks.max.mem: "
                          "GPU X, 1.0, 300.00 W, 1000 MHz, 2000 MHz",
        },
        "rows": rows,
    }


class BnRatesTest(unittest.TestCase):
    def test_the_clock_comes_from_nvidia_smi(self):
        self.assertEqual(bn_rates.max_clock_mhz(profile([])["environment"]), 1000.0)
        self.assertIsNone(bn_rates.max_clock_mhz({"nvidia_smi": ""}))

    def test_rates_count_eight_touches_and_idle_sms_in_nchw(self):
        # One layer of 5 channels and 1,000 values per image; 10 SMs at 1 GHz; 2 ms a step.
        layers = {"net": [(5, 1000)]}
        rows = [
            {"model": "net", "batch": 100, "precision": "fp16", "layout": "nhwc",
             "kernel_ms_by_class": {"batch_norm": 2.0}},
            {"model": "net", "batch": 100, "precision": "bf16", "layout": "nchw",
             "kernel_ms_by_class": {"batch_norm": 2.0}},
            {"model": "net", "batch": 100, "precision": "fp32", "layout": "nchw",
             "kernel_ms_by_class": {"elementwise": 1.0}},  # no batch norm: left out
            {"model": "other", "batch": 1, "precision": "fp32", "layout": "nchw",
             "kernel_ms_by_class": {"batch_norm": 1.0}},  # no layers known: left out
        ]
        table = bn_rates.rates(profile(rows), layers, channels_per_sm=2)
        self.assertEqual(len(table), 2)
        sm_clocks = 2e-3 * 10 * 1e9
        nhwc, nchw = table
        self.assertEqual(nhwc[4], "cudnn")
        self.assertAlmostEqual(nhwc[6], 8 * 1000 * 100 / sm_clocks)
        # 5 channels of 2 x 10 SMs' worth: a quarter of the GPU busy, so 4 x the rate a busy SM.
        self.assertEqual(nchw[4], "native")
        self.assertAlmostEqual(nchw[6], 4 * 8 * 1000 * 100 / sm_clocks)
        self.assertAlmostEqual(bn_rates.spread([2.0, 3.0, 2.5]), 1.5)

    def test_a_profile_without_a_clock_needs_one(self):
        p = profile([])
        p["environment"]["nvidia_smi"] = ""
        with self.assertRaises(ValueError):
            bn_rates.rates(p, {})
        self.assertEqual(bn_rates.rates(p, {}, clock_mhz=1500), [])


if __name__ == "__main__":
    unittest.main()
