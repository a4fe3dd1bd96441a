// The oneDNN CPU backend's transformer layers against the reference backend (the oracle), and
// fmnist_vit as a whole net on both.
//
// Layer cases (tests/kernels/layer_cases.h): forward (train) and backward on seeded random data
// (inputs, parameters and top gradients uniform in [-1, 1]; an embedding gets integer ids in
// [0, vocab)), and for the top, every bottom gradient and every parameter gradient
//   max |cpu - ref| / (max |ref| + 1e-6) < kTol   (kTol = 1e-4, as tests/kernels/cpu_test.cc).
// The whole net: the loss and every parameter gradient of one forward/backward of fmnist_vit's
// structure, built here (this test links no config/ to read the YAML): 28x28 -> patch 7, D 64, a
// class token, positions, 4 pre-LN blocks of 4 heads and a 128-wide GELU MLP, final norm, head
// (batch 4, inputs in [0, 1]), under the same bound per blob, 1e-3 (a deeper chain of fp32 sums
// in different orders).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/model.h"
#include "kernels/kernel.h"
#include "kernels/net.h"
#include "tests/kernels/layer_cases.h"

#ifdef POSEIDON_HAVE_DNNL
#include "kernels/cpu/cpu_kernels.h"
#endif

namespace poseidon::kernels {
namespace {

using namespace ::poseidon::kernels::testing;  // NOLINT: the shared layer cases

using core::LayerKind;

[[maybe_unused]] constexpr double kTol = 1e-4;

bool IsKeyBias(const std::string& name) {
  const std::string tail = ".k.bias";
  return name.size() >= tail.size() &&
         name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

// Attention's key bias adds q . b_k to every score of a query, which the softmax cancels: its
// gradient is exactly 0, and both backends give rounding noise that a relative comparison would
// compare. It must instead be negligible next to the key weight's gradient.
[[maybe_unused]] void ExpectKeyBiasGradZero(const std::vector<float>& got,
                                            const std::vector<float>& k_weight_grad,
                                            const std::string& name) {
  float bias = 0, weight = 0;
  for (float v : got) bias = std::max(bias, std::fabs(v));
  for (float v : k_weight_grad) weight = std::max(weight, std::fabs(v));
  EXPECT_GT(weight, 0.f) << name;
  EXPECT_LE(bias, 1e-4 * weight) << name << " (its exact value is 0)";
}

void Compare(const core::Layer& layer, int64_t batch, uint64_t seed = 7) {
#ifndef POSEIDON_HAVE_DNNL
  (void)layer, (void)batch, (void)seed;
  GTEST_SKIP() << "built without oneDNN";
#else
  SCOPED_TRACE(std::string(core::LayerKindName(layer.kind)) + " " + layer.out.ToString() +
               " batch " + std::to_string(batch));
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float> > bottoms;
  for (const core::Shape& s : layer.in_shapes) {
    bottoms.push_back(Random(batch * s.count(), rng));
    if (layer.kind == LayerKind::kEmbedding) {
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
  auto run = [&](LayerKernel& k) {
    Result r;
    std::vector<const float*> b, p;
    for (const auto& v : bottoms) b.push_back(v.data());
    for (const auto& v : params) p.push_back(v.data());
    r.top.assign(static_cast<size_t>(out_count), 0.f);
    k.Forward(b, r.top.data(), p, true);
    std::vector<float*> bg, pg;
    for (const auto& v : bottoms) {
      r.bottom_grads.emplace_back(v.size(), 123.f);  // overwritten, not summed
      bg.push_back(r.bottom_grads.back().data());
    }
    for (const auto& v : params) {
      r.param_grads.emplace_back(v.size(), 123.f);
      pg.push_back(r.param_grads.back().data());
    }
    k.Backward(b, r.top.data(), top_grad.data(), bg, p, pg);
    return r;
  };
  auto ref_kernel = MakeKernel(Backend::kReference, layer, batch, seed);
  auto cpu_kernel = MakeCpuKernel(layer, batch, seed);
  const Result ref = run(*ref_kernel);
  const Result cpu = run(*cpu_kernel);
  EXPECT_LE(RelErr(cpu.top, ref.top), kTol) << "forward top";
  for (size_t i = 0; i < ref.bottom_grads.size(); ++i) {
    EXPECT_LE(RelErr(cpu.bottom_grads[i], ref.bottom_grads[i]), kTol) << "bottom grad " << i;
  }
  for (size_t i = 0; i < ref.param_grads.size(); ++i) {
    if (IsKeyBias(layer.blobs[i].name)) {
      ExpectKeyBiasGradZero(cpu.param_grads[i], ref.param_grads[i - 1], layer.blobs[i].name);
      continue;
    }
    EXPECT_LE(RelErr(cpu.param_grads[i], ref.param_grads[i]), kTol)
        << "param grad " << layer.blobs[i].name;
  }
#endif
}

const CompareFn kCompare = [](const core::Layer& l, int64_t batch) { Compare(l, batch); };

TEST(CpuTransformerKernels, Linear) { LinearCases(kCompare); }
TEST(CpuTransformerKernels, Attention) { AttentionCases(kCompare); }
TEST(CpuTransformerKernels, LayerNorm) { LayerNormCases(kCompare); }
TEST(CpuTransformerKernels, GeluTanhSoftmax) { PointwiseCases(kCompare); }
TEST(CpuTransformerKernels, PatchEmbed) { PatchEmbedCases(kCompare); }
TEST(CpuTransformerKernels, PosEmbeddingClsTokenTokenPoolEmbedding) { SequenceCopyCases(kCompare); }

TEST(CpuTransformerKernels, EmbeddingIdOutsideTheVocabularyIsAKernelError) {
#ifndef POSEIDON_HAVE_DNNL
  GTEST_SKIP() << "built without oneDNN";
#else
  core::LayerSpec s = Kind(LayerKind::kEmbedding);
  s.vocab = 4, s.num_output = 2;
  const core::Layer l = SingleIds(s, 2);
  auto k = MakeCpuKernel(l, 1, 1);
  const std::vector<float> ids{1.f, 4.f}, table(8, 0.f);
  std::vector<float> top(4);
  EXPECT_THROW(k->Forward({ids.data()}, top.data(), {table.data()}, true), KernelError);
#endif
}

core::Model FmnistVit() {
  core::ModelSpec m;
  m.name = "fmnist_vit";
  m.input_c = 1, m.input_h = 28, m.input_w = 28;
  auto add = [&](const std::string& name, LayerKind kind, std::vector<std::string> bottoms = {}) {
    core::LayerSpec s;
    s.name = name, s.kind = kind, s.bottoms = std::move(bottoms);
    m.layers.push_back(s);
    return &m.layers.back();
  };
  core::LayerSpec* patch = add("patch", LayerKind::kPatchEmbed);
  patch->num_output = 64, patch->patch = 7;
  add("cls", LayerKind::kClsToken);
  add("pos", LayerKind::kPosEmbedding);
  std::string prev = "pos";
  for (int i = 0; i < 4; ++i) {
    const std::string b = "b" + std::to_string(i);
    add(b + "_ln1", LayerKind::kLayerNorm, {prev});
    add(b + "_attn", LayerKind::kAttention)->heads = 4;
    add(b + "_res1", LayerKind::kAdd, {prev, b + "_attn"});
    add(b + "_ln2", LayerKind::kLayerNorm);
    add(b + "_fc1", LayerKind::kLinear)->num_output = 128;
    add(b + "_gelu", LayerKind::kGelu);
    add(b + "_fc2", LayerKind::kLinear)->num_output = 64;
    add(b + "_res2", LayerKind::kAdd, {b + "_res1", b + "_fc2"});
    prev = b + "_res2";
  }
  add("ln", LayerKind::kLayerNorm);
  add("pool_cls", LayerKind::kTokenPool)->pool_first = true;
  add("head", LayerKind::kFc)->num_output = 10;
  add("loss", LayerKind::kSoftmaxLoss);
  return core::Model::Build(m);
}

TEST(CpuTransformerNet, FmnistVitMatchesTheReference) {
#ifndef POSEIDON_HAVE_DNNL
  GTEST_SKIP() << "built without oneDNN";
#else
  const core::Model m = FmnistVit();
  ASSERT_EQ(m.total_params(), 139018);  // scenarios/models/fmnist_vit.yaml's count
  const int64_t batch = 4;
  std::mt19937_64 rng(3);
  std::vector<float> images(static_cast<size_t>(batch * m.input_shape().count()));
  for (float& v : images) v = static_cast<float>((rng() >> 11) * 0x1p-53);
  const std::vector<int32_t> labels{3, 0, 9, 5};
  Net ref(m, Backend::kReference, batch, 1), cpu(m, Backend::kCpu, batch, 1);
  const double ref_loss = ref.Forward(images.data(), labels.data(), true);
  const double cpu_loss = cpu.Forward(images.data(), labels.data(), true);
  EXPECT_NEAR(cpu_loss, ref_loss, 1e-4 * (1 + std::fabs(ref_loss)));
  ref.Backward();
  cpu.Backward();
  ASSERT_EQ(cpu.num_blobs(), ref.num_blobs());
  for (int b = 0; b < ref.num_blobs(); ++b) {
    const BlobRef r = ref.blob(b), c = cpu.blob(b);
    if (IsKeyBias(r.name)) {
      const BlobRef w = ref.blob(b - 1);
      ExpectKeyBiasGradZero(std::vector<float>(c.grad, c.grad + c.count),
                            std::vector<float>(w.grad, w.grad + w.count), r.name);
      continue;
    }
    EXPECT_LE(RelErr(std::vector<float>(c.grad, c.grad + c.count),
                     std::vector<float>(r.grad, r.grad + r.count)),
              1e-3)
        << r.name;
  }
#endif
}

// A tied LM head (embedding table read by a linear layer) gives the same loss and table
// gradient on both backends.
TEST(CpuTransformerNet, TiedHeadMatchesTheReference) {
#ifndef POSEIDON_HAVE_DNNL
  GTEST_SKIP() << "built without oneDNN";
#else
  core::ModelSpec spec;
  spec.name = "tied";
  spec.input_rank = 1, spec.input_c = 1, spec.input_h = 1, spec.input_w = 5;
  core::LayerSpec emb = Kind(LayerKind::kEmbedding);
  emb.name = "emb", emb.vocab = 9, emb.num_output = 6;
  core::LayerSpec head = Kind(LayerKind::kLinear);
  head.name = "head", head.num_output = 9, head.tie = "emb";
  core::LayerSpec pool = Kind(LayerKind::kTokenPool);
  pool.name = "pool";
  core::LayerSpec loss = Kind(LayerKind::kSoftmaxLoss);
  loss.name = "loss";
  spec.layers = {emb, head, pool, loss};
  const core::Model m = core::Model::Build(spec);
  const std::vector<float> ids{0, 8, 3, 3, 1, 7, 2, 5, 5, 0};
  const std::vector<int32_t> labels{4, 8};
  Net ref(m, Backend::kReference, 2, 1), cpu(m, Backend::kCpu, 2, 1);
  const double ref_loss = ref.Forward(ids.data(), labels.data(), true);
  EXPECT_NEAR(cpu.Forward(ids.data(), labels.data(), true), ref_loss, 1e-5);
  ref.Backward();
  cpu.Backward();
  ExpectGradsMatch(cpu, ref, kTol);
#endif
}

}  // namespace
}  // namespace poseidon::kernels
