// tests/kernels/layer_cases.h: shared helpers for the backend-versus-reference layer tests
// (tests/kernels/cpu_test.cc, tests/kernels/gpu_test.cc): single-layer models, random data and
// the relative error both use, and the blob-by-blob gradient comparison of two whole nets.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/model.h"
#include "kernels/net.h"

namespace poseidon::kernels::testing {

using core::LayerKind;
using core::LayerSpec;

inline double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return diff / (scale + 1e-6);
}

// Every parameter blob's gradient in `got` is within `tol` (RelErr) of the same blob's in `want`;
// a failure names the blob.
inline void ExpectGradsMatch(const Net& got, const Net& want, double tol) {
  for (int i = 0; i < want.num_blobs(); ++i) {
    const BlobRef w = want.blob(i), g = got.blob(i);
    EXPECT_LE(RelErr(std::vector<float>(g.grad, g.grad + g.count),
                     std::vector<float>(w.grad, w.grad + w.count)),
              tol)
        << w.name;
  }
}

inline std::vector<float> Random(int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// One layer named "l" fed by the model input (c x h x w).
inline core::Layer Single(LayerSpec s, int64_t c, int64_t h, int64_t w) {
  core::ModelSpec m;
  m.name = "t";
  m.input_c = c, m.input_h = h, m.input_w = w;
  s.name = "l";
  m.layers = {s};
  return *core::Model::Build(m).FindLayer("l");
}

// A concat or add layer "l" fed by 1x1 convs with the given output channels.
inline core::Layer Multi(LayerKind kind, const std::vector<int64_t>& channels, int64_t h,
                         int64_t w) {
  core::ModelSpec m;
  m.name = "t";
  m.input_c = 2, m.input_h = h, m.input_w = w;
  LayerSpec top;
  top.name = "l";
  top.kind = kind;
  for (size_t i = 0; i < channels.size(); ++i) {
    LayerSpec conv;
    conv.name = "b" + std::to_string(i);
    conv.kind = LayerKind::kConv;
    conv.num_output = channels[i];
    conv.kernel_h = conv.kernel_w = 1;
    conv.bottoms = {"data"};
    m.layers.push_back(conv);
    top.bottoms.push_back(conv.name);
  }
  m.layers.push_back(top);
  return *core::Model::Build(m).FindLayer("l");
}

inline LayerSpec Conv(int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t groups,
                      bool bias) {
  LayerSpec s;
  s.kind = LayerKind::kConv;
  s.num_output = out;
  s.kernel_h = s.kernel_w = k;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.groups = groups;
  s.bias = bias;
  return s;
}

inline LayerSpec Pool(core::PoolMethod method, int64_t k, int64_t stride, int64_t pad,
                      bool global = false) {
  LayerSpec s;
  s.kind = LayerKind::kPool;
  s.pool = method;
  s.kernel_h = s.kernel_w = k;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.global_pool = global;
  return s;
}

// The same with PyTorch's floor rounding (`round: floor`).
inline LayerSpec PoolFloor(core::PoolMethod method, int64_t k, int64_t stride, int64_t pad) {
  LayerSpec s = Pool(method, k, stride, pad);
  s.pool_round = core::PoolRound::kFloor;
  s.round_given = true;
  return s;
}

inline LayerSpec Kind(LayerKind kind) {
  LayerSpec s;
  s.kind = kind;
  return s;
}

// The layer cases every backend is checked on, kind by kind (the same shapes for cpu and cuda):
// each calls Compare(layer, batch) once per case.
using CompareFn = std::function<void(const core::Layer&, int64_t batch)>;

inline void ConvCases(const CompareFn& Compare) {
  Compare(Single(Conv(4, 3, 2, 1, 1, true), 3, 9, 11), 2);
  Compare(Single(Conv(6, 3, 1, 1, 2, false), 4, 7, 7), 3);
  Compare(Single(Conv(8, 5, 3, 2, 4, true), 8, 12, 13), 2);
  Compare(Single(Conv(16, 11, 4, 0, 1, true), 3, 35, 35), 2);  // AlexNet conv1-like
}

inline void PoolMaxCases(const CompareFn& Compare) {
  Compare(Single(Pool(core::PoolMethod::kMax, 3, 2, 0), 3, 13, 13), 2);  // exact fit
  Compare(Single(Pool(core::PoolMethod::kMax, 3, 2, 0), 4, 16, 16), 3);  // ceil rounding
  Compare(Single(Pool(core::PoolMethod::kMax, 2, 2, 1), 2, 7, 6), 2);    // pad and ceil
  // Floor rounding: 16 -> 7 (ceil: 8), the last row and column are not read; with pad 1,
  // 8 -> 4 (ceil: 5), torchvision's ResNet stem on 112 -> 56.
  Compare(Single(PoolFloor(core::PoolMethod::kMax, 3, 2, 0), 4, 16, 16), 3);
  Compare(Single(PoolFloor(core::PoolMethod::kMax, 3, 2, 1), 3, 8, 8), 2);
  Compare(Single(PoolFloor(core::PoolMethod::kMax, 3, 2, 1), 2, 112, 112), 1);
}

inline void PoolAvgCases(const CompareFn& Compare) {
  Compare(Single(Pool(core::PoolMethod::kAvg, 3, 2, 0), 3, 16, 16), 2);  // CIFAR-10 quick pool3
  Compare(Single(Pool(core::PoolMethod::kAvg, 3, 2, 1), 2, 8, 8), 2);    // right padding > pad
  Compare(Single(Pool(core::PoolMethod::kAvg, 3, 1, 1), 2, 6, 5), 2);    // symmetric padding
  Compare(Single(Pool(core::PoolMethod::kAvg, 0, 1, 0, /*global=*/true), 5, 5, 7), 3);
  // Floor rounding: every window inside the padded input (divisor kh*kw, padding counted as
  // zeros); 7x6 with 2/2 -> 3x3, the last row not read (no window reaches it).
  Compare(Single(PoolFloor(core::PoolMethod::kAvg, 3, 2, 0), 3, 16, 16), 2);
  Compare(Single(PoolFloor(core::PoolMethod::kAvg, 3, 2, 1), 2, 8, 8), 2);
  Compare(Single(PoolFloor(core::PoolMethod::kAvg, 2, 2, 0), 2, 7, 6), 2);
}

inline void ReluCases(const CompareFn& Compare) {
  Compare(Single(Kind(LayerKind::kRelu), 3, 5, 7), 4);
}

inline void LrnCases(const CompareFn& Compare) {
  LayerSpec s = Kind(LayerKind::kLrn);
  s.alpha = 0.5;  // large enough that the normalisation matters on data in [-1, 1]
  Compare(Single(s, 7, 5, 4), 2);
  s.local_size = 3, s.alpha = 1e-2, s.beta = 0.6, s.k = 2.0;
  Compare(Single(s, 4, 3, 3), 3);
}

inline void FcCases(const CompareFn& Compare) {
  LayerSpec s = Kind(LayerKind::kFc);
  s.num_output = 10;
  Compare(Single(s, 3, 4, 5), 4);
  s.bias = false, s.num_output = 7;
  Compare(Single(s, 20, 1, 1), 3);
}

inline void DropoutCases(const CompareFn& Compare) {
  LayerSpec s = Kind(LayerKind::kDropout);
  s.dropout_ratio = 0.3;
  Compare(Single(s, 4, 6, 6), 5);
}

inline void BatchNormCases(const CompareFn& Compare) {
  Compare(Single(Kind(LayerKind::kBatchNorm), 5, 4, 3), 4);
  LayerSpec s = Kind(LayerKind::kBatchNorm);
  s.bn_affine = false;
  Compare(Single(s, 3, 2, 2), 6);
}

inline void ConcatCases(const CompareFn& Compare) {
  Compare(Multi(LayerKind::kConcat, {3, 1, 4}, 5, 6), 2);
  Compare(Multi(LayerKind::kConcat, {2, 2}, 1, 1), 3);
}

inline void AddCases(const CompareFn& Compare) {
  Compare(Multi(LayerKind::kAdd, {3, 3}, 4, 5), 2);
  Compare(Multi(LayerKind::kAdd, {2, 2, 2}, 3, 3), 3);
}

inline void SoftmaxLossCases(const CompareFn& Compare) {
  Compare(Single(Kind(LayerKind::kSoftmaxLoss), 10, 1, 1), 8);
  Compare(Single(Kind(LayerKind::kSoftmaxLoss), 4, 2, 2), 3);
}

// ---- transformer layers ------------------------------------------------------------------------
// Models on a sequence [s, d] (rank 2) or on token ids [s] (rank 1). A backend's Compare must feed
// an embedding layer valid ids (integers in [0, vocab)) instead of uniform values.

inline core::Layer SingleSeq(LayerSpec s, int64_t seq, int64_t d) {
  core::ModelSpec m;
  m.name = "t";
  m.input_rank = 2, m.input_c = 1, m.input_h = seq, m.input_w = d;
  s.name = "l";
  m.layers = {s};
  return *core::Model::Build(m).FindLayer("l");
}

inline core::Layer SingleIds(LayerSpec s, int64_t seq) {
  core::ModelSpec m;
  m.name = "t";
  m.input_rank = 1, m.input_c = 1, m.input_h = 1, m.input_w = seq;
  s.name = "l";
  m.layers = {s};
  return *core::Model::Build(m).FindLayer("l");
}

inline void LinearCases(const CompareFn& Compare) {
  LayerSpec s = Kind(LayerKind::kLinear);
  s.num_output = 12;
  Compare(SingleSeq(s, 5, 8), 3);
  s.num_output = 128;
  Compare(SingleSeq(s, 17, 64), 4);  // fmnist_vit's fc1
  s.bias = false, s.num_output = 3;
  Compare(SingleSeq(s, 2, 7), 2);
}

inline void AttentionCases(const CompareFn& Compare) {
  LayerSpec s = Kind(LayerKind::kAttention);
  s.heads = 1;
  Compare(SingleSeq(s, 5, 8), 2);
  s.heads = 4;
  Compare(SingleSeq(s, 17, 64), 3);  // fmnist_vit's
  s.heads = 2, s.causal = true, s.bias = false;
  Compare(SingleSeq(s, 6, 8), 2);
}

inline void LayerNormCases(const CompareFn& Compare) {
  Compare(SingleSeq(Kind(LayerKind::kLayerNorm), 17, 64), 3);
  Compare(SingleSeq(Kind(LayerKind::kLayerNorm), 3, 5), 2);
}

inline void PointwiseCases(const CompareFn& Compare) {
  Compare(SingleSeq(Kind(LayerKind::kGelu), 17, 16), 3);
  Compare(SingleSeq(Kind(LayerKind::kTanh), 5, 6), 2);
  Compare(SingleSeq(Kind(LayerKind::kSoftmax), 7, 9), 2);
}

inline void PatchEmbedCases(const CompareFn& Compare) {
  LayerSpec s = Kind(LayerKind::kPatchEmbed);
  s.num_output = 64, s.patch = 7;
  Compare(Single(s, 1, 28, 28), 3);  // fmnist_vit's
  s.num_output = 5, s.patch = 2, s.bias = false;
  Compare(Single(s, 3, 4, 6), 2);
}

inline void SequenceCopyCases(const CompareFn& Compare) {
  LayerSpec pos = Kind(LayerKind::kPosEmbedding);
  Compare(SingleSeq(pos, 17, 64), 3);
  pos.max_len = 9;
  Compare(SingleSeq(pos, 4, 6), 2);
  Compare(SingleSeq(Kind(LayerKind::kClsToken), 16, 64), 3);
  LayerSpec pool = Kind(LayerKind::kTokenPool);
  Compare(SingleSeq(pool, 5, 6), 2);
  pool.pool_first = true;
  Compare(SingleSeq(pool, 17, 64), 3);
  LayerSpec emb = Kind(LayerKind::kEmbedding);
  emb.vocab = 11, emb.num_output = 6;
  Compare(SingleIds(emb, 7), 3);
}

}  // namespace poseidon::kernels::testing
