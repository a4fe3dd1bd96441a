// kernels/cuda/cuda_transformer.cu: the hand-written kernels of the CUDA backend's transformer
// layers (see cuda_transformer.h). Row kernels (layer norm, softmax) give one block to a row and
// reduce in shared memory; column sums give a block 32 columns and 8 row lanes, so every sum is
// computed in a fixed order (deterministic) except the embedding's scatter-add (atomics).
#include "kernels/cuda/cuda_transformer.h"

#include <cfloat>
#include <cmath>

namespace poseidon::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 128;  // per row of a row kernel (D and S are often 64..1024)
constexpr unsigned kMaxBlocks = 65535;

// Enough blocks of kThreads for n items (grid-stride loops cover the rest).
inline unsigned Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? (b > 0 ? b : 1) : kMaxBlocks);
}
// One block per row, up to kMaxBlocks (block-stride loops over the rest).
inline unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(rows < kMaxBlocks ? (rows > 0 ? rows : 1) : kMaxBlocks);
}

// One block per 32 columns of a column kernel (blockDim 32 x 8).
inline unsigned ColumnBlocks(int64_t cols) {
  return static_cast<unsigned>(cols > 0 ? (cols + 31) / 32 : 1);
}

#define POSEIDON_GRID_LOOP(i, n)                                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Every block of a row kernel visits the same rows, so __syncthreads inside the loop is safe.
#define POSEIDON_ROW_LOOP(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

// The sum (or max) of v over the block, returned to every thread. shared holds 33 floats; the
// leading __syncthreads lets a caller reduce twice in a row with the same array.
template <bool kMax>
__device__ float BlockReduce(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_down_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    v = lane < warps ? shared[lane] : (kMax ? -FLT_MAX : 0.f);
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_down_sync(0xffffffffu, v, o);
      v = kMax ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) shared[32] = v;
  }
  __syncthreads();
  return shared[32];
}
__device__ float BlockSum(float v, float* shared) { return BlockReduce<false>(v, shared); }
__device__ float BlockMax(float v, float* shared) { return BlockReduce<true>(v, shared); }

__global__ void AddPeriodicKernel(float* y, const float* x, const float* v, int64_t n,
                                  int64_t period) {
  POSEIDON_GRID_LOOP(i, n) { y[i] = x[i] + v[i % period]; }
}

// blockDim (32, 8): column blockIdx.x * 32 + threadIdx.x, rows threadIdx.y, +8, ...
__global__ void ColumnSumKernel(const float* x, int64_t rows, int64_t cols, int64_t pitch,
                                float* y) {
  __shared__ float partial[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float sum = 0.f;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += 8) sum += x[r * pitch + c];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.f;
    for (int k = 0; k < 8; ++k) total += partial[k][threadIdx.x];
    y[c] = total;
  }
}

__global__ void LayerNormForwardKernel(const float* x, const float* gamma, const float* beta,
                                       int64_t rows, int64_t d, float eps, float* y, float* mean,
                                       float* rstd) {
  __shared__ float shared[33];
  POSEIDON_ROW_LOOP(r, rows) {
    const float* xr = x + r * d;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += xr[j];
    const float mu = BlockSum(s, shared) / static_cast<float>(d);
    float v = 0.f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float t = xr[j] - mu;
      v += t * t;
    }
    const float inv = rsqrtf(BlockSum(v, shared) / static_cast<float>(d) + eps);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      y[r * d + j] = (xr[j] - mu) * inv * gamma[j] + beta[j];
    }
    if (threadIdx.x == 0) mean[r] = mu, rstd[r] = inv;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
__global__ void LayerNormBackwardKernel(const float* x, const float* dy, const float* gamma,
                                        const float* mean, const float* rstd, int64_t rows,
                                        int64_t d, float* dx) {
  __shared__ float shared[33];
  POSEIDON_ROW_LOOP(r, rows) {
    const float mu = mean[r], inv = rstd[r];
    float sg = 0.f, sgx = 0.f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float g = dy[r * d + j] * gamma[j];
      sg += g;
      sgx += g * (x[r * d + j] - mu) * inv;
    }
    const float mg = BlockSum(sg, shared) / static_cast<float>(d);
    const float mgx = BlockSum(sgx, shared) / static_cast<float>(d);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float xhat = (x[r * d + j] - mu) * inv;
      dx[r * d + j] = inv * (dy[r * d + j] * gamma[j] - mg - xhat * mgx);
    }
  }
}

// dgamma = sum over rows of dy * xhat, dbeta = sum of dy; blockDim (32, 8) as ColumnSumKernel.
__global__ void LayerNormParamGradKernel(const float* x, const float* dy, const float* mean,
                                         const float* rstd, int64_t rows, int64_t d, float* dgamma,
                                         float* dbeta) {
  __shared__ float pg[8][33], pb[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float sg = 0.f, sb = 0.f;
  if (c < d) {
    for (int64_t r = threadIdx.y; r < rows; r += 8) {
      const float g = dy[r * d + c];
      sg += g * (x[r * d + c] - mean[r]) * rstd[r];
      sb += g;
    }
  }
  pg[threadIdx.y][threadIdx.x] = sg;
  pb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < d) {
    float tg = 0.f, tb = 0.f;
    for (int k = 0; k < 8; ++k) tg += pg[k][threadIdx.x], tb += pb[k][threadIdx.x];
    dgamma[c] = tg;
    dbeta[c] = tb;
  }
}

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

__global__ void GeluForwardKernel(const float* x, float* y, int64_t n) {
  POSEIDON_GRID_LOOP(i, n) { y[i] = 0.5f * x[i] * (1.f + erff(x[i] * kInvSqrt2)); }
}

__global__ void GeluBackwardKernel(const float* x, const float* dy, float* dx, int64_t n) {
  POSEIDON_GRID_LOOP(i, n) {
    const float v = x[i];
    const float cdf = 0.5f * (1.f + erff(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

__global__ void TanhForwardKernel(const float* x, float* y, int64_t n) {
  POSEIDON_GRID_LOOP(i, n) { y[i] = tanhf(x[i]); }
}

__global__ void TanhBackwardKernel(const float* y, const float* dy, float* dx, int64_t n) {
  POSEIDON_GRID_LOOP(i, n) { dx[i] = dy[i] * (1.f - y[i] * y[i]); }
}

__global__ void SoftmaxForwardKernel(const float* x, float* y, int64_t rows, int64_t cols,
                                     bool causal) {
  __shared__ float shared[33];
  POSEIDON_ROW_LOOP(r, rows) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const int64_t valid = causal ? r % cols + 1 : cols;  // keys 0..valid-1 are visible
    float m = -FLT_MAX;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = BlockMax(m, shared);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
      const float e = expf(xr[j] - m);
      yr[j] = e;
      s += e;
    }
    const float inv = 1.f / BlockSum(s, shared);  // also orders the writes above before the reads
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      yr[j] = j < valid ? yr[j] * inv : 0.f;
    }
  }
}

__global__ void SoftmaxBackwardKernel(const float* y, const float* dy, float* dx, int64_t rows,
                                      int64_t cols) {
  __shared__ float shared[33];
  POSEIDON_ROW_LOOP(r, rows) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += yr[j] * dyr[j];
    // Every read of dy precedes a write of dx (dx may be dy).
    const float dot = BlockSum(s, shared);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      dx[r * cols + j] = yr[j] * (dyr[j] - dot);
    }
  }
}

__global__ void EmbeddingGatherKernel(const int32_t* ids, const float* table, int64_t rows,
                                      int64_t d, float* y) {
  POSEIDON_GRID_LOOP(i, rows * d) {
    const int64_t r = i / d, j = i % d;
    y[i] = table[static_cast<int64_t>(ids[r]) * d + j];
  }
}

__global__ void EmbeddingScatterAddKernel(const int32_t* ids, const float* dy, int64_t rows,
                                          int64_t d, float* dtable) {
  POSEIDON_GRID_LOOP(i, rows * d) {
    const int64_t r = i / d, j = i % d;
    atomicAdd(dtable + static_cast<int64_t>(ids[r]) * d + j, dy[i]);
  }
}

// Index i of cols [n * patches, c * p * p] and its pixel in [n, c, h, w].
__device__ int64_t PatchPixel(const PatchGeometry& g, int64_t i) {
  const int64_t k = g.c * g.p * g.p, pw = g.w / g.p, patches = (g.h / g.p) * pw;
  const int64_t row = i / k, col = i % k;
  const int64_t b = row / patches, patch = row % patches;
  const int64_t py = patch / pw, px = patch % pw;
  const int64_t ch = col / (g.p * g.p), ki = (col / g.p) % g.p, kj = col % g.p;
  return ((b * g.c + ch) * g.h + py * g.p + ki) * g.w + px * g.p + kj;
}

__global__ void PatchIm2ColKernel(PatchGeometry g, const float* x, float* cols) {
  POSEIDON_GRID_LOOP(i, g.n * g.c * g.h * g.w) { cols[i] = x[PatchPixel(g, i)]; }
}

__global__ void PatchCol2ImKernel(PatchGeometry g, const float* dcols, float* dx) {
  POSEIDON_GRID_LOOP(i, g.n * g.c * g.h * g.w) { dx[PatchPixel(g, i)] = dcols[i]; }
}

__global__ void ClsConcatKernel(const float* x, const float* token, int64_t n, int64_t s, int64_t d,
                                float* y) {
  POSEIDON_GRID_LOOP(i, n * (s + 1) * d) {
    const int64_t j = i % d, t = (i / d) % (s + 1), b = i / (d * (s + 1));
    y[i] = t == 0 ? token[j] : x[(b * s + t - 1) * d + j];
  }
}

__global__ void ClsSplitGradKernel(const float* dy, int64_t n, int64_t s, int64_t d, float* dx) {
  POSEIDON_GRID_LOOP(i, n * s * d) {
    const int64_t j = i % d, t = (i / d) % s, b = i / (d * s);
    dx[i] = dy[(b * (s + 1) + t + 1) * d + j];
  }
}

__global__ void TokenPoolForwardKernel(const float* x, int64_t n, int64_t s, int64_t d, bool first,
                                       float* y) {
  POSEIDON_GRID_LOOP(i, n * d) {
    const int64_t b = i / d, j = i % d;
    const float* xb = x + b * s * d + j;
    if (first) {
      y[i] = xb[0];
      continue;
    }
    float sum = 0.f;
    for (int64_t t = 0; t < s; ++t) sum += xb[t * d];
    y[i] = sum / static_cast<float>(s);
  }
}

__global__ void TokenPoolBackwardKernel(const float* dy, int64_t n, int64_t s, int64_t d,
                                        bool first, float* dx) {
  const float inv = 1.f / static_cast<float>(s);
  POSEIDON_GRID_LOOP(i, n * s * d) {
    const int64_t j = i % d, t = (i / d) % s, b = i / (d * s);
    const float g = dy[b * d + j];
    dx[i] = first ? (t == 0 ? g : 0.f) : g * inv;
  }
}

}  // namespace

cudaError_t LaunchAddPeriodic(float* y, const float* x, const float* v, int64_t n, int64_t period,
                              cudaStream_t stream) {
  AddPeriodicKernel<<<Blocks(n), kThreads, 0, stream>>>(y, x, v, n, period);
  return cudaGetLastError();
}

cudaError_t LaunchColumnSum(const float* x, int64_t rows, int64_t cols, int64_t pitch, float* y,
                            cudaStream_t stream) {
  ColumnSumKernel<<<ColumnBlocks(cols), dim3(32, 8), 0, stream>>>(x, rows, cols, pitch, y);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNormForward(const float* x, const float* gamma, const float* beta,
                                   int64_t rows, int64_t d, float eps, float* y, float* mean,
                                   float* rstd, cudaStream_t stream) {
  LayerNormForwardKernel<<<RowBlocks(rows), kRowThreads, 0, stream>>>(x, gamma, beta, rows, d, eps,
                                                                      y, mean, rstd);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNormBackward(const float* x, const float* dy, const float* gamma,
                                    const float* mean, const float* rstd, int64_t rows, int64_t d,
                                    float* dx, float* dgamma, float* dbeta, cudaStream_t stream) {
  if (dx != nullptr) {
    LayerNormBackwardKernel<<<RowBlocks(rows), kRowThreads, 0, stream>>>(x, dy, gamma, mean, rstd,
                                                                         rows, d, dx);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  LayerNormParamGradKernel<<<ColumnBlocks(d), dim3(32, 8), 0, stream>>>(x, dy, mean, rstd, rows, d,
                                                                        dgamma, dbeta);
  return cudaGetLastError();
}

cudaError_t LaunchGeluForward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  GeluForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t LaunchGeluBackward(const float* x, const float* dy, float* dx, int64_t n,
                               cudaStream_t stream) {
  GeluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(x, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t LaunchTanhForward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  TanhForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t LaunchTanhBackward(const float* y, const float* dy, float* dx, int64_t n,
                               cudaStream_t stream) {
  TanhBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxForward(const float* x, float* y, int64_t rows, int64_t cols, bool causal,
                                 cudaStream_t stream) {
  SoftmaxForwardKernel<<<RowBlocks(rows), kRowThreads, 0, stream>>>(x, y, rows, cols, causal);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxBackward(const float* y, const float* dy, float* dx, int64_t rows,
                                  int64_t cols, cudaStream_t stream) {
  SoftmaxBackwardKernel<<<RowBlocks(rows), kRowThreads, 0, stream>>>(y, dy, dx, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingGather(const int32_t* ids, const float* table, int64_t rows, int64_t d,
                                  float* y, cudaStream_t stream) {
  EmbeddingGatherKernel<<<Blocks(rows * d), kThreads, 0, stream>>>(ids, table, rows, d, y);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingScatterAdd(const int32_t* ids, const float* dy, int64_t rows, int64_t d,
                                      float* dtable, cudaStream_t stream) {
  EmbeddingScatterAddKernel<<<Blocks(rows * d), kThreads, 0, stream>>>(ids, dy, rows, d, dtable);
  return cudaGetLastError();
}

cudaError_t LaunchPatchIm2Col(const PatchGeometry& g, const float* x, float* cols,
                              cudaStream_t stream) {
  PatchIm2ColKernel<<<Blocks(g.n * g.c * g.h * g.w), kThreads, 0, stream>>>(g, x, cols);
  return cudaGetLastError();
}

cudaError_t LaunchPatchCol2Im(const PatchGeometry& g, const float* dcols, float* dx,
                              cudaStream_t stream) {
  PatchCol2ImKernel<<<Blocks(g.n * g.c * g.h * g.w), kThreads, 0, stream>>>(g, dcols, dx);
  return cudaGetLastError();
}

cudaError_t LaunchClsConcat(const float* x, const float* token, int64_t n, int64_t s, int64_t d,
                            float* y, cudaStream_t stream) {
  ClsConcatKernel<<<Blocks(n * (s + 1) * d), kThreads, 0, stream>>>(x, token, n, s, d, y);
  return cudaGetLastError();
}

cudaError_t LaunchClsSplitGrad(const float* dy, int64_t n, int64_t s, int64_t d, float* dx,
                               cudaStream_t stream) {
  ClsSplitGradKernel<<<Blocks(n * s * d), kThreads, 0, stream>>>(dy, n, s, d, dx);
  return cudaGetLastError();
}

cudaError_t LaunchTokenPoolForward(const float* x, int64_t n, int64_t s, int64_t d, bool first,
                                   float* y, cudaStream_t stream) {
  TokenPoolForwardKernel<<<Blocks(n * d), kThreads, 0, stream>>>(x, n, s, d, first, y);
  return cudaGetLastError();
}

cudaError_t LaunchTokenPoolBackward(const float* dy, int64_t n, int64_t s, int64_t d, bool first,
                                    float* dx, cudaStream_t stream) {
  TokenPoolBackwardKernel<<<Blocks(n * s * d), kThreads, 0, stream>>>(dy, n, s, d, first, dx);
  return cudaGetLastError();
}

}  // namespace poseidon::kernels::cuda
