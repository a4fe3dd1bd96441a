// kernels/cuda/cuda_kernels.h: the CUDA backend (cuDNN, cuBLAS and a few hand-written kernels).
//
// Computes the reference backend's functions (kernels/reference/reference_kernels.h) on device
// memory: every pointer handed to Forward/Backward is a cudaMalloc'd fp32 buffer (labels stay in
// host memory). Each kernel owns a stream and its cuDNN/cuBLAS handles bound to it; Forward and
// Backward enqueue work and return once it has finished (the stream is synchronised), so the
// caller may read the outputs at once. TF32 is off (FMA math) so results are fp32-accurate.
//   conv       cuDNN, groups via cudnnSetConvolutionGroupCount, algorithms by the _v7 heuristics
//   pool       hand-written (Caffe ceil rounding and avg divisor, which cuDNN's symmetric padding
//              cannot express; floor rounding, `round: floor`, runs through the same code)
//   relu, lrn  cuDNN (LRN: odd local_size <= 16; cuDNN's alpha/n convention is Caffe's)
//   fc         cuBLAS sgemm, W is N x M row-major
//   softmax    cudnnSoftmaxForward + hand-written loss and gradient
//   batchnorm  cuDNN spatial batch norm (eps kBatchNormEps, factor 1 - kBatchNormMomentum)
//   dropout    the mask is drawn on the host with the reference's generator (same seed, same
//              mask) and copied to the device
//   concat/add cudaMemcpy2DAsync / hand-written add
//
//   auto k = MakeCudaKernel(layer, /*batch=*/32, /*seed=*/1);  // needs a device
//
// Thread-safety: a kernel is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "core/model.h"
#include "kernels/kernel.h"

namespace poseidon::kernels {

// Throws KernelError when no device is usable or the layer is outside what the backend supports.
std::unique_ptr<LayerKernel> MakeCudaKernel(const core::Layer& layer, int64_t batch,
                                            uint64_t seed);

}  // namespace poseidon::kernels
