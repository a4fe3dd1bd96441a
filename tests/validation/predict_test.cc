// Tests of validation/predict.cc: the predicted pace from one seed or the median of several.
#include "validation/predict.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "sim/simulation.h"

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

// On emulated hosts the prediction says what the host model booked for the job's processes per
// measured iteration: a message's CPU (host_message_us) 10 us dearer books 10 us more for each
// message delivered; the simulator's trace carries the bookings only when asked.
TEST(Predict, BooksTheProcessesCpuOnEmulatedHostsOnly) {
  const config::ScenarioSpec s = Mlp({"iterations=6"});
  const std::string dir = Dir("booked");
  const Prediction p = Predict(s, s, 1, dir);
  ASSERT_TRUE(p.pace.ok) << p.pace.why;
  ASSERT_TRUE(std::isfinite(p.booked_cpu_ms));
  EXPECT_GT(p.booked_cpu_ms, 0);
  const std::vector<TraceRecord> events = ReadTraceFile(dir + "/sim.json");
  int64_t delivered = 0;
  for (const TraceRecord& e : events) {
    const core::TimeNs at = e.ts + e.dur;
    if (e.kind == TraceRecordKind::kMessage && at > p.pace.begin_ns && at <= p.pace.end_ns)
      ++delivered;
  }
  ASSERT_GT(delivered, 0);
  config::ScenarioSpec dearer = s;
  dearer.network.host_message_ns += 10'000;
  const Prediction q = Predict(dearer, dearer, 1, Dir("dearer"));
  ASSERT_TRUE(q.pace.ok) << q.pace.why;
  const double measured = static_cast<double>(s.iterations - s.warmup_iterations);
  EXPECT_NEAR(q.booked_cpu_ms - p.booked_cpu_ms, 0.010 * static_cast<double>(delivered) / measured,
              0.1 * 0.010 * static_cast<double>(delivered) / measured);
  // Hosts that are not emulated book nothing, and a simulation not asked writes no counter.
  const config::ScenarioSpec real = Mlp({"iterations=6", "cluster.network={bandwidth_gbps: 1}"});
  ASSERT_EQ(real.network.host_cores, 0);
  EXPECT_TRUE(std::isnan(Predict(real, real, 1, Dir("real")).booked_cpu_ms));
  sim::SimOptions so;
  so.record_trace = true;
  EXPECT_EQ(sim::SimulateScenario(s, so).chrome_trace.find("\"ph\":\"C\""), std::string::npos);
  so.record_host_cpu = true;
  EXPECT_NE(sim::SimulateScenario(s, so).chrome_trace.find("\"ph\":\"C\""), std::string::npos);
}

// A task of `actor`'s compute lane that took `dur_us` (live or simulated).
TraceRecord Task(core::ActorId actor, int64_t clock, const std::string& name, double dur_us) {
  TraceRecord e;
  e.kind = TraceRecordKind::kTask;
  e.name = name;
  e.thread.actor = actor;
  e.clock = clock;
  e.dur = static_cast<core::TimeNs>(dur_us * 1e3);
  return e;
}

TEST(LiveTaskLateness, PooledForTheRuleAndEachEmulatedHostAtItsOwnMedian) {
  // Two workers and a co-located shard: worker 0 runs its three tasks on time, worker 1 runs
  // every one of its 300-500 us late. Pooled (the faithfulness rule's median) the six tasks are
  // 150 us late; read per host, worker 1's median is 400 us, and it is named.
  const core::JobLayout layout = core::JobLayout::Colocated(2, 1);
  const core::ActorId w0 = layout.worker(0), w1 = layout.worker(1);
  std::vector<TraceRecord> live, simulated_run;
  const char* names[] = {"forward fc1", "forward fc2", "backward fc2"};
  const double late_w1[] = {300, 400, 500};
  for (int t = 0; t < 3; ++t) {
    simulated_run.push_back(Task(w0, 4, names[t], 100));
    simulated_run.push_back(Task(w1, 4, names[t], 100));
    live.push_back(Task(w0, 4, names[t], 100));
    live.push_back(Task(w1, 4, names[t], 100 + late_w1[t]));
  }
  live.push_back(Task(w1, 5, "forward fc1", 9000));  // no simulated task of that clock: not read
  TaskDurations simulated;
  for (const TraceRecord& e : simulated_run) simulated.emplace(TaskKey(e), e.dur);
  const TaskLateness late = LiveTaskLateness(simulated, live, layout);
  EXPECT_DOUBLE_EQ(late.median_us, 150);
  EXPECT_DOUBLE_EQ(late.latest_host_us, 400);
  EXPECT_EQ(late.latest_host, "worker 1");
  // A host that ran early sets nothing: the latest is then the on-time one.
  std::vector<TraceRecord> early = live;
  for (TraceRecord& e : early) {
    if (e.thread.actor == w1) e.dur = 40'000;
  }
  EXPECT_DOUBLE_EQ(LiveTaskLateness(simulated, early, layout).latest_host_us, 0);
  EXPECT_EQ(LiveTaskLateness(simulated, early, layout).latest_host, "worker 0");
  // None matched: no median, no name.
  const TaskLateness none = LiveTaskLateness({}, live, layout);
  EXPECT_TRUE(std::isnan(none.median_us));
  EXPECT_TRUE(std::isnan(none.latest_host_us));
  EXPECT_TRUE(none.latest_host.empty());
}

}  // namespace
}  // namespace poseidon::validation
