// kernels/buffers.cc: the host space, and the factory (the CUDA space is kernels/cuda/).
#include "kernels/buffers.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#ifdef POSEIDON_WITH_CUDA
#include "kernels/cuda/cuda_space.h"
#endif

namespace poseidon::kernels {
namespace {

// Host memory, 64-byte aligned (oneDNN's preferred alignment; a cache line).
class HostSpace final : public BufferSpace {
 public:
  bool is_host() const override { return true; }
  float* Allocate(int64_t count) override {
    if (count <= 0) return nullptr;
    const size_t bytes = (static_cast<size_t>(count) * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) {
      throw KernelError("out of host memory allocating " + std::to_string(bytes) + " bytes");
    }
    std::memset(p, 0, bytes);
    return static_cast<float*>(p);
  }
  void Release(float* p) noexcept override { std::free(p); }
  void Upload(float* dst, const float* src, int64_t count) override { Copy(dst, src, count); }
  void Download(float* dst, const float* src, int64_t count) override { Copy(dst, src, count); }
  void Zero(float* p, int64_t count) override { std::fill(p, p + count, 0.f); }
  void AddTo(float* y, const float* x, int64_t count) override {
    for (int64_t i = 0; i < count; ++i) y[i] += x[i];
  }

 private:
  static void Copy(float* dst, const float* src, int64_t count) {
    if (dst != src && count > 0) std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
  }
};

}  // namespace

std::unique_ptr<BufferSpace> MakeBufferSpace(Backend backend) {
  if (backend != Backend::kCuda) return std::make_unique<HostSpace>();
#ifdef POSEIDON_WITH_CUDA
  return cuda::MakeCudaSpace();
#else
  throw KernelError(
      "the cuda backend is not available: this build is not built with CUDA; reconfigure with "
      "-DPOSEIDON_WITH_CUDA=ON on a machine with nvcc and cuDNN");
#endif
}

}  // namespace poseidon::kernels
