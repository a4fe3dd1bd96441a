// kernels/buffers.h: where a Net's buffers live, and the few operations the Net needs on them.
//
// The reference and cpu backends compute on host memory; the cuda backend on device memory. A
// BufferSpace allocates zeroed fp32 arrays in its memory, copies between it and host memory,
// zeroes, and accumulates (y += x), so that kernels/net.cc is written once for all backends.
// Every operation has finished when it returns (the CUDA space synchronises its stream), so a
// host buffer passed to Upload may be reused at once and a Download's result read at once.
//
//   std::unique_ptr<BufferSpace> space = MakeBufferSpace(Backend::kCuda);  // throws without one
//   SpaceBuffer x(space.get(), 1024);          // 1024 zeroed floats on the device
//   space->Upload(x.data(), host.data(), 1024);
//
// Thread-safety: a space and its buffers are used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/kernel.h"

namespace poseidon::kernels {

class BufferSpace {
 public:
  virtual ~BufferSpace() = default;
  // True when the space is host memory (Upload/Download are plain copies there).
  virtual bool is_host() const = 0;
  // `count` zeroed floats; null only for count 0. Throws KernelError when out of memory.
  virtual float* Allocate(int64_t count) = 0;
  virtual void Release(float* p) noexcept = 0;
  virtual void Upload(float* dst, const float* host_src, int64_t count) = 0;
  virtual void Download(float* host_dst, const float* src, int64_t count) = 0;
  virtual void Zero(float* p, int64_t count) = 0;
  // y[i] += x[i] for i < count (both in this space).
  virtual void AddTo(float* y, const float* x, int64_t count) = 0;
};

// Host memory for kReference and kCpu; a CUDA device for kCuda. Throws KernelError when the
// backend's memory is not available here (no CUDA build, no device), with the reason.
std::unique_ptr<BufferSpace> MakeBufferSpace(Backend backend);

// A move-only array of `count` floats in a space (which must outlive it).
class SpaceBuffer {
 public:
  SpaceBuffer() = default;
  SpaceBuffer(BufferSpace* space, int64_t count)
      : space_(space), data_(space->Allocate(count)), size_(count) {}
  ~SpaceBuffer() {
    if (data_ != nullptr) space_->Release(data_);
  }
  SpaceBuffer(const SpaceBuffer&) = delete;
  SpaceBuffer& operator=(const SpaceBuffer&) = delete;
  SpaceBuffer(SpaceBuffer&& o) noexcept : space_(o.space_), data_(o.data_), size_(o.size_) {
    o.data_ = nullptr, o.size_ = 0;
  }
  SpaceBuffer& operator=(SpaceBuffer&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) space_->Release(data_);
      space_ = o.space_, data_ = o.data_, size_ = o.size_;
      o.data_ = nullptr, o.size_ = 0;
    }
    return *this;
  }

  float* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  BufferSpace* space_ = nullptr;
  float* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace poseidon::kernels
