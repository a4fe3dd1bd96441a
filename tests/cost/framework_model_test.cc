// The framework compute model's mechanisms, each on a shape where it decides the answer
// (cost/framework_model.h): tensor cores by precision, alignment, the faster of two GEMM plans,
// half-width activations, the layout's transposes and batch norm, autocast's casts, the dispatch
// floor of a pass, the optimizer step. Times come from the model's own
// formulas; no timing is measured.
#include <algorithm>
#include <tuple>

#include <gtest/gtest.h>

#include "config/compute_loader.h"
#include "config/specs.h"
#include "core/model.h"
#include "cost/compute_model.h"
#include "cost/framework_model.h"

namespace poseidon::cost {
namespace {

using config::Precision;

// An A100-like device: 19.5 fp32, 156 tf32, 312 fp16/bf16 TFLOPS, 2 TB/s.
config::DeviceSpec Ampere(Precision p) {
  config::DeviceSpec d;
  d.name = "amp";
  d.peak_flops = 19.5e12;
  d.memory_bandwidth_Bps = 2000e9;
  d.sm_count = 108;
  d.boost_clock_mhz = 1410;
  d.architecture = config::GpuArchitecture::kAmpere;
  d.tensor_flops = {{Precision::kTf32, 156e12}, {Precision::kFp16, 312e12},
                    {Precision::kBf16, 312e12}};
  d.compute_model = config::DeviceComputeModel::kFramework;
  d.precision = p;
  return d;
}

// relu -> fc(in -> out): the fc layer has a data-gradient pass.
core::Model FcNet(int64_t in, int64_t out) {
  core::ModelSpec spec;
  spec.name = "fcnet";
  spec.input_c = in, spec.input_h = 1, spec.input_w = 1;
  core::LayerSpec relu;
  relu.name = "relu0";
  relu.kind = core::LayerKind::kRelu;
  core::LayerSpec fc;
  fc.name = "fc";
  fc.kind = core::LayerKind::kFc;
  fc.num_output = out;
  fc.bias = false;
  spec.layers = {relu, fc};
  return core::Model::Build(spec);
}

double FcForwardNs(const core::Model& m, int64_t batch, const config::DeviceSpec& d,
                   const config::FrameworkModelParams& p) {
  return FrameworkLayerCost(m.layers()[1], batch, d, p).fwd.ns;
}

TEST(FrameworkModel, TensorCoresSpeedALargeGemmUpByTheirPeak) {
  const config::FrameworkModelParams p = FittedFrameworkParams();
  const core::Model m = FcNet(8192, 8192);
  // The GEMM alone (the layer's bf16 forward pass also casts the weight to half).
  const double fp32 = FrameworkGemmNs(8192, 8192, 8192, Ampere(Precision::kFp32), p);
  const double tf32 = FrameworkGemmNs(8192, 8192, 8192, Ampere(Precision::kTf32), p);
  const double bf16 = FrameworkGemmNs(8192, 8192, 8192, Ampere(Precision::kBf16), p);
  // Compute-bound: the times go as the rates (fp32 peak x gemm_efficiency; the tensor peak fed
  // by the SMs' operand paths, x tensor_efficiency), within the launch cost.
  const double feed = p.tensor_feed_per_sm_clock * 108 * 1410e6;
  const auto fed = [feed](double peak) { return 1 / (1 / peak + 1 / feed); };
  const double tc_over_fp32 = (fed(156e12) * p.tensor_efficiency) / (19.5e12 * p.gemm_efficiency);
  EXPECT_NEAR(fp32 / tf32, tc_over_fp32, 0.02 * tc_over_fp32);
  EXPECT_NEAR(tf32 / bf16, fed(312e12) / fed(156e12), 0.04);
  EXPECT_LT(fed(312e12) / fed(156e12), 2.0);  // a faster tensor core is harder to feed
}

// The operand feed: a GPU whose tensor cores do more per SM and clock reaches less of its peak;
// without a feed limit (a very large tensor_feed_per_sm_clock) the datasheet peak is the rate.
TEST(FrameworkModel, AFasterTensorCoreIsHarderToFeed) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.tensor_feed_per_sm_clock = 2048;
  const double n = 8192;
  const config::DeviceSpec d = Ampere(Precision::kBf16);  // 312e12 / (108 x 1.41 GHz) = 2,049
  const double fed = FrameworkGemmNs(n, n, n, d, p);
  p.tensor_feed_per_sm_clock = 1e12;
  const double unfed = FrameworkGemmNs(n, n, n, d, p);
  // Feed equal to the peak per SM and clock: the rate halves, within the launch cost.
  EXPECT_NEAR(fed / unfed, 1 + 312e12 / (2048 * 108 * 1410e6), 0.02);
}

// cuBLAS before 11.0 (unaligned_feed_per_sm_clock 0, v5's rule): an unaligned GEMM runs on CUDA
// cores. From 11.0 on (v6's constants) on tensor cores too, at the narrow loads' feed: slower
// than the aligned GEMM, faster than CUDA cores, and bounded by SMs x clock x that feed.
TEST(FrameworkModel, AnUnalignedGemmRunsOnTensorCoresAtTheNarrowLoadsFeed) {
  config::FrameworkModelParams before = FittedFrameworkParams();
  before.unaligned_feed_per_sm_clock = 0;
  const config::DeviceSpec half = Ampere(Precision::kFp16);
  // N = 30522 (BERT's vocabulary) is not a multiple of 8; 30528 is.
  const double unaligned = FrameworkGemmNs(4096, 30522, 1024, half, before);
  const double aligned = FrameworkGemmNs(4096, 30528, 1024, half, before);
  EXPECT_GT(unaligned / aligned, 5.0);
  // Where each pass ran (what `gpu-model show` prints).
  const LayerCost cu = FrameworkLayerCost(FcNet(1024, 30522).layers()[1], 4096, half, before);
  const LayerCost tc = FrameworkLayerCost(FcNet(1024, 30528).layers()[1], 4096, half, before);
  EXPECT_EQ(cu.fwd.gemm_kernels, 1);
  EXPECT_EQ(cu.fwd.tensor_kernels, 0);
  EXPECT_EQ(tc.fwd.tensor_kernels, 1);
  EXPECT_EQ(tc.bwd.gemm_kernels, 2);  // weight and data gradients
  EXPECT_EQ(tc.bwd.tensor_kernels, 2);
  // The same unaligned GEMM in fp32 does the same arithmetic, but moves twice the bytes.
  const double fp32 = FrameworkGemmNs(4096, 30522, 1024, Ampere(Precision::kFp32), before);
  EXPECT_GE(fp32, unaligned);

  const config::FrameworkModelParams v6 = FittedFrameworkParams();
  ASSERT_GT(v6.unaligned_feed_per_sm_clock, 0);
  const double narrow = FrameworkGemmNs(4096, 30522, 1024, half, v6);
  EXPECT_LT(narrow, unaligned);
  EXPECT_GT(narrow, 1.5 * FrameworkGemmNs(4096, 30528, 1024, half, v6));
  const double flops = 2.0 * 4096 * 30522 * 1024;
  EXPECT_GT(narrow * 1e-9, flops / (v6.unaligned_feed_per_sm_clock * 108 * 1410e6));
  const LayerCost now = FrameworkLayerCost(FcNet(1024, 30522).layers()[1], 4096, half, v6);
  EXPECT_EQ(now.fwd.tensor_kernels, 1);
  EXPECT_EQ(now.bwd.tensor_kernels, 2);

  // The run's libraries decide it (device.cuda_version): cuBLAS 10.2 has no tensor-core plan for
  // it, so v6 prices it as v5 did; 11.0 and a current release (0) as v6.
  config::DeviceSpec cublas10 = half;
  cublas10.cuda_version = 102;
  EXPECT_EQ(FrameworkGemmNs(4096, 30522, 1024, cublas10, v6), unaligned);
  const LayerCost old = FrameworkLayerCost(FcNet(1024, 30522).layers()[1], 4096, cublas10, v6);
  EXPECT_EQ(old.fwd.tensor_kernels, 0);
  EXPECT_EQ(old.bwd.tensor_kernels, 1);  // the weight gradient's N and K (1024, 4096) align
  // An aligned GEMM is on tensor cores under either release, at the same time.
  EXPECT_EQ(FrameworkGemmNs(4096, 30528, 1024, cublas10, v6),
            FrameworkGemmNs(4096, 30528, 1024, half, v6));
  config::DeviceSpec cublas11 = half;
  cublas11.cuda_version = 110;
  EXPECT_EQ(FrameworkGemmNs(4096, 30522, 1024, cublas11, v6), narrow);
}

TEST(FrameworkModel, TheFasterPlanWinsWhereTensorCoresAreNoFaster) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  config::DeviceSpec d = Ampere(Precision::kTf32);
  d.tensor_flops[Precision::kTf32] = d.peak_flops;  // GeForce Ampere: tf32 at the fp32 rate
  p.tensor_efficiency = 0.5 * p.gemm_efficiency;
  const core::Model m = FcNet(4096, 4096);
  EXPECT_DOUBLE_EQ(FcForwardNs(m, 4096, d, p), FcForwardNs(m, 4096, Ampere(Precision::kFp32), p));
}

TEST(FrameworkModel, HalfPrecisionHalvesAMemoryBoundLayersBytes) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.dispatch_us = 0;
  p.launch_us = 0;
  const core::Model m = FcNet(1 << 20, 16);
  const core::Layer& relu = m.layers()[0];
  const double fp32 = FrameworkLayerCost(relu, 64, Ampere(Precision::kFp32), p).fwd.ns;
  const double bf16 = FrameworkLayerCost(relu, 64, Ampere(Precision::kBf16), p).fwd.ns;
  EXPECT_NEAR(fp32 / bf16, 2.0, 1e-9);
  // relu forward reads x and writes y: two tensors of 4 bytes per value.
  EXPECT_NEAR(fp32, 1e9 * 2 * 4.0 * 64 * (1 << 20) / (2000e9 * p.memory_efficiency), 1.0);
  // Fed by the model input it has no backward pass.
  EXPECT_EQ(FrameworkLayerCost(relu, 64, Ampere(Precision::kFp32), p).bwd.ns, 0);
}

TEST(FrameworkModel, ASmallKernelCostsItsDispatch) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.dispatch_us = 50;
  const core::Model m = FcNet(64, 64);
  EXPECT_DOUBLE_EQ(FcForwardNs(m, 1, Ampere(Precision::kFp32), p), 50e3);
  // Under autocast the forward pass also casts the weight to half: two kernels, two dispatches.
  EXPECT_DOUBLE_EQ(FcForwardNs(m, 1, Ampere(Precision::kBf16), p), 100e3);
}

TEST(FrameworkModel, APassTakesTheLongerOfItsKernelsAndTheirDispatch) {
  // One large GEMM and its weight cast: the GPU's work decides, the small cast is not rounded up
  // to a dispatch on top of it.
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.dispatch_us = 20;
  const core::Model m = FcNet(8192, 8192);
  const LayerCost big = FrameworkLayerCost(m.layers()[1], 8192, Ampere(Precision::kBf16), p);
  EXPECT_EQ(big.fwd.kernels, 2);
  config::FrameworkModelParams no_dispatch = p;
  no_dispatch.dispatch_us = 0;
  EXPECT_DOUBLE_EQ(big.fwd.ns,
                   FrameworkLayerCost(m.layers()[1], 8192, Ampere(Precision::kBf16), no_dispatch)
                       .fwd.ns);
  EXPECT_GT(big.fwd.ns, 2 * 20e3);
}

// relu -> conv(c -> c, k x k, stride s, "same" padding) -> batch norm, on h x h images.
core::Model ConvNet(int64_t c, int64_t h, int64_t groups = 1, int64_t k = 3, int64_t s = 1) {
  core::ModelSpec spec;
  spec.name = "convnet";
  spec.input_c = c, spec.input_h = h, spec.input_w = h;
  core::LayerSpec relu;
  relu.name = "relu0";
  relu.kind = core::LayerKind::kRelu;
  core::LayerSpec conv;
  conv.name = "conv";
  conv.kind = core::LayerKind::kConv;
  conv.num_output = c;
  conv.kernel_h = conv.kernel_w = k;
  conv.stride_h = conv.stride_w = s;
  conv.pad_h = conv.pad_w = k / 2;
  conv.groups = groups;
  conv.bias = false;
  core::LayerSpec bn;
  bn.name = "bn";
  bn.kind = core::LayerKind::kBatchNorm;
  spec.layers = {relu, conv, bn};
  return core::Model::Build(spec);
}

config::DeviceSpec WithLayout(config::DeviceSpec d, config::MemoryFormat f) {
  d.memory_format = f;
  return d;
}

TEST(FrameworkModel, NchwWrapsATensorCoreConvolutionInTransposes) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.dispatch_us = 0;
  const core::Model m = ConvNet(64, 56);
  const core::Layer& conv = m.layers()[1];
  const int64_t b = 32;
  for (Precision pr : {Precision::kTf32, Precision::kBf16}) {
    const config::DeviceSpec nchw = WithLayout(Ampere(pr), config::MemoryFormat::kNchw);
    const config::DeviceSpec nhwc = WithLayout(Ampere(pr), config::MemoryFormat::kNhwc);
    const LayerCost a = FrameworkLayerCost(conv, b, nchw, p);
    const LayerCost n = FrameworkLayerCost(conv, b, nhwc, p);
    // Forward: x transposed in, y out; backward: dy and x in, dx out; each read and written once
    // at the memory rate, plus a launch.
    const double vb = pr == Precision::kBf16 ? 2 : 4;
    const double tensor = vb * b * 64 * 56 * 56;  // x and y have the same size here
    const double one = p.launch_us * 1e3 + 1e9 * 2 * tensor / (2000e9 * p.memory_efficiency);
    EXPECT_NEAR(a.fwd.ns - n.fwd.ns, 2 * one, 1e-6 * one);
    EXPECT_NEAR(a.bwd.ns - n.bwd.ns, 3 * one, 1e-6 * one);
    EXPECT_EQ(a.fwd.kernels - n.fwd.kernels, 2);
    EXPECT_EQ(a.bwd.kernels - n.bwd.kernels, 3);
  }
  // In fp32 the convolution runs on CUDA cores in its own layout: no transposes.
  const LayerCost a = FrameworkLayerCost(
      conv, b, WithLayout(Ampere(Precision::kFp32), config::MemoryFormat::kNchw), p);
  const LayerCost n = FrameworkLayerCost(
      conv, b, WithLayout(Ampere(Precision::kFp32), config::MemoryFormat::kNhwc), p);
  EXPECT_DOUBLE_EQ(a.fwd.ns, n.fwd.ns);
  EXPECT_DOUBLE_EQ(a.bwd.ns, n.bwd.ns);
  // Nor does fp16 without tensor cores (cuDNN's pseudo-half on a GPU with no fast half).
  config::DeviceSpec pascal = Ampere(Precision::kFp16);
  pascal.tensor_flops.clear();
  const LayerCost pa = FrameworkLayerCost(conv, b, pascal, p);
  const LayerCost pn = FrameworkLayerCost(conv, b, WithLayout(pascal, config::MemoryFormat::kNhwc), p);
  EXPECT_DOUBLE_EQ(pa.fwd.ns, pn.fwd.ns);
  EXPECT_EQ(pa.bwd.kernels, pn.bwd.kernels);
}

TEST(FrameworkModel, AGroupedConvolutionIsOneKernelWithTilesSpanningGroups) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.dispatch_us = 0;
  const int64_t b = 64;
  // ResNeXt's 3x3 in stage 3: 256 channels in 32 groups of 8 (aligned for half precision, so on
  // tensor cores), and in stage 2 with 32 groups of 4 (not aligned: CUDA cores).
  for (const auto& [c, aligned] : {std::pair<int64_t, bool>{256, true}, {128, false}}) {
    const core::Model grouped = ConvNet(c, 28, 32);
    const core::Layer& conv = grouped.layers()[1];
    const config::DeviceSpec d = WithLayout(Ampere(Precision::kBf16), config::MemoryFormat::kNhwc);
    const LayerCost cost = FrameworkLayerCost(conv, b, d, p);
    // One cuDNN call a pass, as PyTorch makes it (cudnnSetConvolutionGroupCount), not 32; and
    // autocast's cast of the weight (forward) and of its gradient (backward).
    EXPECT_EQ(cost.fwd.gemm_kernels, 1);
    EXPECT_EQ(cost.bwd.gemm_kernels, 2);
    EXPECT_EQ(cost.fwd.kernels, 1 + 1);
    EXPECT_EQ(cost.bwd.kernels, 2 + 1);
    EXPECT_EQ(cost.fwd.tensor_kernels, aligned ? 1 : 0);
    EXPECT_EQ(cost.bwd.tensor_kernels, aligned ? 2 : 0);
    // One launch whose tiles are the faster of each group's own (all 32 groups in one grid) and
    // tiles spanning several groups' channels (N = 32 x the group's channels, K the group's).
    const double c_g = static_cast<double>(c) / 32;
    const double flops = 2.0 * b * 28 * 28 * c_g * c_g * 9;
    const double peak = aligned ? 312e12 : 19.5e12;
    const double eff = aligned ? p.tensor_efficiency : p.gemm_efficiency;
    const double alpha = FittedKernelParams().tile_alpha;
    const GemmPlan own = PlanGemmTiles(b * 28 * 28, c_g, c_g * 9, 32, 108, peak, eff, alpha, 4);
    const GemmPlan spanning = PlanGemmTiles(b * 28 * 28, c, c_g * 9, 1, 108, peak, eff, alpha, 4);
    // 4 or 8 channels fill a quarter or half of the narrowest (16-wide) tile; 128 or 256 fill it.
    EXPECT_GT(spanning.rate, 1.5 * own.rate);
    const double vb = 2;
    const double bytes = vb * (b * 28 * 28 * c * 2 + c * c_g * 9) + spanning.extra_bytes;
    const double expected =
        p.launch_us * 1e3 +
        1e9 * std::max(32 * flops / spanning.rate, bytes / (2000e9 * p.memory_efficiency));
    const double cast = FrameworkLayerCost(conv, b, d, p).fwd.ns - expected;  // the weight's cast
    EXPECT_GT(cast, p.launch_us * 1e3);
    EXPECT_LT(cast,
              p.launch_us * 1e3 + 1e9 * 6.0 * c * c_g * 9 / (2000e9 * p.memory_efficiency) + 1e-6);
  }
  // The same convolution ungrouped keeps its one kernel and its algorithms: grouping only
  // changes how the groups' work is launched.
  const core::Model plain = ConvNet(256, 28);
  EXPECT_EQ(FrameworkLayerCost(plain.layers()[1], b, Ampere(Precision::kFp32), p).fwd.kernels, 1);
}

// Batch norm: cuDNN's kernels (one a pass) unless bf16, then ATen's (NCHW two forward and one
// backward; channels-last two each way), bound by the busy SMs' values a clock or by DRAM at the
// values' width; in NCHW a layer of few channels leaves SMs idle.
// ConvNet with a depthwise convolution (c groups of one channel), k x k at stride s.
core::Model DepthwiseNet(int64_t c, int64_t h, int64_t k, int64_t s) {
  return ConvNet(c, h, c, k, s);
}

TEST(FrameworkModel, DepthwiseConvolutionsRunTheKernelsPyTorchPicksAtTheirTapRate) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.dispatch_us = p.launch_us = 0;
  p.dw_cudnn_nchw = 8, p.dw_cudnn_nhwc = 4, p.dw_native = 2;
  const double sm_clocks = 108 * 1410e6;  // Ampere(): SMs x boost clock, a second
  const auto cost = [&](const core::Model& m, Precision pr, config::MemoryFormat f) {
    return FrameworkLayerCost(m.layers()[1], 32, WithLayout(Ampere(pr), f), p);
  };
  const auto nchw = config::MemoryFormat::kNchw;
  const auto nhwc = config::MemoryFormat::kNhwc;
  // fp32 in NCHW: ATen's conv_depthwise2d, one kernel forward, data and weight backward, each
  // K x K taps an output value at 2 taps a clock per SM (DRAM would take less).
  const core::Model s1 = DepthwiseNet(96, 56, 3, 1);
  const double taps = 32.0 * 96 * 56 * 56 * 9;
  const LayerCost fp32 = cost(s1, Precision::kFp32, nchw);
  EXPECT_EQ(fp32.fwd.algo, ConvAlgo::kDepthwiseNative);
  EXPECT_EQ(fp32.fwd.kernels, 1);
  EXPECT_EQ(fp32.bwd.kernels, 2);
  EXPECT_EQ(fp32.fwd.tensor_kernels + fp32.bwd.tensor_kernels, 0);
  EXPECT_NEAR(fp32.fwd.ns, 1e9 * taps / (2 * sm_clocks), 1.0);
  EXPECT_NEAR(fp32.bwd.ns, 2 * fp32.fwd.ns, 1.0);
  // tf32 and bf16 in NCHW: ATen's too (PyTorch asks cuDNN only for fp16).
  EXPECT_EQ(cost(s1, Precision::kTf32, nchw).fwd.algo, ConvAlgo::kDepthwiseNative);
  EXPECT_EQ(cost(s1, Precision::kBf16, nchw).fwd.algo, ConvAlgo::kDepthwiseNative);
  // Half precision adds autocast's cast of the fp32 filter (6 bytes a value) to each pass.
  const auto cast = [&](Precision pr) {
    const bool half = pr == Precision::kFp16 || pr == Precision::kBf16;
    return half ? 1e9 * 6 * 96 * 9 / (p.memory_efficiency * 2000e9) : 0.0;
  };
  // fp16 in NCHW at stride 1: cuDNN's, at its NCHW rate.
  const LayerCost fp16 = cost(s1, Precision::kFp16, nchw);
  EXPECT_EQ(fp16.fwd.algo, ConvAlgo::kDepthwiseCudnn);
  EXPECT_NEAR(fp16.fwd.ns, 1e9 * taps / (8 * sm_clocks) + cast(Precision::kFp16), 1.0);
  // Channels-last: cuDNN's at every precision, at its channels-last rate.
  for (Precision pr : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    const LayerCost c = cost(s1, pr, nhwc);
    EXPECT_EQ(c.fwd.algo, ConvAlgo::kDepthwiseCudnn) << config::PrecisionName(pr);
    EXPECT_NEAR(c.fwd.ns, 1e9 * taps / (4 * sm_clocks) + cast(pr), 1.0)
        << config::PrecisionName(pr);
  }
  // fp16 NCHW at stride 2: cuDNN's only with >= 512 channels, or >= 256 on planes >= 28 wide.
  const auto algo = [&](int64_t c, int64_t h, int64_t k) {
    return cost(DepthwiseNet(c, h, k, 2), Precision::kFp16, nchw).fwd.algo;
  };
  EXPECT_EQ(algo(96, 112, 3), ConvAlgo::kDepthwiseNative);
  EXPECT_EQ(algo(240, 28, 5), ConvAlgo::kDepthwiseNative);
  EXPECT_EQ(algo(256, 28, 5), ConvAlgo::kDepthwiseCudnn);
  EXPECT_EQ(algo(256, 14, 3), ConvAlgo::kDepthwiseNative);
  EXPECT_EQ(algo(672, 14, 5), ConvAlgo::kDepthwiseCudnn);
  // Fewer than 32 channels, or a 7x7 filter: ATen's even at stride 1.
  EXPECT_EQ(cost(DepthwiseNet(16, 56, 3, 1), Precision::kFp16, nchw).fwd.algo,
            ConvAlgo::kDepthwiseNative);
  EXPECT_EQ(cost(DepthwiseNet(64, 56, 7, 1), Precision::kFp16, nchw).fwd.algo,
            ConvAlgo::kDepthwiseNative);
  // A fast rate leaves DRAM to bound it: forward x, y and the filter at the values' width.
  p.dw_cudnn_nchw = 1e6;
  p.memory_efficiency = 0.5;
  const double bytes = 2.0 * (32.0 * 96 * 56 * 56 * 2 + 96 * 9);
  EXPECT_NEAR(cost(s1, Precision::kFp16, nchw).fwd.ns,
              1e9 * bytes / (0.5 * 2000e9) + cast(Precision::kFp16), 1.0);
  // A grouped convolution with channels per group is not depthwise: implicit GEMM, as before.
  EXPECT_EQ(
      FrameworkLayerCost(ConvNet(64, 56, 16).layers()[1], 32, Ampere(Precision::kFp16), p).fwd.algo,
      ConvAlgo::kImplicitGemm);
}

TEST(FrameworkModel, BatchNormRunsPyTorchsKernelsAtTheSmsRate) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.dispatch_us = p.launch_us = 0;
  p.memory_efficiency = 0.9;
  p.bn_cudnn_nchw = 2, p.bn_native_nchw = 1.5;  // NCHW: cuDNN's kernels, ATen's
  p.bn_cudnn_nhwc = 8, p.bn_native_nhwc = 4;    // channels-last
  p.bn_nchw_channels_per_sm = 2;
  const double sm_clocks = 108 * 1410e6;  // Ampere(): SMs x boost clock, a second
  const auto bn_of = [](int64_t channels) { return ConvNet(channels, 56); };
  const auto at = [&](const core::Model& m, Precision pr, config::MemoryFormat f) {
    return FrameworkLayerCost(m.layers()[2], 32, WithLayout(Ampere(pr), f), p);
  };
  const core::Model wide = bn_of(256);  // 256 channels >= 2 x 108 SMs: every SM busy
  const double values = 32.0 * 256 * 56 * 56;
  // fp32 NCHW: cuDNN, one kernel each way, forward 3 values an activation, backward 5, at the
  // SMs' rate (DRAM at 4 bytes a value, 0.9 x 2 TB/s, would take less).
  const LayerCost fp32 = at(wide, Precision::kFp32, config::MemoryFormat::kNchw);
  EXPECT_EQ(fp32.fwd.kernels, 1);
  EXPECT_EQ(fp32.bwd.kernels, 1);
  EXPECT_NEAR(fp32.fwd.ns, 1e9 * 3 * values / (2 * sm_clocks), 1.0);
  EXPECT_NEAR(fp32.bwd.ns, 1e9 * 5 * values / (2 * sm_clocks), 1.0);
  // fp16 runs the same cuDNN kernels at the same rate: not the values' width.
  EXPECT_DOUBLE_EQ(at(wide, Precision::kFp16, config::MemoryFormat::kNchw).fwd.ns, fp32.fwd.ns);
  // bf16: ATen's kernels at their own rate.
  const LayerCost bf16 = at(wide, Precision::kBf16, config::MemoryFormat::kNchw);
  EXPECT_EQ(bf16.fwd.kernels, 2);
  EXPECT_EQ(bf16.bwd.kernels, 1);
  EXPECT_NEAR(bf16.fwd.ns / fp32.fwd.ns, 2 / 1.5, 1e-9);
  const LayerCost bf16_nhwc = at(wide, Precision::kBf16, config::MemoryFormat::kNhwc);
  EXPECT_EQ(bf16_nhwc.fwd.kernels, 2);
  EXPECT_EQ(bf16_nhwc.bwd.kernels, 2);
  EXPECT_NEAR(bf16_nhwc.fwd.ns, 1e9 * 3 * values / (4 * sm_clocks), 1.0);
  // cuDNN channels-last at 8 values a clock outruns DRAM: bound by DRAM at the values' width.
  const LayerCost fp16_nhwc = at(wide, Precision::kFp16, config::MemoryFormat::kNhwc);
  EXPECT_NEAR(fp16_nhwc.fwd.ns, 1e9 * 3 * values * 2 / (0.9 * 2000e9), 1.0);
  EXPECT_NEAR(at(wide, Precision::kFp32, config::MemoryFormat::kNhwc).fwd.ns, 2 * fp16_nhwc.fwd.ns,
              1.0);
  // 54 channels keep a quarter of the 216 blocks' worth of SMs busy in NCHW: 4 x the time a
  // value; channels-last is not limited by channels.
  const core::Model narrow = bn_of(54);
  const double narrow_values = 32.0 * 54 * 56 * 56;
  EXPECT_NEAR(at(narrow, Precision::kFp32, config::MemoryFormat::kNchw).fwd.ns,
              1e9 * 3 * narrow_values / (2 * sm_clocks / 4), 1.0);
  EXPECT_NEAR(at(narrow, Precision::kBf16, config::MemoryFormat::kNhwc).fwd.ns,
              1e9 * 3 * narrow_values / (4 * sm_clocks), 1.0);
}

// A device file without the boost clock cannot price batch norm: one line says what to add.
TEST(FrameworkModel, ADeviceWithoutItsClockIsNamed) {
  config::DeviceSpec d = Ampere(Precision::kBf16);
  EXPECT_EQ(config::FrameworkFiguresMissing(d), "");
  d.boost_clock_mhz = 0;
  const std::string why = config::FrameworkFiguresMissing(d);
  EXPECT_NE(why.find("'boost_clock_mhz'"), std::string::npos) << why;
  EXPECT_NE(why.find("'amp'"), std::string::npos) << why;
}

core::LayerSpec Layer(const std::string& name, core::LayerKind kind,
                      std::vector<std::string> bottoms = {}) {
  core::LayerSpec l;
  l.name = name;
  l.kind = kind;
  l.bottoms = std::move(bottoms);
  return l;
}

// A k x k convolution to c channels, padded to keep the plane, no bias.
core::LayerSpec Conv(const std::string& name, int64_t c, int64_t k) {
  core::LayerSpec l = Layer(name, core::LayerKind::kConv);
  l.num_output = c;
  l.kernel_h = l.kernel_w = k;
  l.pad_h = l.pad_w = k / 2;
  l.bias = false;
  return l;
}

// A residual block as ResNet writes it: conv -> bn_a -> relu_a -> conv_b -> bn_b, then
// add(relu_a, bn_b) -> relu_out; c channels of h x h throughout.
core::Model ResidualBlock(int64_t c, int64_t h) {
  core::ModelSpec spec;
  spec.name = "block";
  spec.input_c = c, spec.input_h = h, spec.input_w = h;
  spec.layers = {Conv("conv_a", c, 3),
                 Layer("bn_a", core::LayerKind::kBatchNorm),
                 Layer("relu_a", core::LayerKind::kRelu),
                 Conv("conv_b", c, 3),
                 Layer("bn_b", core::LayerKind::kBatchNorm),
                 Layer("add", core::LayerKind::kAdd, {"relu_a", "bn_b"}),
                 Layer("relu_out", core::LayerKind::kRelu)};
  return core::Model::Build(spec);
}

TEST(FrameworkModel, AFusedBatchNormRunsTheReluAndAddAfterIt) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.dispatch_us = 0;
  const core::Model m = ResidualBlock(64, 56);
  enum { kConvA, kBnA, kReluA, kConvB, kBnB, kAdd, kReluOut };
  const int64_t b = 32;
  auto costs = [&](Precision pr, config::MemoryFormat f, config::BatchNormFusion fusion) {
    config::DeviceSpec d = WithLayout(Ampere(pr), f);
    d.batchnorm_fusion = fusion;
    return FrameworkModelCosts(m, b, d, p);
  };
  const auto none =
      costs(Precision::kFp16, config::MemoryFormat::kNhwc, config::BatchNormFusion::kNone);
  // Unfused, every layer is what it costs alone.
  for (const core::Layer& l : m.layers()) {
    const LayerCost alone = FrameworkLayerCost(
        l, b, WithLayout(Ampere(Precision::kFp16), config::MemoryFormat::kNhwc), p);
    EXPECT_DOUBLE_EQ(none[static_cast<size_t>(l.id)].fwd.ns, alone.fwd.ns) << l.name;
    EXPECT_DOUBLE_EQ(none[static_cast<size_t>(l.id)].bwd.ns, alone.bwd.ns) << l.name;
  }
  // One tensor through cuDNN's channels-last batch norm (the fused one): its values at the SMs'
  // rate or DRAM's at 2 bytes a value, whichever is slower.
  const double values = static_cast<double>(b) * 64 * 56 * 56;
  const double t = 1e9 * std::max(values / (p.bn_cudnn_nhwc * 108 * 1410e6),
                                  values * 2 / (2000e9 * p.memory_efficiency));
  const auto relu =
      costs(Precision::kFp16, config::MemoryFormat::kNhwc, config::BatchNormFusion::kBnRelu);
  EXPECT_EQ(relu[kReluA].fwd.kernels + relu[kReluA].bwd.kernels, 0);
  EXPECT_EQ(relu[kReluA].fwd.ns + relu[kReluA].bwd.ns, 0);
  EXPECT_DOUBLE_EQ(relu[kBnA].fwd.ns, none[kBnA].fwd.ns);
  EXPECT_NEAR(relu[kBnA].bwd.ns - none[kBnA].bwd.ns, t, 1e-6 * t);  // + y, the mask
  // bn_relu leaves the residual add and its ReLU alone (bn_b feeds the add, not a ReLU).
  EXPECT_DOUBLE_EQ(relu[kAdd].fwd.ns, none[kAdd].fwd.ns);
  EXPECT_DOUBLE_EQ(relu[kReluOut].fwd.ns, none[kReluOut].fwd.ns);
  EXPECT_DOUBLE_EQ(relu[kBnB].bwd.ns, none[kBnB].bwd.ns);

  const auto add =
      costs(Precision::kFp16, config::MemoryFormat::kNhwc, config::BatchNormFusion::kBnAddRelu);
  for (int gone : {kReluA, kAdd, kReluOut}) {
    EXPECT_EQ(add[gone].fwd.kernels + add[gone].bwd.kernels, 0) << gone;
    EXPECT_EQ(add[gone].fwd.ns + add[gone].bwd.ns, 0) << gone;
  }
  EXPECT_NEAR(add[kBnB].fwd.ns - none[kBnB].fwd.ns, t, 1e-6 * t);      // + the addend
  EXPECT_NEAR(add[kBnB].bwd.ns - none[kBnB].bwd.ns, 2 * t, 1e-6 * t);  // + y, + its gradient
  EXPECT_DOUBLE_EQ(add[kConvB].fwd.ns, none[kConvB].fwd.ns);
  // What the fused kernels save: the add's and the ReLUs' own passes, less the bytes they add.
  double before = 0, after = 0;
  for (size_t i = 0; i < none.size(); ++i) {
    before += none[i].fwd.ns + none[i].bwd.ns;
    after += add[i].fwd.ns + add[i].bwd.ns;
  }
  EXPECT_LT(after, before);
  // bf16 too, where the fusing framework runs cuDNN's batch norm (one kernel a pass), not
  // ATen's as PyTorch does.
  const auto bf16 =
      costs(Precision::kBf16, config::MemoryFormat::kNhwc, config::BatchNormFusion::kBnAddRelu);
  EXPECT_EQ(bf16[kBnB].fwd.kernels + bf16[kBnB].bwd.kernels, 2);
  EXPECT_DOUBLE_EQ(bf16[kBnB].fwd.ns, add[kBnB].fwd.ns);
  EXPECT_EQ(none[kBnB].fwd.kernels, 1);  // fp16: cuDNN's, fused or not

  // cuDNN fuses only NHWC at half precision: NCHW, fp32 and tf32 keep every kernel.
  for (auto [pr, f] : {std::pair{Precision::kBf16, config::MemoryFormat::kNchw},
                       std::pair{Precision::kFp32, config::MemoryFormat::kNhwc},
                       std::pair{Precision::kTf32, config::MemoryFormat::kNhwc}}) {
    const auto kept = costs(pr, f, config::BatchNormFusion::kBnAddRelu);
    const auto plain = costs(pr, f, config::BatchNormFusion::kNone);
    for (size_t i = 0; i < kept.size(); ++i) {
      EXPECT_DOUBLE_EQ(kept[i].fwd.ns, plain[i].fwd.ns);
      EXPECT_DOUBLE_EQ(kept[i].bwd.ns, plain[i].bwd.ns);
    }
  }
}

TEST(FrameworkModel, ABatchNormReadByTwoLayersIsNotFused) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  // conv -> bn -> relu, and the bn also feeds an add: the ReLU cannot run inside it.
  core::ModelSpec spec;
  spec.name = "shared";
  spec.input_c = 16, spec.input_h = spec.input_w = 8;
  spec.layers = {Conv("conv", 16, 1), Layer("bn", core::LayerKind::kBatchNorm),
                 Layer("relu", core::LayerKind::kRelu),
                 Layer("sum", core::LayerKind::kAdd, {"bn", "relu"})};
  const core::Model m = core::Model::Build(spec);
  config::DeviceSpec d = WithLayout(Ampere(Precision::kFp16), config::MemoryFormat::kNhwc);
  const auto plain = FrameworkModelCosts(m, 8, d, p);
  d.batchnorm_fusion = config::BatchNormFusion::kBnAddRelu;
  const auto fused = FrameworkModelCosts(m, 8, d, p);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_DOUBLE_EQ(fused[i].fwd.ns, plain[i].fwd.ns) << i;
    EXPECT_DOUBLE_EQ(fused[i].bwd.ns, plain[i].bwd.ns) << i;
  }
}

TEST(FrameworkModel, AutocastCastsEachParameterTensorOncePerPass) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.dispatch_us = 0;
  const core::Model m = FcNet(4096, 4096);
  const core::Layer& fc = m.layers()[1];
  const LayerCost fp32 = FrameworkLayerCost(fc, 64, Ampere(Precision::kFp32), p);
  const LayerCost tf32 = FrameworkLayerCost(fc, 64, Ampere(Precision::kTf32), p);
  const LayerCost bf16 = FrameworkLayerCost(fc, 64, Ampere(Precision::kBf16), p);
  EXPECT_EQ(bf16.fwd.kernels, fp32.fwd.kernels + 1);
  EXPECT_EQ(bf16.bwd.kernels, fp32.bwd.kernels + 1);
  EXPECT_EQ(tf32.fwd.kernels, fp32.fwd.kernels);  // tf32 keeps fp32 tensors: nothing to cast
  // The cast reads 4 bytes and writes 2 per parameter.
  const LayerCost no_cast = FrameworkLayerCost(m.layers()[0], 64, Ampere(Precision::kBf16), p);
  EXPECT_EQ(no_cast.fwd.kernels, 1);  // relu has no parameters
  const double cast = p.launch_us * 1e3 + 1e9 * 6.0 * 4096 * 4096 / (2000e9 * p.memory_efficiency);
  const double gemm = FrameworkGemmNs(64, 4096, 4096, Ampere(Precision::kBf16), p);
  EXPECT_NEAR(bf16.fwd.ns, gemm + cast, 1e-6 * cast);
}

// embedding -> attention (S tokens of width D, 8 heads) with Transformer-XL's memory and relative
// keys as given.
core::Model AttentionNet(int64_t s, int64_t d, int64_t memory, bool relative) {
  core::ModelSpec spec;
  spec.name = "attnnet";
  spec.input_c = 1, spec.input_h = 1, spec.input_w = s;
  spec.input_rank = 1;
  core::LayerSpec emb;
  emb.name = "emb";
  emb.kind = core::LayerKind::kEmbedding;
  emb.vocab = 1000;
  emb.num_output = d;
  core::LayerSpec attn;
  attn.name = "attn";
  attn.kind = core::LayerKind::kAttention;
  attn.heads = 8;
  attn.bias = false;
  attn.memory = memory;
  attn.relative = relative;
  spec.layers = {emb, attn};
  return core::Model::Build(spec);
}

// A memory lengthens the keys and the K, V projections, and costs its two copies; relative
// positions add a position projection, a second score GEMM and its shift; without either key the
// layer is priced as before (both equal to a layer whose keys were never given).
TEST(FrameworkModel, TransformerXlAttentionPaysForItsMemoryAndPositions) {
  const config::DeviceSpec d = Ampere(Precision::kFp16);
  const config::FrameworkModelParams p = FittedFrameworkParams();
  const auto cost = [&](int64_t memory, bool relative) {
    const core::Model m = AttentionNet(192, 512, memory, relative);
    return FrameworkLayerCost(m.layers()[1], 256, d, p);
  };
  const LayerCost plain = cost(0, false), mem = cost(192, false), xl = cost(192, true);
  EXPECT_GT(mem.fwd.ns, 1.3 * plain.fwd.ns);
  EXPECT_GT(mem.bwd.ns, 1.3 * plain.bwd.ns);
  EXPECT_EQ(mem.fwd.kernels, plain.fwd.kernels + 2);  // the two concatenations
  EXPECT_EQ(mem.fwd.gemm_kernels, plain.fwd.gemm_kernels);
  EXPECT_GT(xl.fwd.ns, mem.fwd.ns);
  EXPECT_GT(xl.bwd.ns, mem.bwd.ns);
  EXPECT_EQ(xl.fwd.gemm_kernels, mem.fwd.gemm_kernels + 2);  // Wr's projection, the BD term
  EXPECT_EQ(xl.bwd.gemm_kernels, mem.bwd.gemm_kernels + 3);
  EXPECT_EQ(xl.fwd.tensor_kernels, xl.fwd.gemm_kernels);  // every GEMM is aligned
  // The memory's rows are projected: at a memory as long as the segment, K, V and Q cost about
  // twice theirs without it, so the forward pass grows by well under 3x.
  EXPECT_LT(mem.fwd.ns, 3 * plain.fwd.ns);
}

// What a kernel profile can be compared with: of each pass's GPU time (kernel_ns, before the
// dispatch floor), the GEMM-like kernels' (gemm_ns). Layouts, biases, casts and memory-bound
// layers are the rest.
TEST(FrameworkModel, EachPassSaysWhatOfItsGpuTimeIsGemms) {
  const config::FrameworkModelParams p = FittedFrameworkParams();
  const int64_t b = 32;
  // An FC layer without bias in fp32: all GEMM; in half precision autocast's casts are the rest.
  const core::Model fc = FcNet(4096, 4096);
  const LayerCost f32 = FrameworkLayerCost(fc.layers()[1], b, Ampere(Precision::kFp32), p);
  EXPECT_GT(f32.fwd.gemm_ns, 0);
  EXPECT_EQ(f32.fwd.gemm_ns, f32.fwd.kernel_ns);
  EXPECT_EQ(f32.bwd.gemm_ns, f32.bwd.kernel_ns);
  EXPECT_GE(f32.fwd.ns, f32.fwd.kernel_ns);  // the dispatch floor only adds
  const LayerCost f16 = FrameworkLayerCost(fc.layers()[1], b, Ampere(Precision::kFp16), p);
  EXPECT_GT(f16.fwd.gemm_ns, 0);
  EXPECT_LT(f16.fwd.gemm_ns, f16.fwd.kernel_ns);
  // A tensor-core convolution: in NHWC all GEMM but the casts, in NCHW the transposes are not.
  const core::Model conv = ConvNet(64, 56);
  const config::DeviceSpec nchw = WithLayout(Ampere(Precision::kTf32), config::MemoryFormat::kNchw);
  const config::DeviceSpec nhwc = WithLayout(Ampere(Precision::kTf32), config::MemoryFormat::kNhwc);
  const LayerCost cn = FrameworkLayerCost(conv.layers()[1], b, nchw, p);
  const LayerCost cc = FrameworkLayerCost(conv.layers()[1], b, nhwc, p);
  EXPECT_EQ(cc.fwd.gemm_ns, cc.fwd.kernel_ns);
  EXPECT_EQ(cn.fwd.gemm_ns, cc.fwd.gemm_ns);
  EXPECT_LT(cn.fwd.gemm_ns, cn.fwd.kernel_ns);
  // A memory-bound layer has none; the cudnn model leaves both 0.
  const LayerCost relu = FrameworkLayerCost(conv.layers()[0], b, nhwc, p);
  EXPECT_EQ(relu.fwd.gemm_ns, 0);
  EXPECT_GT(relu.fwd.kernel_ns, 0);
  // Attention: its projections' and the batched score and context GEMMs, not the softmax.
  const core::Model att = AttentionNet(192, 512, 0, false);
  const LayerCost a = FrameworkLayerCost(att.layers()[1], 64, Ampere(Precision::kFp16), p);
  EXPECT_GT(a.fwd.gemm_ns, 0.5 * a.fwd.kernel_ns);
  EXPECT_LT(a.fwd.gemm_ns, a.fwd.kernel_ns);
  const LayerCost xl = FrameworkLayerCost(AttentionNet(192, 512, 192, true).layers()[1], 64,
                                          Ampere(Precision::kFp16), p);
  EXPECT_GT(xl.fwd.gemm_ns, a.fwd.gemm_ns);
  EXPECT_GT(xl.bwd.gemm_ns, a.bwd.gemm_ns);
  EXPECT_LT(xl.bwd.gemm_ns, xl.bwd.kernel_ns);
}

TEST(FrameworkModel, TheOptimizerStepIsOnePassOverParametersAndState) {
  config::FrameworkModelParams p = FittedFrameworkParams();
  p.launch_us = 0;
  const core::Model m = FcNet(1000, 1000);  // 1e6 parameters in one tensor
  config::DeviceSpec d = Ampere(Precision::kFp32);
  const double bw = 2000e9 * p.memory_efficiency;
  EXPECT_NEAR(OptimizerStepNs(m, d, p), 1e9 * 20 * 1e6 / bw, 1.0);  // SGD with momentum
  d.optimizer = config::OptimizerKind::kAdam;
  EXPECT_NEAR(OptimizerStepNs(m, d, p), 1e9 * 28 * 1e6 / bw, 1.0);
  d.precision = Precision::kBf16;  // + the gradients' unscale (the casts are the layers')
  EXPECT_NEAR(OptimizerStepNs(m, d, p), 1e9 * 36 * 1e6 / bw, 1.0);
}

TEST(FrameworkModel, TheComputeModelChargesTheIterationOnceBeforeTheFirstForward) {
  const core::Model m = FcNet(1024, 1024);
  const config::DeviceSpec d = Ampere(Precision::kBf16);
  const ComputeModel c = ComputeModel::FromDevice(m, d, 256);
  const config::FrameworkModelParams p = FittedFrameworkParams();
  const double first = FrameworkLayerCost(m.layers()[0], 256, d, p).fwd.ns;
  EXPECT_GT(c.iteration_ns(), 0);
  EXPECT_EQ(c.fwd_ns(0), std::llround(first + c.iteration_ns()));
  EXPECT_EQ(c.fwd_ns(1), std::llround(FrameworkLayerCost(m.layers()[1], 256, d, p).fwd.ns));
  EXPECT_NE(c.source().find("framework model amp bf16"), std::string::npos) << c.source();
}

// A fusion that cannot apply (NCHW, or no half precision) is priced as none, and said so.
TEST(FrameworkModel, AFusionThatCannotApplyIsAWarning) {
  const core::Model m = ResidualBlock(16, 8);
  for (auto [pr, f, warns] : {std::tuple{Precision::kBf16, config::MemoryFormat::kNhwc, false},
                              std::tuple{Precision::kBf16, config::MemoryFormat::kNchw, true},
                              std::tuple{Precision::kTf32, config::MemoryFormat::kNhwc, true}}) {
    config::DeviceSpec d = WithLayout(Ampere(pr), f);
    d.batchnorm_fusion = config::BatchNormFusion::kBnAddRelu;
    const ComputeModel c = ComputeModel::FromDevice(m, d, 8);
    bool said = false;
    for (const std::string& w : c.warnings()) said |= w.find("fuses nothing") != std::string::npos;
    EXPECT_EQ(said, warns) << config::PrecisionName(pr) << " " << config::MemoryFormatName(f);
    d.batchnorm_fusion = config::BatchNormFusion::kNone;
    EXPECT_TRUE(ComputeModel::FromDevice(m, d, 8).warnings().empty());
  }
}

TEST(FrameworkModel, DeviceOverridesReplaceTheFittedConstants) {
  config::DeviceSpec d = Ampere(Precision::kFp16);
  d.framework_model["dispatch_us"] = 123;
  EXPECT_DOUBLE_EQ(FrameworkParamsFor(d).dispatch_us, 123);
  EXPECT_DOUBLE_EQ(FrameworkParamsFor(d).tensor_efficiency,
                   FittedFrameworkParams().tensor_efficiency);
}

}  // namespace
}  // namespace poseidon::cost
