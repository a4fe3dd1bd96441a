#include "cost/framework_model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "config/compute_loader.h"
#include "core/types.h"
#include "cost/layer_work.h"

namespace poseidon::cost {
namespace {

using config::DeviceSpec;
using config::Precision;

// v5: fitted by `poseidon gpu-model fit --compute-model framework --all-rows --evaluations 1500`
// on every row of the PyTorch measurement files seen before (538 rows: v3's 16 files, the PyTorch
// 1.10 set, the depthwise sets and the families set less its RegNet channels-last rows), with
// batch norm's measured rates and v4's depthwise rates held; frozen before the second families set
// (families2_2026-12-07/) was priced. The tensor-core tile exponent went to its bound: tile size
// costs a tensor-core kernel only its quantization. v3 (fitted on 405 rows, judged on the PyTorch
// 1.10 set) and v4 (the depthwise rates, judged on DeepLearningExamples' EfficientNet) are in
// docs/gpu_model.md with their commands and results.
constexpr FrameworkModelParams kFitted = {
    .tensor_efficiency = 0.949572,
    .gemm_efficiency = 0.754952,
    .memory_efficiency = 0.753116,
    .launch_us = 5.23238,
    .dispatch_us = 33.7871,
    .iteration_us = 7.74219e-06,
    .tensor_feed_per_sm_clock = 2537.48,
    .tensor_tile_alpha = 1.30539e-10,
    // v6 (unaligned GEMMs on tensor cores, cuBLAS 11.0 and later): v5's other constants held, the
    // objective over every seen PyTorch row (v5's 538, the second families set, the SSD300 and
    // Transformer-XL sets) scanned on a 10-FLOP grid (below ~100 the CUDA-core plan wins and the
    // objective is flat, so the simplex cannot start from the default): least at 290 (23.666,
    // against 27.712 without).
    .unaligned_feed_per_sm_clock = 290,
    // v4 (depthwise convolutions): fitted with v3's seven constants held, on timm's RTX 3090 rows
    // of EfficientNet and MobileNet v2 (depthwise_2026-12-07/timm_rtx3090_pt111.yaml and
    // _pt110_pt112.yaml). dw_native from PyTorch 1.10's NCHW rows, whose rule ran every 5x5
    // depthwise convolution on ATen's kernels (it predates cuDNN 8.2's); the others from the rest.
    // dw_cudnn_nchw is not identified above about 20 (those kernels are DRAM-bound at any such
    // rate). Held by v5's fit.
    .dw_cudnn_nchw = 34.1098,
    .dw_cudnn_nhwc = 4.9314,
    .dw_native = 3.98741,
};

// What one device runs at one precision.
struct Ctx {
  const DeviceSpec& d;
  const FrameworkModelParams& p;
  KernelModelParams kp;      // the cudnn model's constants, with this model's rates (fp32 path)
  double value_bytes = 4;    // activations and their gradients
  double tensor_peak = 0;    // FLOP/s of the half/tf32 path; 0 = fp32 on CUDA cores only
  double align = 1;          // values a tensor-core GEMM's N and K must be a multiple of
  double unaligned_peak = 0;  // FLOP/s of a tensor-core GEMM whose N or K is not; 0: CUDA cores
  double fp32_peak = 0;
  double memory_Bps = 0;
  double bn_values_per_s = 0;  // batch norm's per-SM bound: values a second over all SMs
  bool bn_native = false;      // bf16: ATen's batch-norm kernels, not cuDNN's (PyTorch's rule)
  bool nchw = true;  // activations in NCHW: tensor-core convolutions transpose around them
};

Ctx MakeCtx(const DeviceSpec& d, const FrameworkModelParams& p) {
  Ctx c{d, p, FittedKernelParams()};
  for (const auto& [name, v] : d.kernel_model) {
    for (int i = 0; i < config::kNumKernelParams; ++i) {
      if (name == config::kKernelParamNames[i]) *config::KernelParamField(c.kp, i) = v;
    }
  }
  c.kp.gemm_efficiency = p.gemm_efficiency;
  c.kp.memory_efficiency = p.memory_efficiency;
  c.kp.launch_us = p.launch_us;
  const double arch = d.architecture == config::GpuArchitecture::kKepler ? c.kp.kepler_efficiency
                                                                         : 1.0;
  c.fp32_peak = d.peak_flops * arch;
  c.memory_Bps = d.memory_bandwidth_Bps * p.memory_efficiency;
  c.nchw = d.memory_format == config::MemoryFormat::kNchw;
  // PyTorch's _select_batch_norm_backend (aten/src/ATen/native/Normalization.cpp) takes cuDNN's
  // batch norm unless the input or weight is bf16; then ATen's own kernels run. Where a framework
  // fuses batch norm (device.batchnorm_fusion, NHWC: MXNet, Paddle, TensorFlow), cuDNN's run.
  const Precision pr = d.precision;
  const bool fusing = d.batchnorm_fusion != config::BatchNormFusion::kNone && !c.nchw;
  c.bn_native = pr == Precision::kBf16 && !fusing;
  const double per_clock = c.bn_native ? (c.nchw ? p.bn_native_nchw : p.bn_native_nhwc)
                                       : (c.nchw ? p.bn_cudnn_nchw : p.bn_cudnn_nhwc);
  POSEIDON_CHECK(d.boost_clock_mhz > 0) << config::FrameworkFiguresMissing(d);
  c.bn_values_per_s = per_clock * static_cast<double>(d.sm_count) * d.boost_clock_mhz * 1e6;
  if (pr == Precision::kFp32) return c;
  const auto it = d.tensor_flops.find(pr);
  if (it != d.tensor_flops.end()) {
    // The datasheet peak, and what the SMs' operand paths feed the tensor cores.
    const double feed =
        p.tensor_feed_per_sm_clock * static_cast<double>(d.sm_count) * d.boost_clock_mhz * 1e6;
    c.tensor_peak = 1 / (1 / it->second + 1 / feed);
    // cuBLAS before 11.0 (device.cuda_version) has no tensor-core plan for an unaligned GEMM.
    const bool unaligned_tc = d.cuda_version == 0 || d.cuda_version >= 110;
    if (p.unaligned_feed_per_sm_clock > 0 && unaligned_tc) {
      const double narrow =
          p.unaligned_feed_per_sm_clock * static_cast<double>(d.sm_count) * d.boost_clock_mhz * 1e6;
      c.unaligned_peak = 1 / (1 / c.tensor_peak + 1 / narrow);
    }
  } else if (pr == Precision::kFp16 && d.fp16_flops > 0) {
    c.tensor_peak = d.fp16_flops;  // half2 on CUDA cores (P100)
  } else if (pr == Precision::kFp16) {
    c.tensor_peak = c.fp32_peak;  // no fast half: fp16 storage, fp32 arithmetic (pseudo-half)
  }
  POSEIDON_CHECK(c.tensor_peak > 0) << config::PrecisionUnsupported(d, pr);
  c.align = pr == Precision::kTf32 ? 4 : (it != d.tensor_flops.end() ? 8 : d.fp16_flops > 0 ? 2 : 1);
  if (pr == Precision::kFp16 || pr == Precision::kBf16) c.value_bytes = 2;
  return c;
}

bool Aligned(const Ctx& c, double n, double k) {
  return c.tensor_peak > 0 && std::fmod(n, c.align) == 0 && std::fmod(k, c.align) == 0;
}

// One kernel's work on the GPU at its rates (the CPU's dispatch is charged per pass: DispatchFloor).
double KernelNs(const Ctx& c, double flops, double rate, double bytes) {
  return c.p.launch_us * 1e3 + 1e9 * std::max(flops / rate, bytes / c.memory_Bps);
}

// A memory-bound kernel.
double StreamKernelNs(const Ctx& c, double flops, double bytes) {
  return KernelNs(c, flops, c.fp32_peak, bytes);
}

// The faster of a GEMM's tensor-core plan and its CUDA-core plan, as cuBLAS's and cuDNN's
// heuristics pick (on GeForce Ampere the tf32 tensor rate is no faster than fp32's). An unaligned
// GEMM's tensor-core plan runs at the narrow loads' rate (unaligned_peak), when the model has one.
GemmPlan BestGemmPlan(const Ctx& c, double count, double m, double n, double k) {
  GemmPlan plan = PlanGemmTiles(m, n, k, count, c.d.sm_count, c.fp32_peak, c.p.gemm_efficiency,
                                c.kp.tile_alpha, 4);
  const bool aligned = Aligned(c, n, k);
  if (aligned || c.unaligned_peak > 0) {
    GemmPlan tc =
        PlanGemmTiles(m, n, k, count, c.d.sm_count, aligned ? c.tensor_peak : c.unaligned_peak,
                      c.p.tensor_efficiency, c.p.tensor_tile_alpha, 4);
    tc.tensor_cores = true;
    if (tc.rate > plan.rate) plan = tc;
  }
  return plan;
}

// `count` GEMMs of one shape in one launch; `pass`, when given, counts it (and whether it ran on
// tensor cores).
double GemmKernelNs(const Ctx& c, double count, double m, double n, double k,
                    PassCost* pass = nullptr) {
  const GemmPlan plan = BestGemmPlan(c, count, m, n, k);
  if (pass != nullptr) {
    pass->gemm_kernels += 1;
    if (plan.tensor_cores) pass->tensor_kernels += 1;
  }
  const double bytes = c.value_bytes * count * (m * k + k * n + m * n) + plan.extra_bytes;
  return KernelNs(c, 2 * count * m * n * k, plan.rate, bytes);
}

// The fp32 path of a layer priced by the cudnn model's structure (algorithms, groups, bias
// kernels) at this model's rates.
LayerCost Fp32Cost(const Ctx& c, const core::Layer& l, int64_t batch) {
  return CudnnLayerCost(l, batch, c.d, c.kp);
}

// A convolution's bias: its own kernel each pass (forward: y read and written; backward: dy
// reduced to the bias gradient), y the output's bytes.
void AddConvBias(const Ctx& c, double y, LayerCost* cost) {
  cost->fwd.ns += StreamKernelNs(c, 0, 2 * y);
  cost->bwd.ns += StreamKernelNs(c, 0, y);
  cost->fwd.kernels += 1;
  cost->bwd.kernels += 1;
}

// PyTorch's is_depthwise: as many groups as input channels (more than one), the output channels a
// multiple of them.
bool IsDepthwise(const core::Layer& l) {
  const int64_t ci = l.in_shapes.at(0).c;
  return l.spec.groups > 1 && l.spec.groups == ci && l.out.c % ci == 0;
}

// Whether cuDNN runs depthwise convolution `l`, by PyTorch's use_cudnn_depthwise
// (aten/src/ATen/native/Convolution.cpp, PyTorch 1.11 and later with cuDNN >= 8.2,
// check_cudnn_depthwise_workload_with_filter): always in channels-last; in NCHW only fp16, at
// least 32 channels, a square 1x1, 3x3 or 5x5 filter on planes at least 7 wide, stride 1, or
// stride 2 where the workload table says cuDNN is faster. Otherwise ATen's conv_depthwise2d.
bool CudnnRunsDepthwise(const Ctx& c, const core::Layer& l, int64_t batch) {
  if (!c.nchw) return true;
  const core::LayerSpec& s = l.spec;
  const core::Shape& in = l.in_shapes.at(0);
  const int64_t k = s.kernel_w;
  if (c.d.precision != Precision::kFp16 || in.c < 32 || s.kernel_h != k ||
      s.stride_h != s.stride_w || (k != 1 && k != 3 && k != 5) || in.w < 7) {
    return false;
  }
  if (s.stride_w == 1) return true;
  if (s.stride_w != 2) return false;
  if (batch == 1) return k != 1 || in.w <= 28;
  if (k == 1) return batch <= 16 && in.c >= 128 && in.w <= 7;
  return in.c >= 512 || (in.c >= 256 && in.w >= 28);
}

// A depthwise convolution: K x K multiply-adds (taps) an output value on CUDA cores, in kernels of
// its own (forward; backward data and weight), at the busy SMs' tap rate of the implementation
// PyTorch picks, or DRAM at the values' width, whichever is slower.
LayerCost DepthwiseConvCost(const Ctx& c, const core::Layer& l, int64_t batch) {
  const core::LayerSpec& s = l.spec;
  const core::Shape& in = l.in_shapes.at(0);
  const double b = static_cast<double>(batch);
  const double vb = c.value_bytes;
  const double x = vb * b * static_cast<double>(in.c * in.h * in.w);
  const double y = vb * b * static_cast<double>(l.out.c * l.out.h * l.out.w);
  const double w = vb * static_cast<double>(l.out.c * s.kernel_h * s.kernel_w);
  const double taps =
      b * static_cast<double>(l.out.c * l.out.h * l.out.w * s.kernel_h * s.kernel_w);
  const bool cudnn = CudnnRunsDepthwise(c, l, batch);
  const double per_clock = !cudnn ? c.p.dw_native : c.nchw ? c.p.dw_cudnn_nchw : c.p.dw_cudnn_nhwc;
  const double rate = per_clock * static_cast<double>(c.d.sm_count) * c.d.boost_clock_mhz * 1e6;
  auto kernel = [&](double bytes) {
    return c.p.launch_us * 1e3 + 1e9 * std::max(taps / rate, bytes / c.memory_Bps);
  };
  const ConvAlgo algo = cudnn ? ConvAlgo::kDepthwiseCudnn : ConvAlgo::kDepthwiseNative;
  LayerCost cost;
  cost.fwd = {kernel(x + y + w), 1, algo};
  cost.bwd = {kernel(x + y + w), 1, algo};  // the weight gradient: x and dy in
  if (!l.bottoms.empty()) {
    cost.bwd.ns += kernel(y + x + w);  // the data gradient: dy in, dx out
    cost.bwd.kernels += 1;
  }
  cost.fwd.gemm_kernels = 1;
  cost.bwd.gemm_kernels = cost.bwd.kernels;
  cost.fwd.gemm_ns = cost.fwd.ns;
  cost.bwd.gemm_ns = cost.bwd.ns;
  if (s.bias) AddConvBias(c, y, &cost);
  return cost;
}

// A convolution: implicit GEMM on tensor cores where its channels per group are aligned; an
// ungrouped one that is not runs cuDNN's fp32 algorithms (the cudnn model's structure). A grouped
// convolution is one cuDNN call whatever its groups (PyTorch sets cudnnSetConvolutionGroupCount
// since cuDNN 7, aten/src/ATen/cudnn/Descriptors.h; TensorFlow and MXNet do the same): one kernel a
// pass (see `pass` below for its tiles), on tensor cores when aligned and implicit GEMM on CUDA
// cores otherwise. (The cudnn model, cuDNN 5 under Torch7 and Caffe, keeps one call per group, as
// those frameworks looped over groups.)
LayerCost ConvCost(const Ctx& c, const core::Layer& l, int64_t batch) {
  if (IsDepthwise(l)) return DepthwiseConvCost(c, l, batch);
  const core::LayerSpec& s = l.spec;
  const core::Shape& in = l.in_shapes.at(0);
  const double g = static_cast<double>(s.groups);
  const double ci_g = static_cast<double>(in.c) / g;
  const double co_g = static_cast<double>(l.out.c) / g;
  const bool aligned = Aligned(c, co_g, ci_g);
  if (!aligned && s.groups == 1) {
    LayerCost fp32 = Fp32Cost(c, l, batch);
    fp32.fwd.gemm_kernels = 1;
    fp32.bwd.gemm_kernels = l.bottoms.empty() ? 1 : 2;
    fp32.fwd.gemm_ns = fp32.fwd.ns;  // cuDNN's fp32 algorithms, bias kernels included
    fp32.bwd.gemm_ns = fp32.bwd.ns;
    return fp32;
  }
  const double peak = aligned ? c.tensor_peak : c.fp32_peak;
  const double efficiency = aligned ? c.p.tensor_efficiency : c.p.gemm_efficiency;
  const double alpha = aligned ? c.p.tensor_tile_alpha : c.kp.tile_alpha;
  const double b = static_cast<double>(batch);
  const double kk = static_cast<double>(s.kernel_h * s.kernel_w);
  const double hw_out = static_cast<double>(l.out.h * l.out.w);
  const double hw_in = static_cast<double>(in.h * in.w);
  const double flops = 2 * b * hw_out * co_g * ci_g * kk;
  const double vb = c.value_bytes;
  const double tensors = vb * (b * hw_in * ci_g + b * hw_out * co_g + co_g * ci_g * kk);
  // One launch over every group's GEMM (per group: flops, tensors), tiled the faster of two ways:
  // each group's GEMM its own tiles (all groups in one grid), or tiles that span several groups'
  // channels (CUTLASS's GroupMode::kMultipleGroup; the channels dimension, `channels_m` or not,
  // g times longer and each output still summing only its group's K), which is what keeps a
  // group of 4 or 8 channels from filling a quarter of a 16-wide tile.
  auto pass = [&](double m, double n, double k, bool channels_m) {
    GemmPlan plan = PlanGemmTiles(m, n, k, g, c.d.sm_count, peak, efficiency, alpha, 4);
    if (s.groups > 1) {
      const GemmPlan packed = PlanGemmTiles(channels_m ? g * m : m, channels_m ? n : g * n, k, 1,
                                            c.d.sm_count, peak, efficiency, alpha, 4);
      if (packed.rate > plan.rate) plan = packed;
    }
    return KernelNs(c, g * flops, plan.rate, g * tensors + plan.extra_bytes);
  };
  LayerCost cost;
  cost.fwd = {pass(b * hw_out, co_g, ci_g * kk, false), 1, ConvAlgo::kImplicitGemm};
  cost.bwd = {pass(co_g, ci_g * kk, b * hw_out, true), 1, ConvAlgo::kImplicitGemm};
  if (!l.bottoms.empty()) {
    const double m = b * hw_in;
    cost.bwd.ns += pass(m, ci_g, flops / (2 * m * ci_g), false);
    cost.bwd.kernels += 1;
  }
  const int gemms = l.bottoms.empty() ? 1 : 2;
  cost.fwd.gemm_ns = cost.fwd.ns;
  cost.bwd.gemm_ns = cost.bwd.ns;
  cost.fwd.gemm_kernels = 1;
  cost.bwd.gemm_kernels = gemms;
  cost.fwd.tensor_kernels = aligned ? 1 : 0;
  cost.bwd.tensor_kernels = aligned ? gemms : 0;
  // The whole input and output, every group (bytes).
  const double x = vb * b * hw_in * static_cast<double>(in.c);
  const double y = vb * b * hw_out * static_cast<double>(l.out.c);
  if (aligned && c.nchw && c.align >= 4) {
    // cuDNN's tensor-core convolutions run NHWC: under NCHW each pass transposes what it reads
    // and writes (forward: x in, y out; backward: dy and x in for the weight gradient, dx out),
    // one memory-bound kernel each, read and written once. Half precision without tensor cores
    // (half2 on a P100, fp16 storage elsewhere: align 2 or 1) runs NCHW as it is.
    cost.fwd.ns += StreamKernelNs(c, 0, 2 * x) + StreamKernelNs(c, 0, 2 * y);
    cost.fwd.kernels += 2;
    cost.bwd.ns += StreamKernelNs(c, 0, 2 * y) + StreamKernelNs(c, 0, 2 * x);
    cost.bwd.kernels += 2;
    if (!l.bottoms.empty()) {
      cost.bwd.ns += StreamKernelNs(c, 0, 2 * x);
      cost.bwd.kernels += 1;
    }
  }
  if (s.bias) AddConvBias(c, y, &cost);
  return cost;
}

// fc, linear, patch_embed: the bias rides in the forward GEMM's epilogue (addmm); backward is the
// weight and data GEMMs and one reduction for the bias gradient.
LayerCost FcCost(const Ctx& c, const core::Layer& l, int64_t batch) {
  const double b = static_cast<double>(batch) * static_cast<double>(l.fc_rows);
  const double m_in = static_cast<double>(l.fc_in);
  const double n_out = static_cast<double>(l.fc_out);
  LayerCost cost;
  cost.fwd.kernels = cost.bwd.kernels = 1;
  cost.fwd.ns = GemmKernelNs(c, 1, b, n_out, m_in, &cost.fwd);
  cost.bwd.ns = GemmKernelNs(c, 1, n_out, m_in, b, &cost.bwd);
  if (!l.bottoms.empty()) {
    cost.bwd.ns += GemmKernelNs(c, 1, b, m_in, n_out, &cost.bwd);
    cost.bwd.kernels += 1;
  }
  cost.fwd.gemm_ns = cost.fwd.ns;
  cost.bwd.gemm_ns = cost.bwd.ns;
  if (l.spec.bias) {
    cost.bwd.ns += StreamKernelNs(c, 0, c.value_bytes * b * n_out);
    cost.bwd.kernels += 1;
  }
  return cost;
}

// Transformer-XL's terms on top of AttentionCost's (Dai et al. 2019; DeepLearningExamples'
// RelPartialLearnableMultiHeadAttn, as Hugging Face's TransfoXL): with memory, Q, K and V are
// projected from the L = S + M rows of the memory and the segment (forward, and the data and
// weight gradients), and each forward pass copies L rows twice (the concatenation the keys are
// projected from, and the next segment's memory); with `relative`, the position projection of the
// L offsets (one GEMM a batch; backward its weight gradient only, the positions being constants),
// the second score term (Q + v) R^T (one GEMM over heads, the batch's S rows as M; backward two),
// its shift (a padded copy) and its sum with the first, and Q + u, Q + v (backward: the shift's
// copy back and the two biases' reductions).
void AddTransformerXlTerms(const Ctx& c, const core::Layer& l, int64_t batch, double proj,
                           double proj_weight, LayerCost* cost) {
  const double bt = static_cast<double>(batch);
  const double s = static_cast<double>(l.out.h), dm = static_cast<double>(l.out.w);
  const double heads = static_cast<double>(l.spec.heads), dh = dm / heads;
  const double kl = s + static_cast<double>(l.spec.memory);
  const double rows = bt * s, vb = c.value_bytes;
  const bool data = !l.bottoms.empty();
  if (l.spec.memory > 0) {
    const double kproj = GemmKernelNs(c, 1, bt * kl, dm, dm);
    const double kproj_weight = GemmKernelNs(c, 1, dm, dm, bt * kl);
    const double fwd_gemms = 3 * (kproj - proj);
    const double bwd_gemms = 3 * (kproj_weight - proj_weight) + (data ? 3 * (kproj - proj) : 0.0);
    cost->fwd.ns += fwd_gemms + 2 * StreamKernelNs(c, 0, 2 * vb * bt * kl * dm);
    cost->fwd.gemm_ns += fwd_gemms;
    cost->fwd.kernels += 2;
    cost->bwd.ns += bwd_gemms;
    cost->bwd.gemm_ns += bwd_gemms;
  }
  if (!l.spec.relative) return;
  const double elems = bt * heads * s * kl;
  const double scores = vb * elems;
  const double queries = vb * rows * dm;
  PassCost fwd, bwd;
  const double r_proj = GemmKernelNs(c, 1, kl, dm, dm, &fwd);
  const double bd = GemmKernelNs(c, heads, rows, kl, dh, &fwd);
  cost->fwd.ns += r_proj + bd + StreamKernelNs(c, 0, 2 * scores) +
                  StreamKernelNs(c, elems, 3 * scores) +
                  2 * StreamKernelNs(c, rows * dm, 2 * queries);
  cost->fwd.gemm_ns += r_proj + bd;
  cost->fwd.kernels += 2 + 4;
  const double r_weight = GemmKernelNs(c, 1, dm, dm, kl, &bwd);
  const double bd_query = GemmKernelNs(c, heads, rows, dh, kl, &bwd);
  const double bd_pos = GemmKernelNs(c, heads, kl, dh, rows, &bwd);
  cost->bwd.ns += r_weight + bd_query + bd_pos + StreamKernelNs(c, 0, 2 * scores) +
                  2 * StreamKernelNs(c, rows * dm, queries);
  cost->bwd.gemm_ns += r_weight + bd_query + bd_pos;
  cost->bwd.kernels += 3 + 3;
  for (auto [pass, gemms] : {std::pair{&cost->fwd, &fwd}, std::pair{&cost->bwd, &bwd}}) {
    pass->gemm_kernels += gemms->gemm_kernels;
    pass->tensor_kernels += gemms->tensor_kernels;
  }
}

// Self-attention as eager frameworks run it: four projections, the score and context batched
// GEMMs over batch x heads, and over the scores a scale-and-mask, a softmax and a dropout kernel
// (backward: the three again, the softmax's reading two tensors). The keys span L = S + memory
// tokens; Transformer-XL's terms are AddTransformerXlTerms'.
LayerCost AttentionCost(const Ctx& c, const core::Layer& l, int64_t batch) {
  const double bt = static_cast<double>(batch);
  const double s = static_cast<double>(l.out.h), dm = static_cast<double>(l.out.w);
  const double heads = static_cast<double>(l.spec.heads), dh = dm / heads;
  const double kl = s + static_cast<double>(l.spec.memory);
  const double rows = bt * s;
  const double scores = c.value_bytes * bt * heads * s * kl;
  const double elems = bt * heads * s * kl;
  // The GEMMs once each, counted into `shapes` (then scaled to the pass's kernels below).
  PassCost shapes;
  const double proj = GemmKernelNs(c, 1, rows, dm, dm, &shapes);
  const double score = GemmKernelNs(c, bt * heads, s, kl, dh, &shapes);
  const double context = GemmKernelNs(c, bt * heads, s, dh, kl, &shapes);
  PassCost weight;
  const double proj_weight = GemmKernelNs(c, 1, dm, dm, rows, &weight);
  const bool proj_tc = shapes.tensor_kernels > 0 && BestGemmPlan(c, 1, rows, dm, dm).tensor_cores;
  const int batched_tc = shapes.tensor_kernels - (proj_tc ? 1 : 0);
  LayerCost cost;
  cost.fwd.gemm_ns = 4 * proj + score + context;
  cost.fwd.ns = cost.fwd.gemm_ns + StreamKernelNs(c, 5 * elems, 2 * scores) +
                2 * StreamKernelNs(c, elems, 2 * scores);
  cost.fwd.kernels = 9;
  cost.fwd.gemm_kernels = 6;
  cost.fwd.tensor_kernels = 4 * (proj_tc ? 1 : 0) + batched_tc;
  const bool data = !l.bottoms.empty();
  cost.bwd.gemm_ns = 4 * (proj_weight + (data ? proj : 0.0)) + 2 * score + 2 * context;
  cost.bwd.ns = cost.bwd.gemm_ns + StreamKernelNs(c, 3 * elems, 3 * scores) +
                2 * StreamKernelNs(c, elems, 2 * scores);
  cost.bwd.kernels = 15;
  cost.bwd.gemm_kernels = 4 + (data ? 4 : 0) + 4;
  cost.bwd.tensor_kernels = 4 * weight.tensor_kernels + (data && proj_tc ? 4 : 0) + 2 * batched_tc;
  if (l.spec.bias) {
    cost.bwd.ns += 4 * StreamKernelNs(c, 0, c.value_bytes * rows * dm);
    cost.bwd.kernels += 4;
  }
  if (l.spec.memory > 0 || l.spec.relative) {
    AddTransformerXlTerms(c, l, batch, proj, proj_weight, &cost);
  }
  return cost;
}

// What an eager framework's kernel of a memory-bound layer reads and writes, in fp32 bytes per
// image (I: the layer's inputs, T: its output, P: its parameters), forward and backward:
//   relu, gelu, tanh        I + T;          dy, y (or x), dx: 2T + I
//   batch norm, layer norm  x twice (statistics, then normalise), y: 2I + T;
//                           x and dy for the reductions, again for dx, dx: 3I + 2T
//   add, mul                I + T;          the gradients summed where the branches meet: I + T
//   dropout                 x, y, a byte mask: I + 1.25 T;  dy, mask, dx: I + 1.25 T
//   embedding               the rows gathered: 2T;  the dense table gradient zeroed and the rows
//                           added into it: 4 P + 2T
//   other kinds             cost/layer_work.h's table
// Activations at this precision's value width (the table's 4 bytes scaled), parameters fp32. One
// kernel per pass (concat: one per input).
Work FrameworkWork(const core::Layer& l, double b, bool backward) {
  const double in = b * static_cast<double>(l.in_bytes);
  const double out = b * static_cast<double>(l.out_bytes);
  const double flops = b * static_cast<double>(l.fwd_flops);
  switch (l.kind) {
    case core::LayerKind::kRelu:
    case core::LayerKind::kGelu:
    case core::LayerKind::kTanh:
      return backward ? Work{flops, 2 * out + in} : Work{flops, in + out};
    case core::LayerKind::kBatchNorm:
    case core::LayerKind::kLayerNorm:
      return backward ? Work{2 * flops, 3 * in + 2 * out} : Work{flops, 2 * in + out};
    case core::LayerKind::kAdd:
    case core::LayerKind::kMul:
      return Work{flops, in + out};
    case core::LayerKind::kDropout:
      return Work{flops, in + 1.25 * out};
    case core::LayerKind::kEmbedding:
      return backward ? Work{0, 2 * out} : Work{0, 2 * out};
    default: return backward ? BackwardWork(l, b) : ForwardWork(l, b);
  }
}

// The parameter bytes a pass moves on top of the activations (fp32, not scaled).
double ParamBytes(const core::Layer& l, bool backward) {
  const double pb = 4.0 * static_cast<double>(l.params);
  if (l.kind == core::LayerKind::kEmbedding) return backward ? pb : 0;
  return backward ? 2 * pb : pb;
}

bool OwnTable(core::LayerKind k) {
  switch (k) {
    case core::LayerKind::kRelu:
    case core::LayerKind::kGelu:
    case core::LayerKind::kTanh:
    case core::LayerKind::kBatchNorm:
    case core::LayerKind::kLayerNorm:
    case core::LayerKind::kAdd:
    case core::LayerKind::kMul:
    case core::LayerKind::kDropout:
    case core::LayerKind::kEmbedding: return true;
    default: return false;
  }
}

// Batch norm's kernels a pass: cuDNN's one each way; ATen's (bf16) collect the statistics and then
// normalise in the forward pass, and in the backward pass NCHW runs one kernel where channels-last
// reduces, then computes dx (the H200 profile's batch_norm_* kernels, 53 of each for ResNet-50).
int BatchNormKernels(const Ctx& c, bool backward) {
  if (!c.bn_native) return 1;
  return backward && c.nchw ? 1 : 2;
}

// `values` through batch norm `l`'s kernels: bound by the busy SMs' per-channel reductions
// (NCHW: a channel plane per block, so few channels leave SMs idle) or by DRAM at the values'
// width, whichever is slower, ns.
double BatchNormNs(const Ctx& c, const core::Layer& l, double values) {
  double busy = 1;
  if (c.nchw) {
    const double full = c.p.bn_nchw_channels_per_sm * static_cast<double>(c.d.sm_count);
    busy = std::min(1.0, static_cast<double>(l.out.c) / full);
  }
  return 1e9 * std::max(values / (c.bn_values_per_s * busy), values * c.value_bytes / c.memory_Bps);
}

LayerCost StreamCost(const Ctx& c, const core::Layer& l, int64_t batch) {
  const double b = static_cast<double>(batch);
  const int kernels =
      l.kind == core::LayerKind::kConcat ? static_cast<int>(std::max<size_t>(1, l.bottoms.size()))
                                         : 1;
  const double scale = c.value_bytes / 4;
  auto price = [&](bool backward) {
    const Work w = FrameworkWork(l, b, backward);
    // The shared table counts the parameters in its bytes; this model's own rows do not.
    const double params = ParamBytes(l, backward);
    const double act = OwnTable(l.kind) ? w.bytes : std::max(0.0, w.bytes - params);
    if (l.kind == core::LayerKind::kBatchNorm) {
      // The values it touches (the table counts 4 bytes a value) at its per-SM rate or DRAM's.
      return BatchNormKernels(c, backward) * c.p.launch_us * 1e3 +
             std::max(1e9 * w.flops / c.fp32_peak, BatchNormNs(c, l, act / 4));
    }
    const double bytes = act * scale + params;
    return StreamKernelNs(c, w.flops, bytes);
  };
  const bool bn = l.kind == core::LayerKind::kBatchNorm;
  LayerCost cost;
  cost.fwd = {price(false), bn ? BatchNormKernels(c, false) : kernels, ConvAlgo::kNone};
  if (!BackwardWork(l, b).none) {
    cost.bwd = {price(true), bn ? BatchNormKernels(c, true) : kernels, ConvAlgo::kNone};
  }
  return cost;
}

}  // namespace

FrameworkModelParams FittedFrameworkParams() { return kFitted; }

FrameworkModelParams FrameworkParamsFor(const DeviceSpec& device) {
  FrameworkModelParams p = kFitted;
  for (int i = 0; i < config::kNumFrameworkParams; ++i) {
    auto it = device.framework_model.find(config::kFrameworkParamNames[i]);
    if (it != device.framework_model.end()) *config::FrameworkParamField(p, i) = it->second;
  }
  return p;
}

namespace {

LayerCost KernelsOf(const Ctx& c, const core::Layer& l, int64_t batch) {
  switch (l.kind) {
    case core::LayerKind::kConv: return ConvCost(c, l, batch);
    case core::LayerKind::kFc:
    case core::LayerKind::kLinear:
    case core::LayerKind::kPatchEmbed: return FcCost(c, l, batch);
    case core::LayerKind::kAttention: return AttentionCost(c, l, batch);
    default: return StreamCost(c, l, batch);
  }
}

// Under autocast a layer that runs in half precision (GEMMs and convolutions) casts each fp32
// parameter tensor to half in the forward pass (4 bytes read, 2 written a value), and its half
// gradient back to fp32 in the backward pass: one kernel per tensor and pass.
void AddAutocastCasts(const Ctx& c, const core::Layer& l, LayerCost* cost) {
  if (c.value_bytes != 2 || l.params <= 0) return;
  switch (l.kind) {
    case core::LayerKind::kConv:
    case core::LayerKind::kFc:
    case core::LayerKind::kLinear:
    case core::LayerKind::kPatchEmbed:
    case core::LayerKind::kAttention: break;
    default: return;
  }
  const int tensors = static_cast<int>(std::max<size_t>(1, l.blobs.size()));
  const double bytes = 6.0 * static_cast<double>(l.params) / tensors;
  for (PassCost* pass : {&cost->fwd, &cost->bwd}) {
    pass->ns += tensors * StreamKernelNs(c, 0, bytes);
    pass->kernels += tensors;
  }
}

// An eager framework's CPU issues a pass's kernels one after another, dispatch_us each, while the
// GPU runs what it was given: a pass takes the longer of the two.
void DispatchFloor(const Ctx& c, PassCost* pass) {
  pass->kernel_ns = pass->ns;
  pass->ns = std::max(pass->ns, pass->kernels * c.p.dispatch_us * 1e3);
}

// A layer's kernels before the dispatch floor.
LayerCost RawLayerCost(const Ctx& c, const core::Layer& l, int64_t batch) {
  LayerCost cost = KernelsOf(c, l, batch);
  AddAutocastCasts(c, l, &cost);
  return cost;
}

void CheckPriced(int64_t batch, const DeviceSpec& d) {
  POSEIDON_CHECK(batch > 0) << "batch " << batch;
  POSEIDON_CHECK(d.peak_flops > 0 && d.memory_bandwidth_Bps > 0 && d.sm_count > 0)
      << "device '" << d.name << "' has no peak_flops, memory bandwidth or sm_count";
}

// `bottom`, if it is a layer of `kind` that only one layer reads; -1 otherwise.
int SoleProducer(const core::Model& m, const std::vector<int>& readers, int bottom,
                 core::LayerKind kind) {
  if (bottom < 0) return -1;
  const core::Layer& b = m.layers()[static_cast<size_t>(bottom)];
  return b.kind == kind && readers[static_cast<size_t>(bottom)] == 1 ? bottom : -1;
}

// Batch norm with the ReLU (and residual add) after it in one kernel (DeviceSpec::batchnorm_fusion;
// cuDNN's fused ops, NHWC at half precision only). Per image, T = the batch norm's output bytes at
// 4 bytes a value (the layer table's; BatchNormNs prices T / 4 values):
//   bn + relu        the ReLU's kernels are gone; backward, the batch norm also reads y (the
//                    ReLU's mask): + T
//   bn + add + relu  the add's and the ReLU's kernels are gone; forward the batch norm also reads
//                    the addend: + T; backward it reads y and writes the addend's gradient: + 2T
void FuseBatchNorms(const Ctx& c, const core::Model& m, int64_t batch,
                    std::vector<LayerCost>* costs) {
  const config::BatchNormFusion f = c.d.batchnorm_fusion;
  if (f == config::BatchNormFusion::kNone || c.value_bytes != 2 || c.nchw) return;
  const auto& layers = m.layers();
  std::vector<int> readers(layers.size(), 0);
  for (const core::Layer& l : layers) {
    for (int b : l.bottoms) ++readers[static_cast<size_t>(b)];
  }
  // `bytes` at 4 bytes a value (the layer table's) through the batch norm's kernels.
  auto add_ns = [&](PassCost* pass, const core::Layer& bn, double bytes) {
    pass->ns += BatchNormNs(c, bn, bytes / 4);
  };
  for (size_t r = 0; r < layers.size(); ++r) {
    const core::Layer& relu = layers[r];
    if (relu.kind != core::LayerKind::kRelu || relu.bottoms.size() != 1) continue;
    const double t = static_cast<double>(batch) * static_cast<double>(relu.in_bytes);
    int bn = SoleProducer(m, readers, relu.bottoms[0], core::LayerKind::kBatchNorm);
    if (bn >= 0) {
      (*costs)[r] = LayerCost{};
      add_ns(&(*costs)[static_cast<size_t>(bn)].bwd, layers[static_cast<size_t>(bn)], t);
      continue;
    }
    if (f != config::BatchNormFusion::kBnAddRelu) continue;
    const int add = SoleProducer(m, readers, relu.bottoms[0], core::LayerKind::kAdd);
    if (add < 0) continue;
    // The residual branch's batch norm: in a downsampling block both inputs are batch norms, and
    // the branch is listed after the shortcut (the costs are the same either way).
    const std::vector<int>& inputs = layers[static_cast<size_t>(add)].bottoms;
    for (auto b = inputs.rbegin(); b != inputs.rend() && bn < 0; ++b) {
      bn = SoleProducer(m, readers, *b, core::LayerKind::kBatchNorm);
    }
    if (bn < 0) continue;
    (*costs)[r] = LayerCost{};
    (*costs)[static_cast<size_t>(add)] = LayerCost{};
    add_ns(&(*costs)[static_cast<size_t>(bn)].fwd, layers[static_cast<size_t>(bn)], t);
    add_ns(&(*costs)[static_cast<size_t>(bn)].bwd, layers[static_cast<size_t>(bn)], 2 * t);
  }
}

}  // namespace

LayerCost FrameworkLayerCost(const core::Layer& l, int64_t batch, const DeviceSpec& d,
                             const FrameworkModelParams& p) {
  CheckPriced(batch, d);
  const Ctx c = MakeCtx(d, p);
  LayerCost cost = RawLayerCost(c, l, batch);
  DispatchFloor(c, &cost.fwd);
  if (cost.bwd.kernels > 0) DispatchFloor(c, &cost.bwd);
  return cost;
}

std::vector<LayerCost> FrameworkModelCosts(const core::Model& model, int64_t batch,
                                           const DeviceSpec& d, const FrameworkModelParams& p) {
  CheckPriced(batch, d);
  const Ctx c = MakeCtx(d, p);
  std::vector<LayerCost> costs;
  costs.reserve(model.layers().size());
  for (const core::Layer& l : model.layers()) costs.push_back(RawLayerCost(c, l, batch));
  FuseBatchNorms(c, model, batch, &costs);
  for (LayerCost& cost : costs) {
    if (cost.fwd.kernels > 0) DispatchFloor(c, &cost.fwd);
    if (cost.bwd.kernels > 0) DispatchFloor(c, &cost.bwd);
  }
  return costs;
}

double OptimizerStepNs(const core::Model& model, const DeviceSpec& d,
                       const FrameworkModelParams& p) {
  const Ctx c = MakeCtx(d, p);
  double params = 0;
  int tensors = 0;
  for (const core::Layer& l : model.layers()) {
    if (l.params <= 0) continue;
    params += static_cast<double>(l.params);
    ++tensors;
  }
  if (params == 0) return 0;
  double per_param = d.optimizer == config::OptimizerKind::kSgd    ? 20
                     : d.optimizer == config::OptimizerKind::kAdam ? 28
                                                                   : 40;
  if (c.value_bytes == 2) per_param += 8;  // unscale the gradients (the casts: AddAutocastCasts)
  return tensors * p.launch_us * 1e3 + 1e9 * per_param * params / c.memory_Bps;
}

double FrameworkGemmNs(double m, double n, double k, const DeviceSpec& d,
                       const FrameworkModelParams& p) {
  POSEIDON_CHECK(m >= 1 && n >= 1 && k >= 1) << "gemm " << m << "x" << n << "x" << k;
  // One kernel on its own: at least its dispatch.
  return std::max(p.dispatch_us * 1e3, GemmKernelNs(MakeCtx(d, p), 1, m, n, k));
}

}  // namespace poseidon::cost
