// kernels/cuda/cuda_transformer.cu: the CUDA backend's hand-written transformer kernels
// (being written; see kernels/README.md).
