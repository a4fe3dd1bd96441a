// tests/kernels/layer_cases.h: shared helpers for the backend-versus-reference layer tests
// (tests/kernels/cpu_test.cc, tests/kernels/gpu_test.cc): single-layer models, random data and
// the relative error both use.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/model.h"

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

inline LayerSpec Kind(LayerKind kind) {
  LayerSpec s;
  s.kind = kind;
  return s;
}

}  // namespace poseidon::kernels::testing
