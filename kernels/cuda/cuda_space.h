// kernels/cuda/cuda_space.h: device memory of the current CUDA device as a BufferSpace
// (kernels/buffers.h): cudaMalloc'd arrays, copies and a memset on one stream of its own,
// synchronised before every call returns.
#pragma once

#include <memory>

#include "kernels/buffers.h"

namespace poseidon::kernels::cuda {

// Throws KernelError naming the reason when no device is usable.
std::unique_ptr<BufferSpace> MakeCudaSpace();

}  // namespace poseidon::kernels::cuda
