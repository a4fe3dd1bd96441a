// Tests of validation/predict.cc: the predicted pace from one seed or the median of several.
#include "validation/predict.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "config/job_config.h"

namespace poseidon::validation {
namespace {

TEST(MedianIndex, TheMiddleValueOrTheLowerMiddleOne) {
  EXPECT_EQ(MedianIndex({3.0, 1.0, 2.0}), 2u);
  EXPECT_EQ(MedianIndex({4.0, 1.0, 3.0, 2.0}), 3u);  // 1 2 3 4: the lower middle, 2
  EXPECT_EQ(MedianIndex({7.0}), 0u);
  EXPECT_EQ(MedianIndex({5.0, 5.0, 5.0}), 1u);  // ties keep seed order
}

config::ScenarioSpec Mlp(const std::vector<std::string>& sets) {
  return config::LoadScenarioFile(
      std::string(POSEIDON_SOURCE_DIR) + "/scenarios/validation/mlp_1g.yaml", sets);
}

std::string Dir(const std::string& name) {
  const std::string d =
      (std::filesystem::temp_directory_path() / ("predict_test_" + name)).string();
  std::filesystem::remove_all(d);
  return d;
}

// Jitter draws each compute task's time from the scenario's seed: five seeds give five runs, and
// the prediction is the one in the middle, the same run as that seed alone gives.
TEST(Predict, SeveralSeedsPredictWithTheMedianRun) {
  const config::ScenarioSpec s =
      Mlp({"iterations=6", "jitter={distribution: lognormal, cv: 0.3}", "seed=11"});
  const Prediction five = Predict(s, s, 5, Dir("five"));
  ASSERT_TRUE(five.pace.ok) << five.pace.why;
  ASSERT_EQ(five.seed_means_ms.size(), 5u);
  std::vector<double> sorted = five.seed_means_ms;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_LT(sorted.front(), sorted.back());  // the draws differ
  EXPECT_DOUBLE_EQ(five.pace.mean_ms, sorted[2]);
  EXPECT_DOUBLE_EQ(five.seed_means_ms[five.seed - 11], five.pace.mean_ms);
  // The run taken is that seed's own.
  config::ScenarioSpec alone = s;
  alone.seed = five.seed;
  const Prediction one = Predict(alone, alone, 1, Dir("one"));
  ASSERT_TRUE(one.pace.ok);
  EXPECT_DOUBLE_EQ(one.pace.mean_ms, five.pace.mean_ms);
  EXPECT_DOUBLE_EQ(one.pace.std_ms, five.pace.std_ms);
  EXPECT_EQ(one.tasks, five.tasks);
  // One seed is the scenario's seed alone: the first of the five.
  const Prediction first = Predict(s, s, 1, Dir("first"));
  EXPECT_DOUBLE_EQ(first.pace.mean_ms, five.seed_means_ms[0]);
  EXPECT_EQ(first.seed, 11u);
}

// A simulation that draws nothing gives every seed the same run.
TEST(Predict, WithoutDrawsEverySeedGivesTheSameRun) {
  const config::ScenarioSpec s = Mlp({"iterations=6"});
  const std::string dir = Dir("plain");
  const Prediction p = Predict(s, s, 3, dir);
  ASSERT_TRUE(p.pace.ok) << p.pace.why;
  EXPECT_EQ(p.seed_means_ms, std::vector<double>(3, p.seed_means_ms[0]));
  EXPECT_EQ(p.seed, s.seed + 1);  // ties: the middle of three in seed order
  EXPECT_TRUE(std::filesystem::exists(dir + "/sim.json"));
}

// A pace that cannot be measured (here: measured as a job of more workers than ran) comes back
// not ok, with why, and no seed is taken.
TEST(Predict, APaceThatCannotBeMeasuredIsNotOk) {
  const config::ScenarioSpec s = Mlp({"iterations=6"});
  config::ScenarioSpec more = s;
  more.workers = s.workers + 3;
  const Prediction p = Predict(s, more, 2, Dir("unmeasured"));
  EXPECT_FALSE(p.pace.ok);
  EXPECT_FALSE(p.pace.why.empty());
  EXPECT_TRUE(p.seed_means_ms.empty());
}

}  // namespace
}  // namespace poseidon::validation
