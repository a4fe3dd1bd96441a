// kernels/cpu/cpu_transformer.cc: the CPU (oneDNN) backend's transformer layers
// (being written; see kernels/README.md).
