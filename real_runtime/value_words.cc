#include "real_runtime/value_words.h"

#include <cblas.h>

#include "core/types.h"

namespace poseidon::rt {
namespace {

template <typename T>
void AddTyped(T* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

template <typename T>
void ScaleTyped(T* dst, int64_t n, T factor) {
  for (int64_t i = 0; i < n; ++i) dst[i] *= factor;
}

template <typename T>
void MeanTyped(const std::vector<const T*>& parts, int64_t n, T factor, T* out) {
  for (int64_t i = 0; i < n; ++i) {
    T s = parts[0][i];
    for (size_t p = 1; p < parts.size(); ++p) s += parts[p][i];
    out[i] = s * factor;
  }
}

}  // namespace

void MeanOfParts(int value_words, const std::vector<const float*>& parts, int64_t words,
                 double factor, float* out) {
  POSEIDON_CHECK(!parts.empty()) << "a mean of no parts";
  if (value_words == 2) {
    std::vector<const double*> d;
    for (const float* p : parts) d.push_back(reinterpret_cast<const double*>(p));
    MeanTyped(d, words / 2, factor, reinterpret_cast<double*>(out));
  } else {
    MeanTyped(parts, words, static_cast<float>(factor), out);
  }
}

void AddValues(int value_words, float* dst, const float* src, int64_t words) {
  if (value_words == 2) {
    AddTyped(reinterpret_cast<double*>(dst), reinterpret_cast<const double*>(src), words / 2);
  } else {
    AddTyped(dst, src, words);
  }
}

void ScaleValues(int value_words, float* dst, int64_t words, double factor) {
  if (value_words == 2) {
    ScaleTyped(reinterpret_cast<double*>(dst), words / 2, factor);
  } else {
    ScaleTyped(dst, words, static_cast<float>(factor));
  }
}

void RebuildFromFactors(int value_words, const float* g, const float* x, int64_t k, int64_t m,
                        int64_t n, float* dw) {
  POSEIDON_CHECK(value_words == 1 || value_words == 2) << value_words;
  const auto K = static_cast<blasint>(k), M = static_cast<blasint>(m), N = static_cast<blasint>(n);
  // dw (N x M) = g^T (N x K) x (K x M).
  if (value_words == 2) {
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, M, K, 1.0,
                reinterpret_cast<const double*>(g), N, reinterpret_cast<const double*>(x), M, 0.0,
                reinterpret_cast<double*>(dw), M);
  } else {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, M, K, 1.f, g, N, x, M, 0.f, dw, M);
  }
}

}  // namespace poseidon::rt
