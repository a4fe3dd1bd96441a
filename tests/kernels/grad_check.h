// tests/kernels/grad_check.h: the finite-difference gradient check of one reference kernel, shared
// by tests/kernels/reference_test.cc (the image layers) and transformer_test.cc (the transformer
// layers).
//
// The objective is f = sum_i r_i * top_i (r seeded, in [-1, 1]), or the loss for softmax_loss,
// accumulated in double. Every input and parameter value is perturbed by +-eps. Bounds: per
// element |analytic - numeric| <= 2e-2 * max(|analytic|, |numeric|) + 2e-3, and the relative error
// of the whole gradient vector ||a - n|| / max(||a||, ||n||) <= 1e-2. A fresh kernel (same seed)
// is made for every evaluation so that dropout draws the same mask each time; Backward must
// overwrite its outputs (the buffers start at 123).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/model.h"
#include "kernels/kernel.h"
#include "kernels/reference/reference_kernels.h"

namespace poseidon::kernels::gradcheck {

// Uniform in [lo, hi), the same on every platform.
inline float Uniform(std::mt19937_64& rng, double lo, double hi) {
  return static_cast<float>(lo + (hi - lo) * static_cast<double>(rng() >> 11) * 0x1p-53);
}

inline std::vector<float> Random(std::mt19937_64& rng, int64_t n, double lo = -1, double hi = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = Uniform(rng, lo, hi);
  return v;
}

// kAwayFromZero keeps inputs >= 0.1 from a relu's kink; kDistinct spaces them > 2 eps apart so
// that no perturbation changes a max pool's argmax.
enum class InputKind { kPlain, kAwayFromZero, kDistinct };

inline std::vector<float> RandomInput(std::mt19937_64& rng, int64_t n, InputKind kind) {
  std::vector<float> v(static_cast<size_t>(n));
  if (kind == InputKind::kDistinct) {
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t i = 0; i < n; ++i) {
      v[static_cast<size_t>(i)] = static_cast<float>(-1.0 + 2.0 * perm[static_cast<size_t>(i)] / n);
    }
    return v;
  }
  for (float& x : v) {
    x = Uniform(rng, -1, 1);
    if (kind == InputKind::kAwayFromZero && std::fabs(x) < 0.1f) x += x < 0 ? -0.1f : 0.1f;
  }
  return v;
}

struct GradCheck {
  const core::Layer* layer;
  int64_t batch = 2;
  uint64_t seed = 7;
  InputKind input = InputKind::kPlain;
  double eps = 1e-2;
  std::vector<int32_t> labels;  // softmax_loss
  // Token ids instead of random bottoms (embedding): not perturbed, their gradient must be 0.
  std::vector<float> ids;
};

inline double Objective(const GradCheck& g, const std::vector<std::vector<float>>& bottoms,
                        const std::vector<std::vector<float>>& params,
                        const std::vector<float>& r) {
  auto k = MakeReferenceKernel(*g.layer, g.batch, g.seed);
  std::vector<const float*> b, p;
  for (const auto& v : bottoms) b.push_back(v.data());
  for (const auto& v : params) p.push_back(v.data());
  std::vector<float> top(r.size());
  if (!g.labels.empty()) k->SetLabels(g.labels.data());
  k->Forward(b, top.data(), p, /*train=*/true);
  if (g.layer->kind == core::LayerKind::kSoftmaxLoss) return k->loss();
  double f = 0;
  for (size_t i = 0; i < r.size(); ++i) f += static_cast<double>(r[i]) * top[i];
  return f;
}

inline bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

inline void ExpectClose(const std::vector<float>& analytic, const std::vector<double>& numeric,
                        const std::string& what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  if (EndsWith(what, ".k.bias")) {
    // Attention's key bias adds q . b_k to every score of a query: the softmax cancels it, so its
    // gradient is exactly 0 (up to rounding), and a relative comparison would compare noise.
    for (size_t i = 0; i < analytic.size(); ++i) {
      EXPECT_LE(std::fabs(analytic[i]), 1e-5) << what << "[" << i << "]";
      EXPECT_LE(std::fabs(numeric[i]), 1e-3) << what << "[" << i << "]";
    }
    return;
  }
  double diff2 = 0, a2 = 0, n2 = 0;
  int bad = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    const double a = analytic[i], n = numeric[i];
    diff2 += (a - n) * (a - n), a2 += a * a, n2 += n * n;
    if (std::fabs(a - n) > 2e-2 * std::max(std::fabs(a), std::fabs(n)) + 2e-3 && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << a << " numeric " << n;
    }
  }
  const double scale = std::sqrt(std::max(a2, n2));
  if (scale > 0) {
    EXPECT_LE(std::sqrt(diff2) / scale, 1e-2) << what;
  }
  EXPECT_GT(scale, 0) << what << ": the gradient is all zeros, the test checks nothing";
}

// Parameters in [-0.5, 0.5] (small enough that softmaxes are not saturated), but a batch norm's
// scale and a layer norm's gamma (the first blob) in [0.5, 1.5].
inline void CheckGradients(const GradCheck& g) {
  const core::Layer& l = *g.layer;
  SCOPED_TRACE(l.name);
  std::mt19937_64 rng(g.seed);
  std::vector<std::vector<float>> bottoms, params;
  for (const core::Shape& s : l.in_shapes) {
    bottoms.push_back(g.ids.empty() ? RandomInput(rng, g.batch * s.count(), g.input) : g.ids);
  }
  for (const core::ParamBlob& b : l.blobs) {
    const bool scale = (l.kind == core::LayerKind::kBatchNorm ||
                        l.kind == core::LayerKind::kLayerNorm) && params.empty();
    params.push_back(scale ? Random(rng, b.count, 0.5, 1.5) : Random(rng, b.count, -0.5, 0.5));
  }
  const std::vector<float> r = Random(rng, g.batch * l.out.count());

  auto k = MakeReferenceKernel(l, g.batch, g.seed);
  std::vector<const float*> b, p;
  for (const auto& v : bottoms) b.push_back(v.data());
  for (const auto& v : params) p.push_back(v.data());
  std::vector<float> top(r.size());
  if (!g.labels.empty()) k->SetLabels(g.labels.data());
  k->Forward(b, top.data(), p, true);
  std::vector<std::vector<float>> db, dp;
  std::vector<float*> dbp, dpp;
  for (const auto& v : bottoms) db.emplace_back(v.size(), 123.f);  // overwritten, not summed
  for (const auto& v : params) dp.emplace_back(v.size(), 123.f);
  for (auto& v : db) dbp.push_back(v.data());
  for (auto& v : dp) dpp.push_back(v.data());
  k->Backward(b, top.data(), r.data(), dbp, p, dpp);

  auto numeric = [&](std::vector<float>& x) {
    std::vector<double> d(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float keep = x[i];
      x[i] = static_cast<float>(keep + g.eps);
      const double plus = Objective(g, bottoms, params, r);
      x[i] = static_cast<float>(keep - g.eps);
      const double minus = Objective(g, bottoms, params, r);
      x[i] = keep;
      d[i] = (plus - minus) / (2 * g.eps);
    }
    return d;
  };
  for (size_t i = 0; i < bottoms.size(); ++i) {
    if (!g.ids.empty()) {
      for (float v : db[i]) EXPECT_EQ(v, 0.f) << "token ids get no gradient";
      continue;
    }
    ExpectClose(db[i], numeric(bottoms[i]), l.name + " d/bottom" + std::to_string(i));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    ExpectClose(dp[i], numeric(params[i]), l.name + " d/" + l.blobs[i].name);
  }
}

}  // namespace poseidon::kernels::gradcheck
