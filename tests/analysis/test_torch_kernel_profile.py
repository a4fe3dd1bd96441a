"""Tests for analysis/torch_kernel_profile.py without a GPU: kernel names fall into the classes
the framework model's mechanisms are checked against, and a CPU run of the `tiny` model writes one
row whose class times add up to its kernel time.

    /usr/bin/python3 -m unittest tests.analysis.test_torch_kernel_profile   # from the repository root
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "analysis", "torch_kernel_profile.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
sys.path.insert(0, os.path.join(ROOT, "analysis"))

import torch_kernel_profile  # noqa: E402


class ClassTest(unittest.TestCase):
    def test_kernel_names_are_classed(self):
        cases = {
            "void cudnn::ops::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false>": "layout_transpose",
            "void at::native::batch_norm_collect_statistics_channels_last_kernel<...>": "batch_norm",
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc": "conv",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "gemm",
            "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<...>>": "elementwise",
            "void at::native::multi_tensor_apply_kernel<TensorListMetadata<3>, ...>": "optimizer",
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<...>": "softmax",
            "void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda...>": "cast_copy",
            "something_new": "other",
        }
        for name, cls in cases.items():
            self.assertEqual(torch_kernel_profile.kernel_class(name), cls, name)


class AnnotationTest(unittest.TestCase):
    def test_ranges_are_not_kernels(self):
        # The optimizer's range would class as "optimizer" and count its kernels twice.
        self.assertTrue(torch_kernel_profile.is_annotation("Optimizer.step#AdamW.step"))
        self.assertTrue(torch_kernel_profile.is_annotation("ProfilerStep#3"))
        self.assertTrue(torch_kernel_profile.is_annotation("my_region", user_annotation=True))
        self.assertFalse(torch_kernel_profile.is_annotation(
            "void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>, ...>"))


class CpuRunTest(unittest.TestCase):
    def test_tiny_on_the_cpu(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "p.json")
            r = subprocess.run([PYTHON, SCRIPT, "--torch-device", "cpu", "--plan",
                                "tiny:4:fp32:nchw", "--steps", "2", "-o", out],
                               capture_output=True, text=True, check=False)
            self.assertEqual(r.returncode, 0, r.stderr)
            row = json.load(open(out))["rows"][0]
            self.assertEqual(row["model"], "tiny")
            self.assertGreater(row["kernels_per_step"], 0)
            self.assertAlmostEqual(sum(row["kernel_ms_by_class"].values()),
                                   row["kernel_ms_per_step"], places=6)

    def test_a_bad_plan_is_one_line(self):
        r = subprocess.run([PYTHON, SCRIPT, "--plan", "nope:1:fp32:nchw", "-o", "/dev/null"],
                           capture_output=True, text=True, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown model 'nope'", r.stderr)


if __name__ == "__main__":
    unittest.main()
