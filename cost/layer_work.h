// cost/layer_work.h: the work of one pass of one layer, F (FLOPs) and D (bytes moved), as tabled
// in cost/compute_model.h. Both GPU compute models price the layers without a GEMM from these.
#pragma once

#include "core/model.h"

namespace poseidon::cost {

struct Work {
  double flops = 0;
  double bytes = 0;
  bool none = false;  // no backward pass at all
};

// Forward: read input and weights, write output.
inline Work ForwardWork(const core::Layer& l, double b) {
  return {b * static_cast<double>(l.fwd_flops),
          b * static_cast<double>(l.in_bytes + l.out_bytes) + 4.0 * static_cast<double>(l.params)};
}

inline Work BackwardWork(const core::Layer& l, double b) {
  const double flops = static_cast<double>(l.fwd_flops);
  const double in = static_cast<double>(l.in_bytes);
  const double out = static_cast<double>(l.out_bytes);
  const double pb = 4.0 * static_cast<double>(l.params);
  const bool fed_by_input = l.bottoms.empty();
  // A tied linear layer has no blob of its own but computes its weight's gradient.
  if (l.params > 0 || l.tied_to >= 0) {
    if (fed_by_input) return {b * flops, b * (in + out) + 2 * pb};
    return {2 * b * flops, b * (2 * in + out) + 2 * pb};
  }
  if (fed_by_input) return {0, 0, true};
  if (l.kind == core::LayerKind::kSoftmaxLoss) return {b * in / 4, 2 * b * in};
  return {b * flops, 2 * b * (in + out)};
}

}  // namespace poseidon::cost
