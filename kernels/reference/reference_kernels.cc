// kernels/reference/reference_kernels.cc: naive loops, one class per layer kind (see the header).
#include "kernels/reference/reference_kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/types.h"

namespace poseidon::kernels {
namespace {

using core::Layer;
using core::LayerKind;

void Zero(float* p, int64_t n) {
  if (p != nullptr) std::fill(p, p + n, 0.f);
}

class ConvKernel : public LayerKernel {
 public:
  ConvKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {}

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    const core::Shape& x = l_.in_shapes[0];
    const core::Shape& y = l_.out;
    const auto& s = l_.spec;
    const int64_t icg = x.c / s.groups, ocg = y.c / s.groups;
    const float* w = params[0];
    const float* b = s.bias ? params[1] : nullptr;
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t oc = 0; oc < y.c; ++oc) {
        const int64_t g = oc / ocg;
        for (int64_t oh = 0; oh < y.h; ++oh) {
          for (int64_t ow = 0; ow < y.w; ++ow) {
            double acc = b != nullptr ? b[oc] : 0.0;
            for (int64_t ic = 0; ic < icg; ++ic) {
              for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
                const int64_t ih = oh * s.stride_h - s.pad_h + kh;
                if (ih < 0 || ih >= x.h) continue;
                for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                  const int64_t iw = ow * s.stride_w - s.pad_w + kw;
                  if (iw < 0 || iw >= x.w) continue;
                  acc += static_cast<double>(
                             bottoms[0][((n * x.c + g * icg + ic) * x.h + ih) * x.w + iw]) *
                         w[((oc * icg + ic) * s.kernel_h + kh) * s.kernel_w + kw];
                }
              }
            }
            top[((n * y.c + oc) * y.h + oh) * y.w + ow] = static_cast<float>(acc);
          }
        }
      }
    }
  }

  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    const core::Shape& x = l_.in_shapes[0];
    const core::Shape& y = l_.out;
    const auto& s = l_.spec;
    const int64_t icg = x.c / s.groups, ocg = y.c / s.groups;
    const float* w = params[0];
    float* dw = param_grads[0];
    float* db = s.bias ? param_grads[1] : nullptr;
    float* dx = bottom_grads.empty() ? nullptr : bottom_grads[0];
    Zero(dw, l_.blobs[0].count);
    Zero(db, y.c);
    Zero(dx, n_ * x.count());
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t oc = 0; oc < y.c; ++oc) {
        const int64_t g = oc / ocg;
        for (int64_t oh = 0; oh < y.h; ++oh) {
          for (int64_t ow = 0; ow < y.w; ++ow) {
            const float d = dy[((n * y.c + oc) * y.h + oh) * y.w + ow];
            if (db != nullptr) db[oc] += d;
            for (int64_t ic = 0; ic < icg; ++ic) {
              for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
                const int64_t ih = oh * s.stride_h - s.pad_h + kh;
                if (ih < 0 || ih >= x.h) continue;
                for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                  const int64_t iw = ow * s.stride_w - s.pad_w + kw;
                  if (iw < 0 || iw >= x.w) continue;
                  const int64_t xi = ((n * x.c + g * icg + ic) * x.h + ih) * x.w + iw;
                  const int64_t wi = ((oc * icg + ic) * s.kernel_h + kh) * s.kernel_w + kw;
                  dw[wi] += d * bottoms[0][xi];
                  if (dx != nullptr) dx[xi] += d * w[wi];
                }
              }
            }
          }
        }
      }
    }
  }

 private:
  const Layer l_;  // a copy: the kernel must not depend on the caller keeping the model alive
  int64_t n_;
};

class PoolKernel : public LayerKernel {
 public:
  PoolKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {
    const auto& s = l_.spec;
    if (s.global_pool) {
      kh_ = l_.in_shapes[0].h;
      kw_ = l_.in_shapes[0].w;
      sh_ = sw_ = 1;
      ph_ = pw_ = 0;
    } else {
      kh_ = s.kernel_h, kw_ = s.kernel_w, sh_ = s.stride_h, sw_ = s.stride_w;
      ph_ = s.pad_h, pw_ = s.pad_w;
    }
    argmax_.assign(static_cast<size_t>(n_ * l_.out.count()), -1);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    const core::Shape& x = l_.in_shapes[0];
    const core::Shape& y = l_.out;
    const bool is_max = l_.spec.pool == core::PoolMethod::kMax;
    for (int64_t nc = 0; nc < n_ * y.c; ++nc) {
      const float* plane = bottoms[0] + nc * x.h * x.w;
      for (int64_t oh = 0; oh < y.h; ++oh) {
        for (int64_t ow = 0; ow < y.w; ++ow) {
          const int64_t oi = (nc * y.h + oh) * y.w + ow;
          // Windows follow the output size core::Model chose (ceil or floor rounding): under
          // ceil the last one may run past the padded input and is clipped there; under floor
          // none does, and the clip changes nothing.
          int64_t h0 = oh * sh_ - ph_, w0 = ow * sw_ - pw_;
          int64_t h1 = std::min(h0 + kh_, x.h + ph_), w1 = std::min(w0 + kw_, x.w + pw_);
          const int64_t window = (h1 - h0) * (w1 - w0);  // clipped to the padded input
          h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
          h1 = std::min(h1, x.h), w1 = std::min(w1, x.w);
          if (is_max) {
            float best = -std::numeric_limits<float>::max();
            int64_t arg = -1;
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t w = w0; w < w1; ++w) {
                if (arg < 0 || plane[h * x.w + w] > best)
                  best = plane[h * x.w + w], arg = h * x.w + w;
              }
            }
            top[oi] = arg < 0 ? 0.f : best;
            argmax_[static_cast<size_t>(oi)] = arg;
          } else {
            double sum = 0;
            for (int64_t h = h0; h < h1; ++h) {
              for (int64_t w = w0; w < w1; ++w) sum += plane[h * x.w + w];
            }
            top[oi] = static_cast<float>(sum / static_cast<double>(window));
          }
        }
      }
    }
  }

  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    const core::Shape& x = l_.in_shapes[0];
    const core::Shape& y = l_.out;
    float* dx = bottom_grads[0];
    Zero(dx, n_ * x.count());
    const bool is_max = l_.spec.pool == core::PoolMethod::kMax;
    for (int64_t nc = 0; nc < n_ * y.c; ++nc) {
      float* plane = dx + nc * x.h * x.w;
      for (int64_t oh = 0; oh < y.h; ++oh) {
        for (int64_t ow = 0; ow < y.w; ++ow) {
          const int64_t oi = (nc * y.h + oh) * y.w + ow;
          if (is_max) {
            const int64_t arg = argmax_[static_cast<size_t>(oi)];
            if (arg >= 0) plane[arg] += dy[oi];
            continue;
          }
          int64_t h0 = oh * sh_ - ph_, w0 = ow * sw_ - pw_;
          int64_t h1 = std::min(h0 + kh_, x.h + ph_), w1 = std::min(w0 + kw_, x.w + pw_);
          const int64_t window = (h1 - h0) * (w1 - w0);
          h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
          h1 = std::min(h1, x.h), w1 = std::min(w1, x.w);
          const float d = dy[oi] / static_cast<float>(window);
          for (int64_t h = h0; h < h1; ++h) {
            for (int64_t w = w0; w < w1; ++w) plane[h * x.w + w] += d;
          }
        }
      }
    }
  }

 private:
  const Layer l_;  // a copy: the kernel must not depend on the caller keeping the model alive
  int64_t n_;
  int64_t kh_, kw_, sh_, sw_, ph_, pw_;
  std::vector<int64_t> argmax_;  // per output: index in its input plane, -1 for an empty window
};

class ReluKernel : public LayerKernel {
 public:
  ReluKernel(const Layer& l, int64_t batch) : count_(batch * l.out.count()) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    for (int64_t i = 0; i < count_; ++i) top[i] = std::max(bottoms[0][i], 0.f);
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    for (int64_t i = 0; i < count_; ++i) bottom_grads[0][i] = bottoms[0][i] > 0.f ? dy[i] : 0.f;
  }

 private:
  int64_t count_;
};

class LrnKernel : public LayerKernel {
 public:
  LrnKernel(const Layer& l, int64_t batch)
      : l_(l), n_(batch), scale_(static_cast<size_t>(batch * l.out.count())) {}

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    const core::Shape& x = l_.in_shapes[0];
    const auto& s = l_.spec;
    const int64_t half = (s.local_size - 1) / 2, plane = x.h * x.w;
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t c = 0; c < x.c; ++c) {
        for (int64_t p = 0; p < plane; ++p) {
          double sq = 0;
          for (int64_t j = std::max<int64_t>(0, c - half); j <= std::min(x.c - 1, c + half); ++j) {
            const double v = bottoms[0][(n * x.c + j) * plane + p];
            sq += v * v;
          }
          const int64_t i = (n * x.c + c) * plane + p;
          const double scale = s.k + s.alpha / static_cast<double>(s.local_size) * sq;
          scale_[static_cast<size_t>(i)] = scale;
          top[i] = static_cast<float>(bottoms[0][i] * std::pow(scale, -s.beta));
        }
      }
    }
  }

  // dx_i = dy_i * scale_i^-beta - 2 alpha beta / n * x_i * sum_{j: i in window(j)} dy_j y_j /
  // scale_j
  void Backward(const std::vector<const float*>& bottoms, const float* top, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    const core::Shape& x = l_.in_shapes[0];
    const auto& s = l_.spec;
    const int64_t half = (s.local_size - 1) / 2, plane = x.h * x.w;
    const double coeff = 2.0 * s.alpha * s.beta / static_cast<double>(s.local_size);
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t c = 0; c < x.c; ++c) {
        for (int64_t p = 0; p < plane; ++p) {
          double acc = 0;
          for (int64_t j = std::max<int64_t>(0, c - half); j <= std::min(x.c - 1, c + half); ++j) {
            const int64_t ji = (n * x.c + j) * plane + p;
            acc += static_cast<double>(dy[ji]) * top[ji] / scale_[static_cast<size_t>(ji)];
          }
          const int64_t i = (n * x.c + c) * plane + p;
          bottom_grads[0][i] =
              static_cast<float>(dy[i] * std::pow(scale_[static_cast<size_t>(i)], -s.beta) -
                                 coeff * bottoms[0][i] * acc);
        }
      }
    }
  }

 private:
  const Layer l_;  // a copy: the kernel must not depend on the caller keeping the model alive
  int64_t n_;
  std::vector<double> scale_;
};

class FcKernel : public LayerKernel {
 public:
  FcKernel(const Layer& l, int64_t batch)
      : n_(batch), m_(l.fc_in), o_(l.fc_out), bias_(l.spec.bias) {}

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    const float* x = bottoms[0];
    const float* w = params[0];
    for (int64_t k = 0; k < n_; ++k) {
      for (int64_t o = 0; o < o_; ++o) {
        float acc = bias_ ? params[1][o] : 0.f;
        for (int64_t m = 0; m < m_; ++m) acc += x[k * m_ + m] * w[o * m_ + m];
        top[k * o_ + o] = acc;
      }
    }
  }

  // Loop orders keep the innermost loop contiguous so that the compiler can vectorise them: the
  // MLP test trains through these loops.
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    const float* x = bottoms[0];
    const float* w = params[0];
    float* dw = param_grads[0];
    Zero(dw, o_ * m_);
    for (int64_t k = 0; k < n_; ++k) {
      for (int64_t o = 0; o < o_; ++o) {
        const float d = dy[k * o_ + o];
        float* row = dw + o * m_;
        const float* xk = x + k * m_;
        for (int64_t m = 0; m < m_; ++m) row[m] += d * xk[m];
      }
    }
    if (bias_) {
      float* db = param_grads[1];
      Zero(db, o_);
      for (int64_t k = 0; k < n_; ++k) {
        for (int64_t o = 0; o < o_; ++o) db[o] += dy[k * o_ + o];
      }
    }
    if (!bottom_grads.empty() && bottom_grads[0] != nullptr) {
      float* dx = bottom_grads[0];
      Zero(dx, n_ * m_);
      for (int64_t k = 0; k < n_; ++k) {
        for (int64_t o = 0; o < o_; ++o) {
          const float d = dy[k * o_ + o];
          const float* row = w + o * m_;
          float* dxk = dx + k * m_;
          for (int64_t m = 0; m < m_; ++m) dxk[m] += d * row[m];
        }
      }
    }
  }

 private:
  int64_t n_, m_, o_;
  bool bias_;
};

class DropoutKernel : public LayerKernel {
 public:
  DropoutKernel(const Layer& l, int64_t batch, uint64_t seed)
      : count_(batch * l.out.count()),
        ratio_(l.spec.dropout_ratio),
        rng_(seed),
        mask_(static_cast<size_t>(count_), 1.f) {}

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool train) override {
    const float keep_scale = static_cast<float>(1.0 / (1.0 - ratio_));
    for (int64_t i = 0; i < count_; ++i) {
      float m = 1.f;
      if (train) {
        // 24 random bits -> [0, 1); written out so that every platform draws the same mask.
        const double u = static_cast<double>(rng_() >> 40) * 0x1p-24;
        m = u >= ratio_ ? keep_scale : 0.f;
      }
      mask_[static_cast<size_t>(i)] = m;
      top[i] = bottoms[0][i] * m;
    }
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    for (int64_t i = 0; i < count_; ++i) bottom_grads[0][i] = dy[i] * mask_[static_cast<size_t>(i)];
  }

 private:
  int64_t count_;
  double ratio_;
  std::mt19937_64 rng_;
  std::vector<float> mask_;  // 0 or 1/(1-p) at train; 1 at test
};

class ConcatKernel : public LayerKernel {
 public:
  ConcatKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    for (int64_t n = 0; n < n_; ++n) {
      float* dst = top + n * l_.out.count();
      for (size_t i = 0; i < bottoms.size(); ++i) {
        const int64_t c = l_.in_shapes[i].count();
        std::memcpy(dst, bottoms[i] + n * c, static_cast<size_t>(c) * sizeof(float));
        dst += c;
      }
    }
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    for (int64_t n = 0; n < n_; ++n) {
      const float* src = dy + n * l_.out.count();
      for (size_t i = 0; i < l_.in_shapes.size(); ++i) {
        const int64_t c = l_.in_shapes[i].count();
        if (i < bottom_grads.size() && bottom_grads[i] != nullptr) {
          std::memcpy(bottom_grads[i] + n * c, src, static_cast<size_t>(c) * sizeof(float));
        }
        src += c;
      }
    }
  }

 private:
  const Layer l_;  // a copy: the kernel must not depend on the caller keeping the model alive
  int64_t n_;
};

class SoftmaxLossKernel : public LayerKernel {
 public:
  SoftmaxLossKernel(const Layer& l, int64_t batch)
      : n_(batch), c_(l.out.count()), labels_(static_cast<size_t>(batch), 0) {}

  void SetLabels(const int32_t* labels) override { labels_.assign(labels, labels + n_); }
  double loss() const override { return loss_; }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    double total = 0;
    for (int64_t k = 0; k < n_; ++k) {
      const float* x = bottoms[0] + k * c_;
      float* p = top + k * c_;
      const float mx = *std::max_element(x, x + c_);
      double sum = 0;
      for (int64_t j = 0; j < c_; ++j) sum += std::exp(static_cast<double>(x[j]) - mx);
      for (int64_t j = 0; j < c_; ++j) {
        p[j] = static_cast<float>(std::exp(static_cast<double>(x[j]) - mx) / sum);
      }
      const int32_t label = labels_[static_cast<size_t>(k)];
      POSEIDON_CHECK(label >= 0 && label < c_) << "label " << label << " outside [0, " << c_ << ")";
      total -= std::log(std::max(static_cast<double>(p[label]), static_cast<double>(FLT_MIN)));
    }
    loss_ = total / static_cast<double>(n_);
  }

  void Backward(const std::vector<const float*>&, const float* top, const float*,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    const float inv = 1.f / static_cast<float>(n_);
    for (int64_t k = 0; k < n_; ++k) {
      for (int64_t j = 0; j < c_; ++j) {
        const float onehot = j == labels_[static_cast<size_t>(k)] ? 1.f : 0.f;
        bottom_grads[0][k * c_ + j] = (top[k * c_ + j] - onehot) * inv;
      }
    }
  }

 private:
  int64_t n_, c_;
  std::vector<int32_t> labels_;
  double loss_ = 0;
};

class BatchNormKernel : public LayerKernel {
 public:
  BatchNormKernel(const Layer& l, int64_t batch)
      : l_(l),
        n_(batch),
        c_(l.out.c),
        plane_(l.out.h * l.out.w),
        mean_(static_cast<size_t>(c_)),
        inv_std_(static_cast<size_t>(c_)),
        running_mean_(static_cast<size_t>(c_), 0.0),
        running_var_(static_cast<size_t>(c_), 1.0) {}

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool train) override {
    const bool affine = l_.spec.bn_affine;
    const double m = static_cast<double>(n_ * plane_);
    train_ = train;
    for (int64_t c = 0; c < c_; ++c) {
      const auto ci = static_cast<size_t>(c);
      if (train) {
        double sum = 0, sq = 0;
        ForEach(c, [&](int64_t i) { sum += bottoms[0][i]; });
        const double mean = sum / m;
        ForEach(c, [&](int64_t i) { sq += (bottoms[0][i] - mean) * (bottoms[0][i] - mean); });
        const double var = sq / m;
        mean_[ci] = mean;
        inv_std_[ci] = 1.0 / std::sqrt(var + kBatchNormEps);
        const double unbiased = m > 1 ? var * m / (m - 1) : var;
        running_mean_[ci] =
            kBatchNormMomentum * running_mean_[ci] + (1 - kBatchNormMomentum) * mean;
        running_var_[ci] =
            kBatchNormMomentum * running_var_[ci] + (1 - kBatchNormMomentum) * unbiased;
      } else {
        mean_[ci] = running_mean_[ci];
        inv_std_[ci] = 1.0 / std::sqrt(running_var_[ci] + kBatchNormEps);
      }
      const double gamma = affine ? params[0][c] : 1.0, beta = affine ? params[1][c] : 0.0;
      ForEach(c, [&](int64_t i) {
        top[i] = static_cast<float>(gamma * (bottoms[0][i] - mean_[ci]) * inv_std_[ci] + beta);
      });
    }
  }

  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    const bool affine = l_.spec.bn_affine;
    const double m = static_cast<double>(n_ * plane_);
    float* dx = bottom_grads.empty() ? nullptr : bottom_grads[0];
    for (int64_t c = 0; c < c_; ++c) {
      const auto ci = static_cast<size_t>(c);
      double sum_dy = 0, sum_dy_xhat = 0;
      ForEach(c, [&](int64_t i) {
        const double xhat = (bottoms[0][i] - mean_[ci]) * inv_std_[ci];
        sum_dy += dy[i];
        sum_dy_xhat += dy[i] * xhat;
      });
      const double gamma = affine ? params[0][c] : 1.0;
      if (affine) {
        param_grads[0][c] = static_cast<float>(sum_dy_xhat);
        param_grads[1][c] = static_cast<float>(sum_dy);
      }
      if (dx == nullptr) continue;
      ForEach(c, [&](int64_t i) {
        if (!train_) {  // fixed statistics: an affine map
          dx[i] = static_cast<float>(dy[i] * gamma * inv_std_[ci]);
          return;
        }
        const double xhat = (bottoms[0][i] - mean_[ci]) * inv_std_[ci];
        dx[i] = static_cast<float>(gamma * inv_std_[ci] / m *
                                   (m * dy[i] - sum_dy - xhat * sum_dy_xhat));
      });
    }
  }

 private:
  template <typename F>
  void ForEach(int64_t c, F f) const {
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t p = 0; p < plane_; ++p) f((n * c_ + c) * plane_ + p);
    }
  }

  const Layer l_;  // a copy: the kernel must not depend on the caller keeping the model alive
  int64_t n_, c_, plane_;
  bool train_ = true;
  std::vector<double> mean_, inv_std_;  // of the last Forward
  std::vector<double> running_mean_, running_var_;
};

class AddKernel : public LayerKernel {
 public:
  AddKernel(const Layer& l, int64_t batch) : count_(batch * l.out.count()) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    for (int64_t i = 0; i < count_; ++i) {
      float acc = 0.f;
      for (const float* b : bottoms) acc += b[i];
      top[i] = acc;
    }
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    for (float* dx : bottom_grads) {
      if (dx != nullptr) std::memcpy(dx, dy, static_cast<size_t>(count_) * sizeof(float));
    }
  }

 private:
  int64_t count_;
};

}  // namespace

std::unique_ptr<LayerKernel> MakeReferenceKernel(const core::Layer& layer, int64_t batch,
                                                 uint64_t seed) {
  switch (layer.kind) {
    case LayerKind::kConv:
      return std::make_unique<ConvKernel>(layer, batch);
    case LayerKind::kPool:
      return std::make_unique<PoolKernel>(layer, batch);
    case LayerKind::kRelu:
      return std::make_unique<ReluKernel>(layer, batch);
    case LayerKind::kLrn:
      return std::make_unique<LrnKernel>(layer, batch);
    case LayerKind::kFc:
      return std::make_unique<FcKernel>(layer, batch);
    case LayerKind::kDropout:
      return std::make_unique<DropoutKernel>(layer, batch, seed);
    case LayerKind::kConcat:
      return std::make_unique<ConcatKernel>(layer, batch);
    case LayerKind::kSoftmaxLoss:
      return std::make_unique<SoftmaxLossKernel>(layer, batch);
    case LayerKind::kBatchNorm:
      return std::make_unique<BatchNormKernel>(layer, batch);
    case LayerKind::kAdd:
      return std::make_unique<AddKernel>(layer, batch);
    default:
      break;
  }
  if (auto k = MakeReferenceTransformerKernel(layer, batch)) return k;
  ThrowNoKernel(Backend::kReference, layer);
}

}  // namespace poseidon::kernels
