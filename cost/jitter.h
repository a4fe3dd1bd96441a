// cost/jitter.h: the scenario's per-task compute variability (`jitter: {distribution, cv}`), for
// every host that times compute from the compute model: the simulator charges a jittered task in
// virtual time, the live runtime's replayed compute sleeps it. One stream per worker, seeded by
// (seed, worker), so a run is reproducible and each worker's draws are its own.
//
//   cost::ComputeJitter j(cost::ComputeJitter::Kind::kLognormal, 0.1, /*seed=*/1, /*worker=*/0);
//   const int64_t ns = j.Apply(base_ns);  // base_ns times a factor with mean 1 and cv 0.1
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace poseidon::cost {

class ComputeJitter {
 public:
  enum class Kind { kNone, kLognormal, kUniform };
  // `distribution` as the scenario spells it: none | lognormal | uniform.
  static Kind KindOf(const std::string& distribution);

  ComputeJitter(Kind kind, double cv, uint64_t seed, int worker);

  // Whether a jitter of this kind and cv changes anything (a kind other than none and cv > 0).
  static bool Varies(Kind kind, double cv) { return kind != Kind::kNone && cv > 0; }
  bool active() const { return Varies(kind_, cv_); }

  // base_ns times the next factor of this worker's stream: mean 1, coefficient of variation cv;
  // lognormal, or uniform on [1 - sqrt(3) cv, 1 + sqrt(3) cv] clipped at 0. 0 stays 0 and draws
  // nothing; inactive, base_ns unchanged.
  int64_t Apply(int64_t base_ns);

 private:
  Kind kind_;
  double cv_;
  std::mt19937_64 rng_;
};

}  // namespace poseidon::cost
