// The cudnn compute model's mechanisms, each on a shape where it decides the answer
// (cost/gpu_kernel_model.h). Times come from the model's own formulas; no timing is measured.
#include <gtest/gtest.h>

#include "config/specs.h"
#include "core/model.h"
#include "cost/compute_model.h"
#include "cost/gpu_kernel_model.h"

namespace poseidon::cost {
namespace {

config::DeviceSpec Pascal() {
  config::DeviceSpec d;
  d.name = "p";
  d.peak_flops = 10e12;
  d.memory_bandwidth_Bps = 500e9;
  d.sm_count = 28;
  d.architecture = config::GpuArchitecture::kPascal;
  return d;
}

// One conv layer fed by another (so it has a data-gradient pass), on a C x H x W input.
core::Model ConvNet(int64_t c, int64_t hw, int64_t out, int64_t kernel, int64_t stride,
                    int64_t pad) {
  core::ModelSpec spec;
  spec.name = "convnet";
  spec.input_c = c, spec.input_h = hw, spec.input_w = hw;
  core::LayerSpec first;
  first.name = "relu0";
  first.kind = core::LayerKind::kRelu;
  core::LayerSpec conv;
  conv.name = "conv";
  conv.kind = core::LayerKind::kConv;
  conv.num_output = out;
  conv.kernel_h = conv.kernel_w = kernel;
  conv.stride_h = conv.stride_w = stride;
  conv.pad_h = conv.pad_w = pad;
  conv.bias = false;
  spec.layers = {first, conv};
  return core::Model::Build(spec);
}

const core::Layer& Conv(const core::Model& m) { return m.layers().at(1); }

TEST(GpuKernelModel, A3x3Stride1ConvUsesWinogradFromCudnn5AndNotBefore) {
  const core::Model m = ConvNet(256, 28, 256, 3, 1, 1);
  const KernelModelParams p = FittedKernelParams();
  config::DeviceSpec d = Pascal();
  const LayerCost now = CudnnLayerCost(Conv(m), 32, d, p);
  EXPECT_TRUE(now.fwd.algo == ConvAlgo::kWinograd || now.fwd.algo == ConvAlgo::kWinogradNonfused)
      << ConvAlgoName(now.fwd.algo);
  d.cudnn_version = 40;  // cuDNN 4: no Winograd
  const LayerCost r4 = CudnnLayerCost(Conv(m), 32, d, p);
  EXPECT_NE(r4.fwd.algo, ConvAlgo::kWinograd);
  EXPECT_NE(r4.fwd.algo, ConvAlgo::kWinogradNonfused);
  EXPECT_GT(r4.fwd.ns, 1.3 * now.fwd.ns);
  d.cudnn_version = 20;  // before FFT: implicit GEMM only
  EXPECT_EQ(CudnnLayerCost(Conv(m), 32, d, p).fwd.algo, ConvAlgo::kImplicitGemm);
}

TEST(GpuKernelModel, AStrided3x3ConvCannotUseWinogradOrFft) {
  const core::Model m = ConvNet(256, 28, 256, 3, 2, 1);
  const LayerCost c = CudnnLayerCost(Conv(m), 32, Pascal(), FittedKernelParams());
  EXPECT_EQ(c.fwd.algo, ConvAlgo::kImplicitGemm);
  EXPECT_EQ(c.bwd.algo, ConvAlgo::kImplicitGemm);
}

TEST(GpuKernelModel, FftOnlyWhereItAppliesAndWhereItIsCheapest) {
  // FFT's cost does not grow with the kernel: with a large kernel it beats implicit GEMM.
  KernelModelParams p = FittedKernelParams();
  p.fft_efficiency = 0.5;
  config::DeviceSpec d = Pascal();
  d.cudnn_version = 40;
  const core::Model big = ConvNet(64, 32, 64, 9, 1, 4);
  EXPECT_EQ(CudnnLayerCost(Conv(big), 64, d, p).fwd.algo, ConvAlgo::kFft);
  const core::Model onebyone = ConvNet(64, 32, 64, 1, 1, 0);
  EXPECT_EQ(CudnnLayerCost(Conv(onebyone), 64, d, p).fwd.algo, ConvAlgo::kImplicitGemm);
}

TEST(GpuKernelModel, SmallGemmsRunFarBelowPeak) {
  const config::DeviceSpec d = Pascal();
  const KernelModelParams p = FittedKernelParams();
  auto rate = [&](double m, double n, double k) { return 2 * m * n * k / GemmNs(m, n, k, d, p); };
  const double big = rate(4096, 4096, 4096);
  EXPECT_GT(big, 0.5 * d.peak_flops / 1e9);         // GFLOP/s: a large GEMM near peak
  EXPECT_LE(big, d.peak_flops / 1e9);               // never above it
  EXPECT_LT(rate(16, 4096, 9216), 0.35 * big);      // batch-16 fully connected layer
  EXPECT_LT(rate(64, 64, 64), 0.05 * big);          // a tiny GEMM: launch and one tile
}

// Strided-batched GEMMs (attention's per-head score and context matmuls) are one launch whose
// tiles fill the GPU together: one of them costs what the plain GEMM does; 192 small ones (16
// sequences x 12 heads of 128 x 128 by 64) cost far less than 192 launches, but no less than the
// flops at peak and one launch.
TEST(GpuKernelModel, BatchedGemmsShareOneLaunchAndTheGpu) {
  const config::DeviceSpec d = Pascal();
  const KernelModelParams p = FittedKernelParams();
  EXPECT_EQ(BatchedGemmNs(1, 128, 128, 64, d, p), GemmNs(128, 128, 64, d, p));
  EXPECT_EQ(BatchedGemmNs(1, 4096, 1024, 512, d, p), GemmNs(4096, 1024, 512, d, p));
  const double batched = BatchedGemmNs(192, 128, 128, 64, d, p);
  EXPECT_LT(batched, 0.2 * 192 * GemmNs(128, 128, 64, d, p));
  EXPECT_GT(batched, p.launch_us * 1e3 + 1e9 * 2 * 192 * 128 * 128 * 64 / d.peak_flops);
}

TEST(GpuKernelModel, OneTileMoreThanAWaveCostsAlmostASecondWave) {
  const config::DeviceSpec d = Pascal();
  KernelModelParams p = FittedKernelParams();
  p.launch_us = 0;
  // 128x128 tiles, one per SM at a time, K deep enough for no split-K: 28 tiles fill one wave.
  const double k = 65536;
  const double one_wave = GemmNs(128 * 28, 128, k, d, p);
  const double one_more = GemmNs(128 * 29, 128, k, d, p);
  EXPECT_GT(one_more, 1.6 * one_wave);
}

TEST(GpuKernelModel, MemoryBoundLayersFollowBandwidthNotPeak) {
  core::ModelSpec spec;
  spec.name = "relu";
  spec.input_c = 64, spec.input_h = 112, spec.input_w = 112;
  core::LayerSpec a;
  a.name = "a";
  a.kind = core::LayerKind::kRelu;
  core::LayerSpec b = a;
  b.name = "b";
  spec.layers = {a, b};
  const core::Model m = core::Model::Build(spec);
  KernelModelParams p = FittedKernelParams();
  p.launch_us = 0;
  config::DeviceSpec d = Pascal();
  const double base = CudnnLayerCost(m.layers()[1], 64, d, p).fwd.ns;
  d.peak_flops *= 4;
  EXPECT_DOUBLE_EQ(CudnnLayerCost(m.layers()[1], 64, d, p).fwd.ns, base);
  d.memory_bandwidth_Bps *= 2;
  EXPECT_NEAR(CudnnLayerCost(m.layers()[1], 64, d, p).fwd.ns, base / 2, 1e-6 * base);
}

TEST(GpuKernelModel, EveryKernelPaysTheLaunchCost) {
  const core::Model m = ConvNet(4, 4, 4, 1, 1, 0);  // nothing to compute
  KernelModelParams p = FittedKernelParams();
  p.launch_us = 50;
  const LayerCost c = CudnnLayerCost(Conv(m), 1, Pascal(), p);
  EXPECT_EQ(c.fwd.kernels, 1);
  EXPECT_EQ(c.bwd.kernels, 2);  // data and filter gradients
  // The launches dominate; the few flops add microseconds at most.
  EXPECT_GE(c.fwd.ns, 50e3);
  EXPECT_LT(c.fwd.ns, 60e3);
  EXPECT_GE(c.bwd.ns, 100e3);
  EXPECT_LT(c.bwd.ns, 110e3);
}

TEST(GpuKernelModel, KeplerRunsComputeAtItsLowerRate) {
  const core::Model m = ConvNet(256, 28, 256, 3, 2, 1);
  const KernelModelParams p = FittedKernelParams();
  config::DeviceSpec d = Pascal();
  const double pascal = CudnnLayerCost(Conv(m), 64, d, p).fwd.ns;
  d.architecture = config::GpuArchitecture::kKepler;
  const double kepler = CudnnLayerCost(Conv(m), 64, d, p).fwd.ns;
  EXPECT_NEAR(kepler / pascal, 1 / p.kepler_efficiency, 0.05 / p.kepler_efficiency);
}

TEST(GpuKernelModel, DeviceOverridesReplaceFittedConstants) {
  config::DeviceSpec d = Pascal();
  d.kernel_model["launch_us"] = 1.5;
  const KernelModelParams p = KernelParamsFor(d);
  EXPECT_DOUBLE_EQ(p.launch_us, 1.5);
  EXPECT_DOUBLE_EQ(p.gemm_efficiency, FittedKernelParams().gemm_efficiency);
}

TEST(GpuKernelModel, TheComputeModelSumsTheLayerCostsAndNamesItsSource) {
  const core::Model m = ConvNet(64, 56, 64, 3, 1, 1);
  const config::DeviceSpec d = Pascal();
  const ComputeModel c = ComputeModel::FromDevice(m, d, 32);
  EXPECT_EQ(c.source(), "cudnn model p (batch 32)");
  double fwd = 0;
  for (const core::Layer& l : m.layers()) fwd += CudnnLayerCost(l, 32, d, FittedKernelParams()).fwd.ns;
  EXPECT_NEAR(static_cast<double>(c.total_fwd_ns()), fwd, 2.0);
  config::DeviceSpec r = d;
  r.compute_model = config::DeviceComputeModel::kRoofline;
  EXPECT_EQ(ComputeModel::FromDevice(m, r, 32).source(), "roofline p (batch 32)");
}

}  // namespace
}  // namespace poseidon::cost
