// kernels/reference/reference_transformer.cc: the reference backend's transformer layers
// (being written; see kernels/README.md).
