// validation::LiveOverrides: the --set of a live run; with jitter, a seed of the run's own.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/scenario.h"
#include "validation/validate.h"

namespace poseidon::validation {
namespace {

const std::string kRoot = POSEIDON_SOURCE_DIR;

TEST(LiveOverrides, AConfigurationWithJitterRunsEachLiveRunWithASeedNoSimulationUses) {
  const std::vector<std::string> sets = {"jitter={distribution: lognormal, cv: 0.1}", "seed=7"};
  const config::ScenarioSpec s = config::LoadScenarioFile(kRoot + "/scenarios/demo.yaml", sets);
  std::vector<std::string> seeds;
  for (int run = 1; run <= 3; ++run) {
    const std::vector<std::string> got = LiveOverrides(sets, s, run);
    ASSERT_EQ(got.size(), sets.size() + 1);
    EXPECT_EQ(std::vector<std::string>(got.begin(), got.end() - 1), sets);
    seeds.push_back(got.back());
  }
  EXPECT_EQ(seeds, (std::vector<std::string>{"seed=108", "seed=109", "seed=110"}));
  // The simulator's --sim-seeds N take 7 .. 7 + N - 1: below 107 for any N up to 100.
  EXPECT_EQ(kLiveJitterSeedOffset, 100u);
}

TEST(LiveOverrides, WithoutJitterTheLiveRunIsTheConfigurationAsGiven) {
  const std::vector<std::string> sets = {"cluster.workers=2"};
  const config::ScenarioSpec s = config::LoadScenarioFile(kRoot + "/scenarios/demo.yaml", sets);
  EXPECT_EQ(LiveOverrides(sets, s, 2), sets);
  const std::vector<std::string> zero = {"jitter={distribution: lognormal, cv: 0}"};
  EXPECT_EQ(LiveOverrides(zero, config::LoadScenarioFile(kRoot + "/scenarios/demo.yaml", zero), 1),
            zero);
}

}  // namespace
}  // namespace poseidon::validation
