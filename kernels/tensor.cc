#include "kernels/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace poseidon::kernels {

std::string Dims::ToString() const {
  return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" +
         std::to_string(w);
}

void Tensor::Free::operator()(float* p) const { std::free(p); }

Tensor::Tensor(Dims dims) : dims_(dims) {
  if (dims.n < 0 || dims.c < 0 || dims.h < 0 || dims.w < 0) {
    throw std::invalid_argument("tensor dims must not be negative: " + dims.ToString());
  }
  const size_t bytes = static_cast<size_t>(dims.count()) * sizeof(float);
  // aligned_alloc needs a size that is a multiple of the alignment.
  const size_t rounded = std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  float* p = static_cast<float*>(std::aligned_alloc(kAlignment, rounded));
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(p);
}

Tensor Tensor::Clone() const {
  Tensor t(dims_);
  if (count() > 0) std::memcpy(t.data(), data(), static_cast<size_t>(bytes()));
  return t;
}

void Tensor::Fill(float v) { std::fill(data_.get(), data_.get() + count(), v); }

}  // namespace poseidon::kernels
