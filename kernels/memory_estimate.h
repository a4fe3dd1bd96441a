// kernels/memory_estimate.h: how much memory a Net of a model needs at a batch, checked before
// anything is allocated.
//
//   kernels::CheckNetFits(model, 64);  // throws MemoryError: "needs 61.2 GiB for ..."
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/model.h"

namespace poseidon::kernels {

class MemoryError : public std::runtime_error {
 public:
  explicit MemoryError(const std::string& msg) : std::runtime_error(msg) {}
};

// A lower bound of what a Net holds (workspaces come on top): per parameter its value, gradient
// and momentum; per activation of the batch its value and its gradient, the input's included.
struct MemoryEstimate {
  int64_t param_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t total() const { return param_bytes + activation_bytes; }
};
MemoryEstimate EstimateNetMemory(const core::Model& model, int64_t batch);

// MemAvailable of /proc/meminfo, in bytes; -1 when it cannot be read.
int64_t AvailableMemoryBytes();

// The limit: POSEIDON_MEMORY_LIMIT_GIB when set (0 turns the check off), else the machine's
// available memory. Throws MemoryError, naming the model, the batch, the estimate and the limit,
// when the estimate exceeds it, and for a POSEIDON_MEMORY_LIMIT_GIB that is not a number.
void CheckNetFits(const core::Model& model, int64_t batch);

}  // namespace poseidon::kernels
