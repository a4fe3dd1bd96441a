// Sweeps beyond one machine (shards, merge, identical points computed once), deadlock reports,
// progress callbacks, and the event queue's order under the scale issue's changes.
#include <algorithm>
#include <filesystem>
#include <unistd.h>
#include <fstream>
#include <random>
#include <stdexcept>
#include <tuple>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/scenario.h"
#include "sim/cluster.h"
#include "sim/engine.h"
#include "sim/simulation.h"
#include "sim/sweep.h"
#include "tests/core/test_models.h"

namespace poseidon::sim {
namespace {

namespace fs = std::filesystem;
const std::string kSrc = POSEIDON_SOURCE_DIR;

// The acceptance check: a sweep split into 4 shards and merged equals the sweep run whole, byte
// for byte, whatever order the shard files are given in.
TEST(SweepShards, FourShardsMergedEqualTheWholeSweep) {
  config::SweepSpec sw = config::LoadSweepFile(kSrc + "/tests/golden/small_sweep.yaml");
  ASSERT_EQ(sw.points.size(), 6u);
  const std::string whole = RunSweep(sw, 2, nullptr);
  std::vector<std::pair<std::string, std::string>> shards;
  int rows = 0;
  for (int i = 0; i < 4; ++i) {
    SweepOptions o;
    o.threads = 1;
    o.shard_index = i;
    o.shard_count = 4;
    std::string csv = RunSweep(sw, o);
    EXPECT_EQ(csv.rfind("# poseidon-sweep-shard " + std::to_string(i) + "/4 ", 0), 0u) << csv;
    rows += static_cast<int>(std::count(csv.begin(), csv.end(), '\n')) - 2;
    shards.emplace_back("s" + std::to_string(i) + ".csv", std::move(csv));
  }
  EXPECT_EQ(rows, 6);
  std::swap(shards[0], shards[3]);  // order of the files does not matter
  EXPECT_EQ(MergeSweepShards(shards), whole);
}

TEST(SweepShards, MergeRejectsMissingDuplicateAndForeignShards) {
  config::SweepSpec sw = config::LoadSweepFile(kSrc + "/tests/golden/small_sweep.yaml");
  sw.points.resize(2);  // only the file format matters here; keep the test fast
  auto shard = [&](int i, int n) {
    SweepOptions o;
    o.shard_index = i;
    o.shard_count = n;
    return RunSweep(sw, o);
  };
  const std::string s0 = shard(0, 2), s1 = shard(1, 2);
  auto msg = [](const std::vector<std::pair<std::string, std::string>>& f) {
    try {
      MergeSweepShards(f);
    } catch (const config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg({{"a.csv", s0}}).find("shard 1/2 of 'small-sweep' is missing"), std::string::npos)
      << msg({{"a.csv", s0}});
  EXPECT_NE(msg({{"a.csv", s0}, {"b.csv", s0}, {"c.csv", s1}}).find("given twice"),
            std::string::npos);
  const std::string whole = RunSweep(sw, 1, nullptr);
  EXPECT_NE(msg({{"w.csv", whole}}).find("w.csv:1: error: not a sweep shard"), std::string::npos);
  EXPECT_NE(msg({{"a.csv", s0}, {"x.csv", shard(1, 3)}}).find("x.csv: error: shard of a different"),
            std::string::npos);
  // A truncated shard (a lost row) is caught.
  EXPECT_NE(msg({{"a.csv", s0}, {"b.csv", s1.substr(0, s1.rfind('\n', s1.size() - 2) + 1)}})
                .find("b.csv: error: shard 1/2 holds 0 rows, expected 1"),
            std::string::npos);
}

TEST(SweepShards, ParseShardAcceptsIOverNAndRejectsTheRest) {
  int i = -1, n = -1;
  ParseShard("3/4", &i, &n);
  EXPECT_EQ(i, 3);
  EXPECT_EQ(n, 4);
  for (const char* bad : {"4/4", "-1/4", "1", "1/0", "a/4", "1/4x", "", "/"}) {
    EXPECT_THROW(ParseShard(bad, &i, &n), config::ConfigError) << bad;
  }
  config::SweepSpec sw;
  SweepOptions o;
  o.shard_index = 5;
  o.shard_count = 2;
  EXPECT_THROW(RunSweep(sw, o), config::ConfigError);
}

// Points with identical inputs are computed once (the progress callback counts simulations)
// and get identical rows.
TEST(SweepShards, IdenticalPointsAreComputedOnce) {
  const fs::path dir = fs::temp_directory_path() / ("poseidon_scale_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "dup.yaml") << "schema_version: 1\nname: dup\nbase: "
                                  << kSrc + "/tests/golden/small.yaml"
                                  << "\nvary:\n  cluster.workers: [2, 1, 2]\n"
                                  << "  variant:\n"
                                  << "    - {name: a, set: {seed: 1}}\n"
                                  << "    - {name: b, set: {seed: 1}}\n";
  config::SweepSpec sw = config::LoadSweepFile((dir / "dup.yaml").string());
  fs::remove_all(dir);
  ASSERT_EQ(sw.points.size(), 6u);
  // small.yaml already has seed 1, so variants a and b equal the base: only the worker count
  // distinguishes inputs (2 distinct of 6 points).
  int simulated = 0;
  SweepOptions o;
  o.threads = 2;
  o.progress = [&](int, int total) { simulated = total; };
  const std::string csv = RunSweep(sw, o);
  EXPECT_EQ(simulated, 2);
  std::vector<std::string> lines;
  size_t pos = 0;
  for (size_t e; (e = csv.find('\n', pos)) != std::string::npos; pos = e + 1) {
    lines.push_back(csv.substr(pos, e - pos));
  }
  ASSERT_EQ(lines.size(), 7u);
  auto result = [&](int row) {  // drop the two axis columns
    const std::string& l = lines[static_cast<size_t>(row) + 1];
    return l.substr(l.find(',', l.find(',') + 1));
  };
  EXPECT_EQ(result(0), result(1));  // workers 2, variants a and b
  EXPECT_EQ(result(0), result(4));  // workers 2 again
  EXPECT_EQ(result(2), result(3));  // workers 1
  EXPECT_NE(result(0), result(2));
}

// A job that cannot progress (worker 1's pushes are lost) ends with a report of who waits for
// what instead of hanging.
TEST(Deadlock, LostPushesEndTheRunWithWhoWaitsForWhat) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  SimJobConfig cfg;
  cfg.model = &model;
  cfg.layout = core::JobLayout::Dedicated(2, 1);
  cfg.protocol.iterations = 2;
  config::NetworkSpec net;
  net.host_bandwidth_Bps = 1.25e9;
  net.latency_ns = 5000;
  cfg.network = net;
  config::ProfileSpec p;
  p.model = model.name();
  p.batch = 1;
  p.backend = "synthetic";
  for (const auto& l : model.layers()) p.layers[l.name] = {0.1, 0.2};
  cfg.worker_compute.assign(2, cost::ComputeModel::FromProfile(model, p, 1, "test"));
  const core::ActorId w1 = cfg.layout.worker(1);
  cfg.drop_message = [w1](const core::Message& m) {
    return m.type == core::MsgType::kPushGrad && m.from == w1;
  };
  SimJob job(std::move(cfg));
  SimRun run = job.Run();
  ASSERT_TRUE(run.deadlocked);
  EXPECT_NE(run.deadlock_report.find("shard 0: chunk 0 at clock 0 has 1 of 2 pushes"),
            std::string::npos)
      << run.deadlock_report;
  EXPECT_NE(run.deadlock_report.find("worker 1: at clock 1, waiting for fresh parameters of"),
            std::string::npos)
      << run.deadlock_report;
  EXPECT_NE(run.deadlock_report.find("coordinator: 0 of 2 workers done"), std::string::npos)
      << run.deadlock_report;
}

// The progress callback sees a fraction that never decreases and reaches 1, and does not
// change the result.
TEST(Progress, FractionRisesToOneAndLeavesResultsAlone) {
  // ~200k events (the callback comes every 2^16).
  config::ScenarioSpec s =
      config::LoadScenarioFile(kSrc + "/bench/scenarios/alexnet_bsp.yaml", {"cluster.workers=64", "iterations=3"});
  SimOptions plain;
  plain.baseline = false;
  SimOptions watched = plain;
  std::vector<double> seen;
  watched.progress = [&](double f) { seen.push_back(f); };
  const ScenarioResult a = SimulateScenario(s, plain);
  const ScenarioResult b = SimulateScenario(s, watched);
  EXPECT_EQ(FormatResult(a, OutputFormat::kJson), FormatResult(b, OutputFormat::kJson));
  ASSERT_GE(seen.size(), 2u) << a.events << " events";
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_GE(seen.front(), 0.0);
  EXPECT_GT(seen.back(), 0.0);
  EXPECT_LE(seen.back(), 1.0);
}

// The radix-heap queue against a sorted reference with delays over many magnitudes (every
// bucket is used) and many ties (which must pop in push order).
TEST(EventQueueScale, MatchesSortedReferenceAcrossMagnitudesAndTies) {
  std::mt19937_64 rng(7);
  EventQueue q;
  std::vector<std::tuple<int64_t, uint64_t, uint32_t>> ref;  // (time, seq, target)
  std::vector<uint32_t> popped, expected;
  uint64_t seq = 0;
  int64_t now = 0;
  for (int step = 0; step < 60000; ++step) {
    if (ref.empty() || rng() % 2 == 0) {
      const int shift = static_cast<int>(rng() % 48);
      const int64_t t = rng() % 4 == 0 ? now : now + static_cast<int64_t>(rng() >> (16 + shift));
      const uint32_t target = static_cast<uint32_t>(step);
      q.Push(t, 0, target, 0);
      ref.emplace_back(t, seq++, target);
    } else {
      auto it = std::min_element(ref.begin(), ref.end());
      expected.push_back(std::get<2>(*it));
      now = std::get<0>(*it);
      ref.erase(it);
      Event e;
      ASSERT_TRUE(q.Pop(&e));
      ASSERT_EQ(e.time, now);
      popped.push_back(e.target);
    }
  }
  EXPECT_EQ(popped, expected);
  EXPECT_EQ(q.size(), ref.size());
}

TEST(EventQueueScale, PushIntoThePastIsRejected) {
  EventQueue q;
  q.Push(100, 0, 1, 0);
  Event e;
  ASSERT_TRUE(q.Pop(&e));
  EXPECT_THROW(q.Push(99, 0, 2, 0), std::logic_error);
  q.Push(100, 0, 3, 0);  // the present is fine
  ASSERT_TRUE(q.Pop(&e));
  EXPECT_EQ(e.target, 3u);
}

}  // namespace
}  // namespace poseidon::sim
