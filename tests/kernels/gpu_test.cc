// The CUDA backend against the reference backend (the oracle), layer kind by layer kind.
//
// Every case runs forward (train) and backward on seeded random data (inputs, parameters and
// top gradients uniform in [-1, 1]), copied to the device and back, and requires, for the top,
// every bottom gradient and every parameter gradient:
//   max |cuda - ref| / (max |ref| + 1e-6) < kTol  (kTol = 1e-3: fp32 with TF32 off, sums in a
// different order and cuDNN's own algorithms). Dropout must match exactly (same seeded mask).
// Batch norm is also checked at test time (running averages) after two training passes.
// Whole nets (the shipped models) on the device against the same nets on the reference: loss,
// every parameter gradient, accuracy, FC factors, and a second pass after a host-side parameter
// change (the device must see it).
// Without a CUDA build or without a device every test skips with the reason (ctest label gpu).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "core/model.h"
#include "kernels/kernel.h"
#include "kernels/net.h"
#include "tests/kernels/layer_cases.h"

#ifdef POSEIDON_WITH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.h"
#endif

namespace poseidon::kernels {
namespace {

using namespace ::poseidon::kernels::testing;  // NOLINT: the shared layer cases

using core::LayerKind;
using core::LayerSpec;

// [[maybe_unused]]: a build without CUDA skips every comparison.
[[maybe_unused]] constexpr double kTol = 1e-3;

// Runs both backends on the same data and compares every output.
void Compare(const core::Layer& layer, int64_t batch, uint64_t seed = 7) {
#ifndef POSEIDON_WITH_CUDA
  (void)layer, (void)batch, (void)seed;
  GTEST_SKIP() << "no CUDA device: this build is not built with CUDA (POSEIDON_WITH_CUDA)";
#else
  std::string why;
  if (!cuda::CudaDeviceAvailable(&why)) GTEST_SKIP() << "no CUDA device: " << why;
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
  // On the host for the reference, on the device (copied there and back) for cuda.
  auto run = [&](LayerKernel& k, bool device) {
    Result r;
    std::vector<cuda::DeviceBuffer> buffers;  // keeps every device array alive
    cuda::CudaStream stream;
    auto place = [&](const std::vector<float>& v) -> float* {
      if (!device) return const_cast<float*>(v.data());
      buffers.emplace_back(v.size());
      cuda::CopyToDevice(buffers.back().data(), v.data(), v.size(), stream.get());
      stream.Synchronize();
      return buffers.back().data();
    };
    auto fetch = [&](std::vector<float>& v, const float* p) {
      if (!device) return;
      cuda::CopyToHost(v.data(), p, v.size(), stream.get());
      stream.Synchronize();
    };
    std::vector<const float*> b, p;
    for (const auto& v : bottoms) b.push_back(place(v));
    for (const auto& v : params) p.push_back(place(v));
    k.SetLabels(labels.data());
    r.top.assign(static_cast<size_t>(out_count), 0.f);
    float* top = place(r.top);
    if (layer.kind == LayerKind::kBatchNorm) k.Forward(b, top, p, true);  // 2 updates
    k.Forward(b, top, p, true);
    fetch(r.top, top);
    r.loss = k.loss();
    std::vector<float*> bg, pg;
    for (const auto& v : bottoms) {
      r.bottom_grads.emplace_back(v.size(), 0.f);
      bg.push_back(place(r.bottom_grads.back()));
    }
    for (const auto& v : params) {
      r.param_grads.emplace_back(v.size(), 0.f);
      pg.push_back(place(r.param_grads.back()));
    }
    k.Backward(b, top, place(top_grad), bg, p, pg);
    for (size_t i = 0; i < bg.size(); ++i) fetch(r.bottom_grads[i], bg[i]);
    for (size_t i = 0; i < pg.size(); ++i) fetch(r.param_grads[i], pg[i]);
    r.test_top.assign(static_cast<size_t>(out_count), 0.f);
    float* test_top = place(r.test_top);
    k.Forward(b, test_top, p, false);
    fetch(r.test_top, test_top);
    return r;
  };
  auto ref_kernel = MakeKernel(Backend::kReference, layer, batch, seed);
  auto cuda_kernel = MakeKernel(Backend::kCuda, layer, batch, seed);
  const Result ref = run(*ref_kernel, false);
  const Result gpu = run(*cuda_kernel, true);
  const double tol = layer.kind == LayerKind::kDropout ? 0.0 : kTol;
  EXPECT_LE(RelErr(gpu.top, ref.top), tol) << "forward top";
  EXPECT_LE(RelErr(gpu.test_top, ref.test_top), tol) << "forward top at test";
  for (size_t i = 0; i < ref.bottom_grads.size(); ++i) {
    EXPECT_LE(RelErr(gpu.bottom_grads[i], ref.bottom_grads[i]), tol) << "bottom grad " << i;
  }
  for (size_t i = 0; i < ref.param_grads.size(); ++i) {
    EXPECT_LE(RelErr(gpu.param_grads[i], ref.param_grads[i]), tol) << "param grad " << i;
  }
  EXPECT_NEAR(gpu.loss, ref.loss, 1e-4 * (std::fabs(ref.loss) + 1));
#endif
}

// One shipped model on both backends, same seed and data: two passes with a host-side SGD-like
// change of every parameter in between.
void CompareNets(const std::string& model_name, int64_t batch) {
#ifndef POSEIDON_WITH_CUDA
  (void)model_name, (void)batch;
  GTEST_SKIP() << "no CUDA device: this build is not built with CUDA (POSEIDON_WITH_CUDA)";
#else
  std::string why;
  if (!cuda::CudaDeviceAvailable(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  SCOPED_TRACE(model_name);
  const core::Model m = core::Model::Build(config::LoadModelFile(
      std::string(POSEIDON_SOURCE_DIR) + "/scenarios/models/" + model_name + ".yaml"));
  Net ref(m, Backend::kReference, batch, 3);
  Net gpu(m, Backend::kCuda, batch, 3);
  ASSERT_EQ(ref.num_params(), gpu.num_params());
  std::mt19937_64 rng(11);
  const std::vector<float> images = Random(batch * m.input_shape().count(), rng);
  std::vector<int32_t> labels;
  const int64_t classes = m.layers().back().out.count();
  for (int64_t k = 0; k < batch; ++k) labels.push_back(static_cast<int32_t>(rng() % classes));
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    const double lr = ref.Forward(images.data(), labels.data(), true);
    const double lg = gpu.Forward(images.data(), labels.data(), true);
    EXPECT_NEAR(lg, lr, 1e-3 * (std::fabs(lr) + 1));
    // One image whose two best classes are within rounding of each other may flip.
    EXPECT_NEAR(gpu.Accuracy(), ref.Accuracy(), 1.0 / static_cast<double>(batch) + 1e-9);
    ref.Backward();
    gpu.Backward();
    ExpectGradsMatch(gpu, ref, kTol);
    for (const core::Layer& l : m.layers()) {
      if (l.kind != LayerKind::kFc) continue;
      const FcFactors fa = ref.FactorsOf(l.id), fb = gpu.FactorsOf(l.id);
      EXPECT_LE(RelErr(std::vector<float>(fb.top_grad, fb.top_grad + fb.k * fb.n),
                       std::vector<float>(fa.top_grad, fa.top_grad + fa.k * fa.n)),
                kTol)
          << l.name << " factor top_grad";
      EXPECT_LE(RelErr(std::vector<float>(fb.bottom, fb.bottom + fb.k * fb.m),
                       std::vector<float>(fa.bottom, fa.bottom + fa.k * fa.m)),
                kTol)
          << l.name << " factor bottom";
    }
    // A host-side step (as SGD or a pull does): the next pass must run on the new values.
    for (int64_t j = 0; j < ref.num_params(); ++j) {
      ref.params()[j] -= 0.01f * ref.param_grads()[j];
      gpu.params()[j] -= 0.01f * ref.param_grads()[j];
    }
  }
#endif
}

TEST(CudaNet, FmnistMlpMatchesTheReference) { CompareNets("fmnist_mlp", 16); }
TEST(CudaNet, FmnistCnnMatchesTheReference) { CompareNets("fmnist_cnn", 8); }
TEST(CudaNet, Cifar10QuickMatchesTheReference) { CompareNets("cifar10_quick", 8); }

// The shared cases (layer_cases.h) run through this file's Compare with its default seed.
const CompareFn kCompare = [](const core::Layer& l, int64_t batch) { Compare(l, batch); };

TEST(CudaKernels, Conv) { ConvCases(kCompare); }
TEST(CudaKernels, PoolMax) { PoolMaxCases(kCompare); }
TEST(CudaKernels, PoolAvg) { PoolAvgCases(kCompare); }
TEST(CudaKernels, Relu) { ReluCases(kCompare); }
TEST(CudaKernels, Lrn) { LrnCases(kCompare); }
TEST(CudaKernels, Fc) { FcCases(kCompare); }
TEST(CudaKernels, Dropout) { DropoutCases(kCompare); }
TEST(CudaKernels, BatchNorm) { BatchNormCases(kCompare); }
TEST(CudaKernels, Concat) { ConcatCases(kCompare); }
TEST(CudaKernels, Add) { AddCases(kCompare); }
TEST(CudaKernels, SoftmaxLoss) { SoftmaxLossCases(kCompare); }

}  // namespace
}  // namespace poseidon::kernels
