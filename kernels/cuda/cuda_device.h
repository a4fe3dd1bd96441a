// kernels/cuda/cuda_device.h: launchers of the backend's hand-written CUDA kernels
// (cuda_device.cu). Plain C++ so that only cuda_device.cu goes through nvcc; every launcher takes
// an explicit stream and device pointers, and returns the launch status (cudaGetLastError).
//
//   POSEIDON_CUDA_CHECK(LaunchMul(y, x, mask, n, stream));
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace poseidon::kernels::cuda {

// Caffe pooling over n*c planes of h x w into oh x ow (windows clipped to the image; avg divides by
// the window clipped to the padded input). Max pooling writes the argmax (index in the plane, -1
// for an empty window).
struct PoolGeometry {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
};
cudaError_t LaunchPoolForward(const PoolGeometry& g, bool is_max, const float* x, float* y,
                              int32_t* argmax, cudaStream_t stream);
// dx must be zeroed by the caller (the kernel accumulates with atomicAdd).
cudaError_t LaunchPoolBackward(const PoolGeometry& g, bool is_max, const float* dy,
                               const int32_t* argmax, float* dx, cudaStream_t stream);

// y[i] = a[i] * b[i].
cudaError_t LaunchMul(float* y, const float* a, const float* b, int64_t n, cudaStream_t stream);
// y[i] += x[i].
cudaError_t LaunchAddTo(float* y, const float* x, int64_t n, cudaStream_t stream);

// Softmax loss over n images of c classes: loss[k] = -log(max(p[k, label[k]], FLT_MIN)).
cudaError_t LaunchSoftmaxLoss(const float* p, const int32_t* labels, int64_t n, int64_t c,
                              float* loss, cudaStream_t stream);
// dx = (p - onehot(label)) / n.
cudaError_t LaunchSoftmaxLossGrad(const float* p, const int32_t* labels, int64_t n, int64_t c,
                                  float* dx, cudaStream_t stream);

// Batch norm backward with fixed (running) statistics: dx = dy * gamma * inv_std,
// dgamma = sum dy * (x - mean) * inv_std, dbeta = sum dy. gamma may be null (1); dgamma/dbeta/dx
// may be null (not wanted). mean and var are the running averages (unbiased var).
cudaError_t LaunchBatchNormBackwardFixed(const float* x, const float* dy, const float* gamma,
                                         const float* mean, const float* var, double eps,
                                         int64_t n, int64_t c, int64_t plane, float* dx,
                                         float* dgamma, float* dbeta, cudaStream_t stream);

}  // namespace poseidon::kernels::cuda
