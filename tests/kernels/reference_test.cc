// Tests of kernels/reference/reference_kernels.cc: hand-computed forwards, and every layer kind's
// backward against seeded central finite differences.
//
// Gradient check: the objective is f = sum_i r_i * top_i (r seeded, in [-1, 1]), or the loss for
// softmax_loss, accumulated in double. Every input and parameter value is perturbed by +-eps
// (eps = 1e-2; 1e-3 for max pooling, whose inputs are spaced > 2 eps apart so no perturbation
// changes the argmax; relu inputs are kept >= 0.1 away from the kink). Bounds: per element
// |analytic - numeric| <= 2e-2 * max(|analytic|, |numeric|) + 2e-3, and the relative error of the
// whole gradient vector ||a - n|| / max(||a||, ||n||) <= 1e-2. A fresh kernel (same seed) is made
// for every evaluation so that dropout draws the same mask each time.
#include "kernels/reference/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/model.h"
#include "kernels/kernel.h"
#include "tests/kernels/grad_check.h"

namespace poseidon::kernels {
namespace {

using core::LayerKind;
using core::LayerSpec;

LayerSpec Spec(const std::string& name, LayerKind kind, std::vector<std::string> bottoms = {}) {
  LayerSpec s;
  s.name = name;
  s.kind = kind;
  s.bottoms = std::move(bottoms);
  return s;
}

core::Model Build(int64_t c, int64_t h, int64_t w, std::vector<LayerSpec> layers) {
  core::ModelSpec m;
  m.name = "test";
  m.input_c = c, m.input_h = h, m.input_w = w;
  m.num_classes = 0;
  m.layers = std::move(layers);
  return core::Model::Build(m);
}

using gradcheck::CheckGradients;
using gradcheck::GradCheck;
using gradcheck::InputKind;
using gradcheck::Uniform;

TEST(ReferenceGrad, ConvGroupsStridePad) {
  LayerSpec s = Spec("conv", LayerKind::kConv);
  s.num_output = 4, s.kernel_h = 3, s.kernel_w = 2, s.stride_h = 2, s.stride_w = 1;
  s.pad_h = 1, s.pad_w = 1, s.groups = 2;
  core::Model m = Build(4, 5, 6, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 11});
}

TEST(ReferenceGrad, ConvNoBias) {
  LayerSpec s = Spec("conv", LayerKind::kConv);
  s.num_output = 3, s.kernel_h = s.kernel_w = 3, s.bias = false;
  core::Model m = Build(2, 5, 5, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 3, .seed = 12});
}

TEST(ReferenceGrad, PoolMaxCeilRoundingAndPad) {
  LayerSpec s = Spec("pool", LayerKind::kPool);
  s.pool = core::PoolMethod::kMax, s.kernel_h = s.kernel_w = 3, s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  core::Model m = Build(3, 6, 7, {s});
  CheckGradients({.layer = &m.layers()[0],
                  .batch = 2,
                  .seed = 13,
                  .input = InputKind::kDistinct,
                  .eps = 1e-3});
}

TEST(ReferenceGrad, PoolAvgCeilRounding) {
  LayerSpec s = Spec("pool", LayerKind::kPool);
  s.pool = core::PoolMethod::kAvg, s.kernel_h = s.kernel_w = 3, s.stride_h = s.stride_w = 2;
  core::Model m = Build(2, 6, 6, {s});  // 3x3 out; the last window hangs over the edge
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 14});
  s.pad_h = s.pad_w = 1;
  core::Model m2 = Build(2, 7, 6, {s});
  CheckGradients({.layer = &m2.layers()[0], .batch = 2, .seed = 15});
}

TEST(ReferenceGrad, PoolMaxFloorRounding) {
  LayerSpec s = Spec("pool", LayerKind::kPool);
  s.pool = core::PoolMethod::kMax, s.kernel_h = s.kernel_w = 3, s.stride_h = s.stride_w = 2;
  s.pool_round = core::PoolRound::kFloor, s.round_given = true;
  core::Model m = Build(3, 8, 7, {s});  // 3x3 (ceil: 4x3): the last row is never read
  ASSERT_EQ(m.layers()[0].out, (core::Shape{3, 3, 3}));
  CheckGradients({.layer = &m.layers()[0],
                  .batch = 2,
                  .seed = 31,
                  .input = InputKind::kDistinct,
                  .eps = 1e-3});
  s.pad_h = s.pad_w = 1;
  core::Model m2 = Build(2, 8, 8, {s});  // 4x4 (ceil: 5x5)
  ASSERT_EQ(m2.layers()[0].out, (core::Shape{2, 4, 4}));
  CheckGradients({.layer = &m2.layers()[0],
                  .batch = 2,
                  .seed = 32,
                  .input = InputKind::kDistinct,
                  .eps = 1e-3});
}

TEST(ReferenceGrad, PoolAvgFloorRounding) {
  LayerSpec s = Spec("pool", LayerKind::kPool);
  s.pool = core::PoolMethod::kAvg, s.kernel_h = s.kernel_w = 3, s.stride_h = s.stride_w = 2;
  s.pool_round = core::PoolRound::kFloor, s.round_given = true;
  core::Model m = Build(2, 6, 6, {s});  // 2x2 (ceil: 3x3)
  ASSERT_EQ(m.layers()[0].out, (core::Shape{2, 2, 2}));
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 33});
  s.pad_h = s.pad_w = 1;
  core::Model m2 = Build(2, 7, 6, {s});  // 4x3 (ceil: 4x4): they agree on the height only
  ASSERT_EQ(m2.layers()[0].out, (core::Shape{2, 4, 3}));
  CheckGradients({.layer = &m2.layers()[0], .batch = 2, .seed = 34});
}

TEST(ReferenceGrad, PoolGlobalAvg) {
  LayerSpec s = Spec("gap", LayerKind::kPool);
  s.pool = core::PoolMethod::kAvg, s.global_pool = true;
  core::Model m = Build(3, 4, 5, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 16});
}

TEST(ReferenceGrad, Relu) {
  core::Model m = Build(3, 4, 4, {Spec("relu", LayerKind::kRelu)});
  CheckGradients(
      {.layer = &m.layers()[0], .batch = 2, .seed = 17, .input = InputKind::kAwayFromZero});
}

TEST(ReferenceGrad, Lrn) {
  LayerSpec s = Spec("lrn", LayerKind::kLrn);
  s.local_size = 3, s.alpha = 0.5, s.beta = 0.75, s.k = 2.0;  // large alpha: a visible effect
  core::Model m = Build(5, 3, 3, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 18});
}

TEST(ReferenceGrad, Fc) {
  LayerSpec s = Spec("fc", LayerKind::kFc);
  s.num_output = 5;
  core::Model m = Build(2, 3, 2, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 3, .seed = 19});
}

TEST(ReferenceGrad, DropoutTrain) {
  LayerSpec s = Spec("drop", LayerKind::kDropout);
  s.dropout_ratio = 0.3;
  core::Model m = Build(3, 4, 4, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 20});
}

TEST(ReferenceGrad, Concat) {
  LayerSpec a = Spec("a", LayerKind::kConv, {"data"});
  a.num_output = 2, a.kernel_h = a.kernel_w = 1;
  LayerSpec b = Spec("b", LayerKind::kConv, {"data"});
  b.num_output = 3, b.kernel_h = b.kernel_w = 1;
  core::Model m = Build(2, 3, 3, {a, b, Spec("cat", LayerKind::kConcat, {"a", "b"})});
  const core::Layer* cat = m.FindLayer("cat");
  ASSERT_NE(cat, nullptr);
  CheckGradients({.layer = cat, .batch = 2, .seed = 21});
}

TEST(ReferenceGrad, SoftmaxLoss) {
  LayerSpec s = Spec("fc", LayerKind::kFc);
  s.num_output = 6;
  core::Model m = Build(1, 2, 2, {s, Spec("loss", LayerKind::kSoftmaxLoss)});
  CheckGradients({.layer = m.FindLayer("loss"), .batch = 4, .seed = 22, .labels = {0, 5, 2, 2}});
}

TEST(ReferenceGrad, BatchNormTrainAffine) {
  core::Model m = Build(3, 2, 3, {Spec("bn", LayerKind::kBatchNorm)});
  CheckGradients({.layer = &m.layers()[0], .batch = 3, .seed = 23});
}

TEST(ReferenceGrad, BatchNormNoAffine) {
  LayerSpec s = Spec("bn", LayerKind::kBatchNorm);
  s.bn_affine = false;
  core::Model m = Build(2, 3, 2, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 4, .seed = 24});
}

TEST(ReferenceGrad, Add) {
  core::Model m =
      Build(2, 3, 3,
            {Spec("r1", LayerKind::kRelu, {"data"}), Spec("r2", LayerKind::kRelu, {"data"}),
             Spec("sum", LayerKind::kAdd, {"r1", "r2"})});
  CheckGradients({.layer = m.FindLayer("sum"), .batch = 2, .seed = 25});
}

// Forward values computed by hand.

std::vector<float> RunForward(const core::Layer& l, int64_t batch, std::vector<float> x,
                              std::vector<std::vector<float>> params = {}, bool train = true) {
  auto k = MakeKernel(Backend::kReference, l, batch, 1);
  std::vector<const float*> p;
  for (const auto& v : params) p.push_back(v.data());
  std::vector<float> top(static_cast<size_t>(batch * l.out.count()));
  k->Forward({x.data()}, top.data(), p, train);
  return top;
}

TEST(ReferenceForward, AvgPoolDividesByWindowClippedToPaddedInput) {
  LayerSpec s = Spec("pool", LayerKind::kPool);
  s.pool = core::PoolMethod::kAvg, s.kernel_h = s.kernel_w = 2, s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  core::Model m = Build(1, 3, 3, {s});  // out 2x2: windows rows {-1,0},{1,2}
  ASSERT_EQ(m.layers()[0].out, (core::Shape{1, 2, 2}));
  std::vector<float> top = RunForward(m.layers()[0], 1, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  // Every window here lies inside the padded input (4 cells), padding counting as zeros.
  EXPECT_FLOAT_EQ(top[0], 1.f / 4);
  EXPECT_FLOAT_EQ(top[1], (2 + 3) / 4.f);
  EXPECT_FLOAT_EQ(top[2], (4 + 7) / 4.f);
  EXPECT_FLOAT_EQ(top[3], (5 + 6 + 8 + 9) / 4.f);
  // Without padding, ceil rounding adds a window that hangs over the edge: 1 cell of 2x2 -> /1.
  s.pad_h = s.pad_w = 0;
  core::Model m2 = Build(1, 3, 3, {s});
  ASSERT_EQ(m2.layers()[0].out, (core::Shape{1, 2, 2}));
  top = RunForward(m2.layers()[0], 1, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_FLOAT_EQ(top[0], (1 + 2 + 4 + 5) / 4.f);
  EXPECT_FLOAT_EQ(top[1], (3 + 6) / 2.f);
  EXPECT_FLOAT_EQ(top[3], 9.f);
  // Floor rounding (PyTorch's): only the window that fits, 1x1, divisor 4.
  s.pool_round = core::PoolRound::kFloor, s.round_given = true;
  core::Model m3 = Build(1, 3, 3, {s});
  ASSERT_EQ(m3.layers()[0].out, (core::Shape{1, 1, 1}));
  top = RunForward(m3.layers()[0], 1, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_FLOAT_EQ(top[0], (1 + 2 + 4 + 5) / 4.f);
  // With pad 1, floor: (3 + 2 - 2) / 2 + 1 = 2, the windows of the first case.
  s.pad_h = s.pad_w = 1;
  core::Model m4 = Build(1, 3, 3, {s});
  ASSERT_EQ(m4.layers()[0].out, (core::Shape{1, 2, 2}));
  top = RunForward(m4.layers()[0], 1, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_FLOAT_EQ(top[0], 1.f / 4);
  EXPECT_FLOAT_EQ(top[3], (5 + 6 + 8 + 9) / 4.f);
}

TEST(ReferenceForward, FcConvLrnSoftmaxDropout) {
  LayerSpec fc = Spec("fc", LayerKind::kFc);
  fc.num_output = 2;
  core::Model m = Build(3, 1, 1, {fc});
  // W = [[1 2 3] [4 5 6]], b = [0.5 -1]; x = [1 0 -1] -> [-1.5, -3].
  std::vector<float> y = RunForward(m.layers()[0], 1, {1, 0, -1}, {{1, 2, 3, 4, 5, 6}, {0.5f, -1}});
  EXPECT_FLOAT_EQ(y[0], -1.5f);
  EXPECT_FLOAT_EQ(y[1], -3.f);

  LayerSpec conv = Spec("conv", LayerKind::kConv);
  conv.num_output = 1, conv.kernel_h = conv.kernel_w = 2;
  core::Model mc = Build(1, 2, 3, {conv});
  y = RunForward(mc.layers()[0], 1, {1, 2, 3, 4, 5, 6}, {{1, 0, 0, -1}, {10}});
  EXPECT_FLOAT_EQ(y[0], 1 - 5 + 10.f);
  EXPECT_FLOAT_EQ(y[1], 2 - 6 + 10.f);

  LayerSpec lrn = Spec("lrn", LayerKind::kLrn);
  lrn.local_size = 3, lrn.alpha = 3, lrn.beta = 0.5, lrn.k = 1;
  core::Model ml = Build(2, 1, 1, {lrn});
  y = RunForward(ml.layers()[0], 1, {1, 2});
  // scale = 1 + 3/3 * (1 + 4) = 6 for both channels.
  EXPECT_FLOAT_EQ(y[0], static_cast<float>(1 / std::sqrt(6.0)));
  EXPECT_FLOAT_EQ(y[1], static_cast<float>(2 / std::sqrt(6.0)));

  LayerSpec drop = Spec("drop", LayerKind::kDropout);
  drop.dropout_ratio = 0.5;
  core::Model md = Build(1000, 1, 1, {drop});
  std::vector<float> ones(1000, 1.f);
  y = RunForward(md.layers()[0], 1, ones, {}, /*train=*/false);
  EXPECT_EQ(y, ones);
  y = RunForward(md.layers()[0], 1, ones, {}, /*train=*/true);
  int kept = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.f || v == 2.f) << v;
    kept += v == 2.f;
  }
  EXPECT_GT(kept, 400);
  EXPECT_LT(kept, 600);
}

TEST(ReferenceForward, SoftmaxLossValue) {
  core::Model m = Build(3, 1, 1, {Spec("loss", LayerKind::kSoftmaxLoss)});
  auto k = MakeKernel(Backend::kReference, m.layers()[0], 2, 1);
  std::vector<float> x = {0, 0, 0, 1, 2, 3}, p(6);
  std::vector<int32_t> labels = {1, 2};
  k->SetLabels(labels.data());
  k->Forward({x.data()}, p.data(), {}, true);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(k->loss(), (std::log(3.0) - std::log(std::exp(3.0) / z)) / 2, 1e-6);
  EXPECT_NEAR(p[0], 1 / 3.0, 1e-6);
  EXPECT_NEAR(p[5], std::exp(3.0) / z, 1e-6);
}

TEST(ReferenceForward, BatchNormUsesRunningAveragesAtTest) {
  core::Model m = Build(1, 1, 2, {Spec("bn", LayerKind::kBatchNorm)});
  auto k = MakeKernel(Backend::kReference, m.layers()[0], 1, 1);
  std::vector<float> x = {1, 3}, y(2), scale = {2}, shift = {1};
  k->Forward({x.data()}, y.data(), {scale.data(), shift.data()}, true);
  // Batch: mean 2, biased var 1 -> xhat = -+1 (up to eps) -> y = 1 -+ 2.
  EXPECT_NEAR(y[0], -1, 1e-4);
  EXPECT_NEAR(y[1], 3, 1e-4);
  k->Forward({x.data()}, y.data(), {scale.data(), shift.data()}, false);
  // Running after one step: mean 0.1 * 2 = 0.2, var 0.9 * 1 + 0.1 * 2 (unbiased) = 1.1.
  const double inv = 1 / std::sqrt(1.1 + kBatchNormEps);
  EXPECT_NEAR(y[0], 2 * (1 - 0.2) * inv + 1, 1e-5);
  EXPECT_NEAR(y[1], 2 * (3 - 0.2) * inv + 1, 1e-5);
}

TEST(KernelFactory, BackendNames) {
  Backend b = Backend::kCuda;
  EXPECT_TRUE(BackendFromName("reference", &b));
  EXPECT_EQ(b, Backend::kReference);
  EXPECT_TRUE(BackendFromName("cpu", &b));
  EXPECT_EQ(b, Backend::kCpu);
  EXPECT_FALSE(BackendFromName("tpu", &b));
  EXPECT_STREQ(BackendName(Backend::kCuda), "cuda");
#ifndef POSEIDON_WITH_CUDA
  core::Model m = Build(1, 2, 2, {Spec("relu", LayerKind::kRelu)});
  try {
    MakeKernel(Backend::kCuda, m.layers()[0], 1, 1);
    FAIL() << "expected KernelError";
  } catch (const KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("-DPOSEIDON_WITH_CUDA=ON"), std::string::npos);
  }
#endif
}

}  // namespace
}  // namespace poseidon::kernels
