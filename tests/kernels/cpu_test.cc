// The oneDNN CPU backend against the reference backend (the oracle), layer kind by layer kind.
//
// Every case runs forward (train) and backward on seeded random data (inputs, parameters and
// top gradients uniform in [-1, 1]) and requires, for the top, every bottom gradient and every
// parameter gradient:  max |cpu - ref| / (max |ref| + 1e-6) < kTol  (kTol = 1e-4, fp32 sums of up
// to a few hundred terms in different orders). Dropout must match exactly (same seeded draw).
// Batch norm is also checked at test time (running averages) after two training passes.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/model.h"
#include "kernels/kernel.h"
#include "tests/kernels/layer_cases.h"

#ifdef POSEIDON_HAVE_DNNL
#include "kernels/cpu/cpu_kernels.h"
#endif

namespace poseidon::kernels {
namespace {

using namespace ::poseidon::kernels::testing;  // NOLINT: the shared layer cases

using core::LayerKind;
using core::LayerSpec;

// [[maybe_unused]]: a build without oneDNN skips every comparison.
[[maybe_unused]] constexpr double kTol = 1e-4;

// Runs both backends on the same data and compares every output.
void Compare(const core::Layer& layer, int64_t batch, uint64_t seed = 7) {
#ifndef POSEIDON_HAVE_DNNL
  (void)layer, (void)batch, (void)seed;
  GTEST_SKIP() << "built without oneDNN";
#else
  SCOPED_TRACE(std::string(core::LayerKindName(layer.kind)) + " batch " + std::to_string(batch));
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float> > bottoms;
  for (const core::Shape& s : layer.in_shapes) bottoms.push_back(Random(batch * s.count(), rng));
  std::vector<std::vector<float> > params;
  for (const core::ParamBlob& b : layer.blobs) params.push_back(Random(b.count, rng));
  const int64_t out_count = batch * layer.out.count();
  const std::vector<float> top_grad = Random(out_count, rng);
  std::vector<int32_t> labels;
  for (int64_t n = 0; n < batch; ++n) {
    labels.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(layer.out.count())));
  }

  struct Result {
    std::vector<float> top, test_top;
    std::vector<std::vector<float> > bottom_grads, param_grads;
    double loss = 0;
  };
  auto run = [&](LayerKernel& k) {
    Result r;
    std::vector<const float*> b, p;
    for (const auto& v : bottoms) b.push_back(v.data());
    for (const auto& v : params) p.push_back(v.data());
    k.SetLabels(labels.data());
    r.top.assign(static_cast<size_t>(out_count), 0.f);
    if (layer.kind == LayerKind::kBatchNorm) k.Forward(b, r.top.data(), p, true);  // 2 updates
    k.Forward(b, r.top.data(), p, true);
    r.loss = k.loss();
    std::vector<float*> bg, pg;
    for (const auto& v : bottoms) {
      r.bottom_grads.emplace_back(v.size(), 0.f);
      bg.push_back(r.bottom_grads.back().data());
    }
    for (const auto& v : params) {
      r.param_grads.emplace_back(v.size(), 0.f);
      pg.push_back(r.param_grads.back().data());
    }
    k.Backward(b, r.top.data(), top_grad.data(), bg, p, pg);
    r.test_top.assign(static_cast<size_t>(out_count), 0.f);
    k.Forward(b, r.test_top.data(), p, false);
    return r;
  };
  auto ref_kernel = MakeKernel(Backend::kReference, layer, batch, seed);
  auto cpu_kernel = MakeCpuKernel(layer, batch, seed);
  const Result ref = run(*ref_kernel);
  const Result cpu = run(*cpu_kernel);
  const double tol = layer.kind == LayerKind::kDropout ? 0.0 : kTol;
  EXPECT_LE(RelErr(cpu.top, ref.top), tol) << "forward top";
  EXPECT_LE(RelErr(cpu.test_top, ref.test_top), tol) << "forward top at test";
  for (size_t i = 0; i < ref.bottom_grads.size(); ++i) {
    EXPECT_LE(RelErr(cpu.bottom_grads[i], ref.bottom_grads[i]), tol) << "bottom grad " << i;
  }
  for (size_t i = 0; i < ref.param_grads.size(); ++i) {
    EXPECT_LE(RelErr(cpu.param_grads[i], ref.param_grads[i]), tol) << "param grad " << i;
  }
  EXPECT_NEAR(cpu.loss, ref.loss, 1e-5 * (std::fabs(ref.loss) + 1));
#endif
}

// The shared cases (layer_cases.h) run through this file's Compare with its default seed.
const CompareFn kCompare = [](const core::Layer& l, int64_t batch) { Compare(l, batch); };

TEST(CpuKernels, Conv) { ConvCases(kCompare); }
TEST(CpuKernels, PoolMax) { PoolMaxCases(kCompare); }
TEST(CpuKernels, PoolAvg) { PoolAvgCases(kCompare); }
TEST(CpuKernels, Relu) { ReluCases(kCompare); }
TEST(CpuKernels, Lrn) { LrnCases(kCompare); }
TEST(CpuKernels, Fc) { FcCases(kCompare); }
TEST(CpuKernels, Dropout) { DropoutCases(kCompare); }
TEST(CpuKernels, BatchNorm) { BatchNormCases(kCompare); }
TEST(CpuKernels, Concat) { ConcatCases(kCompare); }
TEST(CpuKernels, Add) { AddCases(kCompare); }
TEST(CpuKernels, SoftmaxLoss) { SoftmaxLossCases(kCompare); }

}  // namespace
}  // namespace poseidon::kernels
