// cost::ComputeJitter: the scenario's per-task compute variability, drawn the same way by the
// simulator and by the live runtime's replayed compute.
#include "cost/jitter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace poseidon::cost {
namespace {

using Kind = ComputeJitter::Kind;

// Mean and coefficient of variation of n jittered copies of base.
std::pair<double, double> MeanCv(ComputeJitter& j, int64_t base, int n) {
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double f = static_cast<double>(j.Apply(base)) / static_cast<double>(base);
    sum += f;
    sum2 += f * f;
  }
  const double mean = sum / n;
  return {mean, std::sqrt(sum2 / n - mean * mean) / mean};
}

TEST(ComputeJitter, FactorsHaveMeanOneAndTheScenariosCv) {
  for (const Kind kind : {Kind::kLognormal, Kind::kUniform}) {
    for (const double cv : {0.05, 0.1, 0.3}) {
      ComputeJitter j(kind, cv, /*seed=*/7, /*worker=*/0);
      const auto [mean, got_cv] = MeanCv(j, 1'000'000, 200'000);
      EXPECT_NEAR(mean, 1.0, 0.005) << static_cast<int>(kind) << " cv " << cv;
      EXPECT_NEAR(got_cv, cv, 0.02 * cv) << static_cast<int>(kind) << " cv " << cv;
    }
  }
}

TEST(ComputeJitter, ASeedAndWorkerDrawTheSameFactorsAndAnotherWorkerOthers) {
  ComputeJitter a(Kind::kLognormal, 0.1, 3, 1), b(Kind::kLognormal, 0.1, 3, 1);
  ComputeJitter other_worker(Kind::kLognormal, 0.1, 3, 2), other_seed(Kind::kLognormal, 0.1, 4, 1);
  int same_worker = 0, same_seed = 0;
  for (int i = 0; i < 100; ++i) {
    const int64_t x = a.Apply(1'000'000);
    EXPECT_EQ(x, b.Apply(1'000'000)) << i;
    same_worker += x == other_worker.Apply(1'000'000);
    same_seed += x == other_seed.Apply(1'000'000);
  }
  EXPECT_LT(same_worker, 3);
  EXPECT_LT(same_seed, 3);
}

TEST(ComputeJitter, NoneZeroCvAndZeroTimeChangeNothingAndDrawNothing) {
  ComputeJitter none(ComputeJitter::KindOf("none"), 0.1, 1, 0);
  ComputeJitter zero_cv(ComputeJitter::KindOf("lognormal"), 0, 1, 0);
  EXPECT_FALSE(none.active());
  EXPECT_FALSE(zero_cv.active());
  EXPECT_EQ(none.Apply(123'456), 123'456);
  EXPECT_EQ(zero_cv.Apply(123'456), 123'456);
  // A zero-time task takes no factor: the next task gets the stream's first one.
  ComputeJitter j(Kind::kUniform, 0.2, 1, 0), ref(Kind::kUniform, 0.2, 1, 0);
  EXPECT_TRUE(j.active());
  EXPECT_EQ(j.Apply(0), 0);
  EXPECT_EQ(j.Apply(1'000'000), ref.Apply(1'000'000));
  EXPECT_EQ(ComputeJitter::KindOf("uniform"), Kind::kUniform);
}

}  // namespace
}  // namespace poseidon::cost
