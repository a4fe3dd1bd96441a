// kernels/cpu/cpu_transformer.cc: the CPU (oneDNN 2.6) backend's transformer layers.
//
// Semantics are the reference's (kernels/reference/reference_kernels.h, PyTorch's). oneDNN
// primitives, created once in each kernel's constructor for the fixed batch:
//   linear, patch_embed  matmul y = x W^T + b (W read in place through transposed strides),
//                        dx = dy W, dW = dy^T x, db = ones^T dy (matmuls);
//                        patch_embed gathers its patches into rows first (plain im2col, and the
//                        matching scatter of dx: the patches do not overlap)
//   attention            the four projections as linear; scores and context as batched matmuls
//                        over (batch, heads) on the [B, S, D] buffers through strides (no head
//                        transposes), the 1/sqrt(dh) scale as an output scale; softmax forward
//                        and backward; the causal mask is a plain loop (-inf above the diagonal)
//                        before the softmax; dx sums three matmuls with a sum post-op
//   layernorm            layer_normalization forward (training) and backward, scale and shift
//   gelu, tanh           eltwise gelu_erf / tanh forward and backward
//   softmax              softmax forward and backward over the last dimension
//   pos_embedding        binary add with the table broadcast over the batch; its gradient is a
//                        sum over the batch (a matmul by ones, as db above)
// and plain loops where oneDNN has no primitive: embedding (a gather; an id outside the
// vocabulary is a KernelError), cls_token (a copy) and token_pool (a mean or a copy), which are
// the reference kernels themselves.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/reference/reference_kernels.h"

namespace poseidon::kernels {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using Tag = memory::format_tag;
using Args = std::unordered_map<int, memory>;
constexpr memory::data_type kF32 = memory::data_type::f32;

memory::desc Md(const memory::dims& dims, Tag tag) { return memory::desc(dims, kF32, tag); }
memory::desc Strided(const memory::dims& dims, const memory::dims& strides) {
  return memory::desc(dims, kF32, strides);
}

float* BottomGrad(const std::vector<float*>& g, size_t i) { return i < g.size() ? g[i] : nullptr; }

// One engine and stream per kernel, as the other CPU kernels.
class DnnlBase : public LayerKernel {
 protected:
  DnnlBase() : eng_(dnnl::engine::kind::cpu, 0), strm_(eng_) {}
  memory Wrap(const memory::desc& md) const { return memory(md, eng_, DNNL_MEMORY_NONE); }
  // oneDNN takes void*; it only reads inputs, so the const_cast never leads to a write.
  static memory& Bind(memory& m, const float* p) {
    m.set_data_handle(const_cast<float*>(p));
    return m;
  }
  void Run(const dnnl::primitive& p, const Args& args) {
    p.execute(strm_, args);
    strm_.wait();
  }

  dnnl::engine eng_;
  dnnl::stream strm_;
};

// A matmul c = scale * a b (+ bias) (+ c when accumulating), a and b and c any strided
// descriptors, with the memory objects it binds pointers to.
struct MatMul {
  dnnl::matmul prim;
  memory a, b, c, bias;
  bool has_bias = false;

  void Init(const dnnl::engine& eng, const memory::desc& a_md, const memory::desc& b_md,
            const memory::desc& c_md, const memory::desc* bias_md = nullptr, float scale = 1.f,
            bool accumulate = false) {
    dnnl::primitive_attr attr;
    if (scale != 1.f) attr.set_output_scales(0, {scale});
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.f);
      attr.set_post_ops(po);
    }
    has_bias = bias_md != nullptr;
    const dnnl::matmul::desc d = has_bias ? dnnl::matmul::desc(a_md, b_md, *bias_md, c_md)
                                          : dnnl::matmul::desc(a_md, b_md, c_md);
    prim = dnnl::matmul(dnnl::matmul::primitive_desc(d, attr, eng));
    a = memory(a_md, eng, DNNL_MEMORY_NONE);
    b = memory(b_md, eng, DNNL_MEMORY_NONE);
    c = memory(c_md, eng, DNNL_MEMORY_NONE);
    if (has_bias) bias = memory(*bias_md, eng, DNNL_MEMORY_NONE);
  }
  void Run(dnnl::stream& s, const float* pa, const float* pb, float* pc,
           const float* pbias = nullptr) {
    a.set_data_handle(const_cast<float*>(pa));
    b.set_data_handle(const_cast<float*>(pb));
    c.set_data_handle(pc);
    Args args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (has_bias) {
      bias.set_data_handle(const_cast<float*>(pbias));
      args[DNNL_ARG_BIAS] = bias;
    }
    prim.execute(s, args);
  }
};

// Column sums of an m x n matrix into n values, as the matmul ones(1 x m) x (m x n): oneDNN
// 2.6's reduction_sum has only its reference implementation on CPU, which took as long as all
// the matmuls of fmnist_vit together.
struct ColumnSum {
  MatMul prim;
  std::vector<float> ones;
  void Init(const dnnl::engine& eng, int64_t m, int64_t n) {
    ones.assign(static_cast<size_t>(m), 1.f);
    prim.Init(eng, Md({1, m}, Tag::ab), Md({m, n}, Tag::ab), Md({1, n}, Tag::ab));
  }
  void Run(dnnl::stream& s, const float* x, float* y) { prim.Run(s, ones.data(), x, y); }
};

// y (rows x n) = x (rows x k) W^T + b with W {n, k}, and its backward; dx optionally accumulated
// into (for attention's three projections of one input).
struct Gemm {
  MatMul fwd, bwd_data, bwd_data_acc, bwd_weights;
  ColumnSum bias_grad;
  bool bias = false;

  void Init(const dnnl::engine& eng, int64_t rows, int64_t k, int64_t n, bool with_bias,
            bool with_acc = false) {
    bias = with_bias;
    const memory::desc x = Md({rows, k}, Tag::ab), y = Md({rows, n}, Tag::ab);
    const memory::desc wt = Strided({k, n}, {1, k});  // W^T read from W {n, k}
    const memory::desc b = Md({1, n}, Tag::ab);
    fwd.Init(eng, x, wt, y, bias ? &b : nullptr);
    const memory::desc w = Md({n, k}, Tag::ab);
    bwd_data.Init(eng, y, w, x);
    if (with_acc) bwd_data_acc.Init(eng, y, w, x, nullptr, 1.f, true);
    bwd_weights.Init(eng, Strided({n, rows}, {1, n}), x, w);  // dy^T x
    if (bias) bias_grad.Init(eng, rows, n);
  }
  void Forward(dnnl::stream& s, const float* x, const float* w, const float* b, float* y) {
    fwd.Run(s, x, w, y, b);
  }
  // dW (and db) always; dx when not null (added to it when `accumulate`).
  void Backward(dnnl::stream& s, const float* x, const float* w, const float* dy, float* dx,
                float* dw, float* db, bool accumulate = false) {
    bwd_weights.Run(s, dy, x, dw);
    if (bias) bias_grad.Run(s, dy, db);
    if (dx != nullptr) (accumulate ? bwd_data_acc : bwd_data).Run(s, dy, w, dx);
  }
};

// ---------------------------------------------------------------------------------------------
class LinearKernel final : public DnnlBase {
 public:
  LinearKernel(const core::Layer& l, int64_t batch) : bias_(l.spec.bias) {
    gemm_.Init(eng_, batch * l.fc_rows, l.fc_in, l.fc_out, bias_);
  }
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    gemm_.Forward(strm_, bottoms[0], params[0], bias_ ? params[1] : nullptr, top);
    strm_.wait();
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    gemm_.Backward(strm_, bottoms[0], params[0], dy, BottomGrad(bottom_grads, 0), param_grads[0],
                   bias_ ? param_grads[1] : nullptr);
    strm_.wait();
  }

 private:
  bool bias_;
  Gemm gemm_;
};

// ---------------------------------------------------------------------------------------------
class PatchEmbedKernel final : public DnnlBase {
 public:
  PatchEmbedKernel(const core::Layer& l, int64_t batch) : l_(l), n_(batch) {
    cols_.resize(static_cast<size_t>(n_ * l.fc_rows * l.fc_in));
    dcols_.resize(cols_.size());
    gemm_.Init(eng_, n_ * l.fc_rows, l.fc_in, l.fc_out, l.spec.bias);
  }
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    ForEachPixel([&](int64_t xi, int64_t ci) { cols_[static_cast<size_t>(ci)] = bottoms[0][xi]; });
    gemm_.Forward(strm_, cols_.data(), params[0], l_.spec.bias ? params[1] : nullptr, top);
    strm_.wait();
  }
  // Uses the patches gathered by the Forward of the same iteration.
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    float* dx = BottomGrad(bottom_grads, 0);
    gemm_.Backward(strm_, cols_.data(), params[0], dy, dx != nullptr ? dcols_.data() : nullptr,
                   param_grads[0], l_.spec.bias ? param_grads[1] : nullptr);
    strm_.wait();
    if (dx != nullptr) {
      ForEachPixel([&](int64_t xi, int64_t ci) { dx[xi] = dcols_[static_cast<size_t>(ci)]; });
    }
  }

 private:
  template <typename F>
  void ForEachPixel(F f) const {
    const core::Shape& x = l_.in_shapes[0];
    const int64_t p = l_.spec.patch, gw = x.w / p, np = l_.fc_rows, k = l_.fc_in;
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t t = 0; t < np; ++t) {
        const int64_t ph = t / gw, pw = t % gw;
        for (int64_t c = 0; c < x.c; ++c) {
          for (int64_t i = 0; i < p; ++i) {
            const int64_t xrow = ((n * x.c + c) * x.h + ph * p + i) * x.w + pw * p;
            const int64_t crow = (n * np + t) * k + (c * p + i) * p;
            for (int64_t j = 0; j < p; ++j) f(xrow + j, crow + j);
          }
        }
      }
    }
  }

  core::Layer l_;
  int64_t n_;
  Gemm gemm_;
  std::vector<float> cols_, dcols_;
};

// ---------------------------------------------------------------------------------------------
class AttentionKernel final : public DnnlBase {
 public:
  AttentionKernel(const core::Layer& l, int64_t batch)
      : n_(batch),
        s_(l.out.h),
        d_(l.out.w),
        h_(l.spec.heads),
        bias_(l.spec.bias),
        causal_(l.spec.causal) {
    const int64_t rows = n_ * s_, dh = d_ / h_, s = s_, d = d_, h = h_;
    for (int p = 0; p < 4; ++p) proj_[p].Init(eng_, rows, d, d, bias_, /*with_acc=*/p > 0);
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
    // [B, S, D] viewed as [B, H, S, dh], and as its transpose [B, H, dh, S].
    const memory::desc head = Strided({n_, h, s, dh}, {s * d, dh, d, 1});
    const memory::desc head_t = Strided({n_, h, dh, s}, {s * d, dh, 1, d});
    const memory::desc probs = Md({n_, h, s, s}, Tag::abcd);
    const memory::desc probs_t = Strided({n_, h, s, s}, {h * s * s, s * s, 1, s});
    scores_.Init(eng_, head, head_t, probs, nullptr, scale);  // Q K^T / sqrt(dh)
    context_.Init(eng_, probs, head, head);                   // P V
    dprobs_.Init(eng_, head, head_t, probs);                  // dctx V^T
    dv_.Init(eng_, probs_t, head, head);                      // P^T dctx
    dq_.Init(eng_, probs, head, head, nullptr, scale);        // dS K / sqrt(dh)
    dk_.Init(eng_, probs_t, head, head, nullptr, scale);      // dS^T Q / sqrt(dh)
    dnnl::softmax_forward::desc sfd(prop_kind::forward_training, probs, 3);
    dnnl::softmax_forward::primitive_desc spd(sfd, eng_);
    softmax_ = dnnl::softmax_forward(spd);
    dnnl::softmax_backward::desc sbd(probs, probs, 3);
    softmax_bwd_ = dnnl::softmax_backward(dnnl::softmax_backward::primitive_desc(sbd, eng_, spd));
    sm_src_ = Wrap(probs), sm_dst_ = Wrap(probs), sm_diff_ = Wrap(probs);
    const auto sd = static_cast<size_t>(rows * d), ss = static_cast<size_t>(n_ * h * s * s);
    q_.resize(sd), k_.resize(sd), v_.resize(sd), ctx_.resize(sd);
    dctx_.resize(sd), dq_buf_.resize(sd), dk_buf_.resize(sd), dv_buf_.resize(sd);
    scores_buf_.resize(ss), p_.resize(ss), dp_.resize(ss), ds_.resize(ss);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    const float* x = bottoms[0];
    proj_[0].Forward(strm_, x, W(params, 0), B(params, 0), q_.data());
    proj_[1].Forward(strm_, x, W(params, 1), B(params, 1), k_.data());
    proj_[2].Forward(strm_, x, W(params, 2), B(params, 2), v_.data());
    scores_.Run(strm_, q_.data(), k_.data(), scores_buf_.data());
    strm_.wait();
    if (causal_) {
      const float ninf = -std::numeric_limits<float>::infinity();
      for (int64_t r = 0; r < n_ * h_; ++r) {
        for (int64_t i = 0; i < s_; ++i) {
          float* row = scores_buf_.data() + (r * s_ + i) * s_;
          for (int64_t j = i + 1; j < s_; ++j) row[j] = ninf;
        }
      }
    }
    Bind(sm_src_, scores_buf_.data()), Bind(sm_dst_, p_.data());
    softmax_.execute(strm_, {{DNNL_ARG_SRC, sm_src_}, {DNNL_ARG_DST, sm_dst_}});
    context_.Run(strm_, p_.data(), v_.data(), ctx_.data());
    proj_[3].Forward(strm_, ctx_.data(), W(params, 3), B(params, 3), top);
    strm_.wait();
  }

  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    const float* x = bottoms[0];
    proj_[3].Backward(strm_, ctx_.data(), W(params, 3), dy, dctx_.data(), W(param_grads, 3),
                      B(param_grads, 3));
    dprobs_.Run(strm_, dctx_.data(), v_.data(), dp_.data());
    dv_.Run(strm_, p_.data(), dctx_.data(), dv_buf_.data());
    // Masked probabilities are 0, so their score gradient is 0 as well.
    Bind(sm_dst_, p_.data()), Bind(sm_diff_, dp_.data()), Bind(sm_src_, ds_.data());
    softmax_bwd_.execute(
        strm_,
        {{DNNL_ARG_DST, sm_dst_}, {DNNL_ARG_DIFF_DST, sm_diff_}, {DNNL_ARG_DIFF_SRC, sm_src_}});
    dq_.Run(strm_, ds_.data(), k_.data(), dq_buf_.data());
    dk_.Run(strm_, ds_.data(), q_.data(), dk_buf_.data());
    float* dx = BottomGrad(bottom_grads, 0);
    const float* grads[3] = {dq_buf_.data(), dk_buf_.data(), dv_buf_.data()};
    for (int p = 0; p < 3; ++p) {
      proj_[p].Backward(strm_, x, W(params, p), grads[p], dx, W(param_grads, p), B(param_grads, p),
                        /*accumulate=*/p > 0);
    }
    strm_.wait();
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

  int64_t n_, s_, d_, h_;
  bool bias_, causal_;
  Gemm proj_[4];  // q, k, v (dx accumulated over the three), o
  MatMul scores_, context_, dprobs_, dv_, dq_, dk_;
  dnnl::primitive softmax_, softmax_bwd_;
  memory sm_src_, sm_dst_, sm_diff_;
  std::vector<float> q_, k_, v_, ctx_, scores_buf_, p_;  // of the last Forward
  std::vector<float> dctx_, dq_buf_, dk_buf_, dv_buf_, dp_, ds_;
};

// ---------------------------------------------------------------------------------------------
class LayerNormKernel final : public DnnlBase {
 public:
  LayerNormKernel(const core::Layer& l, int64_t batch) {
    const int64_t d = l.out.w, rows = batch * l.out.count() / d;
    const memory::desc md = Md({rows, d}, Tag::ab), cmd = Md({d}, Tag::a);
    const auto eps = static_cast<float>(kLayerNormEps);
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    dnnl::layer_normalization_forward::desc fd(prop_kind::forward_training, md, eps, flags);
    dnnl::layer_normalization_forward::primitive_desc fpd(fd, eng_);
    fwd_ = dnnl::layer_normalization_forward(fpd);
    dnnl::layer_normalization_backward::desc bd(prop_kind::backward, md, md, eps, flags);
    bwd_ = dnnl::layer_normalization_backward(
        dnnl::layer_normalization_backward::primitive_desc(bd, eng_, fpd));
    mean_ = memory(fpd.mean_desc(), eng_), var_ = memory(fpd.variance_desc(), eng_);
    if (fpd.workspace_desc().get_size() > 0) workspace_ = memory(fpd.workspace_desc(), eng_);
    src_ = Wrap(md), dst_ = Wrap(md), diff_src_ = Wrap(md);
    scale_ = Wrap(cmd), shift_ = Wrap(cmd), diff_scale_ = Wrap(cmd), diff_shift_ = Wrap(cmd);
    scratch_.resize(static_cast<size_t>(rows * d));
  }
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    Args args{{DNNL_ARG_SRC, Bind(src_, bottoms[0])},
              {DNNL_ARG_DST, Bind(dst_, top)},
              {DNNL_ARG_MEAN, mean_},
              {DNNL_ARG_VARIANCE, var_},
              {DNNL_ARG_SCALE, Bind(scale_, params[0])},
              {DNNL_ARG_SHIFT, Bind(shift_, params[1])}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    Run(fwd_, args);
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    float* dx = BottomGrad(bottom_grads, 0);
    Args args{{DNNL_ARG_SRC, Bind(src_, bottoms[0])},
              {DNNL_ARG_DIFF_DST, Bind(dst_, dy)},
              {DNNL_ARG_DIFF_SRC, Bind(diff_src_, dx != nullptr ? dx : scratch_.data())},
              {DNNL_ARG_MEAN, mean_},
              {DNNL_ARG_VARIANCE, var_},
              {DNNL_ARG_SCALE, Bind(scale_, params[0])},
              {DNNL_ARG_SHIFT, Bind(shift_, params[1])},
              {DNNL_ARG_DIFF_SCALE, Bind(diff_scale_, param_grads[0])},
              {DNNL_ARG_DIFF_SHIFT, Bind(diff_shift_, param_grads[1])}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    Run(bwd_, args);
  }

 private:
  dnnl::primitive fwd_, bwd_;
  memory mean_, var_, workspace_;  // statistics of the last Forward
  memory src_, dst_, diff_src_, scale_, shift_, diff_scale_, diff_shift_;
  std::vector<float> scratch_;  // diff_src when the caller wants none
};

// ---------------------------------------------------------------------------------------------
// gelu (erf), tanh and softmax (last dimension): one shape in and out.
class PointwiseKernel final : public DnnlBase {
 public:
  PointwiseKernel(const core::Layer& l, int64_t batch) : kind_(l.kind) {
    const int64_t d = l.out.w, rows = batch * l.out.count() / d;
    const memory::desc md = Md({rows, d}, Tag::ab);
    if (kind_ == core::LayerKind::kSoftmax) {
      dnnl::softmax_forward::desc fd(prop_kind::forward_training, md, 1);
      dnnl::softmax_forward::primitive_desc fpd(fd, eng_);
      fwd_ = dnnl::softmax_forward(fpd);
      dnnl::softmax_backward::desc bd(md, md, 1);
      bwd_ = dnnl::softmax_backward(dnnl::softmax_backward::primitive_desc(bd, eng_, fpd));
    } else {
      const algorithm alg =
          kind_ == core::LayerKind::kGelu ? algorithm::eltwise_gelu_erf : algorithm::eltwise_tanh;
      dnnl::eltwise_forward::desc fd(prop_kind::forward_training, alg, md, 0.f, 0.f);
      dnnl::eltwise_forward::primitive_desc fpd(fd, eng_);
      fwd_ = dnnl::eltwise_forward(fpd);
      dnnl::eltwise_backward::desc bd(alg, md, md, 0.f, 0.f);
      bwd_ = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(bd, eng_, fpd));
    }
    src_ = Wrap(md), dst_ = Wrap(md), diff_dst_ = Wrap(md), diff_src_ = Wrap(md);
  }
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    Run(fwd_, {{DNNL_ARG_SRC, Bind(src_, bottoms[0])}, {DNNL_ARG_DST, Bind(dst_, top)}});
  }
  void Backward(const std::vector<const float*>& bottoms, const float* top, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    float* dx = BottomGrad(bottom_grads, 0);
    if (dx == nullptr) return;
    Args args{{DNNL_ARG_DIFF_DST, Bind(diff_dst_, dy)}, {DNNL_ARG_DIFF_SRC, Bind(diff_src_, dx)}};
    // Softmax's backward reads its output; gelu's and tanh's (the src forms) their input.
    if (kind_ == core::LayerKind::kSoftmax) {
      args[DNNL_ARG_DST] = Bind(dst_, top);
    } else {
      args[DNNL_ARG_SRC] = Bind(src_, bottoms[0]);
    }
    Run(bwd_, args);
  }

 private:
  core::LayerKind kind_;
  dnnl::primitive fwd_, bwd_;
  memory src_, dst_, diff_dst_, diff_src_;
};

// ---------------------------------------------------------------------------------------------
class PosEmbeddingKernel final : public DnnlBase {
 public:
  PosEmbeddingKernel(const core::Layer& l, int64_t batch) : n_(batch), per_(l.out.count()) {
    table_ = l.blobs[0].count;
    const memory::desc x = Md({n_, per_}, Tag::ab), p = Md({1, per_}, Tag::ab);
    add_ = dnnl::binary(
        dnnl::binary::primitive_desc(dnnl::binary::desc(algorithm::binary_add, x, p, x), eng_));
    sum_.Init(eng_, n_, per_);
    src0_ = Wrap(x), src1_ = Wrap(p), dst_ = Wrap(x);
  }
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    Run(add_, {{DNNL_ARG_SRC_0, Bind(src0_, bottoms[0])},
               {DNNL_ARG_SRC_1, Bind(src1_, params[0])},  // the first S rows of the table
               {DNNL_ARG_DST, Bind(dst_, top)}});
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>& param_grads) override {
    sum_.Run(strm_, dy, param_grads[0]);
    strm_.wait();
    std::fill(param_grads[0] + per_, param_grads[0] + table_, 0.f);  // rows past S
    if (float* dx = BottomGrad(bottom_grads, 0)) {
      std::memcpy(dx, dy, static_cast<size_t>(n_ * per_) * sizeof(float));
    }
  }

 private:
  int64_t n_, per_, table_;
  dnnl::primitive add_;
  ColumnSum sum_;
  memory src0_, src1_, dst_;
};

}  // namespace

std::unique_ptr<LayerKernel> MakeCpuTransformerKernel(const core::Layer& layer, int64_t batch) {
  switch (layer.kind) {
    case core::LayerKind::kLinear:
      return std::make_unique<LinearKernel>(layer, batch);
    case core::LayerKind::kPatchEmbed:
      return std::make_unique<PatchEmbedKernel>(layer, batch);
    case core::LayerKind::kAttention:
      return std::make_unique<AttentionKernel>(layer, batch);
    case core::LayerKind::kLayerNorm:
      return std::make_unique<LayerNormKernel>(layer, batch);
    case core::LayerKind::kGelu:
    case core::LayerKind::kTanh:
    case core::LayerKind::kSoftmax:
      return std::make_unique<PointwiseKernel>(layer, batch);
    case core::LayerKind::kPosEmbedding:
      return std::make_unique<PosEmbeddingKernel>(layer, batch);
    case core::LayerKind::kEmbedding:
    case core::LayerKind::kClsToken:
    case core::LayerKind::kTokenPool:
      // Gathers and copies: oneDNN has no primitive for them; the reference's plain loops.
      return MakeReferenceTransformerKernel(layer, batch);
    default:
      return nullptr;
  }
}

}  // namespace poseidon::kernels
