// The pace is computed in one place (core/pace.h): the simulator's reported iteration time and
// the one validate reads back from the simulator's own trace are the same number, under BSP,
// with per-layer gating, and under SSP and ASP.
#include "core/pace.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/scenario.h"
#include "sim/simulation.h"
#include "validation/trace_pace.h"
#include "validation/trace_reader.h"

namespace poseidon::validation {
namespace {

TEST(JobIterationPace, IsTheSlowestMembersPaceOverTheMeasuredClocks) {
  // Two workers; clocks 0..4, warm-up 1. Worker 0 steps 10 ns, worker 1 12 ns from 3.
  const std::vector<std::vector<std::optional<core::TimeNs>>> reached = {
      {0, 10, 20, 30, 40}, {3, 15, 27, 39, 51}};
  const core::IterationPace p = core::JobIterationPace(reached, 1, 4);
  ASSERT_TRUE(p.ok);
  EXPECT_DOUBLE_EQ(p.mean_ns, (51.0 - 15.0) / 3);
  EXPECT_DOUBLE_EQ(p.std_ns, 1.0);  // three samples of 10, three of 12
  EXPECT_DOUBLE_EQ(p.min_ns, 10);
  EXPECT_DOUBLE_EQ(p.max_ns, 12);
  EXPECT_EQ(p.samples, 6);
}

TEST(JobIterationPace, AnUnknownEndNamesTheWorkerAndAGapOnlyDropsItsSamples) {
  std::vector<std::vector<std::optional<core::TimeNs>>> reached = {{0, 10, 20, 30},
                                                                   {0, 10, std::nullopt, 30}};
  core::IterationPace p = core::JobIterationPace(reached, 0, 3);
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.samples, 4);  // worker 1's two samples around the gap are left out
  EXPECT_DOUBLE_EQ(p.mean_ns, 10);
  reached[1].pop_back();
  p = core::JobIterationPace(reached, 0, 3);
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.missing_worker, 1);
  EXPECT_FALSE(core::JobIterationPace({}, 0, 3).ok);
}

TEST(JobIterationPace, SyncPointsUnderBspIterationEndsOtherwise) {
  EXPECT_FALSE(core::PacedByIterationEnds(/*bsp=*/true, /*has_sync_points=*/true));
  EXPECT_TRUE(core::PacedByIterationEnds(true, false));
  EXPECT_TRUE(core::PacedByIterationEnds(false, true));
}

class SimulatorAndTrace : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(SimulatorAndTrace, GiveTheSameIterationTime) {
  const config::ScenarioSpec s = config::LoadScenarioFile(
      std::string(POSEIDON_SOURCE_DIR) + "/scenarios/validation/mlp_1g.yaml", GetParam());
  sim::SimOptions so;
  so.baseline = false;
  so.record_trace = true;
  const sim::ScenarioResult r = sim::SimulateScenario(s, so);
  const Pace p = IterationPaceFromTraces({ReadTrace(r.chrome_trace, "sim.json")}, s.workers,
                                         s.warmup_iterations, s.iterations, s.consistency == "bsp");
  ASSERT_TRUE(p.ok) << p.why;
  EXPECT_DOUBLE_EQ(p.mean_ms, r.iteration_ms);
  EXPECT_DOUBLE_EQ(p.std_ms, r.iteration_std_ms);
}

INSTANTIATE_TEST_SUITE_P(
    Consistency, SimulatorAndTrace,
    ::testing::Values(std::vector<std::string>{},
                      std::vector<std::string>{"cluster.workers=3", "protocol.gate=per_layer"},
                      std::vector<std::string>{"cluster.workers=3",
                                               "protocol.consistency={model: ssp, staleness: 1}"},
                      std::vector<std::string>{"protocol.consistency={model: asp}",
                                               "stragglers=[{worker: 1, slowdown: 1.5}]"}));

}  // namespace
}  // namespace poseidon::validation
