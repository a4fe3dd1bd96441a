// kernels/cuda/cuda_device.cu: the backend's hand-written kernels (see cuda_device.h).
#include "kernels/cuda/cuda_device.h"

#include <cfloat>

namespace poseidon::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// The one launch helper for grid arithmetic: enough blocks of kThreads for n items (grid-stride
// loops cover the rest).
inline unsigned Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

#define POSEIDON_GRID_LOOP(i, n)                                                              \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n);       \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// The window of output (oh, ow), first clipped to the padded input (its size is avg's divisor),
// then to the image. The output size is core::Model's (ceil or floor rounding); under floor no
// window runs past the padded input, so the first clip changes nothing.
struct Window {
  int64_t h0, h1, w0, w1, size;
};
__device__ Window PoolWindow(const PoolGeometry& g, int64_t oh, int64_t ow) {
  Window r;
  r.h0 = oh * g.sh - g.ph;
  r.w0 = ow * g.sw - g.pw;
  r.h1 = min(r.h0 + g.kh, g.h + g.ph);
  r.w1 = min(r.w0 + g.kw, g.w + g.pw);
  r.size = (r.h1 - r.h0) * (r.w1 - r.w0);
  r.h0 = max(r.h0, int64_t{0});
  r.w0 = max(r.w0, int64_t{0});
  r.h1 = min(r.h1, g.h);
  r.w1 = min(r.w1, g.w);
  return r;
}

__global__ void PoolForwardKernel(PoolGeometry g, bool is_max, const float* x, float* y,
                                  int32_t* argmax) {
  const int64_t total = g.planes * g.oh * g.ow;
  POSEIDON_GRID_LOOP(oi, total) {
    const int64_t ow = oi % g.ow, oh = (oi / g.ow) % g.oh, nc = oi / (g.ow * g.oh);
    const float* plane = x + nc * g.h * g.w;
    const Window win = PoolWindow(g, oh, ow);
    if (is_max) {
      float best = -FLT_MAX;
      int64_t arg = -1;
      for (int64_t h = win.h0; h < win.h1; ++h) {
        for (int64_t w = win.w0; w < win.w1; ++w) {
          const float v = plane[h * g.w + w];
          if (arg < 0 || v > best) best = v, arg = h * g.w + w;
        }
      }
      y[oi] = arg < 0 ? 0.f : best;
      argmax[oi] = static_cast<int32_t>(arg);
    } else {
      double sum = 0;
      for (int64_t h = win.h0; h < win.h1; ++h) {
        for (int64_t w = win.w0; w < win.w1; ++w) sum += plane[h * g.w + w];
      }
      y[oi] = static_cast<float>(sum / static_cast<double>(win.size));
    }
  }
}

__global__ void PoolBackwardKernel(PoolGeometry g, bool is_max, const float* dy,
                                   const int32_t* argmax, float* dx) {
  const int64_t total = g.planes * g.oh * g.ow;
  POSEIDON_GRID_LOOP(oi, total) {
    const int64_t ow = oi % g.ow, oh = (oi / g.ow) % g.oh, nc = oi / (g.ow * g.oh);
    float* plane = dx + nc * g.h * g.w;
    if (is_max) {
      if (argmax[oi] >= 0) atomicAdd(plane + argmax[oi], dy[oi]);
      continue;
    }
    const Window win = PoolWindow(g, oh, ow);
    const float d = dy[oi] / static_cast<float>(win.size);
    for (int64_t h = win.h0; h < win.h1; ++h) {
      for (int64_t w = win.w0; w < win.w1; ++w) atomicAdd(plane + h * g.w + w, d);
    }
  }
}

__global__ void MulKernel(float* y, const float* a, const float* b, int64_t n) {
  POSEIDON_GRID_LOOP(i, n) { y[i] = a[i] * b[i]; }
}

__global__ void AddToKernel(float* y, const float* x, int64_t n) {
  POSEIDON_GRID_LOOP(i, n) { y[i] += x[i]; }
}

__global__ void SoftmaxLossKernel(const float* p, const int32_t* labels, int64_t n, int64_t c,
                                  float* loss) {
  POSEIDON_GRID_LOOP(k, n) {
    const int32_t label = labels[k];
    const float v = (label >= 0 && label < c) ? p[k * c + label] : 0.f;
    loss[k] = -logf(fmaxf(v, FLT_MIN));
  }
}

__global__ void SoftmaxLossGradKernel(const float* p, const int32_t* labels, int64_t n, int64_t c,
                                      float* dx) {
  const float inv = 1.f / static_cast<float>(n);
  POSEIDON_GRID_LOOP(i, n * c) {
    const int64_t k = i / c, j = i % c;
    dx[i] = (p[i] - (j == labels[k] ? 1.f : 0.f)) * inv;
  }
}

// One block per channel; a shared-memory tree reduction in double.
__global__ void BatchNormBackwardFixedKernel(const float* x, const float* dy, const float* gamma,
                                             const float* mean, const float* var, double eps,
                                             int64_t n, int64_t c, int64_t plane, float* dx,
                                             float* dgamma, float* dbeta) {
  __shared__ double s_dy[kThreads], s_dyx[kThreads];
  const int64_t ch = blockIdx.x;
  const double inv_std = rsqrt(static_cast<double>(var[ch]) + eps);
  const double g = gamma != nullptr ? gamma[ch] : 1.0;
  double sum_dy = 0, sum_dyx = 0;
  for (int64_t t = threadIdx.x; t < n * plane; t += blockDim.x) {
    const int64_t i = ((t / plane) * c + ch) * plane + t % plane;
    const double xhat = (x[i] - static_cast<double>(mean[ch])) * inv_std;
    sum_dy += dy[i];
    sum_dyx += dy[i] * xhat;
    if (dx != nullptr) dx[i] = static_cast<float>(dy[i] * g * inv_std);
  }
  s_dy[threadIdx.x] = sum_dy;
  s_dyx[threadIdx.x] = sum_dyx;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.x) < s) {
      s_dy[threadIdx.x] += s_dy[threadIdx.x + s];
      s_dyx[threadIdx.x] += s_dyx[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (dgamma != nullptr) dgamma[ch] = static_cast<float>(s_dyx[0]);
    if (dbeta != nullptr) dbeta[ch] = static_cast<float>(s_dy[0]);
  }
}

}  // namespace

cudaError_t LaunchPoolForward(const PoolGeometry& g, bool is_max, const float* x, float* y,
                              int32_t* argmax, cudaStream_t stream) {
  PoolForwardKernel<<<Blocks(g.planes * g.oh * g.ow), kThreads, 0, stream>>>(g, is_max, x, y,
                                                                             argmax);
  return cudaGetLastError();
}

cudaError_t LaunchPoolBackward(const PoolGeometry& g, bool is_max, const float* dy,
                               const int32_t* argmax, float* dx, cudaStream_t stream) {
  PoolBackwardKernel<<<Blocks(g.planes * g.oh * g.ow), kThreads, 0, stream>>>(g, is_max, dy,
                                                                              argmax, dx);
  return cudaGetLastError();
}

cudaError_t LaunchMul(float* y, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  MulKernel<<<Blocks(n), kThreads, 0, stream>>>(y, a, b, n);
  return cudaGetLastError();
}

cudaError_t LaunchAddTo(float* y, const float* x, int64_t n, cudaStream_t stream) {
  AddToKernel<<<Blocks(n), kThreads, 0, stream>>>(y, x, n);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxLoss(const float* p, const int32_t* labels, int64_t n, int64_t c,
                              float* loss, cudaStream_t stream) {
  SoftmaxLossKernel<<<Blocks(n), kThreads, 0, stream>>>(p, labels, n, c, loss);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxLossGrad(const float* p, const int32_t* labels, int64_t n, int64_t c,
                                  float* dx, cudaStream_t stream) {
  SoftmaxLossGradKernel<<<Blocks(n * c), kThreads, 0, stream>>>(p, labels, n, c, dx);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormBackwardFixed(const float* x, const float* dy, const float* gamma,
                                         const float* mean, const float* var, double eps,
                                         int64_t n, int64_t c, int64_t plane, float* dx,
                                         float* dgamma, float* dbeta, cudaStream_t stream) {
  BatchNormBackwardFixedKernel<<<static_cast<unsigned>(c), kThreads, 0, stream>>>(
      x, dy, gamma, mean, var, eps, n, c, plane, dx, dgamma, dbeta);
  return cudaGetLastError();
}

}  // namespace poseidon::kernels::cuda
