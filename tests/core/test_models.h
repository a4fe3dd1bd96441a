// tests/core/test_models.h: small models built in code for core unit tests.
#pragma once

#include <string>
#include <vector>

#include "core/model.h"

namespace poseidon::testing {

// data(1x8x8) -> conv1(4, 3x3) -> relu1 -> fc1(32) -> relu2 -> fc2(10) -> loss
inline core::ModelSpec SmallNetSpec() {
  core::ModelSpec m;
  m.name = "smallnet";
  m.input_c = 1;
  m.input_h = 8;
  m.input_w = 8;
  m.num_classes = 10;
  auto add = [&](const char* name, core::LayerKind kind) -> core::LayerSpec& {
    core::LayerSpec l;
    l.name = name;
    l.kind = kind;
    m.layers.push_back(l);
    return m.layers.back();
  };
  core::LayerSpec& conv = add("conv1", core::LayerKind::kConv);
  conv.num_output = 4;
  conv.kernel_h = conv.kernel_w = 3;
  add("relu1", core::LayerKind::kRelu);
  add("fc1", core::LayerKind::kFc).num_output = 32;
  add("relu2", core::LayerKind::kRelu);
  add("fc2", core::LayerKind::kFc).num_output = 10;
  add("loss", core::LayerKind::kSoftmaxLoss);
  return m;
}

// One FC layer without bias: data(1 x 1 x m) -> fc(n) -> loss. Weight bytes = 4*m*n.
inline core::ModelSpec SingleFcSpec(int64_t m_in, int64_t n_out) {
  core::ModelSpec m;
  m.name = "single_fc";
  m.input_c = m_in;
  m.input_h = 1;
  m.input_w = 1;
  core::LayerSpec fc;
  fc.name = "fc";
  fc.kind = core::LayerKind::kFc;
  fc.num_output = n_out;
  fc.bias = false;
  m.layers.push_back(fc);
  core::LayerSpec loss;
  loss.name = "loss";
  loss.kind = core::LayerKind::kSoftmaxLoss;
  m.layers.push_back(loss);
  return m;
}

// A chain of FC layers with bias: data(1 x 1 x input) -> fc1(outputs[0]) -> fc2 ... -> loss, with
// num_classes the last output. Gradient tensors become ready last layer first, bias before weight.
inline core::ModelSpec FcChainSpec(const char* name, int64_t input, std::vector<int64_t> outputs) {
  core::ModelSpec m;
  m.name = name;
  m.input_c = input;
  m.input_h = 1;
  m.input_w = 1;
  m.num_classes = outputs.back();
  for (size_t i = 0; i < outputs.size(); ++i) {
    core::LayerSpec l;
    l.name = "fc" + std::to_string(i + 1);
    l.kind = core::LayerKind::kFc;
    l.num_output = outputs[i];
    m.layers.push_back(l);
  }
  core::LayerSpec loss;
  loss.name = "loss";
  loss.kind = core::LayerKind::kSoftmaxLoss;
  m.layers.push_back(loss);
  return m;
}

}  // namespace poseidon::testing
