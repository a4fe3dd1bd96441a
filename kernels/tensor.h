// kernels/tensor.h: an fp32 NCHW tensor with an owned, 64-byte-aligned buffer.
//
// The unit the layers (issue: kernels) compute on. Move-only: copying a tensor is always an
// explicit Clone(), so large buffers are never copied by accident.
//
//   kernels::Tensor x({32, 3, 28, 28});
//   x.Fill(0.f);
//   float* p = x.data();  // p[((n*C + c)*H + h)*W + w]
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace poseidon::kernels {

struct Dims {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t count() const { return n * c * h * w; }
  bool operator==(const Dims&) const = default;
  std::string ToString() const;
};

class Tensor {
 public:
  static constexpr size_t kAlignment = 64;

  Tensor() = default;
  explicit Tensor(Dims dims);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  Tensor Clone() const;
  void Fill(float v);

  const Dims& dims() const { return dims_; }
  int64_t count() const { return dims_.count(); }
  int64_t bytes() const { return count() * 4; }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  float& at(int64_t n, int64_t c, int64_t h, int64_t w) {
    return data_.get()[((n * dims_.c + c) * dims_.h + h) * dims_.w + w];
  }
  float at(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return data_.get()[((n * dims_.c + c) * dims_.h + h) * dims_.w + w];
  }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  Dims dims_;
  std::unique_ptr<float[], Free> data_;
};

}  // namespace poseidon::kernels
