// kernels/reference/reference_transformer.cc: the reference backend's transformer layers
// (embedding, pos_embedding, layernorm, linear, attention, gelu, tanh, softmax, patch_embed,
// cls_token, token_pool) as plain loops over row-major host buffers. Semantics (PyTorch's) are
// listed in reference_kernels.h; every other backend is checked against these, and these are
// checked by finite differences (tests/kernels/transformer_test.cc).
//
// A sequence [S, D] of one image is S rows of D contiguous values; the batch is the outermost
// dimension. Accumulations are in double where a row is reduced (layernorm, softmax) and in
// float with contiguous inner loops for the GEMMs, which the ViT test trains through.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/reference/reference_kernels.h"

namespace poseidon::kernels {
namespace {

using core::Layer;
using core::LayerKind;

void Zero(float* p, int64_t n) {
  if (p != nullptr) std::fill(p, p + n, 0.f);
}

float* BottomGrad(const std::vector<float*>& g, size_t i) { return i < g.size() ? g[i] : nullptr; }

// y (rows x n) = x (rows x k) W^T (W is n x k, out x in) + b (or no bias when b is null).
void GemmXWt(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t k,
             int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    for (int64_t o = 0; o < n; ++o) {
      const float* wo = w + o * k;
      float acc = b != nullptr ? b[o] : 0.f;
      for (int64_t j = 0; j < k; ++j) acc += xr[j] * wo[j];
      y[r * n + o] = acc;
    }
  }
}

// The backward of GemmXWt: dW (n x k) = dy^T x, db = column sums of dy (when db is not null),
// and dx (rows x k) = dy W (when dx is not null). dW, db and dx are overwritten.
void GemmXWtBackward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db, int64_t rows, int64_t k, int64_t n) {
  Zero(dw, n * k);
  Zero(db, n);
  Zero(dx, rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    for (int64_t o = 0; o < n; ++o) {
      const float d = dy[r * n + o];
      if (db != nullptr) db[o] += d;
      float* dwo = dw + o * k;
      for (int64_t j = 0; j < k; ++j) dwo[j] += d * xr[j];
      if (dx != nullptr) {
        const float* wo = w + o * k;
        float* dxr = dx + r * k;
        for (int64_t j = 0; j < k; ++j) dxr[j] += d * wo[j];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// embedding: token ids [S] (float values, rounded) -> rows of the {vocab, D} table.
class EmbeddingKernel : public LayerKernel {
 public:
  EmbeddingKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {
    if (l.in_shapes[0].rank != 1) {
      throw KernelError(
          "layer '" + l.name +
          "' (embedding): the form on a sequence [S, D] adds a lookup by "
          "side ids (BERT's token types), which needs a second input of ids that the model does "
          "not have; no backend trains it yet. Give the embedding token ids [S] as its input");
    }
    ids_.assign(static_cast<size_t>(n_ * l.in_shapes[0].w), 0);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    const int64_t s = l_.in_shapes[0].w, d = l_.spec.num_output, vocab = l_.spec.vocab;
    for (int64_t i = 0; i < n_ * s; ++i) {
      const float v = bottoms[0][i];
      const double r = std::nearbyint(static_cast<double>(v));
      if (!(r >= 0 && r < static_cast<double>(vocab))) {
        throw KernelError("layer '" + l_.name + "' (embedding): token id " + std::to_string(v) +
                          " (position " + std::to_string(i % s) + " of image " +
                          std::to_string(i / s) + ") is outside the vocabulary [0, " +
                          std::to_string(vocab) + "); check the input data or 'vocab'");
      }
      const auto id = static_cast<int64_t>(r);
      ids_[static_cast<size_t>(i)] = id;
      std::memcpy(top + i * d, params[0] + id * d, static_cast<size_t>(d) * sizeof(float));
    }
  }

  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>& param_grads) override {
    const int64_t s = l_.in_shapes[0].w, d = l_.spec.num_output;
    float* dw = param_grads[0];
    Zero(dw, l_.blobs[0].count);
    for (int64_t i = 0; i < n_ * s; ++i) {
      float* row = dw + ids_[static_cast<size_t>(i)] * d;
      for (int64_t j = 0; j < d; ++j) row[j] += dy[i * d + j];
    }
    Zero(BottomGrad(bottom_grads, 0), n_ * s);  // ids have no gradient
  }

 private:
  const Layer l_;  // a copy: the kernel must not depend on the caller keeping the model alive
  int64_t n_;
  std::vector<int64_t> ids_;  // of the last Forward
};

// pos_embedding: y = x + P[0:S] for each image.
class PosEmbeddingKernel : public LayerKernel {
 public:
  PosEmbeddingKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    const int64_t per = l_.out.count();
    for (int64_t k = 0; k < n_; ++k) {
      for (int64_t i = 0; i < per; ++i) top[k * per + i] = bottoms[0][k * per + i] + params[0][i];
    }
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>& param_grads) override {
    const int64_t per = l_.out.count();
    Zero(param_grads[0], l_.blobs[0].count);  // rows past S get no gradient
    for (int64_t k = 0; k < n_; ++k) {
      for (int64_t i = 0; i < per; ++i) param_grads[0][i] += dy[k * per + i];
    }
    if (float* dx = BottomGrad(bottom_grads, 0)) {
      std::memcpy(dx, dy, static_cast<size_t>(n_ * per) * sizeof(float));
    }
  }

 private:
  const Layer l_;
  int64_t n_;
};

// layernorm over the last dimension: biased variance, eps kLayerNormEps, gamma and beta.
class LayerNormKernel : public LayerKernel {
 public:
  LayerNormKernel(const Layer& l, int64_t batch)
      : d_(l.out.w),
        rows_(batch * l.out.count() / l.out.w),
        mean_(static_cast<size_t>(rows_)),
        rstd_(static_cast<size_t>(rows_)) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    for (int64_t r = 0; r < rows_; ++r) {
      const float* x = bottoms[0] + r * d_;
      double sum = 0, sq = 0;
      for (int64_t j = 0; j < d_; ++j) sum += x[j];
      const double mean = sum / static_cast<double>(d_);
      for (int64_t j = 0; j < d_; ++j) sq += (x[j] - mean) * (x[j] - mean);
      const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(d_) + kLayerNormEps);
      mean_[static_cast<size_t>(r)] = mean, rstd_[static_cast<size_t>(r)] = rstd;
      for (int64_t j = 0; j < d_; ++j) {
        top[r * d_ + j] = static_cast<float>((x[j] - mean) * rstd * params[0][j] + params[1][j]);
      }
    }
  }
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    float* dgamma = param_grads[0];
    float* dbeta = param_grads[1];
    float* dx = BottomGrad(bottom_grads, 0);
    std::vector<double> dg(static_cast<size_t>(d_), 0.0), dbt(static_cast<size_t>(d_), 0.0);
    for (int64_t r = 0; r < rows_; ++r) {
      const float* x = bottoms[0] + r * d_;
      const float* g = dy + r * d_;
      const double mean = mean_[static_cast<size_t>(r)], rstd = rstd_[static_cast<size_t>(r)];
      double sum_g = 0, sum_gx = 0;
      for (int64_t j = 0; j < d_; ++j) {
        const double xhat = (x[j] - mean) * rstd;
        dg[static_cast<size_t>(j)] += g[j] * xhat;
        dbt[static_cast<size_t>(j)] += g[j];
        const double gg = static_cast<double>(g[j]) * params[0][j];
        sum_g += gg;
        sum_gx += gg * xhat;
      }
      if (dx == nullptr) continue;
      const double inv_d = 1.0 / static_cast<double>(d_);
      for (int64_t j = 0; j < d_; ++j) {
        const double xhat = (x[j] - mean) * rstd;
        const double gg = static_cast<double>(g[j]) * params[0][j];
        dx[r * d_ + j] = static_cast<float>(rstd * (gg - sum_g * inv_d - xhat * sum_gx * inv_d));
      }
    }
    for (int64_t j = 0; j < d_; ++j) {
      dgamma[j] = static_cast<float>(dg[static_cast<size_t>(j)]);
      dbeta[j] = static_cast<float>(dbt[static_cast<size_t>(j)]);
    }
  }

 private:
  int64_t d_, rows_;
  std::vector<double> mean_, rstd_;  // of the last Forward
};

// linear over the last dimension: y = x W^T + b, W {N, D}. A tied layer's params are {the tied
// embedding table, bias?} (the Net passes the table first; see reference_kernels.h).
class LinearKernel : public LayerKernel {
 public:
  LinearKernel(const Layer& l, int64_t batch)
      : rows_(batch * l.fc_rows), k_(l.fc_in), n_(l.fc_out), bias_(l.spec.bias) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    GemmXWt(bottoms[0], params[0], bias_ ? params[1] : nullptr, top, rows_, k_, n_);
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    GemmXWtBackward(bottoms[0], params[0], dy, BottomGrad(bottom_grads, 0), param_grads[0],
                    bias_ ? param_grads[1] : nullptr, rows_, k_, n_);
  }

 private:
  int64_t rows_, k_, n_;
  bool bias_;
};

// patch_embed: a conv with kernel = stride = P as a GEMM over the patches (row-major patch
// order), weight {D, C, P, P} flattened to D x (C P P).
class PatchEmbedKernel : public LayerKernel {
 public:
  PatchEmbedKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {
    cols_.resize(static_cast<size_t>(n_ * l.fc_rows * l.fc_in));
  }
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    Im2Col(bottoms[0]);
    GemmXWt(cols_.data(), params[0], l_.spec.bias ? params[1] : nullptr, top, n_ * l_.fc_rows,
            l_.fc_in, l_.fc_out);
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    Im2Col(bottoms[0]);
    float* dx = BottomGrad(bottom_grads, 0);
    std::vector<float> dcols;
    if (dx != nullptr) dcols.resize(cols_.size());
    GemmXWtBackward(cols_.data(), params[0], dy, dx != nullptr ? dcols.data() : nullptr,
                    param_grads[0], l_.spec.bias ? param_grads[1] : nullptr, n_ * l_.fc_rows,
                    l_.fc_in, l_.fc_out);
    if (dx != nullptr) Col2Im(dcols.data(), dx);
  }

 private:
  // Column index of pixel (c, i, j) of patch (ph, pw): ((c * P + i) * P + j), as the weight.
  template <typename F>
  void ForEachPixel(F f) const {
    const core::Shape& x = l_.in_shapes[0];
    const int64_t p = l_.spec.patch, gw = x.w / p, np = l_.fc_rows, k = l_.fc_in;
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t t = 0; t < np; ++t) {
        const int64_t ph = t / gw, pw = t % gw;
        for (int64_t c = 0; c < x.c; ++c) {
          for (int64_t i = 0; i < p; ++i) {
            for (int64_t j = 0; j < p; ++j) {
              f(((n * x.c + c) * x.h + ph * p + i) * x.w + pw * p + j,
                (n * np + t) * k + (c * p + i) * p + j);
            }
          }
        }
      }
    }
  }
  void Im2Col(const float* x) {
    ForEachPixel([&](int64_t xi, int64_t ci) { cols_[static_cast<size_t>(ci)] = x[xi]; });
  }
  void Col2Im(const float* dcols, float* dx) const {
    // Patches do not overlap and cover the image (P divides H and W): every pixel once.
    ForEachPixel([&](int64_t xi, int64_t ci) { dx[xi] = dcols[ci]; });
  }

  const Layer l_;
  int64_t n_;
  std::vector<float> cols_;  // (batch x patches) x (C P P)
};

// cls_token: the {1, D} token as row 0, the input's S rows after it.
class ClsTokenKernel : public LayerKernel {
 public:
  ClsTokenKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    const int64_t d = l_.out.w, in = l_.in_shapes[0].count(), out = l_.out.count();
    for (int64_t k = 0; k < n_; ++k) {
      std::memcpy(top + k * out, params[0], static_cast<size_t>(d) * sizeof(float));
      std::memcpy(top + k * out + d, bottoms[0] + k * in, static_cast<size_t>(in) * sizeof(float));
    }
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>& param_grads) override {
    const int64_t d = l_.out.w, in = l_.in_shapes[0].count(), out = l_.out.count();
    Zero(param_grads[0], d);
    float* dx = BottomGrad(bottom_grads, 0);
    for (int64_t k = 0; k < n_; ++k) {
      for (int64_t j = 0; j < d; ++j) param_grads[0][j] += dy[k * out + j];
      if (dx != nullptr) {
        std::memcpy(dx + k * in, dy + k * out + d, static_cast<size_t>(in) * sizeof(float));
      }
    }
  }

 private:
  const Layer l_;
  int64_t n_;
};

// token_pool: the mean of the S rows, or row 0 (`method: first`).
class TokenPoolKernel : public LayerKernel {
 public:
  TokenPoolKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    const int64_t s = l_.in_shapes[0].h, d = l_.in_shapes[0].w;
    for (int64_t k = 0; k < n_; ++k) {
      const float* x = bottoms[0] + k * s * d;
      for (int64_t j = 0; j < d; ++j) {
        if (l_.spec.pool_first) {
          top[k * d + j] = x[j];
          continue;
        }
        double sum = 0;
        for (int64_t t = 0; t < s; ++t) sum += x[t * d + j];
        top[k * d + j] = static_cast<float>(sum / static_cast<double>(s));
      }
    }
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    float* dx = BottomGrad(bottom_grads, 0);
    if (dx == nullptr) return;
    const int64_t s = l_.in_shapes[0].h, d = l_.in_shapes[0].w;
    const float inv = l_.spec.pool_first ? 1.f : 1.f / static_cast<float>(s);
    for (int64_t k = 0; k < n_; ++k) {
      for (int64_t t = 0; t < s; ++t) {
        for (int64_t j = 0; j < d; ++j) {
          dx[(k * s + t) * d + j] = (!l_.spec.pool_first || t == 0) ? dy[k * d + j] * inv : 0.f;
        }
      }
    }
  }

 private:
  const Layer l_;
  int64_t n_;
};

// gelu (exact erf form), tanh, and softmax over the last dimension.
class PointwiseKernel : public LayerKernel {
 public:
  PointwiseKernel(const Layer& l, int64_t batch)
      : kind_(l.kind), count_(batch * l.out.count()), d_(l.out.w) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    const float* x = bottoms[0];
    if (kind_ == LayerKind::kGelu) {
      for (int64_t i = 0; i < count_; ++i) {
        top[i] = static_cast<float>(0.5 * x[i] * (1.0 + std::erf(x[i] * M_SQRT1_2)));
      }
    } else if (kind_ == LayerKind::kTanh) {
      for (int64_t i = 0; i < count_; ++i) top[i] = std::tanh(x[i]);
    } else {
      for (int64_t r = 0; r < count_ / d_; ++r) {
        const float* xr = x + r * d_;
        float* yr = top + r * d_;
        const double mx = *std::max_element(xr, xr + d_);
        double sum = 0;
        for (int64_t j = 0; j < d_; ++j) sum += std::exp(xr[j] - mx);
        for (int64_t j = 0; j < d_; ++j) yr[j] = static_cast<float>(std::exp(xr[j] - mx) / sum);
      }
    }
  }
  void Backward(const std::vector<const float*>& bottoms, const float* top, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    float* dx = BottomGrad(bottom_grads, 0);
    if (dx == nullptr) return;
    const float* x = bottoms[0];
    if (kind_ == LayerKind::kGelu) {
      // d/dx [x Phi(x)] = Phi(x) + x phi(x).
      const double inv_sqrt_2pi = 0.5 * M_2_SQRTPI * M_SQRT1_2;
      for (int64_t i = 0; i < count_; ++i) {
        const double v = x[i];
        const double cdf = 0.5 * (1.0 + std::erf(v * M_SQRT1_2));
        dx[i] = static_cast<float>(dy[i] * (cdf + v * inv_sqrt_2pi * std::exp(-0.5 * v * v)));
      }
    } else if (kind_ == LayerKind::kTanh) {
      for (int64_t i = 0; i < count_; ++i) dx[i] = dy[i] * (1.f - top[i] * top[i]);
    } else {
      for (int64_t r = 0; r < count_ / d_; ++r) {
        const float* y = top + r * d_;
        const float* g = dy + r * d_;
        double dot = 0;
        for (int64_t j = 0; j < d_; ++j) dot += static_cast<double>(g[j]) * y[j];
        for (int64_t j = 0; j < d_; ++j) dx[r * d_ + j] = static_cast<float>(y[j] * (g[j] - dot));
      }
    }
  }

 private:
  LayerKind kind_;
  int64_t count_, d_;
};

// attention: nn.MultiheadAttention (self-attention, batch_first) with weights out x in.
class AttentionKernel : public LayerKernel {
 public:
  AttentionKernel(const Layer& l, int64_t batch)
      : n_(batch),
        s_(l.out.h),
        d_(l.out.w),
        h_(l.spec.heads),
        dh_(l.out.w / l.spec.heads),
        bias_(l.spec.bias),
        causal_(l.spec.causal) {
    const auto sd = static_cast<size_t>(n_ * s_ * d_);
    q_.resize(sd), k_.resize(sd), v_.resize(sd), ctx_.resize(sd);
    p_.resize(static_cast<size_t>(n_ * h_ * s_ * s_));
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    const int64_t rows = n_ * s_;
    GemmXWt(bottoms[0], W(params, 0), B(params, 0), q_.data(), rows, d_, d_);
    GemmXWt(bottoms[0], W(params, 1), B(params, 1), k_.data(), rows, d_, d_);
    GemmXWt(bottoms[0], W(params, 2), B(params, 2), v_.data(), rows, d_, d_);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh_));
    std::fill(ctx_.begin(), ctx_.end(), 0.f);
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t h = 0; h < h_; ++h) {
        for (int64_t i = 0; i < s_; ++i) {
          float* p = P(n, h, i);
          const float* qi = Row(q_, n, i, h);
          double mx = -std::numeric_limits<double>::infinity();
          std::vector<double> sc(static_cast<size_t>(s_));
          for (int64_t j = 0; j < s_; ++j) {
            if (causal_ && j > i) {
              sc[static_cast<size_t>(j)] = -std::numeric_limits<double>::infinity();
              continue;
            }
            const float* kj = Row(k_, n, j, h);
            double dot = 0;
            for (int64_t e = 0; e < dh_; ++e) dot += static_cast<double>(qi[e]) * kj[e];
            sc[static_cast<size_t>(j)] = dot * scale;
            mx = std::max(mx, dot * scale);
          }
          double sum = 0;
          for (int64_t j = 0; j < s_; ++j) sum += std::exp(sc[static_cast<size_t>(j)] - mx);
          float* ci = Row(ctx_, n, i, h);
          for (int64_t j = 0; j < s_; ++j) {
            p[j] = static_cast<float>(std::exp(sc[static_cast<size_t>(j)] - mx) / sum);
            const float* vj = Row(v_, n, j, h);
            for (int64_t e = 0; e < dh_; ++e) ci[e] += p[j] * vj[e];
          }
        }
      }
    }
    GemmXWt(ctx_.data(), W(params, 3), B(params, 3), top, rows, d_, d_);
  }

  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    const int64_t rows = n_ * s_;
    const auto sd = static_cast<size_t>(rows * d_);
    std::vector<float> dctx(sd), dq(sd, 0.f), dk(sd, 0.f), dv(sd, 0.f);
    GemmXWtBackward(ctx_.data(), W(params, 3), dy, dctx.data(), W(param_grads, 3),
                    B(param_grads, 3), rows, d_, d_);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh_));
    std::vector<double> dp(static_cast<size_t>(s_));
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t h = 0; h < h_; ++h) {
        for (int64_t i = 0; i < s_; ++i) {
          const float* p = P(n, h, i);
          const float* gi = Row(dctx, n, i, h);
          // dP_ij = dctx_i . v_j; dV_j += P_ij dctx_i.
          double dot = 0;
          for (int64_t j = 0; j < s_; ++j) {
            const float* vj = Row(v_, n, j, h);
            float* dvj = Row(dv, n, j, h);
            double acc = 0;
            for (int64_t e = 0; e < dh_; ++e) {
              acc += static_cast<double>(gi[e]) * vj[e];
              dvj[e] += p[j] * gi[e];
            }
            dp[static_cast<size_t>(j)] = acc;
            dot += acc * p[j];
          }
          // Softmax backward, then the scaled score's: dS_ij = P_ij (dP_ij - sum_j P dP).
          float* dqi = Row(dq, n, i, h);
          const float* qi = Row(q_, n, i, h);
          for (int64_t j = 0; j < s_; ++j) {
            const double ds = p[j] * (dp[static_cast<size_t>(j)] - dot) * scale;
            if (ds == 0) continue;  // masked (P = 0)
            const float* kj = Row(k_, n, j, h);
            float* dkj = Row(dk, n, j, h);
            for (int64_t e = 0; e < dh_; ++e) {
              dqi[e] += static_cast<float>(ds * kj[e]);
              dkj[e] += static_cast<float>(ds * qi[e]);
            }
          }
        }
      }
    }
    float* dx = BottomGrad(bottom_grads, 0);
    std::vector<float> part(dx != nullptr ? sd : 0);
    const std::vector<float>* grads[3] = {&dq, &dk, &dv};
    for (int p = 0; p < 3; ++p) {
      GemmXWtBackward(bottoms[0], W(params, p), grads[p]->data(),
                      dx != nullptr ? part.data() : nullptr, W(param_grads, p), B(param_grads, p),
                      rows, d_, d_);
      if (dx == nullptr) continue;
      if (p == 0) {
        std::copy(part.begin(), part.end(), dx);
      } else {
        for (size_t i = 0; i < sd; ++i) dx[i] += part[i];
      }
    }
  }

 private:
  // Blob order: q.weight, [q.bias], k.weight, [k.bias], v.weight, [v.bias], o.weight, [o.bias].
  template <typename T>
  T W(const std::vector<T>& v, int p) const {
    return v[static_cast<size_t>(bias_ ? 2 * p : p)];
  }
  template <typename T>
  T B(const std::vector<T>& v, int p) const {
    return bias_ ? v[static_cast<size_t>(2 * p + 1)] : nullptr;
  }
  // Head h's dh values of token i of image n in an [N, S, D] buffer.
  float* Row(std::vector<float>& b, int64_t n, int64_t i, int64_t h) const {
    return b.data() + (n * s_ + i) * d_ + h * dh_;
  }
  const float* Row(const std::vector<float>& b, int64_t n, int64_t i, int64_t h) const {
    return b.data() + (n * s_ + i) * d_ + h * dh_;
  }
  float* P(int64_t n, int64_t h, int64_t i) { return p_.data() + ((n * h_ + h) * s_ + i) * s_; }

  int64_t n_, s_, d_, h_, dh_;
  bool bias_, causal_;
  std::vector<float> q_, k_, v_, ctx_;  // [N, S, D] of the last Forward
  std::vector<float> p_;                // probabilities [N, heads, S, S]
};

}  // namespace

std::unique_ptr<LayerKernel> MakeReferenceTransformerKernel(const core::Layer& layer,
                                                            int64_t batch) {
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
    case LayerKind::kSoftmax:
      return std::make_unique<PointwiseKernel>(layer, batch);
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
