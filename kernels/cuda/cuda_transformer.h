// kernels/cuda/cuda_transformer.h: the CUDA backend's transformer layers (cuda_transformer.cc,
// cuBLAS for every matrix product) and the launchers of their hand-written kernels
// (cuda_transformer.cu). Plain C++ without core/ headers so that nvcc (C++17) can include it.
//
// Layouts are row-major with the batch outermost: a sequence [S, D] of a batch is rows = batch x S
// rows of D floats. Every launcher takes an explicit stream and device pointers and returns the
// launch status (cudaGetLastError); results are ready once the stream is synchronised.
//
//   POSEIDON_CUDA_CHECK(LaunchLayerNormForward(x, gamma, beta, rows, d, 1e-5f, y, mean, rstd,
//                                              stream));
//   auto k = MakeCudaTransformerKernel(layer, batch);  // nullptr for a non-transformer kind
#pragma once

#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

namespace poseidon::core {
struct Layer;
}
namespace poseidon::kernels {
class LayerKernel;

// A kernel for embedding, pos_embedding, layernorm, linear, attention, gelu, tanh, softmax,
// patch_embed, cls_token and token_pool; nullptr for any other kind (MakeCudaKernel's own).
// Throws KernelError when no device is usable.
std::unique_ptr<LayerKernel> MakeCudaTransformerKernel(const core::Layer& layer, int64_t batch);

}  // namespace poseidon::kernels

namespace poseidon::kernels::cuda {

// y[i] = x[i] + v[i % period] for i < n (x may be y): a bias over rows of `period` values, a
// position table over the tokens of each sequence.
cudaError_t LaunchAddPeriodic(float* y, const float* x, const float* v, int64_t n, int64_t period,
                              cudaStream_t stream);

// y[c] = sum over r < rows of x[r * pitch + c], for c < cols (a deterministic column sum: bias
// gradients, a table's gradient over the batch). pitch >= cols.
cudaError_t LaunchColumnSum(const float* x, int64_t rows, int64_t cols, int64_t pitch, float* y,
                            cudaStream_t stream);

// Layer norm over the last dimension d of `rows` rows (PyTorch: biased variance, eps inside the
// square root): y = (x - mean) * rstd * gamma + beta; mean and rstd (rows each) are saved for the
// backward pass.
cudaError_t LaunchLayerNormForward(const float* x, const float* gamma, const float* beta,
                                   int64_t rows, int64_t d, float eps, float* y, float* mean,
                                   float* rstd, cudaStream_t stream);
// dx (may be null) from dy, x and the saved statistics; dgamma and dbeta (d each) overwritten.
cudaError_t LaunchLayerNormBackward(const float* x, const float* dy, const float* gamma,
                                    const float* mean, const float* rstd, int64_t rows, int64_t d,
                                    float* dx, float* dgamma, float* dbeta, cudaStream_t stream);

// GELU, exact erf form: y = x * Phi(x); dx = dy * (Phi(x) + x * phi(x)).
cudaError_t LaunchGeluForward(const float* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchGeluBackward(const float* x, const float* dy, float* dx, int64_t n,
                               cudaStream_t stream);
// tanh; the backward reads the output: dx = dy * (1 - y^2).
cudaError_t LaunchTanhForward(const float* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t LaunchTanhBackward(const float* y, const float* dy, float* dx, int64_t n,
                               cudaStream_t stream);

// Softmax over each of `rows` rows of `cols` values. causal (square score blocks, cols = S):
// row r is query r % cols and its keys j > r % cols get probability 0 (PyTorch's -inf mask).
cudaError_t LaunchSoftmaxForward(const float* x, float* y, int64_t rows, int64_t cols, bool causal,
                                 cudaStream_t stream);
// dx = y * (dy - sum_j dy_j y_j) per row (masked entries, y = 0, get 0). dx may be dy.
cudaError_t LaunchSoftmaxBackward(const float* y, const float* dy, float* dx, int64_t rows,
                                  int64_t cols, cudaStream_t stream);

// Embedding lookup of `rows` ids (validated by the caller: 0 <= id < vocab): y[r, :] =
// table[ids[r], :] (d values).
cudaError_t LaunchEmbeddingGather(const int32_t* ids, const float* table, int64_t rows, int64_t d,
                                  float* y, cudaStream_t stream);
// dtable[ids[r], :] += dy[r, :] (atomic adds: dtable must be zeroed by the caller).
cudaError_t LaunchEmbeddingScatterAdd(const int32_t* ids, const float* dy, int64_t rows, int64_t d,
                                      float* dtable, cudaStream_t stream);

// Patch embedding's im2col: images [n, c, h, w] -> cols [n * (h/p) * (w/p), c * p * p], the
// patches in row-major order, each patch's values in the weight's {c, p, p} order.
struct PatchGeometry {
  int64_t n, c, h, w, p;
};
cudaError_t LaunchPatchIm2Col(const PatchGeometry& g, const float* x, float* cols,
                              cudaStream_t stream);
// The inverse (patches do not overlap and tile the image, so a plain scatter): dx from dcols.
cudaError_t LaunchPatchCol2Im(const PatchGeometry& g, const float* dcols, float* dx,
                              cudaStream_t stream);

// Class token: y [n, s + 1, d] = concat(token [d], x [n, s, d]) along the tokens; the backward
// part that is a copy: dx[b, t, :] = dy[b, t + 1, :].
cudaError_t LaunchClsConcat(const float* x, const float* token, int64_t n, int64_t s, int64_t d,
                            float* y, cudaStream_t stream);
cudaError_t LaunchClsSplitGrad(const float* dy, int64_t n, int64_t s, int64_t d, float* dx,
                               cudaStream_t stream);

// Token pool of [n, s, d] into [n, d]: the mean over the tokens, or the first token.
cudaError_t LaunchTokenPoolForward(const float* x, int64_t n, int64_t s, int64_t d, bool first,
                                   float* y, cudaStream_t stream);
cudaError_t LaunchTokenPoolBackward(const float* dy, int64_t n, int64_t s, int64_t d, bool first,
                                    float* dx, cudaStream_t stream);

}  // namespace poseidon::kernels::cuda
