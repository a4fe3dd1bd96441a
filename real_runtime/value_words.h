// real_runtime/value_words.h: arithmetic on buffers of parameter values held as 32-bit words.
//
// The core moves words (core/model.h: a model's values are fp32, one word each, or fp64, two);
// the stores of a job whose workers bring the model (poseidon.torch: float32 or float64
// parameters) add, average and rebuild them in their own type, so that a float64 job sums in
// float64 and matches one process to 1e-10. `value_words` is 1 (float) or 2 (double); counts are
// in words and, for 2, even; buffers are at least 8-byte aligned (std::vector's, the transport's).
#pragma once

#include <cstdint>
#include <vector>

namespace poseidon::rt {

// dst[i] += src[i] over `words` words of values.
void AddValues(int value_words, float* dst, const float* src, int64_t words);
// dst[i] *= factor.
void ScaleValues(int value_words, float* dst, int64_t words, double factor);
// out[i] = (parts[0][i] + parts[1][i] + ...) * factor, summed in the order given (so that
// every replica's sum is bit-identical); `out` may be one of the parts.
void MeanOfParts(int value_words, const std::vector<const float*>& parts, int64_t words,
                 double factor, float* out);
// dw (n x m) = g^T x for the factors g (k x n) and x (k x m), all row-major, in the values' type
// (a GEMM through CBLAS): one worker's weight gradient rebuilt from its sufficient factors.
void RebuildFromFactors(int value_words, const float* g, const float* x, int64_t k, int64_t m,
                        int64_t n, float* dw);

}  // namespace poseidon::rt
