// tests/kernels/gpu_transformer_test.cc: transformer layers (being written).
