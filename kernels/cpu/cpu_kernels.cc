// kernels/cpu/cpu_kernels.cc: the oneDNN 2.x CPU backend (see cpu_kernels.h for the semantics).
#include "kernels/cpu/cpu_kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

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

// Common state: the layer, the batch, one engine and one stream.
class DnnlKernel : public LayerKernel {
 protected:
  DnnlKernel(const core::Layer& layer, int64_t batch)
      : layer_(layer), batch_(batch), eng_(dnnl::engine::kind::cpu, 0), strm_(eng_) {}

  // A memory object without a buffer; Bind gives it the caller's pointer before each call.
  memory Wrap(const memory::desc& md) const { return memory(md, eng_, DNNL_MEMORY_NONE); }
  // oneDNN takes void*; it only reads inputs, so the const_cast never leads to a write.
  static void Bind(memory& m, const float* p) { m.set_data_handle(const_cast<float*>(p)); }
  void Run(const dnnl::primitive& p, const Args& args) {
    p.execute(strm_, args);
    strm_.wait();
  }
  memory::desc InMd(size_t i) const {
    const core::Shape& s = layer_.in_shapes[i];
    return Md({batch_, s.c, s.h, s.w}, Tag::nchw);
  }
  memory::desc OutMd() const {
    return Md({batch_, layer_.out.c, layer_.out.h, layer_.out.w}, Tag::nchw);
  }
  int64_t OutCount() const { return batch_ * layer_.out.count(); }

  // One interface buffer in its plain layout and, where a primitive wants another layout, a
  // kernel-owned buffer in that layout with the reorder between the two (created once here).
  struct Port {
    memory user, inner;
    dnnl::primitive reorder;
    bool reordered = false;
  };
  Port MakePort(const memory::desc& plain, const memory::desc& want, bool input) const {
    Port p;
    p.user = Wrap(plain);
    if (want == plain) {
      p.inner = p.user;
      return p;
    }
    p.reordered = true;
    p.inner = memory(want, eng_);
    p.reorder = input ? dnnl::reorder(p.user, p.inner) : dnnl::reorder(p.inner, p.user);
    return p;
  }
  // An input: binds the caller's pointer and reorders it into the inner buffer when needed.
  const memory& In(Port& p, const float* ptr) {
    Bind(p.user, ptr);
    if (p.reordered) p.reorder.execute(strm_, {{DNNL_ARG_FROM, p.user}, {DNNL_ARG_TO, p.inner}});
    return p.inner;
  }
  // An output: binds the caller's pointer; Flush copies the inner buffer out after the primitive.
  const memory& Out(Port& p, float* ptr) {
    Bind(p.user, ptr);
    return p.inner;
  }
  void Flush(Port& p) {
    if (p.reordered) p.reorder.execute(strm_, {{DNNL_ARG_FROM, p.inner}, {DNNL_ARG_TO, p.user}});
  }

  core::Layer layer_;
  int64_t batch_;
  dnnl::engine eng_;
  dnnl::stream strm_;
};

// ---------------------------------------------------------------------------------------------
class ConvKernel final : public DnnlKernel {
 public:
  // src, weights and dst use the layouts oneDNN prefers (format_tag::any, blocked on most CPUs, so
  // that it picks a JIT direct convolution instead of im2col + gemm); reorders at the boundary.
  ConvKernel(const core::Layer& layer, int64_t batch) : DnnlKernel(layer, batch) {
    const core::LayerSpec& s = layer.spec;
    const core::Shape& x = layer.in_shapes[0];
    const int64_t g = s.groups, oc = layer.out.c;
    bias_ = s.bias;
    const memory::desc src = InMd(0), dst = OutMd();
    const memory::dims wdims = g > 1 ? memory::dims{g, oc / g, x.c / g, s.kernel_h, s.kernel_w}
                                     : memory::dims{oc, x.c, s.kernel_h, s.kernel_w};
    const memory::desc w = Md(wdims, g > 1 ? Tag::goihw : Tag::oihw);
    const memory::desc b = Md({oc}, Tag::x);
    const memory::desc src_any = Md(src.dims(), Tag::any), dst_any = Md(dst.dims(), Tag::any),
                       w_any = Md(wdims, Tag::any);
    memory::dims strides{s.stride_h, s.stride_w}, pad{s.pad_h, s.pad_w};
    const auto alg = algorithm::convolution_direct;
    auto fd = bias_ ? dnnl::convolution_forward::desc(prop_kind::forward_training, alg, src_any,
                                                      w_any, b, dst_any, strides, pad, pad)
                    : dnnl::convolution_forward::desc(prop_kind::forward_training, alg, src_any,
                                                      w_any, dst_any, strides, pad, pad);
    dnnl::convolution_forward::primitive_desc fpd(fd, eng_);
    fwd_ = dnnl::convolution_forward(fpd);
    dnnl::convolution_backward_data::desc dd(alg, src_any, w_any, dst_any, strides, pad, pad);
    dnnl::convolution_backward_data::primitive_desc dpd(dd, eng_, fpd);
    bwd_data_ = dnnl::convolution_backward_data(dpd);
    auto wd = bias_ ? dnnl::convolution_backward_weights::desc(alg, src_any, w_any, b, dst_any,
                                                               strides, pad, pad)
                    : dnnl::convolution_backward_weights::desc(alg, src_any, w_any, dst_any,
                                                               strides, pad, pad);
    dnnl::convolution_backward_weights::primitive_desc wpd(wd, eng_, fpd);
    bwd_weights_ = dnnl::convolution_backward_weights(wpd);
    f_src_ = MakePort(src, fpd.src_desc(), true);
    f_w_ = MakePort(w, fpd.weights_desc(), true);
    f_dst_ = MakePort(dst, fpd.dst_desc(), false);
    w_src_ = MakePort(src, wpd.src_desc(), true);
    w_ddst_ = MakePort(dst, wpd.diff_dst_desc(), true);
    w_dw_ = MakePort(w, wpd.diff_weights_desc(), false);
    d_ddst_ = MakePort(dst, dpd.diff_dst_desc(), true);
    d_w_ = MakePort(w, dpd.weights_desc(), true);
    d_dsrc_ = MakePort(src, dpd.diff_src_desc(), false);
    share_ddst_ = wpd.diff_dst_desc() == dpd.diff_dst_desc();
    b_ = Wrap(b);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    Args args{{DNNL_ARG_SRC, In(f_src_, bottoms[0])},
              {DNNL_ARG_WEIGHTS, In(f_w_, params[0])},
              {DNNL_ARG_DST, Out(f_dst_, top)}};
    if (bias_) Bind(b_, params[1]), args[DNNL_ARG_BIAS] = b_;
    fwd_.execute(strm_, args);
    Flush(f_dst_);
    strm_.wait();
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* top_grad,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    const memory& ddst = In(w_ddst_, top_grad);
    Args args{{DNNL_ARG_SRC, In(w_src_, bottoms[0])},
              {DNNL_ARG_DIFF_DST, ddst},
              {DNNL_ARG_DIFF_WEIGHTS, Out(w_dw_, param_grads[0])}};
    if (bias_) Bind(b_, param_grads[1]), args[DNNL_ARG_DIFF_BIAS] = b_;
    bwd_weights_.execute(strm_, args);
    Flush(w_dw_);
    if (bottom_grads[0] != nullptr) {
      bwd_data_.execute(strm_, {{DNNL_ARG_DIFF_DST, share_ddst_ ? ddst : In(d_ddst_, top_grad)},
                                {DNNL_ARG_WEIGHTS, In(d_w_, params[0])},
                                {DNNL_ARG_DIFF_SRC, Out(d_dsrc_, bottom_grads[0])}});
      Flush(d_dsrc_);
    }
    strm_.wait();
  }

 private:
  bool bias_ = true;
  bool share_ddst_ = false;
  dnnl::primitive fwd_, bwd_data_, bwd_weights_;
  Port f_src_, f_w_, f_dst_, w_src_, w_ddst_, w_dw_, d_ddst_, d_w_, d_dsrc_;
  memory b_;
};

// ---------------------------------------------------------------------------------------------
class PoolKernel final : public DnnlKernel {
 public:
  PoolKernel(const core::Layer& layer, int64_t batch) : DnnlKernel(layer, batch) {
    const core::LayerSpec& s = layer.spec;
    const core::Shape& x = layer.in_shapes[0];
    const core::Shape& y = layer.out;
    const bool global = s.global_pool;
    const int64_t kh = global ? x.h : s.kernel_h, kw = global ? x.w : s.kernel_w;
    const int64_t sh = global ? 1 : s.stride_h, sw = global ? 1 : s.stride_w;
    const int64_t ph = global ? 0 : s.pad_h, pw = global ? 0 : s.pad_w;
    // Caffe's ceil rounding: extra padding on the right/bottom makes oneDNN's floor-rounded
    // output size equal core::Layer's. Floor rounding (`round: floor`) is oneDNN's own: the
    // right/bottom padding is the left/top one, and no window runs past the padded input (a
    // last row or column that no window reaches is simply not read, as in PyTorch).
    const bool floor_round = !global && s.pool_round == core::PoolRound::kFloor;
    const int64_t prh = floor_round ? ph : (y.h - 1) * sh + kh - x.h - ph;
    const int64_t prw = floor_round ? pw : (y.w - 1) * sw + kw - x.w - pw;
    if (prh < 0 || prw < 0) {
      throw KernelError("layer '" + layer.name + "': pooling windows that skip input (kernel " +
                        "smaller than stride) are not supported by the oneDNN backend");
    }
    const algorithm alg = s.pool == core::PoolMethod::kMax ? algorithm::pooling_max
                                                           : algorithm::pooling_avg_include_padding;
    // oneDNN 2.6 has only its slow reference implementation (simple_nchw) for plain layouts; a
    // channel-blocked layout (reorders at the boundary) gets the JIT one.
    const memory::desc src = InMd(0), dst = OutMd();
    const memory::desc src_blk = Md(src.dims(), Tag::nChw8c), dst_any = Md(dst.dims(), Tag::any);
    memory::dims strides{sh, sw}, kernel{kh, kw}, pl{ph, pw}, pr{prh, prw};
    dnnl::pooling_forward::desc fd(prop_kind::forward_training, alg, src_blk, dst_any, strides,
                                   kernel, pl, pr);
    dnnl::pooling_forward::primitive_desc fpd(fd, eng_);
    fwd_ = dnnl::pooling_forward(fpd);
    dnnl::pooling_backward::desc bd(alg, src_blk, fpd.dst_desc(), strides, kernel, pl, pr);
    dnnl::pooling_backward::primitive_desc bpd(bd, eng_, fpd);
    bwd_ = dnnl::pooling_backward(bpd);
    if (fpd.workspace_desc().get_size() > 0) workspace_ = memory(fpd.workspace_desc(), eng_);
    f_src_ = MakePort(src, fpd.src_desc(), true);
    f_dst_ = MakePort(dst, fpd.dst_desc(), false);
    b_ddst_ = MakePort(dst, bpd.diff_dst_desc(), true);
    b_dsrc_ = MakePort(src, bpd.diff_src_desc(), false);
    if (alg == algorithm::pooling_avg_include_padding && (prh > ph || prw > pw)) {
      // Caffe divides by (min(start + k, size + pad) - start) per axis; oneDNN by k.
      factor_.resize(y.h * y.w);
      for (int64_t i = 0; i < y.h; ++i) {
        const int64_t hs = i * sh - ph, he = std::min(hs + kh, x.h + ph);
        for (int64_t j = 0; j < y.w; ++j) {
          const int64_t ws = j * sw - pw, we = std::min(ws + kw, x.w + pw);
          factor_[i * y.w + j] =
              static_cast<float>(kh * kw) / static_cast<float>((he - hs) * (we - ws));
        }
      }
      scaled_grad_.resize(OutCount());
    }
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    Args args{{DNNL_ARG_SRC, In(f_src_, bottoms[0])}, {DNNL_ARG_DST, Out(f_dst_, top)}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    fwd_.execute(strm_, args);
    Flush(f_dst_);
    strm_.wait();
    if (!factor_.empty()) Scale(top, top);
  }
  void Backward(const std::vector<const float*>&, const float*, const float* top_grad,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads[0] == nullptr) return;
    if (!factor_.empty()) {
      Scale(top_grad, scaled_grad_.data());
      top_grad = scaled_grad_.data();
    }
    Args args{{DNNL_ARG_DIFF_DST, In(b_ddst_, top_grad)},
              {DNNL_ARG_DIFF_SRC, Out(b_dsrc_, bottom_grads[0])}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    bwd_.execute(strm_, args);
    Flush(b_dsrc_);
    strm_.wait();
  }

 private:
  void Scale(const float* in, float* out) const {
    const int64_t plane = static_cast<int64_t>(factor_.size());
    const int64_t planes = OutCount() / plane;
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t i = 0; i < plane; ++i) out[p * plane + i] = in[p * plane + i] * factor_[i];
    }
  }

  dnnl::primitive fwd_, bwd_;
  Port f_src_, f_dst_, b_ddst_, b_dsrc_;
  memory workspace_;
  std::vector<float> factor_;  // per output position; empty when oneDNN's divisor is Caffe's
  std::vector<float> scaled_grad_;
};

// ---------------------------------------------------------------------------------------------
// relu and lrn: one data shape in and out, forward_training with an optional workspace.
class EltwiseLikeKernel final : public DnnlKernel {
 public:
  EltwiseLikeKernel(const core::Layer& layer, int64_t batch) : DnnlKernel(layer, batch) {
    memory::desc md = OutMd();
    memory::desc ws_md;
    if (layer.kind == core::LayerKind::kRelu) {
      dnnl::eltwise_forward::desc fd(prop_kind::forward_training, algorithm::eltwise_relu, md, 0.f,
                                     0.f);
      dnnl::eltwise_forward::primitive_desc fpd(fd, eng_);
      fwd_ = dnnl::eltwise_forward(fpd);
      dnnl::eltwise_backward::desc bd(algorithm::eltwise_relu, md, md, 0.f, 0.f);
      bwd_ = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(bd, eng_, fpd));
      ws_md = fpd.workspace_desc();
    } else {
      // oneDNN's ACROSS_CHANNELS LRN is Caffe's: k + alpha / local_size * sum of squares.
      const core::LayerSpec& s = layer.spec;
      const auto alpha = static_cast<float>(s.alpha), beta = static_cast<float>(s.beta),
                 k = static_cast<float>(s.k);
      dnnl::lrn_forward::desc fd(prop_kind::forward_training, algorithm::lrn_across_channels, md,
                                 s.local_size, alpha, beta, k);
      dnnl::lrn_forward::primitive_desc fpd(fd, eng_);
      fwd_ = dnnl::lrn_forward(fpd);
      dnnl::lrn_backward::desc bd(algorithm::lrn_across_channels, md, md, s.local_size, alpha, beta,
                                  k);
      bwd_ = dnnl::lrn_backward(dnnl::lrn_backward::primitive_desc(bd, eng_, fpd));
      ws_md = fpd.workspace_desc();
    }
    if (ws_md.get_size() > 0) workspace_ = memory(ws_md, eng_);
    src_ = Wrap(md), dst_ = Wrap(md), diff_src_ = Wrap(md);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    Bind(src_, bottoms[0]), Bind(dst_, top);
    Args args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    Run(fwd_, args);
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* top_grad,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads[0] == nullptr) return;
    Bind(src_, bottoms[0]), Bind(dst_, top_grad), Bind(diff_src_, bottom_grads[0]);
    Args args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, dst_}, {DNNL_ARG_DIFF_SRC, diff_src_}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    Run(bwd_, args);
  }

 private:
  dnnl::primitive fwd_, bwd_;
  memory src_, dst_, diff_src_, workspace_;
};

// ---------------------------------------------------------------------------------------------
class FcKernel final : public DnnlKernel {
 public:
  FcKernel(const core::Layer& layer, int64_t batch) : DnnlKernel(layer, batch) {
    bias_ = layer.spec.bias;
    const int64_t m = layer.fc_in, n = layer.fc_out;
    memory::desc src = Md({batch, m}, Tag::nc), dst = Md({batch, n}, Tag::nc);
    memory::desc w = Md({n, m}, Tag::oi), b = Md({n}, Tag::x);
    auto fd = bias_ ? dnnl::inner_product_forward::desc(prop_kind::forward_training, src, w, b, dst)
                    : dnnl::inner_product_forward::desc(prop_kind::forward_training, src, w, dst);
    dnnl::inner_product_forward::primitive_desc fpd(fd, eng_);
    fwd_ = dnnl::inner_product_forward(fpd);
    dnnl::inner_product_backward_data::desc dd(src, w, dst);
    bwd_data_ = dnnl::inner_product_backward_data(
        dnnl::inner_product_backward_data::primitive_desc(dd, eng_, fpd));
    auto wd = bias_ ? dnnl::inner_product_backward_weights::desc(src, w, b, dst)
                    : dnnl::inner_product_backward_weights::desc(src, w, dst);
    bwd_weights_ = dnnl::inner_product_backward_weights(
        dnnl::inner_product_backward_weights::primitive_desc(wd, eng_, fpd));
    src_ = Wrap(src), dst_ = Wrap(dst), w_ = Wrap(w), b_ = Wrap(b);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    Bind(src_, bottoms[0]), Bind(dst_, top), Bind(w_, params[0]);
    Args args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_DST, dst_}};
    if (bias_) Bind(b_, params[1]), args[DNNL_ARG_BIAS] = b_;
    Run(fwd_, args);
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* top_grad,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    Bind(src_, bottoms[0]), Bind(dst_, top_grad), Bind(w_, param_grads[0]);
    Args args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, dst_}, {DNNL_ARG_DIFF_WEIGHTS, w_}};
    if (bias_) Bind(b_, param_grads[1]), args[DNNL_ARG_DIFF_BIAS] = b_;
    Run(bwd_weights_, args);
    if (bottom_grads[0] != nullptr) {
      Bind(src_, bottom_grads[0]), Bind(w_, params[0]);
      Run(bwd_data_,
          {{DNNL_ARG_DIFF_SRC, src_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_DIFF_DST, dst_}});
    }
  }

 private:
  bool bias_ = true;
  dnnl::primitive fwd_, bwd_data_, bwd_weights_;
  memory src_, dst_, w_, b_;
};

// ---------------------------------------------------------------------------------------------
// Train: batch statistics (oneDNN) and running averages updated here. Test: the running averages
// through oneDNN's use_global_stats.
class BatchNormKernel final : public DnnlKernel {
 public:
  BatchNormKernel(const core::Layer& layer, int64_t batch) : DnnlKernel(layer, batch) {
    affine_ = layer.spec.bn_affine;
    const int64_t c = layer.out.c;
    const auto eps = static_cast<float>(kBatchNormEps);
    memory::desc md = OutMd(), cmd = Md({c}, Tag::x);
    const auto flags =
        affine_ ? (dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift)
                : dnnl::normalization_flags::none;
    dnnl::batch_normalization_forward::desc fd(prop_kind::forward_training, md, eps, flags);
    dnnl::batch_normalization_forward::primitive_desc fpd(fd, eng_);
    fwd_train_ = dnnl::batch_normalization_forward(fpd);
    dnnl::batch_normalization_forward::desc id(prop_kind::forward_inference, md, eps,
                                               flags | dnnl::normalization_flags::use_global_stats);
    fwd_test_ = dnnl::batch_normalization_forward(
        dnnl::batch_normalization_forward::primitive_desc(id, eng_));
    dnnl::batch_normalization_backward::desc bd(
        affine_ ? prop_kind::backward : prop_kind::backward_data, md, md, eps, flags);
    bwd_ = dnnl::batch_normalization_backward(
        dnnl::batch_normalization_backward::primitive_desc(bd, eng_, fpd));
    if (fpd.workspace_desc().get_size() > 0) workspace_ = memory(fpd.workspace_desc(), eng_);
    mean_.assign(c, 0.f), var_.assign(c, 0.f);
    running_mean_.assign(c, 0.f), running_var_.assign(c, 1.f);
    src_ = Wrap(md), dst_ = Wrap(md), diff_src_ = Wrap(md);
    scale_ = Wrap(cmd), shift_ = Wrap(cmd), diff_scale_ = Wrap(cmd), diff_shift_ = Wrap(cmd);
    mean_mem_ = Wrap(cmd), var_mem_ = Wrap(cmd);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool train) override {
    Bind(src_, bottoms[0]), Bind(dst_, top);
    Bind(mean_mem_, train ? mean_.data() : running_mean_.data());
    Bind(var_mem_, train ? var_.data() : running_var_.data());
    Args args{{DNNL_ARG_SRC, src_},
              {DNNL_ARG_DST, dst_},
              {DNNL_ARG_MEAN, mean_mem_},
              {DNNL_ARG_VARIANCE, var_mem_}};
    if (affine_) {
      Bind(scale_, params[0]), Bind(shift_, params[1]);
      args[DNNL_ARG_SCALE] = scale_, args[DNNL_ARG_SHIFT] = shift_;
    }
    if (train && workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    Run(train ? fwd_train_ : fwd_test_, args);
    if (!train) return;
    const int64_t m = batch_ * layer_.out.h * layer_.out.w;
    const double unbias = m > 1 ? static_cast<double>(m) / static_cast<double>(m - 1) : 1.0;
    const double mom = kBatchNormMomentum;
    for (size_t c = 0; c < mean_.size(); ++c) {
      running_mean_[c] = static_cast<float>(mom * running_mean_[c] + (1 - mom) * mean_[c]);
      running_var_[c] = static_cast<float>(mom * running_var_[c] + (1 - mom) * var_[c] * unbias);
    }
  }
  void Backward(const std::vector<const float*>& bottoms, const float*, const float* top_grad,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    // oneDNN computes diff_src together with the parameter gradients; without a caller buffer it
    // goes to a scratch one.
    float* dx = bottom_grads[0];
    if (dx == nullptr) {
      scratch_.resize(OutCount());
      dx = scratch_.data();
    }
    Bind(src_, bottoms[0]), Bind(dst_, top_grad), Bind(diff_src_, dx);
    Bind(mean_mem_, mean_.data()), Bind(var_mem_, var_.data());
    Args args{{DNNL_ARG_SRC, src_},
              {DNNL_ARG_DIFF_DST, dst_},
              {DNNL_ARG_DIFF_SRC, diff_src_},
              {DNNL_ARG_MEAN, mean_mem_},
              {DNNL_ARG_VARIANCE, var_mem_}};
    if (affine_) {
      Bind(scale_, params[0]), Bind(shift_, params[1]);
      Bind(diff_scale_, param_grads[0]), Bind(diff_shift_, param_grads[1]);
      args[DNNL_ARG_SCALE] = scale_, args[DNNL_ARG_SHIFT] = shift_;
      args[DNNL_ARG_DIFF_SCALE] = diff_scale_, args[DNNL_ARG_DIFF_SHIFT] = diff_shift_;
    }
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    Run(bwd_, args);
  }

 private:
  bool affine_ = true;
  dnnl::primitive fwd_train_, fwd_test_, bwd_;
  memory src_, dst_, diff_src_, scale_, shift_, diff_scale_, diff_shift_, mean_mem_, var_mem_,
      workspace_;
  std::vector<float> mean_, var_, running_mean_, running_var_, scratch_;
};

// ---------------------------------------------------------------------------------------------
// concat (channels) and add: several bottoms of the same batch.
class MultiInputKernel final : public DnnlKernel {
 public:
  MultiInputKernel(const core::Layer& layer, int64_t batch) : DnnlKernel(layer, batch) {
    std::vector<memory::desc> srcs;
    for (size_t i = 0; i < layer.in_shapes.size(); ++i) srcs.push_back(InMd(i));
    memory::desc dst = OutMd();
    if (layer.kind == core::LayerKind::kConcat) {
      prim_ = dnnl::concat(dnnl::concat::primitive_desc(dst, 1, srcs, eng_));
    } else {
      std::vector<float> scales(srcs.size(), 1.f);
      prim_ = dnnl::sum(dnnl::sum::primitive_desc(dst, scales, srcs, eng_));
    }
    for (const memory::desc& md : srcs) srcs_.push_back(Wrap(md));
    dst_ = Wrap(dst);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    Bind(dst_, top);
    Args args{{DNNL_ARG_DST, dst_}};
    for (size_t i = 0; i < srcs_.size(); ++i) {
      Bind(srcs_[i], bottoms[i]);
      args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = srcs_[i];
    }
    Run(prim_, args);
  }
  void Backward(const std::vector<const float*>&, const float*, const float* top_grad,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    // Plain copies: add passes top_grad to every bottom, concat splits it by channel slices.
    const bool concat = layer_.kind == core::LayerKind::kConcat;
    const int64_t plane = layer_.out.h * layer_.out.w, top_per_image = layer_.out.count();
    int64_t offset = 0;  // channel offset of bottom i in the top, in values per image
    for (size_t i = 0; i < bottom_grads.size(); ++i) {
      const int64_t per_image = layer_.in_shapes[i].count();
      if (bottom_grads[i] != nullptr) {
        if (!concat) {
          std::memcpy(bottom_grads[i], top_grad, sizeof(float) * OutCount());
        } else {
          for (int64_t n = 0; n < batch_; ++n) {
            std::memcpy(bottom_grads[i] + n * per_image, top_grad + n * top_per_image + offset,
                        sizeof(float) * per_image);
          }
        }
      }
      offset += layer_.in_shapes[i].c * plane;
    }
  }

 private:
  dnnl::primitive prim_;
  std::vector<memory> srcs_;
  memory dst_;
};

// ---------------------------------------------------------------------------------------------
// Softmax over each image's c*h*w values (oneDNN), cross-entropy and its gradient (plain code).
class SoftmaxLossKernel final : public DnnlKernel {
 public:
  SoftmaxLossKernel(const core::Layer& layer, int64_t batch) : DnnlKernel(layer, batch) {
    memory::desc md = Md({batch, layer.out.count()}, Tag::nc);
    dnnl::softmax_forward::desc fd(prop_kind::forward_training, md, 1);
    fwd_ = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(fd, eng_));
    src_ = Wrap(md), dst_ = Wrap(md);
    labels_.assign(batch, 0);
  }

  void SetLabels(const int32_t* labels) override { labels_.assign(labels, labels + batch_); }
  double loss() const override { return loss_; }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    Bind(src_, bottoms[0]), Bind(dst_, top);
    Run(fwd_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}});
    const int64_t k = layer_.out.count();
    double sum = 0;
    for (int64_t n = 0; n < batch_; ++n) {
      const float p = top[n * k + Label(n)];
      sum -= std::log(std::max(p, FLT_MIN));
    }
    loss_ = sum / static_cast<double>(batch_);
  }
  void Backward(const std::vector<const float*>&, const float* top, const float*,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    float* dx = bottom_grads[0];
    if (dx == nullptr) return;
    const int64_t k = layer_.out.count();
    const float inv = 1.f / static_cast<float>(batch_);
    for (int64_t n = 0; n < batch_; ++n) {
      for (int64_t j = 0; j < k; ++j) dx[n * k + j] = top[n * k + j] * inv;
      dx[n * k + Label(n)] -= inv;
    }
  }

 private:
  int64_t Label(int64_t n) const {
    const int64_t l = labels_[n];
    if (l < 0 || l >= layer_.out.count()) {
      throw KernelError("layer '" + layer_.name + "': label " + std::to_string(l) + " of image " +
                        std::to_string(n) + " is outside [0, " +
                        std::to_string(layer_.out.count()) + ")");
    }
    return l;
  }

  dnnl::primitive fwd_;
  memory src_, dst_;
  std::vector<int32_t> labels_;
  double loss_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Inverted dropout in plain code (oneDNN 2.6 has no dropout primitive).
class DropoutKernel final : public LayerKernel {
 public:
  DropoutKernel(const core::Layer& layer, int64_t batch, uint64_t seed)
      : count_(batch * layer.out.count()),
        ratio_(layer.spec.dropout_ratio),
        rng_(seed),
        mask_(count_, 1.f) {}

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool train) override {
    const float* x = bottoms[0];
    const auto scale = static_cast<float>(1.0 / (1.0 - ratio_));
    for (int64_t i = 0; i < count_; ++i) {
      float m = 1.f;
      if (train) {
        // The reference's draw (24 random bits -> [0, 1)), so that both backends drop the same
        // values for the same seed.
        const double u = static_cast<double>(rng_() >> 40) * 0x1p-24;
        m = u >= ratio_ ? scale : 0.f;
      }
      mask_[i] = m;
      top[i] = x[i] * m;
    }
  }
  void Backward(const std::vector<const float*>&, const float*, const float* top_grad,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    float* dx = bottom_grads[0];
    if (dx == nullptr) return;
    for (int64_t i = 0; i < count_; ++i) dx[i] = top_grad[i] * mask_[i];
  }

 private:
  int64_t count_;
  double ratio_;
  std::mt19937_64 rng_;
  std::vector<float> mask_;  // 0 or 1/(1-p) at train; 1 at test
};

}  // namespace

std::unique_ptr<LayerKernel> MakeCpuKernel(const core::Layer& layer, int64_t batch, uint64_t seed) {
  try {
    switch (layer.kind) {
      case core::LayerKind::kConv:
        return std::make_unique<ConvKernel>(layer, batch);
      case core::LayerKind::kPool:
        return std::make_unique<PoolKernel>(layer, batch);
      case core::LayerKind::kRelu:
      case core::LayerKind::kLrn:
        return std::make_unique<EltwiseLikeKernel>(layer, batch);
      case core::LayerKind::kFc:
        return std::make_unique<FcKernel>(layer, batch);
      case core::LayerKind::kDropout:
        return std::make_unique<DropoutKernel>(layer, batch, seed);
      case core::LayerKind::kConcat:
      case core::LayerKind::kAdd:
        return std::make_unique<MultiInputKernel>(layer, batch);
      case core::LayerKind::kSoftmaxLoss:
        return std::make_unique<SoftmaxLossKernel>(layer, batch);
      case core::LayerKind::kBatchNorm:
        return std::make_unique<BatchNormKernel>(layer, batch);
      default:
        if (auto k = MakeCpuTransformerKernel(layer, batch)) return k;
        break;  // no kernel: refused below
    }
  } catch (const dnnl::error& e) {
    throw KernelError("layer '" + layer.name + "' (" + core::LayerKindName(layer.kind) +
                      "): oneDNN cannot create its primitives: " + e.what());
  }
  ThrowNoKernel(Backend::kCpu, layer);
}

}  // namespace poseidon::kernels
