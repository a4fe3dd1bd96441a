// cost/framework_model.h: what a training iteration costs on a current GPU when a current framework
// (PyTorch, TensorFlow, MXNet with cuDNN 7-9 and cuBLAS(Lt)) runs it at a precision.
//
// The `framework` compute model (cost::ComputeModel::FromDevice when the device says
// `compute_model: framework`, or a scenario names `cluster.precision`). Where the `cudnn` model
// (cost/gpu_kernel_model.h) describes cuDNN 5 under Torch7 in fp32, this one knows:
//
//   Precision (config::Precision). fp32: GEMMs and convolutions on CUDA cores at the fp32 peak.
//     tf32: on tensor cores at the device's tf32 peak, tensors in fp32. fp16 / bf16 (automatic
//     mixed precision): on tensor cores at that peak, activations and their gradients 2 bytes
//     per value; master weights, the optimizer step and its state in fp32. fp16 on a GPU without
//     tensor cores: at its fp16_tflops (the P100's half2), else at the fp32 rate with 2-byte
//     values (cuDNN's pseudo-half: fp16 storage, fp32 arithmetic). tf32 and bf16 need the
//     device's tensor-core figure of that precision (config::PrecisionUnsupported says why not).
//   Tensor-core kernels: rate = fed peak x tensor_efficiency x the GEMM's tiling (the same
//     tiles, tile quantization, wave quantization and split-K as the cudnn model's, with its fitted
//     tile_alpha), where the fed peak is 1 / (1 / datasheet peak + 1 / (SMs x boost clock x
//     tensor_feed_per_sm_clock)): what the SMs' operand paths can feed tensor cores that do more
//     a clock per SM with each generation. Alignment: a convolution runs on tensor cores only when
//     its input and output channels per group are multiples of 8 values for fp16/bf16 and 4 for
//     tf32, on CUDA cores at the fp32 rate otherwise. A GEMM whose N or K is not such a multiple
//     runs (cuBLAS 11.0 and later, docs/gpu_model.md "v6") on tensor cores too, at a peak fed by
//     SMs x boost clock x unaligned_feed_per_sm_clock (its narrow operand loads), or on CUDA
//     cores if that is faster; with unaligned_feed_per_sm_clock 0 (v5), or a device.cuda_version
//     before 11.0 (the run's libraries: cuBLAS 10), always on CUDA cores.
//     Convolutions on tensor cores run implicit GEMM (no Winograd or FFT); in
//     fp32 cuDNN's Winograd and FFT remain as in the cudnn model. A grouped convolution is one
//     cuDNN call (cudnnSetConvolutionGroupCount, as PyTorch, TensorFlow and MXNet make it since
//     cuDNN 7): one kernel a pass, implicit GEMM on tensor cores when its channels per group are
//     aligned, on CUDA cores otherwise, tiled the faster of two ways: each group's GEMM its own
//     tiles (all groups in one grid), or tiles spanning several groups' channels (CUTLASS's
//     kMultipleGroup), which keeps 4 or 8 channels a group (ResNeXt) from filling a fraction of a
//     tile. A depthwise convolution (as many groups as input channels: MobileNet, EfficientNet)
//     runs the kernels PyTorch picks (use_cudnn_depthwise, PyTorch >= 1.11 with cuDNN >= 8.2):
//     cuDNN's in channels-last, and in NCHW for fp16 at stride 1 or where its stride-2 workload
//     table says so; ATen's conv_depthwise2d otherwise. One kernel forward, two backward (data,
//     weight), each K x K multiply-adds an output value at the busy SMs' rate for that
//     implementation (dw_cudnn_nchw, dw_cudnn_nhwc, dw_native, a clock at the boost clock) or
//     DRAM at the values' width, whichever is slower (docs/gpu_model.md, "v4").
//   Fusion, as frameworks run training in eager mode: a linear layer's bias is added in its
//     GEMM's epilogue (addmm; the bias gradient is one reduction kernel); a convolution's bias,
//     batch norm, ReLU, GELU, residual add, dropout, layer norm and softmax are each their own
//     memory-bound kernel, at bytes x (value bytes / 4) of the fp32 table (cost/layer_work.h).
//     Where the framework fuses batch norm with what follows it (device.batchnorm_fusion: MXNet's
//     --fuse-bn-relu / --fuse-bn-add-relu, Paddle's fuse_bn_act_ops / fuse_bn_add_act_ops,
//     TensorFlow's _FusedBatchNormEx) and cuDNN can (NHWC, fp16 or bf16), a ReLU whose only input
//     is a batch norm read by nothing else runs inside it (backward: + the output's bytes, the
//     mask), and with bn_add_relu so does a residual add + ReLU after such a batch norm (forward:
//     + the addend's bytes; backward: + the mask and the addend's gradient); FrameworkModelCosts.
//   Layout (device.memory_format, the scenario's cluster.memory_format): cuDNN's tensor-core
//     convolutions run NHWC, so under NCHW each pass of one is wrapped in transposes (forward: x
//     in, y out; backward: dy and x in, dx out), each a memory-bound kernel that reads and writes
//     its tensor once (what a profile of PyTorch 2.11 / cuDNN 9 shows: nchwToNhwcKernel and
//     nhwcToNchwKernel around every convolution; docs/gpu_model.md).
//   Batch norm, as PyTorch runs it (_select_batch_norm_backend): cuDNN's kernels, one a pass,
//     unless the values are bf16; then ATen's (NCHW: collect statistics and normalise forward,
//     one backward kernel; channels-last: two each way). Bound by its per-channel reductions,
//     not by DRAM: each busy SM handles bn_{cudnn,native}_{nchw,nhwc} values a clock at the
//     boost clock, or DRAM at the values' width, whichever is slower. In NCHW a layer of C
//     channels keeps min(1, C / (bn_nchw_channels_per_sm x SMs)) of the SMs busy. The rates
//     were measured on H200 kernel profiles (analysis/bn_rates.py), not fitted.
//   Attention (one layer: Q, K, V and output projections, the score and context GEMMs batched over
//     batch x heads, scale-and-mask, softmax and dropout over the scores). With memory
//     (Transformer-XL) the keys span the previous segment's tokens too, Q, K and V are projected
//     from all those rows, and each forward pass copies them twice (the concatenation and the next
//     memory); with relative positions, the position projection (once a batch), the second score
//     term, its shift and its sum, and the two biased queries.
//   Autocast (fp16 / bf16): each layer that runs on tensor cores casts its fp32 parameter tensors
//     to half in the forward pass and their half gradients back to fp32 in the backward pass, a
//     kernel per tensor and pass (6 bytes a parameter each).
//   Kernel time: launch_us + max(F / rate, D / (bandwidth x memory_efficiency)). The CPU of an
//     eager framework issues one kernel per dispatch_us at best while the GPU runs what it was
//     given, so a layer's pass takes max(its kernels' time, kernels x dispatch_us): many small
//     kernels cost their dispatch, not their work (what decides small batches).
//   Optimizer step, once per iteration: one pass over the parameters at memory speed: SGD with
//     momentum reads weights, gradients and momentum and writes weights and momentum (20 bytes per
//     parameter); Adam 28; LAMB 40 (a second pass for the trust ratio); mixed precision adds the
//     gradient unscale (8). A launch per parameter tensor (multi-tensor apply).
//   Per iteration: iteration_us outside kernels (zero_grad, the loss scaler, the loop).
//
// The constants (config::FrameworkModelParams) are the same for every device and precision: a
// device enters only through its datasheet figures (fp32 and tensor-core peaks, bandwidth, SMs).
// They are fitted to the `set: fit` rows of scenarios/devices/measurements/ that give whole
// iterations (`poseidon gpu-model fit --compute-model framework`); docs/gpu_model.md reports the
// held-out rows. A device file may override any of them (framework_model: {NAME: value}).
//
// Pure: no I/O, no clock; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/specs.h"
#include "cost/gpu_kernel_model.h"
#include "core/model.h"

namespace poseidon::cost {

using config::FrameworkModelParams;

// The fitted constants (provenance in cost/framework_model.cc).
FrameworkModelParams FittedFrameworkParams();
// FittedFrameworkParams() with the device's framework_model overrides applied.
FrameworkModelParams FrameworkParamsFor(const config::DeviceSpec& device);

// Per layer and pass, whole batch, at the device's precision (device.precision), the layer on its
// own (no fusion with its neighbours).
LayerCost FrameworkLayerCost(const core::Layer& layer, int64_t batch,
                             const config::DeviceSpec& device, const FrameworkModelParams& p);

// Every layer of the model (model.layers() order): FrameworkLayerCost, except where
// device.batchnorm_fusion fuses a ReLU, or a residual add and its ReLU, into the batch norm before
// them (NHWC at half precision, as cuDNN's fused batch norm runs): those layers cost nothing and
// the batch norm reads and writes what they did not leave to it (the header's "Fusion").
std::vector<LayerCost> FrameworkModelCosts(const core::Model& model, int64_t batch,
                                           const config::DeviceSpec& device,
                                           const FrameworkModelParams& p);

// The optimizer step of one iteration over the model's parameters (device.optimizer), ns.
double OptimizerStepNs(const core::Model& model, const config::DeviceSpec& device,
                       const FrameworkModelParams& p);

// One GEMM C[M,N] = A[M,K] B[K,N] at the device's precision, ns (one kernel on its own: at least
// a dispatch).
double FrameworkGemmNs(double m, double n, double k, const config::DeviceSpec& device,
                       const FrameworkModelParams& p);

}  // namespace poseidon::cost
