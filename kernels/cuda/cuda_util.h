// kernels/cuda/cuda_util.h: status checks, RAII device buffers and streams for the CUDA backend.
//
// Every device call names itself when it fails: POSEIDON_CUDA_CHECK(cudaMalloc(&p, n)) throws
// KernelError("cudaMalloc(&p, n) failed at file:line: out of memory"). Buffers are plain
// cudaMalloc memory (never managed memory); copies go on an explicit stream.
//
//   CudaStream stream;
//   DeviceBuffer buf(1024);                       // 1024 floats
//   CopyToDevice(buf.data(), host.data(), 1024, stream.get());
//   stream.Synchronize();
//
// Thread-safety: none of these objects may be used by two threads at once.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/kernel.h"

namespace poseidon::kernels::cuda {

[[noreturn]] void ThrowCudaError(const char* call, const char* file, int line, const char* what);

#define POSEIDON_CUDA_CHECK(call)                                                           \
  do {                                                                                      \
    const cudaError_t poseidon_status_ = (call);                                            \
    if (poseidon_status_ != cudaSuccess) {                                                  \
      ::poseidon::kernels::cuda::ThrowCudaError(#call, __FILE__, __LINE__,                  \
                                                cudaGetErrorString(poseidon_status_));      \
    }                                                                                       \
  } while (false)

#define POSEIDON_CUDNN_CHECK(call)                                                          \
  do {                                                                                      \
    const cudnnStatus_t poseidon_status_ = (call);                                          \
    if (poseidon_status_ != CUDNN_STATUS_SUCCESS) {                                         \
      ::poseidon::kernels::cuda::ThrowCudaError(#call, __FILE__, __LINE__,                  \
                                                cudnnGetErrorString(poseidon_status_));     \
    }                                                                                       \
  } while (false)

#define POSEIDON_CUBLAS_CHECK(call)                                                         \
  do {                                                                                      \
    const cublasStatus_t poseidon_status_ = (call);                                         \
    if (poseidon_status_ != CUBLAS_STATUS_SUCCESS) {                                        \
      ::poseidon::kernels::cuda::ThrowCudaError(#call, __FILE__, __LINE__,                  \
                                                cublasGetStatusString(poseidon_status_));   \
    }                                                                                       \
  } while (false)

// True when at least one CUDA device is usable; otherwise false and, if why is not null, the
// reason (no driver, no device, ...).
bool CudaDeviceAvailable(std::string* why);

// The current device and the libraries, for provenance: {"device", "NVIDIA H200 (sm_90, 139.8
// GiB)"}, {"cuda", "runtime 12.4, driver 12.6"}, {"cudnn", "9.1.0"}; empty without a device.
std::vector<std::pair<std::string, std::string>> DeviceProvenance();

// A move-only cudaMalloc'd array of `count` floats (or `bytes` raw bytes via Bytes()).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { Allocate(count * sizeof(float)); }
  static DeviceBuffer Bytes(size_t bytes) {
    DeviceBuffer b;
    b.Allocate(bytes);
    return b;
  }
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr, o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  float* data() const { return static_cast<float*>(ptr_); }
  void* raw() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void Allocate(size_t bytes);
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A move-only non-blocking CUDA stream.
class CudaStream {
 public:
  CudaStream();
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream(CudaStream&& o) noexcept : stream_(o.stream_) { o.stream_ = nullptr; }
  CudaStream& operator=(CudaStream&&) = delete;

  cudaStream_t get() const { return stream_; }
  void Synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// Asynchronous copies of `bytes` bytes on `stream` (the host memory must stay alive until the
// stream is synchronised).
void CopyToDeviceBytes(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void CopyToHostBytes(void* dst, const void* src, size_t bytes, cudaStream_t stream);
inline void CopyToDevice(float* dst, const float* src, size_t count, cudaStream_t stream) {
  CopyToDeviceBytes(dst, src, count * sizeof(float), stream);
}
inline void CopyToHost(float* dst, const float* src, size_t count, cudaStream_t stream) {
  CopyToHostBytes(dst, src, count * sizeof(float), stream);
}

}  // namespace poseidon::kernels::cuda
