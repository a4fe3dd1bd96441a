// Tests of kernels/reference/reference_transformer.cc: hand-computed forwards, every transformer
// layer kind's backward (parameter and bottom gradients) against seeded central finite
// differences, the refusals, and whole small nets (a ViT, and a tied LM head) whose Net gradients
// are checked the same way.
//
// Gradient check (tests/kernels/grad_check.h, shared with reference_test.cc): f = sum_i r_i * top_i with r seeded in
// [-1, 1], accumulated in double; every input and parameter value perturbed by +-eps (1e-2);
// per element |analytic - numeric| <= 2e-2 * max(|a|, |n|) + 2e-3 and over the whole vector
// ||a - n|| / max(||a||, ||n||) <= 1e-2. Backward must overwrite (buffers start at 123).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "core/model.h"
#include "kernels/data/idx.h"
#include "kernels/kernel.h"
#include "kernels/net.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/sgd.h"
#include "tests/kernels/grad_check.h"
#include "tests/kernels/synthetic_training.h"

namespace poseidon::kernels {
namespace {

using core::LayerKind;
using core::LayerSpec;

LayerSpec Spec(const std::string& name, LayerKind kind, std::vector<std::string> bottoms = {}) {
  LayerSpec s;
  s.name = name;
  s.kind = kind;
  s.bottoms = std::move(bottoms);
  return s;
}

// A model on a sequence [s, d] (rank 2), token ids [s] (rank 1, d = 0) or an image (c > 0).
core::Model Build(int64_t c, int64_t s, int64_t d, std::vector<LayerSpec> layers, int rank) {
  core::ModelSpec m;
  m.name = "test";
  m.input_rank = rank;
  if (rank == 3) m.input_c = c, m.input_h = s, m.input_w = d;
  if (rank == 2) m.input_c = 1, m.input_h = s, m.input_w = d;
  if (rank == 1) m.input_c = 1, m.input_h = 1, m.input_w = s;
  m.layers = std::move(layers);
  return core::Model::Build(m);
}
core::Model Seq(int64_t s, int64_t d, std::vector<LayerSpec> layers) {
  return Build(1, s, d, std::move(layers), 2);
}

using gradcheck::CheckGradients;
using gradcheck::EndsWith;
using gradcheck::ExpectClose;
using gradcheck::GradCheck;
using gradcheck::Random;
using gradcheck::Uniform;

// Runs one forward of a single-layer kernel.
std::vector<float> Fwd(const core::Layer& l, int64_t batch, const std::vector<float>& x,
                       const std::vector<std::vector<float>>& params) {
  auto k = MakeReferenceKernel(l, batch, 1);
  std::vector<const float*> p;
  for (const auto& v : params) p.push_back(v.data());
  std::vector<float> top(static_cast<size_t>(batch * l.out.count()));
  k->Forward({x.data()}, top.data(), p, true);
  return top;
}

// ---- hand-computed forwards -------------------------------------------------------------------

TEST(TransformerForward, GeluIsTheErfForm) {
  core::Model m = Seq(1, 3, {Spec("g", LayerKind::kGelu)});
  const std::vector<float> y = Fwd(m.layers()[0], 1, {-1.f, 0.f, 2.f}, {});
  // x * Phi(x): Phi(-1) = 0.158655, Phi(2) = 0.977250 (the tanh form gives 1.95460 for 2).
  EXPECT_NEAR(y[0], -0.158655, 1e-5);
  EXPECT_EQ(y[1], 0.f);
  EXPECT_NEAR(y[2], 1.954500, 1e-5);
}

TEST(TransformerForward, LayerNormUsesBiasedVarianceAndEps) {
  core::Model m = Seq(1, 4, {Spec("ln", LayerKind::kLayerNorm)});
  const std::vector<float> y =
      Fwd(m.layers()[0], 1, {1.f, 2.f, 3.f, 4.f}, {{1.f, 1.f, 2.f, 1.f}, {0.f, 0.f, 0.f, 10.f}});
  // mean 2.5, biased variance 1.25: xhat = (x - 2.5) / sqrt(1.25 + 1e-5).
  const double rstd = 1.0 / std::sqrt(1.25 + 1e-5);
  EXPECT_NEAR(y[0], -1.5 * rstd, 1e-6);
  EXPECT_NEAR(y[2], 2 * 0.5 * rstd, 1e-6);
  EXPECT_NEAR(y[3], 1.5 * rstd + 10, 1e-5);
}

TEST(TransformerForward, SoftmaxOverTheLastDimension) {
  core::Model m = Seq(2, 2, {Spec("sm", LayerKind::kSoftmax)});
  const std::vector<float> y = Fwd(m.layers()[0], 1, {0.f, 0.f, 0.f, std::log(3.f)}, {});
  EXPECT_NEAR(y[0], 0.5, 1e-6);
  EXPECT_NEAR(y[1], 0.5, 1e-6);
  EXPECT_NEAR(y[2], 0.25, 1e-6);
  EXPECT_NEAR(y[3], 0.75, 1e-6);
}

TEST(TransformerForward, PatchEmbedTokensAreRowMajorPatches) {
  LayerSpec s = Spec("p", LayerKind::kPatchEmbed);
  s.num_output = 1, s.patch = 2;
  core::Model m = Build(1, 4, 6, {s}, 3);  // 2 x 3 patches
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i);
  // Weight picks the top-left pixel of each patch; bias 0.5.
  const std::vector<float> y = Fwd(m.layers()[0], 1, x, {{1.f, 0.f, 0.f, 0.f}, {0.5f}});
  ASSERT_EQ(y.size(), 6u);
  const float want[] = {0, 2, 4, 12, 14, 16};
  for (int t = 0; t < 6; ++t) EXPECT_EQ(y[static_cast<size_t>(t)], want[t] + 0.5f) << t;
}

TEST(TransformerForward, ClsTokenIsRowZeroAndPoolFirstReadsIt) {
  LayerSpec pool = Spec("pool", LayerKind::kTokenPool, {"cls"});
  pool.pool_first = true;
  core::Model m = Seq(2, 2, {Spec("cls", LayerKind::kClsToken), pool});
  const std::vector<float> y = Fwd(m.layers()[0], 1, {1.f, 2.f, 3.f, 4.f}, {{9.f, 8.f}});
  EXPECT_EQ(y, (std::vector<float>{9.f, 8.f, 1.f, 2.f, 3.f, 4.f}));
  EXPECT_EQ(Fwd(m.layers()[1], 1, y, {}), (std::vector<float>{9.f, 8.f}));
  core::Model mean = Seq(2, 2, {Spec("mean", LayerKind::kTokenPool)});
  EXPECT_EQ(Fwd(mean.layers()[0], 1, {1.f, 2.f, 3.f, 6.f}, {}), (std::vector<float>{2.f, 4.f}));
}

TEST(TransformerForward, CausalAttentionFirstTokenSeesOnlyItself) {
  // With identity projections and no bias, the first output row is v_0 = x_0 whatever the
  // other tokens are; without the mask it mixes them.
  LayerSpec s = Spec("a", LayerKind::kAttention);
  s.heads = 1, s.bias = false, s.causal = true;
  core::Model m = Seq(3, 2, {s});
  const std::vector<float> eye{1.f, 0.f, 0.f, 1.f};
  const std::vector<float> x{0.3f, -0.2f, 5.f, 1.f, -2.f, 4.f};
  std::vector<float> y = Fwd(m.layers()[0], 1, x, {eye, eye, eye, eye});
  EXPECT_NEAR(y[0], 0.3f, 1e-6);
  EXPECT_NEAR(y[1], -0.2f, 1e-6);
  s.causal = false;
  core::Model full = Seq(3, 2, {s});
  y = Fwd(full.layers()[0], 1, x, {eye, eye, eye, eye});
  EXPECT_GT(std::fabs(y[0] - 0.3f), 0.1f);
}

TEST(TransformerForward, EmbeddingLooksUpRoundedIds) {
  LayerSpec s = Spec("emb", LayerKind::kEmbedding);
  s.vocab = 3, s.num_output = 2;
  core::Model m = Build(1, 2, 0, {s}, 1);
  const std::vector<float> y = Fwd(m.layers()[0], 1, {2.f, 0.9999f}, {{0, 1, 10, 11, 20, 21}});
  EXPECT_EQ(y, (std::vector<float>{20, 21, 10, 11}));
}

// ---- refusals --------------------------------------------------------------------------------

TEST(TransformerErrors, EmbeddingIdOutsideTheVocabularyNamesLayerIdAndVocab) {
  LayerSpec s = Spec("tok", LayerKind::kEmbedding);
  s.vocab = 5, s.num_output = 2;
  core::Model m = Build(1, 2, 0, {s}, 1);
  try {
    Fwd(m.layers()[0], 1, {1.f, 7.f}, {std::vector<float>(10, 0.f)});
    FAIL() << "no error for id 7 in a vocabulary of 5";
  } catch (const KernelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'tok'"), std::string::npos) << what;
    EXPECT_NE(what.find("7"), std::string::npos) << what;
    EXPECT_NE(what.find("[0, 5)"), std::string::npos) << what;
  }
  EXPECT_THROW(Fwd(m.layers()[0], 1, {-1.f, 0.f}, {std::vector<float>(10, 0.f)}), KernelError);
}

TEST(TransformerErrors, EmbeddingOnASequenceIsRefusedClearly) {
  LayerSpec s = Spec("types", LayerKind::kEmbedding);
  s.vocab = 2, s.num_output = 4;
  core::Model m = Seq(3, 4, {s});
  try {
    MakeReferenceKernel(m.layers()[0], 1, 1);
    FAIL() << "the [S, D] form of embedding was accepted";
  } catch (const KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("second input of ids"), std::string::npos) << e.what();
  }
}

// ---- gradients -------------------------------------------------------------------------------

TEST(TransformerGrad, Embedding) {
  LayerSpec s = Spec("emb", LayerKind::kEmbedding);
  s.vocab = 5, s.num_output = 3;
  core::Model m = Build(1, 4, 0, {s}, 1);
  // Ids repeat (0 and 3 twice) so that the scatter must add; 2 is never used.
  CheckGradients(
      {.layer = &m.layers()[0], .batch = 2, .seed = 21, .ids = {0, 3, 1, 3, 4, 0, 1, 0}});
}

TEST(TransformerGrad, PosEmbeddingShorterThanTheTable) {
  LayerSpec s = Spec("pos", LayerKind::kPosEmbedding);
  s.max_len = 6;
  core::Model m = Seq(4, 3, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 3, .seed = 22});
}

TEST(TransformerGrad, LayerNorm) {
  core::Model m = Seq(3, 5, {Spec("ln", LayerKind::kLayerNorm)});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 23});
}

TEST(TransformerGrad, LinearWithAndWithoutBias) {
  LayerSpec s = Spec("fc", LayerKind::kLinear);
  s.num_output = 4;
  core::Model m = Seq(3, 5, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 24});
  s.bias = false, s.num_output = 2;
  core::Model nb = Seq(2, 3, {s});
  CheckGradients({.layer = &nb.layers()[0], .batch = 3, .seed = 25});
}

TEST(TransformerGrad, AttentionSingleHead) {
  LayerSpec s = Spec("attn", LayerKind::kAttention);
  s.heads = 1;
  core::Model m = Seq(3, 4, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 26});
}

TEST(TransformerGrad, AttentionMultiHead) {
  LayerSpec s = Spec("attn", LayerKind::kAttention);
  s.heads = 3;
  core::Model m = Seq(4, 6, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 27});
}

TEST(TransformerGrad, AttentionCausalMultiHeadNoBias) {
  LayerSpec s = Spec("attn", LayerKind::kAttention);
  s.heads = 2, s.causal = true, s.bias = false;
  core::Model m = Seq(4, 4, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 28});
}

TEST(TransformerGrad, GeluTanhSoftmax) {
  for (LayerKind k : {LayerKind::kGelu, LayerKind::kTanh, LayerKind::kSoftmax}) {
    core::Model m = Seq(3, 4, {Spec(core::LayerKindName(k), k)});
    CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 29});
  }
}

TEST(TransformerGrad, PatchEmbed) {
  LayerSpec s = Spec("patch", LayerKind::kPatchEmbed);
  s.num_output = 3, s.patch = 2;
  core::Model m = Build(2, 4, 6, {s}, 3);
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 30});
}

TEST(TransformerGrad, ClsToken) {
  core::Model m = Seq(3, 4, {Spec("cls", LayerKind::kClsToken)});
  CheckGradients({.layer = &m.layers()[0], .batch = 3, .seed = 31});
}

TEST(TransformerGrad, TokenPoolMeanAndFirst) {
  LayerSpec s = Spec("pool", LayerKind::kTokenPool);
  core::Model m = Seq(4, 3, {s});
  CheckGradients({.layer = &m.layers()[0], .batch = 2, .seed = 32});
  s.pool_first = true;
  core::Model f = Seq(4, 3, {s});
  CheckGradients({.layer = &f.layers()[0], .batch = 2, .seed = 33});
}

// ---- whole nets ------------------------------------------------------------------------------

// Net::Backward's gradient of every parameter against central differences of Net::Forward's
// loss (perturbing net.params() in place).
void CheckNetGradients(const core::Model& model, const std::vector<float>& input,
                       const std::vector<int32_t>& labels, int64_t batch) {
  Net net(model, Backend::kReference, batch, /*seed=*/5);
  // Parameters of order 1 (the init's 0.02-scale tables would make a layer norm of the class
  // token nearly singular at the finite-difference step): gammas in [0.5, 1.5], the rest in
  // [-0.5, 0.5].
  std::mt19937_64 rng(9);
  for (int b = 0; b < net.num_blobs(); ++b) {
    const BlobRef r = net.blob(b);
    const bool gamma = EndsWith(r.name, ".gamma");
    for (int64_t i = 0; i < r.count; ++i) {
      r.value[i] = gamma ? Uniform(rng, 0.5, 1.5) : Uniform(rng, -0.5, 0.5);
    }
  }
  net.Forward(input.data(), labels.data(), true);
  net.Backward();
  const std::vector<float> analytic(net.param_grads(), net.param_grads() + net.num_params());
  std::vector<double> numeric(analytic.size());
  const double eps = 1e-2;
  float* w = net.params();
  for (int64_t i = 0; i < net.num_params(); ++i) {
    const float keep = w[i];
    w[i] = static_cast<float>(keep + eps);
    const double plus = net.Forward(input.data(), labels.data(), true);
    w[i] = static_cast<float>(keep - eps);
    const double minus = net.Forward(input.data(), labels.data(), true);
    w[i] = keep;
    numeric[static_cast<size_t>(i)] = (plus - minus) / (2 * eps);
  }
  for (int b = 0; b < net.num_blobs(); ++b) {
    const BlobRef r = net.blob(b);
    const int64_t off = r.value - net.params();
    ExpectClose(std::vector<float>(analytic.begin() + off, analytic.begin() + off + r.count),
                std::vector<double>(numeric.begin() + off, numeric.begin() + off + r.count),
                r.name);
  }
}

TEST(TransformerNet, TinyVitGradients) {
  // fmnist_vit's structure at toy size: 4x4 image, patch 2 -> 4 tokens + class token, D 4.
  std::vector<LayerSpec> ls;
  LayerSpec patch = Spec("patch", LayerKind::kPatchEmbed);
  patch.num_output = 4, patch.patch = 2;
  ls.push_back(patch);
  ls.push_back(Spec("cls", LayerKind::kClsToken));
  ls.push_back(Spec("pos", LayerKind::kPosEmbedding));
  ls.push_back(Spec("ln1", LayerKind::kLayerNorm));
  LayerSpec attn = Spec("attn", LayerKind::kAttention);
  attn.heads = 2;
  ls.push_back(attn);
  ls.push_back(Spec("res1", LayerKind::kAdd, {"pos", "attn"}));
  ls.push_back(Spec("ln2", LayerKind::kLayerNorm));
  LayerSpec fc1 = Spec("fc1", LayerKind::kLinear);
  fc1.num_output = 6;
  ls.push_back(fc1);
  ls.push_back(Spec("gelu", LayerKind::kGelu));
  LayerSpec fc2 = Spec("fc2", LayerKind::kLinear);
  fc2.num_output = 4;
  ls.push_back(fc2);
  ls.push_back(Spec("res2", LayerKind::kAdd, {"res1", "fc2"}));
  LayerSpec pool = Spec("pool", LayerKind::kTokenPool);
  pool.pool_first = true;
  ls.push_back(pool);
  LayerSpec head = Spec("head", LayerKind::kFc);
  head.num_output = 3;
  ls.push_back(head);
  ls.push_back(Spec("loss", LayerKind::kSoftmaxLoss));
  core::Model m = Build(1, 4, 4, ls, 3);
  std::mt19937_64 rng(41);
  CheckNetGradients(m, Random(rng, 2 * 16), {0, 2}, 2);
}

TEST(TransformerNet, TiedHeadGetsBothGradients) {
  // GPT-2's tied LM head: the table's gradient is the lookup's plus the head's.
  LayerSpec emb = Spec("emb", LayerKind::kEmbedding);
  emb.vocab = 5, emb.num_output = 3;
  LayerSpec head = Spec("head", LayerKind::kLinear);
  head.num_output = 5, head.tie = "emb", head.bias = true;
  LayerSpec pool = Spec("pool", LayerKind::kTokenPool);
  core::Model m = Build(1, 3, 0, {emb, head, pool, Spec("loss", LayerKind::kSoftmaxLoss)}, 1);
  ASSERT_EQ(m.layers()[1].tied_to, 0);
  Net net(m, Backend::kReference, 2, 1);
  EXPECT_EQ(net.num_blobs(), 2);  // the table and the head's bias
  CheckNetGradients(m, {0, 4, 4, 2, 1, 0}, {4, 1}, 2);
}

// Transformer-XL's attention (memory, relative positions) is priced by the simulator only: a
// live Net refuses it, naming the layer and the keys, before it allocates anything.
TEST(TransformerNet, AttentionWithMemoryOrRelativePositionsIsRefusedByName) {
  for (const bool relative : {false, true}) {
    LayerSpec attn = Spec("xl_attn", LayerKind::kAttention);
    attn.heads = 2;
    attn.memory = relative ? 0 : 4;
    attn.relative = relative;
    LayerSpec pool = Spec("pool", LayerKind::kTokenPool);
    core::Model m = Seq(3, 4, {attn, pool, Spec("loss", LayerKind::kSoftmaxLoss)});
    try {
      Net net(m, Backend::kReference, 2, 1);
      ADD_FAILURE() << "expected a KernelError";
    } catch (const KernelError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("layer 'xl_attn'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("'memory' or 'relative'"), std::string::npos) << msg;
    }
  }
}

// A linear layer with its own weight has sufficient factors over its batch x tokens rows
// (core::SfbFactorRows); rebuilding its weight gradient from them gives Backward's.
TEST(TransformerNet, LinearSufficientFactorsRebuildItsGradient) {
  LayerSpec fc = Spec("fc", LayerKind::kLinear);
  fc.num_output = 5;
  LayerSpec pool = Spec("pool", LayerKind::kTokenPool);
  core::Model m = Seq(3, 4, {fc, pool, Spec("loss", LayerKind::kSoftmaxLoss)});
  Net net(m, Backend::kReference, 2, 1);
  std::mt19937_64 rng(4);
  const std::vector<float> x = Random(rng, 2 * 12);
  const std::vector<int32_t> labels{1, 4};
  net.Forward(x.data(), labels.data(), true);
  net.Backward();
  const FcFactors f = net.FactorsOf(0);
  EXPECT_EQ(f.k, 6);  // 2 images x 3 tokens
  EXPECT_EQ(f.m, 4);
  EXPECT_EQ(f.n, 5);
  std::vector<float> dw(20);
  RebuildFcGradient(f.top_grad, f.bottom, f.k, f.m, f.n, dw.data());
  const BlobRef w = net.blob(0);
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(dw[static_cast<size_t>(i)], w.grad[i], 1e-6) << i;
}

// fmnist_vit (the shipped model file) trains on the cpu backend: over 40 SGD steps of 16
// synthetic 28x28 images (kernels/data/idx.h: a fixed pattern per class plus noise) the mean loss
// of the last 10 steps is well under that of the first 10, and nothing diverges.
TEST(TransformerTraining, FmnistVitLossDecreasesOnCpu) {
#ifndef POSEIDON_HAVE_DNNL
  GTEST_SKIP() << "built without oneDNN";
#else
  const core::Model m = core::Model::Build(
      config::LoadModelFile(POSEIDON_SOURCE_DIR "/scenarios/models/fmnist_vit.yaml"));
  Net net(m, Backend::kCpu, /*batch=*/16, 1);
  const testing::LossEnds e = testing::TrainOnSyntheticData(net, 16, /*iterations=*/40, 0.02);
  EXPECT_LT(e.last, 0.6 * e.first) << "first " << e.first << " last " << e.last;
#endif
}

}  // namespace
}  // namespace poseidon::kernels
