// kernels/cuda/cuda_space.cc: see cuda_space.h.
#include "kernels/cuda/cuda_space.h"

#include <string>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_util.h"

namespace poseidon::kernels::cuda {
namespace {

class CudaSpace final : public BufferSpace {
 public:
  bool is_host() const override { return false; }
  float* Allocate(int64_t count) override {
    if (count <= 0) return nullptr;
    const size_t bytes = static_cast<size_t>(count) * sizeof(float);
    void* p = nullptr;
    POSEIDON_CUDA_CHECK(cudaMalloc(&p, bytes));
    const cudaError_t set = cudaMemsetAsync(p, 0, bytes, stream_.get());
    if (set != cudaSuccess) {
      cudaFree(p);
      ThrowCudaError("cudaMemsetAsync(p, 0, bytes, stream)", __FILE__, __LINE__,
                     cudaGetErrorString(set));
    }
    stream_.Synchronize();
    return static_cast<float*>(p);
  }
  void Release(float* p) noexcept override { cudaFree(p); }  // a failure here is ignored
  void Upload(float* dst, const float* src, int64_t count) override {
    if (count <= 0) return;
    CopyToDevice(dst, src, static_cast<size_t>(count), stream_.get());
    stream_.Synchronize();
  }
  void Download(float* dst, const float* src, int64_t count) override {
    if (count <= 0) return;
    CopyToHost(dst, src, static_cast<size_t>(count), stream_.get());
    stream_.Synchronize();
  }
  void Zero(float* p, int64_t count) override {
    if (count <= 0) return;
    POSEIDON_CUDA_CHECK(
        cudaMemsetAsync(p, 0, static_cast<size_t>(count) * sizeof(float), stream_.get()));
    stream_.Synchronize();
  }
  void AddTo(float* y, const float* x, int64_t count) override {
    if (count <= 0) return;
    POSEIDON_CUDA_CHECK(LaunchAddTo(y, x, count, stream_.get()));
    stream_.Synchronize();
  }

 private:
  CudaStream stream_;
};

}  // namespace

std::unique_ptr<BufferSpace> MakeCudaSpace() {
  std::string why;
  if (!CudaDeviceAvailable(&why)) {
    throw KernelError("the cuda backend needs a CUDA device: " + why +
                      "; use --backend cpu on this machine");
  }
  return std::make_unique<CudaSpace>();
}

}  // namespace poseidon::kernels::cuda
