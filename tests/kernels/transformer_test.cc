// tests/kernels/transformer_test.cc: transformer layers (being written).
