// kernels/cuda/cuda_transformer.cc: the CUDA backend's transformer layers, one class per kind
// (see cuda_transformer.h). Every matrix product is a cuBLAS sgemm (TF32 off); the attention's
// per-head products are gemmStridedBatched over the heads of one image (a head's Q, K, V and
// context are dh-column slices of the [S, D] matrices, so the stride between heads is dh and the
// leading dimension D), one call per image. Everything else is a hand-written kernel
// (cuda_transformer.cu). Semantics are the reference backend's (kernels/reference/
// reference_transformer.cc), which follows PyTorch.
//
// cuBLAS is column-major: a row-major matrix [r, c] is, unchanged in memory, a column-major
// c x r matrix, so the row-major C = A B is computed as the column-major C^T = B^T A^T.
#include "kernels/cuda/cuda_transformer.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/model.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/kernel.h"

namespace poseidon::kernels {
namespace {

using core::Layer;
using core::LayerKind;
using cuda::DeviceBuffer;

constexpr float kOne = 1.f, kZero = 0.f;
constexpr float kLayerNormEps = 1e-5f;  // PyTorch's nn.LayerNorm default

int I(int64_t v) { return static_cast<int>(v); }
size_t Z(int64_t v) { return static_cast<size_t>(v); }

bool Wanted(const std::vector<float*>& grads, size_t i) {
  return i < grads.size() && grads[i] != nullptr;
}

// The stream and the cuBLAS handle bound to it (as cuda_kernels.cc's CudaKernel, without cuDNN,
// which none of these layers uses).
class TransformerKernel : public LayerKernel {
 public:
  TransformerKernel() {
    std::string why;
    if (!cuda::CudaDeviceAvailable(&why))
      throw KernelError("the cuda backend needs a device: " + why);
    POSEIDON_CUBLAS_CHECK(cublasCreate(&cublas_));
    POSEIDON_CUBLAS_CHECK(cublasSetStream(cublas_, stream_.get()));
    POSEIDON_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));  // no TF32
  }
  ~TransformerKernel() override {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
  }
  TransformerKernel(const TransformerKernel&) = delete;
  TransformerKernel& operator=(const TransformerKernel&) = delete;

 protected:
  cudaStream_t stream() const { return stream_.get(); }
  void Sync() const { stream_.Synchronize(); }
  void CopyD2D(float* dst, const float* src, int64_t count) const {
    POSEIDON_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, Z(count) * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  }
  void Zero(float* dst, int64_t count) const {
    POSEIDON_CUDA_CHECK(cudaMemsetAsync(dst, 0, Z(count) * sizeof(float), stream()));
  }

  // Row-major y [rows, out] = x [rows, in] W^T (+ b), W [out, in].
  void LinearForward(const float* x, const float* w, const float* b, int64_t rows, int64_t in,
                     int64_t out, float* y) const {
    POSEIDON_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, I(out), I(rows), I(in),
                                      &kOne, w, I(in), x, I(in), &kZero, y, I(out)));
    if (b != nullptr) {
      POSEIDON_CUDA_CHECK(cuda::LaunchAddPeriodic(y, y, b, rows * out, out, stream()));
    }
  }
  // dW [out, in] = dy^T x and db [out] = the column sums of dy (db may be null); dx [rows, in] =
  // dy W (+ dx when accumulate), skipped when dx is null.
  void LinearBackward(const float* x, const float* w, const float* dy, int64_t rows, int64_t in,
                      int64_t out, float* dw, float* db, float* dx, bool accumulate = false) const {
    POSEIDON_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, I(in), I(out), I(rows),
                                      &kOne, x, I(in), dy, I(out), &kZero, dw, I(in)));
    if (db != nullptr) {
      POSEIDON_CUDA_CHECK(cuda::LaunchColumnSum(dy, rows, out, out, db, stream()));
    }
    if (dx != nullptr) {
      const float* beta = accumulate ? &kOne : &kZero;
      POSEIDON_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, I(in), I(rows), I(out),
                                        &kOne, w, I(in), dy, I(out), beta, dx, I(in)));
    }
  }

  cuda::CudaStream stream_;
  cublasHandle_t cublas_ = nullptr;
};

// Token ids [S] (float values, as the Net feeds its input, rounded to the nearest integer) ->
// rows of the {vocab, D} table; no gradient into the ids (their gradient is zeroed). The ids are
// checked on the host (one copy of batch x S floats) so that an id outside the vocabulary is a
// KernelError naming the layer, the id and the vocabulary, never a wild read. The form on a
// sequence [S, D] (a lookup by side ids added to it) needs a second input of ids the model does
// not have: refused, as the reference refuses it.
class EmbeddingKernel : public TransformerKernel {
 public:
  EmbeddingKernel(const Layer& l, int64_t batch)
      : name_(l.name),
        vocab_(l.spec.vocab),
        d_(l.out.w),
        s_(l.in_shapes[0].w),
        rows_(batch * l.in_shapes[0].w),
        host_ids_(Z(rows_)),
        ids_(DeviceBuffer::Bytes(Z(rows_) * sizeof(int32_t))) {
    if (l.in_shapes[0].rank != 1) {
      throw KernelError(
          "layer '" + l.name +
          "' (embedding): the form on a sequence [S, D] adds a lookup by "
          "side ids (BERT's token types), which needs a second input of ids that the model does "
          "not have; no backend trains it yet. Give the embedding token ids [S] as its input");
    }
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    std::vector<float> values(Z(rows_));
    cuda::CopyToHost(values.data(), bottoms[0], values.size(), stream());
    Sync();
    for (int64_t i = 0; i < rows_; ++i) {
      const float v = values[Z(i)];
      const double r = std::nearbyint(static_cast<double>(v));
      if (!(r >= 0 && r < static_cast<double>(vocab_))) {
        throw KernelError("layer '" + name_ + "' (embedding): token id " + std::to_string(v) +
                          " (position " + std::to_string(i % s_) + " of image " +
                          std::to_string(i / s_) + ") is outside the vocabulary [0, " +
                          std::to_string(vocab_) + "); check the input data or 'vocab'");
      }
      host_ids_[Z(i)] = static_cast<int32_t>(r);
    }
    cuda::CopyToDeviceBytes(ids_.raw(), host_ids_.data(), host_ids_.size() * sizeof(int32_t),
                            stream());
    POSEIDON_CUDA_CHECK(cuda::LaunchEmbeddingGather(Ids(), params[0], rows_, d_, top, stream()));
    Sync();  // also keeps host_ids_ unchanged until the copy is done
  }

  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>& param_grads) override {
    Zero(param_grads[0], vocab_ * d_);
    POSEIDON_CUDA_CHECK(
        cuda::LaunchEmbeddingScatterAdd(Ids(), dy, rows_, d_, param_grads[0], stream()));
    if (Wanted(bottom_grads, 0)) Zero(bottom_grads[0], rows_);  // ids have no gradient
    Sync();
  }

 private:
  const int32_t* Ids() const { return static_cast<const int32_t*>(ids_.raw()); }

  std::string name_;
  int64_t vocab_, d_, s_, rows_;
  std::vector<int32_t> host_ids_;
  DeviceBuffer ids_;  // int32 per token, of the last Forward (for Backward)
};

// y = x + table[0:S]; the table's rows S..max_len-1 get a zero gradient.
class PosEmbeddingKernel : public TransformerKernel {
 public:
  PosEmbeddingKernel(const Layer& l, int64_t batch)
      : n_(batch), count_(l.out.count()), table_count_(l.blobs[0].count) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    POSEIDON_CUDA_CHECK(
        cuda::LaunchAddPeriodic(top, bottoms[0], params[0], n_ * count_, count_, stream()));
    Sync();
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>& param_grads) override {
    if (table_count_ > count_) Zero(param_grads[0] + count_, table_count_ - count_);
    POSEIDON_CUDA_CHECK(cuda::LaunchColumnSum(dy, n_, count_, count_, param_grads[0], stream()));
    if (Wanted(bottom_grads, 0)) CopyD2D(bottom_grads[0], dy, n_ * count_);
    Sync();
  }

 private:
  int64_t n_, count_, table_count_;
};

class LayerNormKernel : public TransformerKernel {
 public:
  LayerNormKernel(const Layer& l, int64_t batch)
      : d_(l.out.w), rows_(batch * l.out.count() / l.out.w), mean_(Z(rows_)), rstd_(Z(rows_)) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    POSEIDON_CUDA_CHECK(cuda::LaunchLayerNormForward(bottoms[0], params[0], params[1], rows_, d_,
                                                     kLayerNormEps, top, mean_.data(), rstd_.data(),
                                                     stream()));
    Sync();
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    POSEIDON_CUDA_CHECK(
        cuda::LaunchLayerNormBackward(bottoms[0], dy, params[0], mean_.data(), rstd_.data(), rows_,
                                      d_, Wanted(bottom_grads, 0) ? bottom_grads[0] : nullptr,
                                      param_grads[0], param_grads[1], stream()));
    Sync();
  }

 private:
  int64_t d_, rows_;
  DeviceBuffer mean_, rstd_;  // per row, from the last Forward
};

// Over the last dimension of any rank. A tied layer (`tie`, GPT-2's head) has no weight blob of
// its own: the caller passes the embedding's table {vocab, D} as params[0] (and receives its
// gradient in param_grads[0]), ahead of the layer's bias.
class LinearKernel : public TransformerKernel {
 public:
  LinearKernel(const Layer& l, int64_t batch)
      : name_(l.name), rows_(batch * l.fc_rows), in_(l.fc_in), out_(l.fc_out), bias_(l.spec.bias) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    CheckParams(params.size());
    LinearForward(bottoms[0], params[0], bias_ ? params[1] : nullptr, rows_, in_, out_, top);
    Sync();
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    CheckParams(params.size());
    LinearBackward(bottoms[0], params[0], dy, rows_, in_, out_, param_grads[0],
                   bias_ ? param_grads[1] : nullptr,
                   Wanted(bottom_grads, 0) ? bottom_grads[0] : nullptr);
    Sync();
  }

 private:
  void CheckParams(size_t given) const {
    const size_t want = bias_ ? 2 : 1;
    if (given < want) {
      throw KernelError("layer '" + name_ + "' (linear): needs " + std::to_string(want) +
                        " parameter arrays (weight" + (bias_ ? ", bias" : "") + "), got " +
                        std::to_string(given) +
                        "; a tied layer takes the embedding's table as its weight");
    }
  }

  std::string name_;
  int64_t rows_, in_, out_;
  bool bias_;
};

// PyTorch's nn.MultiheadAttention on [S, D] (batch_first, self-attention): Q = x Wq^T + bq, ...;
// per head, P = softmax(Q_h K_h^T / sqrt(dh)) with keys j > i masked when causal; context
// ctx_h = P V_h; y = ctx Wo^T + bo. Q, K, V, P and ctx are kept from Forward for Backward.
class AttentionKernel : public TransformerKernel {
 public:
  AttentionKernel(const Layer& l, int64_t batch)
      : n_(batch),
        s_(l.out.h),
        d_(l.out.w),
        heads_(l.spec.heads),
        dh_(d_ / heads_),
        bias_(l.spec.bias),
        causal_(l.spec.causal),
        scale_(static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh_)))),
        q_(Z(n_ * s_ * d_)),
        k_(Z(n_ * s_ * d_)),
        v_(Z(n_ * s_ * d_)),
        ctx_(Z(n_ * s_ * d_)),
        p_(Z(n_ * heads_ * s_ * s_)),
        dq_(Z(n_ * s_ * d_)),
        dk_(Z(n_ * s_ * d_)),
        dv_(Z(n_ * s_ * d_)),
        dctx_(Z(n_ * s_ * d_)),
        dp_(Z(n_ * heads_ * s_ * s_)) {}

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    const float* x = bottoms[0];
    const int64_t rows = n_ * s_;
    LinearForward(x, W(params, 0), B(params, 0), rows, d_, d_, q_.data());
    LinearForward(x, W(params, 1), B(params, 1), rows, d_, d_, k_.data());
    LinearForward(x, W(params, 2), B(params, 2), rows, d_, d_, v_.data());
    // Scores of image b, head h (row-major S x S, query i by key j) = Q_h K_h^T * scale: the
    // column-major S x S matrix K_h Q_h^T, i.e. op(K)=T, op(Q)=N on the dh x S column-major views.
    for (int64_t b = 0; b < n_; ++b) {
      POSEIDON_CUBLAS_CHECK(cublasSgemmStridedBatched(
          cublas_, CUBLAS_OP_T, CUBLAS_OP_N, I(s_), I(s_), I(dh_), &scale_, k_.data() + Off(b),
          I(d_), dh_, q_.data() + Off(b), I(d_), dh_, &kZero, p_.data() + POff(b), I(s_), s_ * s_,
          I(heads_)));
    }
    POSEIDON_CUDA_CHECK(
        cuda::LaunchSoftmaxForward(p_.data(), p_.data(), n_ * heads_ * s_, s_, causal_, stream()));
    // ctx_h (S x dh, row stride D) = P V_h: column-major ctx_h^T = V_h^T P^T.
    for (int64_t b = 0; b < n_; ++b) {
      POSEIDON_CUBLAS_CHECK(
          cublasSgemmStridedBatched(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, I(dh_), I(s_), I(s_), &kOne,
                                    v_.data() + Off(b), I(d_), dh_, p_.data() + POff(b), I(s_),
                                    s_ * s_, &kZero, ctx_.data() + Off(b), I(d_), dh_, I(heads_)));
    }
    LinearForward(ctx_.data(), W(params, 3), B(params, 3), rows, d_, d_, top);
    Sync();
  }

  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    const float* x = bottoms[0];
    const int64_t rows = n_ * s_;
    LinearBackward(ctx_.data(), W(params, 3), dy, rows, d_, d_, WG(param_grads, 3),
                   BG(param_grads, 3), dctx_.data());
    for (int64_t b = 0; b < n_; ++b) {
      // dP = dctx_h V_h^T: column-major dP^T = V_h dctx_h^T.
      POSEIDON_CUBLAS_CHECK(
          cublasSgemmStridedBatched(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, I(s_), I(s_), I(dh_), &kOne,
                                    v_.data() + Off(b), I(d_), dh_, dctx_.data() + Off(b), I(d_),
                                    dh_, &kZero, dp_.data() + POff(b), I(s_), s_ * s_, I(heads_)));
      // dV_h = P^T dctx_h: column-major dV_h^T = dctx_h^T P.
      POSEIDON_CUBLAS_CHECK(
          cublasSgemmStridedBatched(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, I(dh_), I(s_), I(s_), &kOne,
                                    dctx_.data() + Off(b), I(d_), dh_, p_.data() + POff(b), I(s_),
                                    s_ * s_, &kZero, dv_.data() + Off(b), I(d_), dh_, I(heads_)));
    }
    // Through the softmax (masked probabilities are 0, so masked scores get 0), in place.
    POSEIDON_CUDA_CHECK(cuda::LaunchSoftmaxBackward(p_.data(), dp_.data(), dp_.data(),
                                                    n_ * heads_ * s_, s_, stream()));
    for (int64_t b = 0; b < n_; ++b) {
      // dQ_h = dS K_h * scale: column-major dQ_h^T = K_h^T dS^T.
      POSEIDON_CUBLAS_CHECK(cublasSgemmStridedBatched(
          cublas_, CUBLAS_OP_N, CUBLAS_OP_N, I(dh_), I(s_), I(s_), &scale_, k_.data() + Off(b),
          I(d_), dh_, dp_.data() + POff(b), I(s_), s_ * s_, &kZero, dq_.data() + Off(b), I(d_), dh_,
          I(heads_)));
      // dK_h = dS^T Q_h * scale: column-major dK_h^T = Q_h^T dS.
      POSEIDON_CUBLAS_CHECK(cublasSgemmStridedBatched(
          cublas_, CUBLAS_OP_N, CUBLAS_OP_T, I(dh_), I(s_), I(s_), &scale_, q_.data() + Off(b),
          I(d_), dh_, dp_.data() + POff(b), I(s_), s_ * s_, &kZero, dk_.data() + Off(b), I(d_), dh_,
          I(heads_)));
    }
    float* dx = Wanted(bottom_grads, 0) ? bottom_grads[0] : nullptr;
    LinearBackward(x, W(params, 0), dq_.data(), rows, d_, d_, WG(param_grads, 0),
                   BG(param_grads, 0), dx);
    LinearBackward(x, W(params, 1), dk_.data(), rows, d_, d_, WG(param_grads, 1),
                   BG(param_grads, 1), dx, /*accumulate=*/true);
    LinearBackward(x, W(params, 2), dv_.data(), rows, d_, d_, WG(param_grads, 2),
                   BG(param_grads, 2), dx, /*accumulate=*/true);
    Sync();
  }

 private:
  // Blobs are q, k, v, o weights {D, D}, each followed by its bias {D} when the layer has biases.
  size_t Index(int which) const { return static_cast<size_t>(bias_ ? 2 * which : which); }
  const float* W(const std::vector<const float*>& p, int which) const { return p[Index(which)]; }
  const float* B(const std::vector<const float*>& p, int which) const {
    return bias_ ? p[Index(which) + 1] : nullptr;
  }
  float* WG(const std::vector<float*>& g, int which) const { return g[Index(which)]; }
  float* BG(const std::vector<float*>& g, int which) const {
    return bias_ ? g[Index(which) + 1] : nullptr;
  }
  int64_t Off(int64_t b) const { return b * s_ * d_; }            // image b in [n, S, D]
  int64_t POff(int64_t b) const { return b * heads_ * s_ * s_; }  // image b in [n, H, S, S]

  int64_t n_, s_, d_, heads_, dh_;
  bool bias_, causal_;
  float scale_;
  DeviceBuffer q_, k_, v_, ctx_, p_;       // from the last Forward
  DeviceBuffer dq_, dk_, dv_, dctx_, dp_;  // Backward's scratch
};

// gelu, tanh: elementwise.
class ActivationKernel : public TransformerKernel {
 public:
  ActivationKernel(const Layer& l, int64_t batch)
      : gelu_(l.kind == LayerKind::kGelu), count_(batch * l.out.count()) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    POSEIDON_CUDA_CHECK(gelu_ ? cuda::LaunchGeluForward(bottoms[0], top, count_, stream())
                              : cuda::LaunchTanhForward(bottoms[0], top, count_, stream()));
    Sync();
  }
  void Backward(const std::vector<const float*>& bottoms, const float* top, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (!Wanted(bottom_grads, 0)) return;
    POSEIDON_CUDA_CHECK(
        gelu_ ? cuda::LaunchGeluBackward(bottoms[0], dy, bottom_grads[0], count_, stream())
              : cuda::LaunchTanhBackward(top, dy, bottom_grads[0], count_, stream()));
    Sync();
  }

 private:
  bool gelu_;
  int64_t count_;
};

// Over the last dimension, any rank.
class SoftmaxKernel : public TransformerKernel {
 public:
  SoftmaxKernel(const Layer& l, int64_t batch)
      : cols_(l.out.w), rows_(batch * l.out.count() / l.out.w) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    POSEIDON_CUDA_CHECK(cuda::LaunchSoftmaxForward(bottoms[0], top, rows_, cols_, false, stream()));
    Sync();
  }
  void Backward(const std::vector<const float*>&, const float* top, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (!Wanted(bottom_grads, 0)) return;
    POSEIDON_CUDA_CHECK(
        cuda::LaunchSoftmaxBackward(top, dy, bottom_grads[0], rows_, cols_, stream()));
    Sync();
  }

 private:
  int64_t cols_, rows_;
};

// A conv with kernel = stride = patch: im2col into [n * patches, C P P] (kept for Backward), then a
// linear layer with the weight {D, C, P, P} read as [D, C P P].
class PatchEmbedKernel : public TransformerKernel {
 public:
  PatchEmbedKernel(const Layer& l, int64_t batch)
      : g_{batch, l.in_shapes[0].c, l.in_shapes[0].h, l.in_shapes[0].w, l.spec.patch},
        rows_(batch * l.fc_rows),
        k_(l.fc_in),
        d_(l.fc_out),
        bias_(l.spec.bias),
        cols_(Z(rows_ * k_)),
        dcols_(Z(rows_ * k_)) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    POSEIDON_CUDA_CHECK(cuda::LaunchPatchIm2Col(g_, bottoms[0], cols_.data(), stream()));
    LinearForward(cols_.data(), params[0], bias_ ? params[1] : nullptr, rows_, k_, d_, top);
    Sync();
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    const bool want_dx = Wanted(bottom_grads, 0);
    LinearBackward(cols_.data(), params[0], dy, rows_, k_, d_, param_grads[0],
                   bias_ ? param_grads[1] : nullptr, want_dx ? dcols_.data() : nullptr);
    if (want_dx) {
      POSEIDON_CUDA_CHECK(cuda::LaunchPatchCol2Im(g_, dcols_.data(), bottom_grads[0], stream()));
    }
    Sync();
  }

 private:
  cuda::PatchGeometry g_;
  int64_t rows_, k_, d_;
  bool bias_;
  DeviceBuffer cols_, dcols_;
};

// [S, D] -> [S + 1, D], the blob {1, D} as token 0.
class ClsTokenKernel : public TransformerKernel {
 public:
  ClsTokenKernel(const Layer& l, int64_t batch)
      : n_(batch), s_(l.in_shapes[0].h), d_(l.in_shapes[0].w) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    POSEIDON_CUDA_CHECK(cuda::LaunchClsConcat(bottoms[0], params[0], n_, s_, d_, top, stream()));
    Sync();
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>& param_grads) override {
    POSEIDON_CUDA_CHECK(cuda::LaunchColumnSum(dy, n_, d_, (s_ + 1) * d_, param_grads[0], stream()));
    if (Wanted(bottom_grads, 0)) {
      POSEIDON_CUDA_CHECK(cuda::LaunchClsSplitGrad(dy, n_, s_, d_, bottom_grads[0], stream()));
    }
    Sync();
  }

 private:
  int64_t n_, s_, d_;
};

// [S, D] -> [D]: the mean over the tokens, or the first token.
class TokenPoolKernel : public TransformerKernel {
 public:
  TokenPoolKernel(const Layer& l, int64_t batch)
      : n_(batch), s_(l.in_shapes[0].h), d_(l.in_shapes[0].w), first_(l.spec.pool_first) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    POSEIDON_CUDA_CHECK(
        cuda::LaunchTokenPoolForward(bottoms[0], n_, s_, d_, first_, top, stream()));
    Sync();
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (!Wanted(bottom_grads, 0)) return;
    POSEIDON_CUDA_CHECK(
        cuda::LaunchTokenPoolBackward(dy, n_, s_, d_, first_, bottom_grads[0], stream()));
    Sync();
  }

 private:
  int64_t n_, s_, d_;
  bool first_;
};

}  // namespace

std::unique_ptr<LayerKernel> MakeCudaTransformerKernel(const core::Layer& layer, int64_t batch) {
  switch (layer.kind) {
    case LayerKind::kEmbedding:
      return std::make_unique<EmbeddingKernel>(layer, batch);
    case LayerKind::kPosEmbedding:
      return std::make_unique<PosEmbeddingKernel>(layer, batch);
    case LayerKind::kLayerNorm:
      return std::make_unique<LayerNormKernel>(layer, batch);
    case LayerKind::kLinear:
      return std::make_unique<LinearKernel>(layer, batch);
    case LayerKind::kAttention:
      return std::make_unique<AttentionKernel>(layer, batch);
    case LayerKind::kGelu:
    case LayerKind::kTanh:
      return std::make_unique<ActivationKernel>(layer, batch);
    case LayerKind::kSoftmax:
      return std::make_unique<SoftmaxKernel>(layer, batch);
    case LayerKind::kPatchEmbed:
      return std::make_unique<PatchEmbedKernel>(layer, batch);
    case LayerKind::kClsToken:
      return std::make_unique<ClsTokenKernel>(layer, batch);
    case LayerKind::kTokenPool:
      return std::make_unique<TokenPoolKernel>(layer, batch);
    default:
      return nullptr;
  }
}

}  // namespace poseidon::kernels
