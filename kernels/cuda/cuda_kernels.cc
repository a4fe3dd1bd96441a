// kernels/cuda/cuda_kernels.cc: one class per layer kind on cuDNN/cuBLAS (see cuda_kernels.h).
#include "kernels/cuda/cuda_kernels.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_transformer.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/reference/reference_kernels.h"

namespace poseidon::kernels {
namespace {

using core::Layer;
using core::LayerKind;
using cuda::DeviceBuffer;

constexpr float kOne = 1.f, kZero = 0.f;

int I(int64_t v) { return static_cast<int>(v); }

// RAII for a cuDNN descriptor type.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Desc {
 public:
  Desc() { POSEIDON_CUDNN_CHECK(Create(&d_)); }
  ~Desc() { Destroy(d_); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  T get() const { return d_; }

 private:
  T d_{};
};
using TensorDesc = Desc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                        cudnnDestroyTensorDescriptor>;
using FilterDesc = Desc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                        cudnnDestroyFilterDescriptor>;
using ConvDesc = Desc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                      cudnnDestroyConvolutionDescriptor>;
using ActDesc = Desc<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                     cudnnDestroyActivationDescriptor>;
using LrnDesc = Desc<cudnnLRNDescriptor_t, cudnnCreateLRNDescriptor, cudnnDestroyLRNDescriptor>;

void SetTensor(const TensorDesc& d, int64_t n, int64_t c, int64_t h, int64_t w) {
  POSEIDON_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                  I(n), I(c), I(h), I(w)));
}

// The stream and the library handles bound to it; every kernel has one.
class CudaKernel : public LayerKernel {
 public:
  CudaKernel() {
    std::string why;
    if (!cuda::CudaDeviceAvailable(&why)) throw KernelError("the cuda backend needs a device: " + why);
    POSEIDON_CUDNN_CHECK(cudnnCreate(&cudnn_));
    POSEIDON_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_.get()));
    POSEIDON_CUBLAS_CHECK(cublasCreate(&cublas_));
    POSEIDON_CUBLAS_CHECK(cublasSetStream(cublas_, stream_.get()));
    POSEIDON_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));  // no TF32
  }
  ~CudaKernel() override {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  }
  CudaKernel(const CudaKernel&) = delete;
  CudaKernel& operator=(const CudaKernel&) = delete;

 protected:
  cudaStream_t stream() const { return stream_.get(); }
  void Sync() const { stream_.Synchronize(); }
  void CopyD2D(float* dst, const float* src, int64_t count) const {
    POSEIDON_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, stream()));
  }
  void Fill(float* dst, int64_t count, float value) const {
    std::vector<float> host(static_cast<size_t>(count), value);
    cuda::CopyToDevice(dst, host.data(), host.size(), stream());
    Sync();  // host must outlive the copy
  }

  cuda::CudaStream stream_;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

class ConvKernel : public CudaKernel {
 public:
  ConvKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {
    const core::Shape& x = l.in_shapes[0];
    const core::Shape& y = l.out;
    const auto& s = l.spec;
    SetTensor(x_, n_, x.c, x.h, x.w);
    SetTensor(y_, n_, y.c, y.h, y.w);
    SetTensor(b_, 1, y.c, 1, 1);
    POSEIDON_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                    I(y.c), I(x.c / s.groups), I(s.kernel_h),
                                                    I(s.kernel_w)));
    POSEIDON_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv_.get(), I(s.pad_h), I(s.pad_w), I(s.stride_h), I(s.stride_w), 1, 1,
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    POSEIDON_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_.get(), I(s.groups)));
    POSEIDON_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), CUDNN_FMA_MATH));  // no TF32

    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    POSEIDON_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        cudnn_, x_.get(), w_.get(), conv_.get(), y_.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found,
        fwd));
    fwd_algo_ = Pick(fwd, found, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    POSEIDON_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        cudnn_, w_.get(), y_.get(), conv_.get(), x_.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
        &found, bwd_data));
    bwd_data_algo_ = Pick(bwd_data, found, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    POSEIDON_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        cudnn_, x_.get(), y_.get(), conv_.get(), w_.get(),
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, bwd_filter));
    bwd_filter_algo_ = Pick(bwd_filter, found, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);

    size_t a = 0, b = 0, c = 0;
    POSEIDON_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        cudnn_, x_.get(), w_.get(), conv_.get(), y_.get(), fwd_algo_, &a));
    POSEIDON_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        cudnn_, w_.get(), y_.get(), conv_.get(), x_.get(), bwd_data_algo_, &b));
    POSEIDON_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        cudnn_, x_.get(), y_.get(), conv_.get(), w_.get(), bwd_filter_algo_, &c));
    workspace_ = DeviceBuffer::Bytes(std::max({a, b, c}));
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    POSEIDON_CUDNN_CHECK(cudnnConvolutionForward(cudnn_, &kOne, x_.get(), bottoms[0], w_.get(),
                                                 params[0], conv_.get(), fwd_algo_,
                                                 workspace_.raw(), workspace_.bytes(), &kZero,
                                                 y_.get(), top));
    if (l_.spec.bias) {
      POSEIDON_CUDNN_CHECK(
          cudnnAddTensor(cudnn_, &kOne, b_.get(), params[1], &kOne, y_.get(), top));
    }
    Sync();
  }

  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    POSEIDON_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        cudnn_, &kOne, x_.get(), bottoms[0], y_.get(), dy, conv_.get(), bwd_filter_algo_,
        workspace_.raw(), workspace_.bytes(), &kZero, w_.get(), param_grads[0]));
    if (l_.spec.bias) {
      POSEIDON_CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_, &kOne, y_.get(), dy, &kZero,
                                                        b_.get(), param_grads[1]));
    }
    if (!bottom_grads.empty() && bottom_grads[0] != nullptr) {
      POSEIDON_CUDNN_CHECK(cudnnConvolutionBackwardData(
          cudnn_, &kOne, w_.get(), params[0], y_.get(), dy, conv_.get(), bwd_data_algo_,
          workspace_.raw(), workspace_.bytes(), &kZero, x_.get(), bottom_grads[0]));
    }
    Sync();
  }

 private:
  // The heuristics' best algorithm that is supported, or a safe fallback.
  template <typename Perf, typename Algo>
  static Algo Pick(const Perf* perf, int found, Algo fallback) {
    for (int i = 0; i < found; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS) return perf[i].algo;
    }
    return fallback;
  }

  const Layer l_;
  int64_t n_;
  TensorDesc x_, y_, b_;
  FilterDesc w_;
  ConvDesc conv_;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_{};
  DeviceBuffer workspace_;
};

class PoolKernel : public CudaKernel {
 public:
  PoolKernel(const Layer& l, int64_t batch) : is_max_(l.spec.pool == core::PoolMethod::kMax) {
    const auto& s = l.spec;
    const core::Shape& x = l.in_shapes[0];
    g_ = {batch * x.c, x.h, x.w, l.out.h, l.out.w, s.kernel_h, s.kernel_w,
          s.stride_h, s.stride_w, s.pad_h, s.pad_w};
    if (s.global_pool) g_.kh = x.h, g_.kw = x.w, g_.sh = g_.sw = 1, g_.ph = g_.pw = 0;
    in_count_ = batch * x.count();
    argmax_ = DeviceBuffer::Bytes(static_cast<size_t>(batch * l.out.count()) * sizeof(int32_t));
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    POSEIDON_CUDA_CHECK(cuda::LaunchPoolForward(g_, is_max_, bottoms[0], top, ArgMax(), stream()));
    Sync();
  }

  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    POSEIDON_CUDA_CHECK(cudaMemsetAsync(bottom_grads[0], 0,
                                        static_cast<size_t>(in_count_) * sizeof(float), stream()));
    POSEIDON_CUDA_CHECK(
        cuda::LaunchPoolBackward(g_, is_max_, dy, ArgMax(), bottom_grads[0], stream()));
    Sync();
  }

 private:
  int32_t* ArgMax() const { return static_cast<int32_t*>(argmax_.raw()); }

  bool is_max_;
  cuda::PoolGeometry g_{};
  int64_t in_count_ = 0;
  DeviceBuffer argmax_;  // int32 per output
};

class ReluKernel : public CudaKernel {
 public:
  ReluKernel(const Layer& l, int64_t batch) {
    SetTensor(t_, batch, l.out.c, l.out.h, l.out.w);
    POSEIDON_CUDNN_CHECK(cudnnSetActivationDescriptor(act_.get(), CUDNN_ACTIVATION_RELU,
                                                      CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    POSEIDON_CUDNN_CHECK(cudnnActivationForward(cudnn_, act_.get(), &kOne, t_.get(), bottoms[0],
                                                &kZero, t_.get(), top));
    Sync();
  }
  void Backward(const std::vector<const float*>& bottoms, const float* top, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    POSEIDON_CUDNN_CHECK(cudnnActivationBackward(cudnn_, act_.get(), &kOne, t_.get(), top,
                                                 t_.get(), dy, t_.get(), bottoms[0], &kZero,
                                                 t_.get(), bottom_grads[0]));
    Sync();
  }

 private:
  TensorDesc t_;
  ActDesc act_;
};

class LrnKernel : public CudaKernel {
 public:
  LrnKernel(const Layer& l, int64_t batch) {
    const auto& s = l.spec;
    // cuDNN's window for even sizes is asymmetric; Caffe (and the reference) require odd sizes.
    if (s.local_size % 2 == 0 || s.local_size < 1 || s.local_size > 16) {
      throw KernelError("layer '" + l.name + "': the cuda backend's lrn needs an odd local_size " +
                        "in [1, 16], got " + std::to_string(s.local_size));
    }
    SetTensor(t_, batch, l.out.c, l.out.h, l.out.w);
    POSEIDON_CUDNN_CHECK(
        cudnnSetLRNDescriptor(lrn_.get(), static_cast<unsigned>(s.local_size), s.alpha, s.beta, s.k));
  }
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    POSEIDON_CUDNN_CHECK(cudnnLRNCrossChannelForward(cudnn_, lrn_.get(),
                                                     CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne,
                                                     t_.get(), bottoms[0], &kZero, t_.get(), top));
    Sync();
  }
  void Backward(const std::vector<const float*>& bottoms, const float* top, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    POSEIDON_CUDNN_CHECK(cudnnLRNCrossChannelBackward(
        cudnn_, lrn_.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne, t_.get(), top, t_.get(), dy,
        t_.get(), bottoms[0], &kZero, t_.get(), bottom_grads[0]));
    Sync();
  }

 private:
  TensorDesc t_;
  LrnDesc lrn_;
};

// Row-major y (n x o) = x (n x m) W^T + b with W o x m, written as column-major cuBLAS calls.
class FcKernel : public CudaKernel {
 public:
  FcKernel(const Layer& l, int64_t batch)
      : n_(batch), m_(l.fc_in), o_(l.fc_out), bias_(l.spec.bias), ones_(static_cast<size_t>(batch)) {
    Fill(ones_.data(), n_, 1.f);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool) override {
    POSEIDON_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, I(o_), I(n_), I(m_),
                                      &kOne, params[0], I(m_), bottoms[0], I(m_), &kZero, top,
                                      I(o_)));
    if (bias_) {
      POSEIDON_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, I(o_), I(n_), 1, &kOne,
                                        params[1], I(o_), ones_.data(), 1, &kOne, top, I(o_)));
    }
    Sync();
  }

  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    POSEIDON_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, I(m_), I(o_), I(n_),
                                      &kOne, bottoms[0], I(m_), dy, I(o_), &kZero, param_grads[0],
                                      I(m_)));
    if (bias_) {
      POSEIDON_CUBLAS_CHECK(cublasSgemv(cublas_, CUBLAS_OP_N, I(o_), I(n_), &kOne, dy, I(o_),
                                        ones_.data(), 1, &kZero, param_grads[1], 1));
    }
    if (!bottom_grads.empty() && bottom_grads[0] != nullptr) {
      POSEIDON_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, I(m_), I(n_), I(o_),
                                        &kOne, params[0], I(m_), dy, I(o_), &kZero,
                                        bottom_grads[0], I(m_)));
    }
    Sync();
  }

 private:
  int64_t n_, m_, o_;
  bool bias_;
  DeviceBuffer ones_;  // n ones, for the bias as a rank-1 update and its gradient as a gemv
};

// The mask is drawn on the host exactly as the reference draws it (mt19937_64 seeded with the
// kernel's seed, 24 bits per value) so that both backends drop the same units; it is then copied.
class DropoutKernel : public CudaKernel {
 public:
  DropoutKernel(const Layer& l, int64_t batch, uint64_t seed)
      : count_(batch * l.out.count()),
        ratio_(l.spec.dropout_ratio),
        rng_(seed),
        host_mask_(static_cast<size_t>(count_), 1.f),
        mask_(static_cast<size_t>(count_)) {}

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool train) override {
    const float keep_scale = static_cast<float>(1.0 / (1.0 - ratio_));
    for (float& m : host_mask_) {
      m = 1.f;
      if (train) {
        const double u = static_cast<double>(rng_() >> 40) * 0x1p-24;
        m = u >= ratio_ ? keep_scale : 0.f;
      }
    }
    cuda::CopyToDevice(mask_.data(), host_mask_.data(), host_mask_.size(), stream());
    POSEIDON_CUDA_CHECK(cuda::LaunchMul(top, bottoms[0], mask_.data(), count_, stream()));
    Sync();  // also keeps host_mask_ alive until the copy is done
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    POSEIDON_CUDA_CHECK(cuda::LaunchMul(bottom_grads[0], dy, mask_.data(), count_, stream()));
    Sync();
  }

 private:
  int64_t count_;
  double ratio_;
  std::mt19937_64 rng_;
  std::vector<float> host_mask_;
  DeviceBuffer mask_;  // 0 or 1/(1-p) at train; 1 at test
};

// Along channels: per image, each bottom's c*h*w block goes after the previous ones.
class ConcatKernel : public CudaKernel {
 public:
  ConcatKernel(const Layer& l, int64_t batch) : l_(l), n_(batch) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    int64_t offset = 0;
    for (size_t i = 0; i < bottoms.size(); ++i) {
      const int64_t c = l_.in_shapes[i].count();
      Copy2D(top + offset, l_.out.count(), bottoms[i], c, c);
      offset += c;
    }
    Sync();
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    int64_t offset = 0;
    for (size_t i = 0; i < l_.in_shapes.size(); ++i) {
      const int64_t c = l_.in_shapes[i].count();
      if (i < bottom_grads.size() && bottom_grads[i] != nullptr) {
        Copy2D(bottom_grads[i], c, dy + offset, l_.out.count(), c);
      }
      offset += c;
    }
    Sync();
  }

 private:
  // n_ rows of `width` floats, with the given row pitches (in floats).
  void Copy2D(float* dst, int64_t dpitch, const float* src, int64_t spitch, int64_t width) const {
    POSEIDON_CUDA_CHECK(cudaMemcpy2DAsync(
        dst, static_cast<size_t>(dpitch) * sizeof(float), src,
        static_cast<size_t>(spitch) * sizeof(float), static_cast<size_t>(width) * sizeof(float),
        static_cast<size_t>(n_), cudaMemcpyDeviceToDevice, stream()));
  }

  const Layer l_;
  int64_t n_;
};

class SoftmaxLossKernel : public CudaKernel {
 public:
  SoftmaxLossKernel(const Layer& l, int64_t batch)
      : n_(batch),
        c_(l.out.count()),
        host_labels_(static_cast<size_t>(batch), 0),
        labels_(DeviceBuffer::Bytes(static_cast<size_t>(batch) * sizeof(int32_t))),
        losses_(static_cast<size_t>(batch)),
        host_losses_(static_cast<size_t>(batch)) {
    SetTensor(t_, n_, c_, 1, 1);
  }

  void SetLabels(const int32_t* labels) override {
    for (int64_t k = 0; k < n_; ++k) {
      if (labels[k] < 0 || labels[k] >= c_) {
        throw KernelError("label " + std::to_string(labels[k]) + " outside [0, " +
                          std::to_string(c_) + ")");
      }
    }
    host_labels_.assign(labels, labels + n_);
    cuda::CopyToDeviceBytes(labels_.raw(), host_labels_.data(),
                            host_labels_.size() * sizeof(int32_t), stream());
    Sync();
  }
  double loss() const override { return loss_; }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    POSEIDON_CUDNN_CHECK(cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_ACCURATE,
                                             CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, t_.get(),
                                             bottoms[0], &kZero, t_.get(), top));
    POSEIDON_CUDA_CHECK(cuda::LaunchSoftmaxLoss(top, Labels(), n_, c_, losses_.data(), stream()));
    cuda::CopyToHost(host_losses_.data(), losses_.data(), host_losses_.size(), stream());
    Sync();
    double total = 0;
    for (float v : host_losses_) total += v;
    loss_ = total / static_cast<double>(n_);
  }

  void Backward(const std::vector<const float*>&, const float* top, const float*,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    if (bottom_grads.empty() || bottom_grads[0] == nullptr) return;
    POSEIDON_CUDA_CHECK(
        cuda::LaunchSoftmaxLossGrad(top, Labels(), n_, c_, bottom_grads[0], stream()));
    Sync();
  }

 private:
  const int32_t* Labels() const { return static_cast<const int32_t*>(labels_.raw()); }

  int64_t n_, c_;
  TensorDesc t_;
  std::vector<int32_t> host_labels_;
  DeviceBuffer labels_;  // int32 per image
  DeviceBuffer losses_;  // per image
  std::vector<float> host_losses_;
  double loss_ = 0;
};

// cuDNN spatial batch norm. cuDNN's running variance is the unbiased one and its update is
// running = (1 - f) * running + f * batch, so f = 1 - kBatchNormMomentum gives the reference's.
class BatchNormKernel : public CudaKernel {
 public:
  BatchNormKernel(const Layer& l, int64_t batch)
      : affine_(l.spec.bn_affine),
        n_(batch),
        c_(l.out.c),
        plane_(l.out.h * l.out.w),
        running_mean_(static_cast<size_t>(c_)),
        running_var_(static_cast<size_t>(c_)),
        saved_mean_(static_cast<size_t>(c_)),
        saved_inv_std_(static_cast<size_t>(c_)),
        ones_(static_cast<size_t>(c_)),
        zeros_(static_cast<size_t>(c_)),
        scratch_dscale_(static_cast<size_t>(c_)),
        scratch_dbias_(static_cast<size_t>(c_)),
        scratch_dx_(static_cast<size_t>(batch * l.out.count())) {
    SetTensor(x_, n_, c_, l.out.h, l.out.w);
    SetTensor(bn_, 1, c_, 1, 1);
    Fill(running_mean_.data(), c_, 0.f);
    Fill(running_var_.data(), c_, 1.f);
    Fill(ones_.data(), c_, 1.f);
    Fill(zeros_.data(), c_, 0.f);
  }

  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>& params, bool train) override {
    train_ = train;
    const float* scale = affine_ ? params[0] : ones_.data();
    const float* shift = affine_ ? params[1] : zeros_.data();
    if (train) {
      POSEIDON_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
          cudnn_, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, x_.get(), bottoms[0], x_.get(), top,
          bn_.get(), scale, shift, 1.0 - kBatchNormMomentum, running_mean_.data(),
          running_var_.data(), kBatchNormEps, saved_mean_.data(), saved_inv_std_.data()));
    } else {
      POSEIDON_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          cudnn_, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, x_.get(), bottoms[0], x_.get(), top,
          bn_.get(), scale, shift, running_mean_.data(), running_var_.data(), kBatchNormEps));
    }
    Sync();
  }

  void Backward(const std::vector<const float*>& bottoms, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>& params,
                const std::vector<float*>& param_grads) override {
    float* dx = bottom_grads.empty() ? nullptr : bottom_grads[0];
    float* dscale = affine_ ? param_grads[0] : nullptr;
    float* dbias = affine_ ? param_grads[1] : nullptr;
    if (!train_) {  // fixed statistics: an affine map (cuDNN's backward assumes batch statistics)
      POSEIDON_CUDA_CHECK(cuda::LaunchBatchNormBackwardFixed(
          bottoms[0], dy, affine_ ? params[0] : nullptr, running_mean_.data(),
          running_var_.data(), kBatchNormEps, n_, c_, plane_, dx, dscale, dbias, stream()));
      Sync();
      return;
    }
    POSEIDON_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        cudnn_, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, x_.get(), bottoms[0],
        x_.get(), dy, x_.get(), dx != nullptr ? dx : scratch_dx_.data(), bn_.get(),
        affine_ ? params[0] : ones_.data(), dscale != nullptr ? dscale : scratch_dscale_.data(),
        dbias != nullptr ? dbias : scratch_dbias_.data(), kBatchNormEps, saved_mean_.data(),
        saved_inv_std_.data()));
    Sync();
  }

 private:
  bool affine_;
  int64_t n_, c_, plane_;
  bool train_ = true;
  TensorDesc x_, bn_;
  DeviceBuffer running_mean_, running_var_, saved_mean_, saved_inv_std_;
  DeviceBuffer ones_, zeros_;  // scale and shift without affine parameters
  DeviceBuffer scratch_dscale_, scratch_dbias_, scratch_dx_;  // outputs nobody asked for
};

class AddKernel : public CudaKernel {
 public:
  AddKernel(const Layer& l, int64_t batch) : count_(batch * l.out.count()) {}
  void Forward(const std::vector<const float*>& bottoms, float* top,
               const std::vector<const float*>&, bool) override {
    CopyD2D(top, bottoms[0], count_);
    for (size_t i = 1; i < bottoms.size(); ++i) {
      POSEIDON_CUDA_CHECK(cuda::LaunchAddTo(top, bottoms[i], count_, stream()));
    }
    Sync();
  }
  void Backward(const std::vector<const float*>&, const float*, const float* dy,
                const std::vector<float*>& bottom_grads, const std::vector<const float*>&,
                const std::vector<float*>&) override {
    for (float* dx : bottom_grads) {
      if (dx != nullptr) CopyD2D(dx, dy, count_);
    }
    Sync();
  }

 private:
  int64_t count_;
};

}  // namespace

std::unique_ptr<LayerKernel> MakeCudaKernel(const core::Layer& layer, int64_t batch,
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
    default:  // the transformer kinds (cuda_transformer.h), or no kernel: refused below
      if (auto k = MakeCudaTransformerKernel(layer, batch)) return k;
      break;
  }
  ThrowNoKernel(Backend::kCuda, layer);
}

}  // namespace poseidon::kernels
