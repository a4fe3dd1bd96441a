#include "cost/gpu_kernel_model.h"

#include <algorithm>
#include <cmath>

#include "core/types.h"
#include "cost/layer_work.h"

namespace poseidon::cost {
namespace {

// Fitted by `poseidon gpu-model fit scenarios/devices/measurements/cnn_benchmarks.yaml` on the
// rows marked `set: fit` only (21 of 44 model x device pairs, forward and backward each); the
// rows marked `set: heldout` were not used. docs/gpu_model.md has the command, the commit and the
// held-out errors (frozen at commit 41bc92d).
constexpr KernelModelParams kFitted = {
    .gemm_efficiency = 0.747555,
    .tile_alpha = 1.25409,
    .winograd_gain = 4,
    .fft_efficiency = 0.549404,
    .memory_efficiency = 0.466996,
    .launch_us = 8.13282,
    .kepler_efficiency = 0.335119,
};

// A kernel of F flops at compute rate `rate` and D bytes at memory rate `bw`, plus the launch.
double KernelNs(double flops, double rate, double bytes, double bw, const KernelModelParams& p) {
  return p.launch_us * 1e3 + 1e9 * std::max(flops / rate, bytes / bw);
}

double ArchScale(const config::DeviceSpec& d, const KernelModelParams& p) {
  return d.architecture == config::GpuArchitecture::kKepler ? p.kepler_efficiency : 1.0;
}

double PeakFlops(const config::DeviceSpec& d, const KernelModelParams& p) {
  return d.peak_flops * ArchScale(d, p);
}

double MemoryBps(const config::DeviceSpec& d, const KernelModelParams& p) {
  return d.memory_bandwidth_Bps * p.memory_efficiency;
}

// `count` independent GEMMs of one shape in one launch (cublasSgemmStridedBatched) share the GPU:
// their tiles fill its slots together.
GemmPlan PlanGemm(double m, double n, double k, const config::DeviceSpec& d,
                  const KernelModelParams& p, double count = 1) {
  return PlanGemmTiles(m, n, k, count, d.sm_count, PeakFlops(d, p), p.gemm_efficiency,
                       p.tile_alpha, 4);
}

// A memory-bound kernel (bias add, bias gradient, elementwise layers).
double StreamNs(double flops, double bytes, const config::DeviceSpec& d,
                const KernelModelParams& p) {
  return KernelNs(flops, PeakFlops(d, p), bytes, MemoryBps(d, p), p);
}

// The shape of one convolution kernel (one group, one pass) and the tensors it touches.
struct ConvPass {
  double m = 0, n = 0, k = 0;  // implicit GEMM shape
  double flops = 0;            // 2 * MACs of this group's pass
  double in_bytes = 0, out_bytes = 0, w_bytes = 0;  // the group's tensors (whole batch)
};

struct Choice {
  double ns = 0;
  ConvAlgo algo = ConvAlgo::kNone;
};

int64_t NextPow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// The cheapest applicable algorithm for one group's pass.
enum class Pass { kForward, kData, kFilter };

Choice BestConvAlgo(const ConvPass& c, Pass pass, const core::LayerSpec& s, const core::Shape& in,
                    double b,
                    double ci_g, double co_g, const config::DeviceSpec& d,
                    const KernelModelParams& p) {
  const double bw = MemoryBps(d, p);
  const GemmPlan plan = PlanGemm(c.m, c.n, c.k, d, p);
  const double rate = plan.rate;
  const double tensors = c.in_bytes + c.out_bytes + c.w_bytes + plan.extra_bytes;
  Choice best{KernelNs(c.flops, rate, tensors, bw, p), ConvAlgo::kImplicitGemm};

  const int version = d.cudnn_version == 0 ? 1000 : d.cudnn_version;  // 0: a current release
  const bool stride1 = s.stride_h == 1 && s.stride_w == 1;
  const bool k3 = s.kernel_h == 3 && s.kernel_w == 3;
  const bool k5 = s.kernel_h == 5 && s.kernel_w == 5;
  if (version >= 51 && stride1 && (k3 || k5)) {
    // Non-fused Winograd, every pass: transforms written to and read from memory. 5x5 uses
    // F(2x2,5x5), whose multiplies are at most 2.78x fewer.
    const double gain = k3 ? p.winograd_gain : std::min(p.winograd_gain, 100.0 / 36.0);
    const double transformed = 2 * (2.25 * (c.in_bytes + c.out_bytes) + 4 * c.w_bytes);
    const double t = KernelNs(c.flops / gain, rate, tensors + transformed, bw, p);
    if (t < best.ns) best = {t, ConvAlgo::kWinogradNonfused};
  }
  if (version >= 50 && stride1 && k3 && pass != Pass::kFilter) {
    // Fused F(2x2,3x3) (forward and backward data only): 2.25x fewer multiplies, the transforms
    // stay on chip.
    const double tf = KernelNs(c.flops / 2.25, rate, tensors, bw, p);
    if (tf < best.ns) best = {tf, ConvAlgo::kWinograd};
  }
  const int64_t padded = std::max(in.h + 2 * s.pad_h, in.w + 2 * s.pad_w);
  if (version >= 30 && stride1 && (s.kernel_h > 1 || s.kernel_w > 1) && padded <= 256) {
    const double P = static_cast<double>(NextPow2(padded));
    const double freq = P * (P / 2 + 1);               // complex values per plane
    const double planes = b * ci_g + ci_g * co_g + b * co_g;
    const double transform_flops = 5 * P * P * std::log2(P * P) * planes;
    const double product_flops = 8 * b * ci_g * co_g * freq;
    const double spectra_bytes = 2 * 8 * freq * planes;  // complex float, written and read
    const double t = KernelNs(transform_flops + product_flops, PeakFlops(d, p) * p.fft_efficiency,
                              tensors + spectra_bytes, bw, p);
    if (t < best.ns) best = {t, ConvAlgo::kFft};
  }
  return best;
}

LayerCost ConvCost(const core::Layer& l, double b, const config::DeviceSpec& d,
                   const KernelModelParams& p) {
  const core::LayerSpec& s = l.spec;
  const core::Shape& in = l.in_shapes.at(0);
  const double g = static_cast<double>(s.groups);
  const double ci_g = static_cast<double>(in.c) / g;
  const double co_g = static_cast<double>(l.out.c) / g;
  const double kk = static_cast<double>(s.kernel_h * s.kernel_w);
  const double hw_out = static_cast<double>(l.out.h * l.out.w);
  const double hw_in = static_cast<double>(in.h * in.w);
  const double flops = 2 * b * hw_out * co_g * ci_g * kk;  // one group
  ConvPass base;
  base.flops = flops;
  base.in_bytes = 4 * b * hw_in * ci_g;
  base.out_bytes = 4 * b * hw_out * co_g;
  base.w_bytes = 4 * co_g * ci_g * kk;

  ConvPass fwd = base, data = base, filter = base;
  fwd.m = b * hw_out, fwd.n = co_g, fwd.k = ci_g * kk;
  data.m = b * hw_in, data.n = ci_g, data.k = flops / (2 * data.m * data.n);
  filter.m = co_g, filter.n = ci_g * kk, filter.k = b * hw_out;

  LayerCost cost;
  const Choice f = BestConvAlgo(fwd, Pass::kForward, s, in, b, ci_g, co_g, d, p);
  cost.fwd = {g * f.ns, static_cast<int>(s.groups), f.algo};
  const Choice w = BestConvAlgo(filter, Pass::kFilter, s, in, b, ci_g, co_g, d, p);
  cost.bwd = {g * w.ns, static_cast<int>(s.groups), w.algo};
  if (!l.bottoms.empty()) {
    const Choice x = BestConvAlgo(data, Pass::kData, s, in, b, ci_g, co_g, d, p);
    cost.bwd.ns += g * x.ns;
    cost.bwd.kernels += static_cast<int>(s.groups);
    cost.bwd.algo = x.algo;
  }
  if (s.bias) {
    const double out_bytes = 4 * b * hw_out * static_cast<double>(l.out.c);
    cost.fwd.ns += StreamNs(0, 2 * out_bytes, d, p);  // read-modify-write the output
    cost.bwd.ns += StreamNs(0, out_bytes, d, p);      // reduce the output gradient
    cost.fwd.kernels += 1;
    cost.bwd.kernels += 1;
  }
  return cost;
}

// fc, and linear and patch_embed (one GEMM over batch x fc_rows rows; fc_rows is 1 for fc). A
// tied linear layer computes its weight gradient too (added to the embedding's).
LayerCost FcCost(const core::Layer& l, double batch, const config::DeviceSpec& d,
                 const KernelModelParams& p) {
  const double b = batch * static_cast<double>(l.fc_rows);
  const double m_in = static_cast<double>(l.fc_in);
  const double n_out = static_cast<double>(l.fc_out);
  LayerCost cost;
  cost.fwd = {GemmNs(b, n_out, m_in, d, p), 1, ConvAlgo::kNone};
  cost.bwd = {GemmNs(n_out, m_in, b, d, p), 1, ConvAlgo::kNone};
  if (!l.bottoms.empty()) {
    cost.bwd.ns += GemmNs(b, m_in, n_out, d, p);
    cost.bwd.kernels += 1;
  }
  if (l.spec.bias) {
    cost.fwd.ns += StreamNs(0, 2 * 4 * b * n_out, d, p);
    cost.bwd.ns += StreamNs(0, 4 * b * n_out, d, p);
    cost.fwd.kernels += 1;
    cost.bwd.kernels += 1;
  }
  return cost;
}

// Self-attention: the Q, K, V and output projections (GEMMs of batch x S rows), and per head the
// score (S x dh by dh x S) and context (S x S by S x dh) matmuls, each one batched launch over
// batch x heads (as cuBLAS's strided-batched GEMM and the CUDA backend run them); the softmax
// over the scores streams them. Backward: two GEMMs per forward GEMM (data and weight
// gradients; the first layer's data gradient is skipped as for fc), the softmax gradient streamed.
// With memory the keys span L = S + memory tokens, and Q, K and V are projected from L rows;
// `relative` adds the position projection (L rows, once a batch) and the second score term, one
// batched GEMM over heads (backward: the position projection's weight gradient and two GEMMs).
LayerCost AttentionCost(const core::Layer& l, double batch, const config::DeviceSpec& d,
                        const KernelModelParams& p) {
  const double s = static_cast<double>(l.out.h), dm = static_cast<double>(l.out.w);
  const double heads = static_cast<double>(l.spec.heads), dh = dm / heads;
  const double kl = s + static_cast<double>(l.spec.memory);
  const double rows = batch * s;
  const double scores_bytes = 4 * batch * heads * s * kl;
  LayerCost cost;
  const double proj = GemmNs(rows, dm, dm, d, p);
  const double score = BatchedGemmNs(batch * heads, s, kl, dh, d, p);
  const double context = BatchedGemmNs(batch * heads, s, dh, kl, d, p);
  cost.fwd = {4 * proj + score + context + StreamNs(5 * scores_bytes / 4, 2 * scores_bytes, d, p),
              7, ConvAlgo::kNone};
  const double proj_weight = GemmNs(dm, dm, rows, d, p);
  const double proj_bwd = proj_weight + (l.bottoms.empty() ? 0.0 : proj);
  cost.bwd = {4 * proj_bwd + 2 * score + 2 * context +
                  StreamNs(3 * scores_bytes / 4, 3 * scores_bytes, d, p),
              13, ConvAlgo::kNone};
  if (l.spec.bias) {
    cost.fwd.ns += 4 * StreamNs(0, 2 * 4 * rows * dm, d, p);
    cost.bwd.ns += 4 * StreamNs(0, 4 * rows * dm, d, p);
  }
  if (l.spec.memory > 0) {
    const double kproj = GemmNs(batch * kl, dm, dm, d, p);
    cost.fwd.ns += 3 * (kproj - proj);
    cost.bwd.ns += 3 * (GemmNs(dm, dm, batch * kl, d, p) - proj_weight) +
                   (l.bottoms.empty() ? 0.0 : 3 * (kproj - proj));
  }
  if (l.spec.relative) {
    const double bd = BatchedGemmNs(heads, rows, kl, dh, d, p);
    cost.fwd.ns += GemmNs(kl, dm, dm, d, p) + bd;
    cost.fwd.kernels += 2;
    cost.bwd.ns += GemmNs(dm, dm, kl, d, p) + 2 * bd;
    cost.bwd.kernels += 3;
  }
  return cost;
}

LayerCost StreamCost(const core::Layer& l, double b, const config::DeviceSpec& d,
                     const KernelModelParams& p) {
  const int kernels =
      l.kind == core::LayerKind::kConcat ? static_cast<int>(std::max<size_t>(1, l.bottoms.size()))
                                         : 1;
  LayerCost cost;
  const Work f = ForwardWork(l, b);
  cost.fwd = {StreamNs(f.flops, f.bytes, d, p) + (kernels - 1) * p.launch_us * 1e3, kernels,
              ConvAlgo::kNone};
  const Work w = BackwardWork(l, b);
  if (!w.none) {
    cost.bwd = {StreamNs(w.flops, w.bytes, d, p) + (kernels - 1) * p.launch_us * 1e3, kernels,
                ConvAlgo::kNone};
  }
  return cost;
}

}  // namespace

KernelModelParams FittedKernelParams() { return kFitted; }

KernelModelParams KernelParamsFor(const config::DeviceSpec& device) {
  KernelModelParams p = kFitted;
  for (int i = 0; i < config::kNumKernelParams; ++i) {
    auto it = device.kernel_model.find(config::kKernelParamNames[i]);
    if (it != device.kernel_model.end()) *config::KernelParamField(p, i) = it->second;
  }
  return p;
}

GemmPlan PlanGemmTiles(double m, double n, double k, double count, int sm_count, double peak,
                       double efficiency, double tile_alpha, double partial_value_bytes) {
  struct Tile {
    double a, b;
  };
  // Square and rectangular tiles, and the skinny ones kept for a small M or N (a batch of 16).
  static constexpr Tile kTiles[] = {{128, 128}, {128, 64}, {64, 128}, {64, 64},
                                    {32, 32},   {128, 32}, {32, 128}, {128, 16}, {16, 128}};
  const double sms = std::max(1, sm_count);
  GemmPlan best;
  for (const Tile& t : kTiles) {
    // Intensity (flops per byte loaded) grows with a b / (a + b); relative to 128x128's.
    const double rel = std::pow((t.a * t.b / (t.a + t.b)) / 64.0, tile_alpha);
    const double tm = std::ceil(m / t.a), tn = std::ceil(n / t.b);
    const double fill = (m * n) / (tm * t.a * tn * t.b);  // tile quantization
    const double tiles = count * tm * tn;
    const double slots = sms * (128.0 * 128.0) / (t.a * t.b);  // tiles resident at once
    // Split-K: cut K into parts (each >= 128 deep) until the tiles fill the GPU.
    const double splits = std::clamp(std::floor(slots / tiles), 1.0, std::max(1.0, k / 128));
    const double work = tiles * splits;
    const double waves = work / (std::ceil(work / slots) * slots);  // wave quantization
    const double e = efficiency * rel * fill * waves;
    const double rate = peak * e;
    if (rate > best.rate) {
      best.rate = rate;
      best.extra_bytes = splits > 1 ? 2 * partial_value_bytes * count * m * n * splits : 0;
    }
  }
  return best;
}

const char* ConvAlgoName(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::kNone: return "-";
    case ConvAlgo::kImplicitGemm: return "implicit_gemm";
    case ConvAlgo::kWinograd: return "winograd";
    case ConvAlgo::kWinogradNonfused: return "winograd_nf";
    case ConvAlgo::kFft: return "fft";
    case ConvAlgo::kDepthwiseCudnn:
      return "dw_cudnn";
    case ConvAlgo::kDepthwiseNative:
      return "dw_aten";
  }
  return "?";
}

double GemmNs(double m, double n, double k, const config::DeviceSpec& d,
              const KernelModelParams& p) {
  POSEIDON_CHECK(m >= 1 && n >= 1 && k >= 1) << "gemm " << m << "x" << n << "x" << k;
  const GemmPlan plan = PlanGemm(m, n, k, d, p);
  return KernelNs(2 * m * n * k, plan.rate, 4 * (m * k + k * n + m * n) + plan.extra_bytes,
                  MemoryBps(d, p), p);
}

double BatchedGemmNs(double count, double m, double n, double k, const config::DeviceSpec& d,
                     const KernelModelParams& p) {
  POSEIDON_CHECK(count >= 1 && m >= 1 && n >= 1 && k >= 1)
      << "batched gemm " << count << " x " << m << "x" << n << "x" << k;
  const GemmPlan plan = PlanGemm(m, n, k, d, p, count);
  return KernelNs(2 * count * m * n * k, plan.rate,
                  4 * count * (m * k + k * n + m * n) + plan.extra_bytes, MemoryBps(d, p), p);
}

LayerCost CudnnLayerCost(const core::Layer& l, int64_t batch, const config::DeviceSpec& d,
                         const KernelModelParams& p) {
  POSEIDON_CHECK(batch > 0) << "batch " << batch;
  POSEIDON_CHECK(d.peak_flops > 0 && d.memory_bandwidth_Bps > 0 && d.sm_count > 0)
      << "device '" << d.name << "' has no peak_flops, memory bandwidth or sm_count";
  const double b = static_cast<double>(batch);
  switch (l.kind) {
    case core::LayerKind::kConv: return ConvCost(l, b, d, p);
    case core::LayerKind::kFc:
    case core::LayerKind::kLinear:
    case core::LayerKind::kPatchEmbed: return FcCost(l, b, d, p);
    case core::LayerKind::kAttention: return AttentionCost(l, b, d, p);
    default: return StreamCost(l, b, d, p);
  }
}

}  // namespace poseidon::cost
