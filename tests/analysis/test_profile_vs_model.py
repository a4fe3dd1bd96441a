"""Tests for analysis/profile_vs_model.py: a profile row's split (the optimizer's range out), the
model's line, and the command each row is priced with.

    /usr/bin/python3 -m unittest tests.analysis.test_profile_vs_model   # from the repository root
"""

import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "analysis"))

import profile_vs_model  # noqa: E402

ROW = {
    "model": "bert_large", "batch": 128, "tokens": 128, "precision": "bf16", "layout": "nchw",
    "kernel_ms_per_step": 100.0,
    "kernel_ms_by_class": {"gemm": 40.0, "attention": 5.0, "optimizer": 16.0, "cast_copy": 14.0,
                           "elementwise": 25.0},
    "top_kernels": [{"name": "nvjet_sm90_tst_256x128", "ms_per_step": 13.0, "per_step": 144},
                    {"name": "Optimizer.step#AdamW.step", "ms_per_step": 9.0, "per_step": 1}],
}


class SplitTest(unittest.TestCase):
    def test_the_optimizer_range_is_not_a_kernel(self):
        gemm, rest, opt, total = profile_vs_model.profile_split(ROW)
        self.assertEqual(gemm, 45.0)  # gemm + attention
        self.assertEqual(opt, 7.0)    # 16 less the 9-ms range
        self.assertEqual(total, 91.0)
        self.assertEqual(rest, 39.0)  # casts and elementwise

    def test_a_profile_without_the_range(self):
        row = dict(ROW, top_kernels=[])
        self.assertEqual(profile_vs_model.profile_split(row), (45.0, 39.0, 16.0, 100.0))

    def test_the_model_line(self):
        text = ("total: forward 42.02 ms, backward 76.94 ms\n"
                "GPU kernels: GEMMs and convolutions 89.58 ms, the rest 28.18 ms, "
                "optimizer step 3.99 ms\n")
        self.assertEqual(profile_vs_model.model_split(text), (89.58, 28.18, 3.99))
        with self.assertRaises(ValueError):
            profile_vs_model.model_split("cudnn compute model\n")

    def test_each_row_is_priced_as_it_ran(self):
        args = profile_vs_model.show_args(ROW, "h200")
        self.assertEqual(args[:5], ["gpu-model", "show", "bert_large", "--device", "h200"])
        for flag, value in (("--batch", "128"), ("--precision", "bf16"), ("--memory-format", "nchw"),
                            ("--optimizer", "adamw"), ("--tokens", "128"),
                            ("--compute-model", "framework")):
            self.assertEqual(args[args.index(flag) + 1], value)
        cnn = profile_vs_model.show_args(dict(ROW, model="resnet50", tokens=None), "h200")
        self.assertEqual(cnn[cnn.index("--optimizer") + 1], "sgd")
        self.assertNotIn("--tokens", cnn)


if __name__ == "__main__":
    unittest.main()
