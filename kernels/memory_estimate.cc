#include "kernels/memory_estimate.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace poseidon::kernels {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Gib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GiB", static_cast<double>(bytes) / kGiB);
  return b;
}

}  // namespace

MemoryEstimate EstimateNetMemory(const core::Model& model, int64_t batch) {
  MemoryEstimate e;
  e.param_bytes = model.total_params() * 4 * 3;
  const int64_t per_sample = model.activation_bytes() + model.input_shape().count() * 4;
  e.activation_bytes = per_sample * batch * 2;
  return e;
}

int64_t AvailableMemoryBytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long v = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

void CheckNetFits(const core::Model& model, int64_t batch) {
  int64_t limit = -1;
  std::string source = "this machine has available";
  if (const char* v = std::getenv("POSEIDON_MEMORY_LIMIT_GIB"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const double gib = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(gib >= 0)) {
      throw MemoryError(std::string("error: POSEIDON_MEMORY_LIMIT_GIB='") + v +
                        "' is not a size in GiB (0 turns the memory check off)");
    }
    if (gib == 0) return;
    limit = static_cast<int64_t>(gib * kGiB);
    source = "POSEIDON_MEMORY_LIMIT_GIB allows";
  } else {
    limit = AvailableMemoryBytes();
    if (limit < 0) return;  // nothing to compare with
  }
  const MemoryEstimate e = EstimateNetMemory(model, batch);
  if (e.total() <= limit) return;
  throw MemoryError("error: model '" + model.name() + "' at batch " + std::to_string(batch) +
                    " needs " + Gib(e.total()) + " for parameters and activations (" +
                    Gib(e.param_bytes) + " of parameters, gradients and momentum, " +
                    Gib(e.activation_bytes) + " of activations and their gradients), more than "
                    "the " + Gib(limit) + " " + source + "; lower the batch or use a smaller "
                    "model (POSEIDON_MEMORY_LIMIT_GIB=N sets the limit, 0 turns the check off)");
}

}  // namespace poseidon::kernels
