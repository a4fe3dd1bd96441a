// The CUDA backend's transformer layers (kernels/cuda/cuda_transformer.{h,cc,cu}) against the
// reference backend (the oracle, kernels/reference/reference_transformer.cc), kind by kind.
//
// Every case runs forward (train) and backward on seeded random data (inputs, parameters and top
// gradients uniform in [-1, 1]; token ids uniform in [0, vocab)), copied to the device and back,
// and requires, for the top, every bottom gradient (not the ids') and every parameter gradient:
//   max |cuda - ref| / (max |ref| + 1e-6) < kTol  (kTol = 1e-3: fp32 with TF32 off, sums in
// another order). Gradient buffers start filled with garbage on both backends, so a kernel that
// accumulates instead of overwriting fails. Shapes are chosen to cross the kernels' thread
// counts (rows longer than a 128-thread block, sequences longer than a warp) and include
// repeated token ids (the embedding's scatter-add) and the causal mask. Attention's K bias, whose
// exact gradient is zero, is compared on the scale of the layer's other gradients.
// A small ViT (scenarios/models/fmnist_vit.yaml) runs as a whole Net on both backends.
// Without a CUDA build or without a device every test skips with the reason (ctest label gpu).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "core/model.h"
#include "kernels/kernel.h"
#include "kernels/net.h"
#include "tests/kernels/layer_cases.h"

#ifdef POSEIDON_WITH_CUDA
#include "kernels/cuda/cuda_util.h"
#endif

namespace poseidon::kernels {
namespace {

using namespace ::poseidon::kernels::testing;  // NOLINT: the shared helpers

using core::LayerKind;
using core::LayerSpec;

// [[maybe_unused]]: a build without CUDA skips every comparison.
[[maybe_unused]] constexpr double kTol = 1e-3;
[[maybe_unused]] constexpr float kGarbage = 1e3f;  // what gradient buffers hold before Backward

// The gradient of attention's K bias is zero in exact arithmetic (adding a constant to every key
// adds q . bk to all of a query's scores, which the softmax ignores): both backends compute
// rounding noise, so it is compared on the scale of the other gradients, not its own.
[[maybe_unused]] bool IsKeyBias(const std::string& blob) {
  return blob.size() >= 7 && blob.compare(blob.size() - 7, 7, ".k.bias") == 0;
}
[[maybe_unused]] double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}
// max |got - want| / (scale + 1e-6).
[[maybe_unused]] double ErrOnScale(const std::vector<float>& got, const std::vector<float>& want,
                                   double scale) {
  double diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return diff / (scale + 1e-6);
}

// The reason to skip, or empty when the CUDA backend can run here.
std::string NoDevice() {
#ifndef POSEIDON_WITH_CUDA
  return "no CUDA device: this build is not built with CUDA (POSEIDON_WITH_CUDA)";
#else
  std::string why;
  if (!cuda::CudaDeviceAvailable(&why)) return "no CUDA device: " + why;
  return "";
#endif
}

#define SKIP_WITHOUT_DEVICE()                            \
  do {                                                   \
    const std::string no_device_ = NoDevice();           \
    if (!no_device_.empty()) GTEST_SKIP() << no_device_; \
  } while (false)

// One layer named "l" fed by a model input of the given rank: a sequence [S, D] (rank 2), token
// ids [S] (rank 1, d unused).
core::Layer OnSequence(LayerSpec s, int64_t seq, int64_t d) {
  core::ModelSpec m;
  m.name = "t";
  m.input_rank = 2, m.input_c = 1, m.input_h = seq, m.input_w = d;
  s.name = "l";
  m.layers = {s};
  return *core::Model::Build(m).FindLayer("l");
}
core::Layer OnIds(LayerSpec s, int64_t seq) {
  core::ModelSpec m;
  m.name = "t";
  m.input_rank = 1, m.input_c = 1, m.input_h = 1, m.input_w = seq;
  s.name = "l";
  m.layers = {s};
  return *core::Model::Build(m).FindLayer("l");
}

LayerSpec Embedding(int64_t vocab, int64_t d) {
  LayerSpec s = Kind(LayerKind::kEmbedding);
  s.vocab = vocab, s.num_output = d;
  return s;
}
LayerSpec PosEmbedding(int64_t max_len) {
  LayerSpec s = Kind(LayerKind::kPosEmbedding);
  s.max_len = max_len;
  return s;
}
LayerSpec Linear(int64_t out, bool bias) {
  LayerSpec s = Kind(LayerKind::kLinear);
  s.num_output = out, s.bias = bias;
  return s;
}
LayerSpec Attention(int64_t heads, bool causal, bool bias) {
  LayerSpec s = Kind(LayerKind::kAttention);
  s.heads = heads, s.causal = causal, s.bias = bias;
  return s;
}
LayerSpec PatchEmbed(int64_t d, int64_t patch, bool bias) {
  LayerSpec s = Kind(LayerKind::kPatchEmbed);
  s.num_output = d, s.patch = patch, s.bias = bias;
  return s;
}
LayerSpec TokenPool(bool first) {
  LayerSpec s = Kind(LayerKind::kTokenPool);
  s.pool_first = first;
  return s;
}

// Runs both backends on the same data and compares every output.
void Compare(const core::Layer& layer, int64_t batch, uint64_t seed = 7) {
  SKIP_WITHOUT_DEVICE();
#ifdef POSEIDON_WITH_CUDA
  SCOPED_TRACE(std::string(core::LayerKindName(layer.kind)) + " on " +
               layer.in_shapes[0].ToString() + ", batch " + std::to_string(batch));
  const bool ids = layer.kind == LayerKind::kEmbedding;
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float> > bottoms;
  for (const core::Shape& s : layer.in_shapes) {
    bottoms.push_back(Random(batch * s.count(), rng));
    if (ids) {
      for (float& v : bottoms.back()) {
        v = static_cast<float>(rng() % static_cast<uint64_t>(layer.spec.vocab));
      }
    }
  }
  std::vector<std::vector<float> > params;
  for (const core::ParamBlob& b : layer.blobs) params.push_back(Random(b.count, rng));
  const int64_t out_count = batch * layer.out.count();
  const std::vector<float> top_grad = Random(out_count, rng);

  struct Result {
    std::vector<float> top;
    std::vector<std::vector<float> > bottom_grads, param_grads;
  };
  // On the host for the reference, on the device (copied there and back) for cuda.
  auto run = [&](LayerKernel& k, bool device) {
    Result r;
    std::vector<cuda::DeviceBuffer> buffers;  // keeps every device array alive
    cuda::CudaStream stream;
    auto place = [&](const std::vector<float>& v) -> float* {
      if (!device) return const_cast<float*>(v.data());
      buffers.emplace_back(v.size());
      cuda::CopyToDevice(buffers.back().data(), v.data(), v.size(), stream.get());
      stream.Synchronize();
      return buffers.back().data();
    };
    auto fetch = [&](std::vector<float>& v, const float* p) {
      if (!device) return;
      cuda::CopyToHost(v.data(), p, v.size(), stream.get());
      stream.Synchronize();
    };
    std::vector<const float*> b, p;
    for (const auto& v : bottoms) b.push_back(place(v));
    for (const auto& v : params) p.push_back(place(v));
    r.top.assign(static_cast<size_t>(out_count), kGarbage);
    float* top = place(r.top);
    k.Forward(b, top, p, true);
    fetch(r.top, top);
    std::vector<float*> bg, pg;
    for (const auto& v : bottoms) {
      r.bottom_grads.emplace_back(v.size(), kGarbage);
      bg.push_back(place(r.bottom_grads.back()));
    }
    for (const auto& v : params) {
      r.param_grads.emplace_back(v.size(), kGarbage);
      pg.push_back(place(r.param_grads.back()));
    }
    k.Backward(b, top, place(top_grad), bg, p, pg);
    for (size_t i = 0; i < bg.size(); ++i) fetch(r.bottom_grads[i], bg[i]);
    for (size_t i = 0; i < pg.size(); ++i) fetch(r.param_grads[i], pg[i]);
    return r;
  };
  auto ref_kernel = MakeKernel(Backend::kReference, layer, batch, seed);
  auto cuda_kernel = MakeKernel(Backend::kCuda, layer, batch, seed);
  const Result ref = run(*ref_kernel, false);
  const Result gpu = run(*cuda_kernel, true);
  EXPECT_LE(RelErr(gpu.top, ref.top), kTol) << "forward top";
  for (size_t i = 0; i < ref.bottom_grads.size(); ++i) {
    if (ids) {  // no gradient into the ids: zeroed, as the reference does
      for (float v : gpu.bottom_grads[i]) ASSERT_EQ(v, 0.f) << "ids gradient";
      continue;
    }
    EXPECT_LE(RelErr(gpu.bottom_grads[i], ref.bottom_grads[i]), kTol) << "bottom grad " << i;
  }
  double scale = 0;  // of every parameter gradient, for the K bias's
  for (const auto& g : ref.param_grads) scale = std::max(scale, MaxAbs(g));
  for (size_t i = 0; i < ref.param_grads.size(); ++i) {
    const double err = IsKeyBias(layer.blobs[i].name)
                           ? ErrOnScale(gpu.param_grads[i], ref.param_grads[i], scale)
                           : RelErr(gpu.param_grads[i], ref.param_grads[i]);
    EXPECT_LE(err, kTol) << "param grad " << i << " (" << layer.blobs[i].name << ")";
  }
#else
  (void)layer, (void)batch, (void)seed;
#endif
}

TEST(CudaTransformer, Embedding) {
  Compare(OnIds(Embedding(11, 6), 7), 3);     // 21 ids over 11 rows: repeats (scatter-add)
  Compare(OnIds(Embedding(300, 130), 5), 2);  // rows wider than a block
}

TEST(CudaTransformer, EmbeddingIdOutsideTheVocabularyIsAnError) {
  SKIP_WITHOUT_DEVICE();
#ifdef POSEIDON_WITH_CUDA
  const core::Layer l = OnIds(Embedding(5, 4), 3);
  auto k = MakeKernel(Backend::kCuda, l, 2, 1);
  std::vector<float> host_ids = {0, 1, 2, 3, 5, 4};  // 5 is outside [0, 5)
  cuda::CudaStream stream;
  cuda::DeviceBuffer ids(host_ids.size()), table(20), top(24);
  cuda::CopyToDevice(ids.data(), host_ids.data(), host_ids.size(), stream.get());
  stream.Synchronize();
  try {
    k->Forward({ids.data()}, top.data(), {table.data()}, true);
    FAIL() << "an id outside the vocabulary was accepted";
  } catch (const KernelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'l'"), std::string::npos) << what;
    EXPECT_NE(what.find("token id 5"), std::string::npos) << what;
    EXPECT_NE(what.find("[0, 5)"), std::string::npos) << what;
  }
#endif
}

TEST(CudaTransformer, EmbeddingOnASequenceIsRefused) {
  SKIP_WITHOUT_DEVICE();
  EXPECT_THROW(MakeKernel(Backend::kCuda, OnSequence(Embedding(2, 8), 4, 8), 2, 1), KernelError);
}

TEST(CudaTransformer, PosEmbedding) {
  Compare(OnSequence(PosEmbedding(0), 5, 8), 3);
  Compare(OnSequence(PosEmbedding(9), 5, 8), 4);  // rows past S: zero gradient
}

TEST(CudaTransformer, LayerNorm) {
  Compare(OnSequence(Kind(LayerKind::kLayerNorm), 6, 16), 3);
  Compare(OnSequence(Kind(LayerKind::kLayerNorm), 3, 200), 2);  // D > the block's 128 threads
}

TEST(CudaTransformer, Linear) {
  Compare(OnSequence(Linear(7, true), 5, 12), 3);
  Compare(OnSequence(Linear(9, false), 4, 6), 2);
  Compare(Single(Linear(5, true), 3, 4, 6), 2);  // rank 3: over the last dimension
}

TEST(CudaTransformer, Attention) {
  Compare(OnSequence(Attention(4, false, true), 6, 16), 2);
  Compare(OnSequence(Attention(4, true, true), 6, 16), 2);
  Compare(OnSequence(Attention(1, false, false), 5, 8), 3);
  Compare(OnSequence(Attention(2, true, false), 1, 4), 2);    // one token
  Compare(OnSequence(Attention(2, true, true), 37, 32), 2);   // S longer than a warp
  Compare(OnSequence(Attention(3, false, true), 17, 24), 1);  // fmnist_vit-like
}

TEST(CudaTransformer, Gelu) {
  Compare(OnSequence(Kind(LayerKind::kGelu), 5, 9), 3);
  Compare(Single(Kind(LayerKind::kGelu), 2, 3, 4), 2);
}

TEST(CudaTransformer, Tanh) { Compare(OnSequence(Kind(LayerKind::kTanh), 5, 9), 3); }

TEST(CudaTransformer, Softmax) {
  Compare(OnSequence(Kind(LayerKind::kSoftmax), 4, 10), 2);
  Compare(Single(Kind(LayerKind::kSoftmax), 3, 4, 150), 2);  // rows longer than a block
}

TEST(CudaTransformer, PatchEmbed) {
  Compare(Single(PatchEmbed(5, 4, true), 3, 8, 12), 2);
  Compare(Single(PatchEmbed(8, 7, false), 1, 28, 28), 2);
}

TEST(CudaTransformer, ClsToken) {
  Compare(OnSequence(Kind(LayerKind::kClsToken), 4, 6), 3);
  Compare(OnSequence(Kind(LayerKind::kClsToken), 1, 40), 2);
}

TEST(CudaTransformer, TokenPool) {
  Compare(OnSequence(TokenPool(false), 5, 7), 3);
  Compare(OnSequence(TokenPool(true), 5, 7), 3);
}

// The shipped small ViT as a whole Net on both backends, same seed and data: loss, accuracy and
// every parameter gradient over two passes with a host-side parameter change in between.
TEST(CudaTransformerNet, FmnistVitMatchesTheReference) {
  SKIP_WITHOUT_DEVICE();
#ifdef POSEIDON_WITH_CUDA
  const int64_t batch = 4;
  const core::Model m = core::Model::Build(config::LoadModelFile(
      std::string(POSEIDON_SOURCE_DIR) + "/scenarios/models/fmnist_vit.yaml"));
  Net ref(m, Backend::kReference, batch, 3);
  Net gpu(m, Backend::kCuda, batch, 3);
  ASSERT_EQ(ref.num_params(), gpu.num_params());
  std::mt19937_64 rng(11);
  const std::vector<float> images = Random(batch * m.input_shape().count(), rng);
  std::vector<int32_t> labels;
  for (int64_t k = 0; k < batch; ++k) labels.push_back(static_cast<int32_t>(rng() % 10));
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    const double lr = ref.Forward(images.data(), labels.data(), true);
    const double lg = gpu.Forward(images.data(), labels.data(), true);
    EXPECT_NEAR(lg, lr, 1e-3 * (std::fabs(lr) + 1));
    EXPECT_NEAR(gpu.Accuracy(), ref.Accuracy(), 1.0 / static_cast<double>(batch) + 1e-9);
    ref.Backward();
    gpu.Backward();
    double scale = 0;  // of every parameter gradient, for the K biases'
    for (int i = 0; i < ref.num_blobs(); ++i) {
      const BlobRef a = ref.blob(i);
      scale = std::max(scale, MaxAbs(std::vector<float>(a.grad, a.grad + a.count)));
    }
    for (int i = 0; i < ref.num_blobs(); ++i) {
      const BlobRef a = ref.blob(i), b = gpu.blob(i);
      const std::vector<float> want(a.grad, a.grad + a.count), got(b.grad, b.grad + b.count);
      const double err = IsKeyBias(a.name) ? ErrOnScale(got, want, scale) : RelErr(got, want);
      EXPECT_LE(err, kTol) << a.name;
    }
    for (int64_t j = 0; j < ref.num_params(); ++j) {
      ref.params()[j] -= 0.01f * ref.param_grads()[j];
      gpu.params()[j] -= 0.01f * ref.param_grads()[j];
    }
  }
#endif
}

}  // namespace
}  // namespace poseidon::kernels
