// cost/gpu_kernel_model.h: what a layer costs on a GPU when cuDNN and cuBLAS run it.
//
// The `cudnn` compute model (cost::ComputeModel::FromDevice when the device says
// `compute_model: cudnn`, the default). Per layer and pass it picks what cuDNN would run and
// prices each kernel by a roofline whose compute rate depends on the kernel's shape:
//
//   GEMM(M, N, K) (cuBLAS sgemm, C[M,N] = A[M,K] B[K,N]):
//     F = 2 M N K,  D = 4 (M K + K N + M N)
//     e = gemm_efficiency * s(M, gemm_half_mn) * s(N, gemm_half_mn) * s(K, gemm_half_k),
//     s(x, h) = x / (x + h)        (a dimension far below the tile size leaves the GPU idle)
//     T = launch + max(F / (peak * e), D / (bandwidth * memory_efficiency))
//
//   Convolution, for each of the three passes (forward; backward data, skipped when the layer
//   reads the model input; backward filter), each group as its own kernel (cuDNN 5-7 and
//   Caffe/Torch loop over groups), the cheapest of the algorithms that apply:
//     implicit GEMM (always):   the GEMM of the pass (forward M = B Ho Wo, N = Co/g,
//                               K = Ci/g kh kw; data M = B Hi Wi, N = Ci/g, K = F / 2MN;
//                               filter M = Co/g, N = Ci/g kh kw, K = B Ho Wo), reading the
//                               tensors once (no im2col buffer);
//     Winograd F(4x4, 3x3) (3x3, stride 1): F / winograd_gain at the same shape efficiency,
//                               plus writing and reading the transformed tiles (input and
//                               output x 2.25, filter x 4) at memory speed;
//     FFT (stride 1, kernel > 1, padded plane <= 256): per group the spectra of inputs,
//                               filters and outputs (P x (P/2+1) complex values per plane,
//                               P = next power of two of H + 2 pad), 5 P^2 log2(P^2) flops per
//                               transform and 8 flops per complex multiply-add, at
//                               fft_efficiency of peak, the spectra written and read once.
//     plus one bias kernel per pass when the layer has a bias (memory-bound).
//   Fully connected: forward GEMM(B, N, M); backward data GEMM(B, M, N) (unless fed by the
//     input) and filter GEMM(N, M, B); a bias kernel per pass.
//   Everything else (relu, pool, lrn, dropout, batch norm, add, concat, softmax loss) is
//     memory-bound: the bytes of cost/compute_model.h's table at bandwidth * memory_efficiency
//     (or its flops at peak, whichever is longer), one kernel per pass (concat: one per input).
//   Every kernel pays launch_us (launch plus framework dispatch).
//
// The constants are the same for every device: a device enters through its datasheet peak and
// bandwidth only. kFittedKernelParams are fitted to half of the published measurements in
// scenarios/devices/measurements/ (`poseidon gpu-model fit`); docs/gpu_model.md reports the
// error on the other half. A device file may override any constant (kernel_model:).
//
// Pure: no I/O, no clock; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "config/specs.h"
#include "core/model.h"

namespace poseidon::cost {

using config::KernelModelParams;

// The fitted constants (see the file comment; their provenance is in cost/gpu_kernel_model.cc).
KernelModelParams FittedKernelParams();
// FittedKernelParams() with the device's kernel_model overrides applied.
KernelModelParams KernelParamsFor(const config::DeviceSpec& device);

// kDepthwiseCudnn, kDepthwiseNative: the framework model's depthwise convolutions (cuDNN's
// kernels, or ATen's conv_depthwise2d).
enum class ConvAlgo {
  kNone,
  kImplicitGemm,
  kWinograd,
  kWinogradNonfused,
  kFft,
  kDepthwiseCudnn,
  kDepthwiseNative
};
const char* ConvAlgoName(ConvAlgo a);

// One pass of one layer: its time and, for conv layers, the algorithm of its largest kernel.
struct PassCost {
  double ns = 0;
  int kernels = 0;
  ConvAlgo algo = ConvAlgo::kNone;  // forward: the forward kernel's; backward: the data pass's
                                    // (the filter pass's when there is no data pass)
  // The framework model: how many of the pass's GEMM-like kernels ran on tensor cores, of how
  // many GEMM-like kernels (0 of 0 for a memory-bound layer, and always for the cudnn model).
  int tensor_kernels = 0, gemm_kernels = 0;
  // The framework model (0 for the cudnn model): of the pass's GPU time, its GEMM-like kernels'
  // (GEMMs, and convolutions' implicit GEMM, depthwise and fp32 cuDNN kernels), and the pass's GPU
  // time before the dispatch floor (ns is the longer of it and the CPU's dispatch). What a kernel
  // profile's classes can be compared with: `gpu-model show`, analysis/profile_vs_model.py.
  double gemm_ns = 0, kernel_ns = 0;
};

struct LayerCost {
  PassCost fwd, bwd;
};

// Per layer, whole batch (batch > 0). The device must have peak_flops and bandwidth > 0.
LayerCost CudnnLayerCost(const core::Layer& layer, int64_t batch, const config::DeviceSpec& device,
                         const KernelModelParams& p);

// One cuBLAS sgemm C[M,N] = A[M,K] B[K,N] (M, N, K >= 1), ns, launch included.
double GemmNs(double m, double n, double k, const config::DeviceSpec& device,
              const KernelModelParams& p);
// `count` such GEMMs in one launch (cublasSgemmStridedBatched): one launch latency, and the
// tiles of all of them fill the GPU together. BatchedGemmNs(1, m, n, k) == GemmNs(m, n, k).
double BatchedGemmNs(double count, double m, double n, double k,
                     const config::DeviceSpec& device, const KernelModelParams& p);

// How a GEMM of this shape is tiled: the best of the output tiles cuBLAS-style kernels use (its
// relative intensity^tile_alpha x tile quantization x wave quantization over sm_count SMs), with
// split-K when the tiles alone cannot fill the GPU. `count` GEMMs of the shape share one launch.
// rate = peak * efficiency * that; extra_bytes: split-K partial sums (partial_value_bytes each)
// written and read back. Both compute models price their GEMMs with it.
struct GemmPlan {
  double rate = 0;            // FLOP/s
  double extra_bytes = 0;     // split-K partial sums written and read back
  bool tensor_cores = false;  // set by the framework model when it picked a tensor-core plan
};
GemmPlan PlanGemmTiles(double m, double n, double k, double count, int sm_count, double peak,
                       double efficiency, double tile_alpha, double partial_value_bytes);

}  // namespace poseidon::cost
