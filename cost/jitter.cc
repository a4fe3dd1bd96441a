#include "cost/jitter.h"

#include <algorithm>
#include <cmath>

namespace poseidon::cost {

ComputeJitter::Kind ComputeJitter::KindOf(const std::string& distribution) {
  if (distribution == "lognormal") return Kind::kLognormal;
  if (distribution == "uniform") return Kind::kUniform;
  return Kind::kNone;
}

namespace {
std::mt19937_64 Stream(uint64_t seed, int worker) {
  std::seed_seq seq{seed, static_cast<uint64_t>(worker), uint64_t{0x9e3779b97f4a7c15}};
  return std::mt19937_64(seq);
}
}  // namespace

ComputeJitter::ComputeJitter(Kind kind, double cv, uint64_t seed, int worker)
    : kind_(kind), cv_(cv), rng_(Stream(seed, worker)) {}

int64_t ComputeJitter::Apply(int64_t base_ns) {
  if (!active() || base_ns == 0) return base_ns;
  double factor = 1;
  if (kind_ == Kind::kLognormal) {
    // Mean 1, coefficient of variation cv: sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2.
    const double sigma2 = std::log1p(cv_ * cv_);
    std::normal_distribution<double> n(-sigma2 / 2, std::sqrt(sigma2));
    factor = std::exp(n(rng_));
  } else {
    // Uniform on [1 - a, 1 + a] with a = sqrt(3) cv (so the cv is cv), clipped at 0.
    const double a = std::sqrt(3.0) * cv_;
    std::uniform_real_distribution<double> u(-a, a);
    factor = std::max(0.0, 1 + u(rng_));
  }
  return static_cast<int64_t>(std::llround(static_cast<double>(base_ns) * factor));
}

}  // namespace poseidon::cost
