// kernels/cuda/cuda_transformer.cc: the CUDA backend's transformer layers, host side
// (being written; see kernels/README.md).
