// kernels/cuda/cuda_util.cc: see cuda_util.h.
#include "kernels/cuda/cuda_util.h"

#include <cstdio>
#include <utility>

namespace poseidon::kernels::cuda {

void ThrowCudaError(const char* call, const char* file, int line, const char* what) {
  throw KernelError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                    (what != nullptr ? what : "unknown error"));
}

bool CudaDeviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (why != nullptr) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky-free error so that later calls start clean
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "cudaGetDeviceCount returned 0 devices";
    return false;
  }
  return true;
}

std::vector<std::pair<std::string, std::string>> DeviceProvenance() {
  if (!CudaDeviceAvailable(nullptr)) return {};
  int dev = 0, runtime = 0, driver = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f", static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  const size_t cudnn = cudnnGetVersion();
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return {{"device", std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                         std::to_string(prop.minor) + ", " + mem + " GiB)"},
          {"cuda", "runtime " + version(runtime) + ", driver " + version(driver)},
          {"cudnn", std::to_string(cudnn / 10000) + "." + std::to_string(cudnn % 10000 / 100) +
                        "." + std::to_string(cudnn % 100)}};
}

void DeviceBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return;
  POSEIDON_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor; a failure here is ignored
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

CudaStream::CudaStream() {
  POSEIDON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaStream::Synchronize() const { POSEIDON_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CopyToDeviceBytes(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  POSEIDON_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

void CopyToHostBytes(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  POSEIDON_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}

}  // namespace poseidon::kernels::cuda
