// tests/kernels/cpu_transformer_test.cc: transformer layers (being written).
