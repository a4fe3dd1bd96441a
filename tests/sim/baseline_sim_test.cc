// The baselines (protocol.baseline, core/collectives.h) in the simulator, against closed forms on
// small cases: two workers on one switch, zero compute, known bucket sizes.
#include <gtest/gtest.h>

#include "config/scenario.h"
#include "sim/cluster.h"
#include "sim/simulation.h"
#include "tests/core/test_models.h"

namespace poseidon::sim {
namespace {

// data(1 x 1 x 1000) -> fc1(1000) -> fc2(500) -> fc3(100) -> loss. Gradient tensors in the order
// they become ready: fc3.bias 400 B, fc3.weight 200,000 B, fc2.bias 2,000 B, fc2.weight
// 2,000,000 B, fc1.bias 4,000 B, fc1.weight 4,000,000 B (6,206,400 B in all).
core::ModelSpec ThreeFc() { return testing::FcChainSpec("three_fc", 1000, {1000, 500, 100}); }

cost::ComputeModel ZeroCompute(const core::Model& model) {
  config::ProfileSpec p;
  p.model = model.name();
  p.batch = 1;
  p.backend = "synthetic";
  for (const auto& l : model.layers()) p.layers[l.name] = {0, 0};
  cost::ComputeModel c = cost::ComputeModel::FromProfile(model, p, 1, "zero-profile");
  c.set_host_memory_bandwidth(1e30);
  c.set_pcie_bandwidth(0);
  return c;
}

constexpr double kGbps = 10;
constexpr double kBytesPerNs = kGbps / 8;
constexpr int64_t kLatencyNs = 5000;

SimRun RunOn(const core::Model& model, const core::BaselineConfig& b, int iterations,
             int machines) {
  SimJobConfig cfg;
  cfg.model = &model;
  cfg.layout = core::JobLayout::Colocated(machines, 1);
  cfg.protocol.chunk_bytes = int64_t{1} << 30;  // one piece per collective
  cfg.protocol.iterations = iterations;
  cfg.protocol.scheme_of_layer.assign(model.layers().size(), core::Scheme::kAllreduce);
  cfg.protocol.baseline = b;
  cfg.network.host_bandwidth_Bps = kGbps * 1e9 / 8;
  cfg.network.latency_ns = kLatencyNs;
  cfg.worker_compute.assign(static_cast<size_t>(machines), ZeroCompute(model));
  SimJob job(std::move(cfg));
  return job.Run();
}

SimRun RunTwo(const core::Model& model, const core::BaselineConfig& b, int iterations) {
  return RunOn(model, b, iterations, 2);
}

// A ring all-reduce of S bytes between two workers: two steps, each one message of S/2 bytes
// (plus the header) each way at once, the second once the first has arrived.
double RingOfTwoNs(int64_t s) {
  return 2 * (kLatencyNs + (s / 2 + core::Message::kHeaderBytes) / kBytesPerNs);
}

// DDP: iteration 0 all-reduces one bucket of every gradient; from iteration 1 on the rebuilt
// buckets (first_bucket_mib then bucket_cap_mib) go one after another, so an iteration with no
// compute is the sum of their all-reduce times.
TEST(BaselineSim, DdpIterationIsTheSumOfItsBucketsAllReduces) {
  const core::Model model = core::Model::Build(ThreeFc());
  core::BaselineConfig b;
  b.kind = core::Baseline::kDdp;
  b.first_bucket_bytes = 100 << 10;
  b.bucket_cap_bytes = 3 << 19;  // 1.5 MiB
  // Rebuilt: fc3's two tensors reach 100 KiB with fc3.weight (200,400 B), fc2's the 1.5 MiB cap
  // with fc2.weight (2,002,000 B), fc1's the cap with fc1.weight (4,004,000 B).
  const double first = RingOfTwoNs(6'206'400);
  const double rebuilt = RingOfTwoNs(200'400) + RingOfTwoNs(2'002'000) + RingOfTwoNs(4'004'000);
  const SimRun run = RunTwo(model, b, 4);
  ASSERT_FALSE(run.deadlocked) << run.deadlock_report;
  // Clock 0 may take one header's time more (32 ns): the coordinator's start message to worker 1
  // leaves machine 0 on the stream worker 0's first step then queues behind.
  const double start_header = core::Message::kHeaderBytes / kBytesPerNs;
  for (const WorkerRun& w : run.workers) {
    ASSERT_EQ(w.iteration_end.size(), 4u);
    EXPECT_NEAR(static_cast<double>(w.iteration_end[0] - w.iteration_begin[0]), first,
                start_header + 4);
    for (size_t c = 1; c < 4; ++c) {
      EXPECT_NEAR(static_cast<double>(w.iteration_end[c] - w.iteration_begin[c]), rebuilt, 6)
          << "clock " << c;
    }
  }
  // The defaults (1 MiB, then 25 MiB): fc3 and fc2 reach 1 MiB with fc2.weight (2,202,400 B),
  // fc1 is the rest.
  b.first_bucket_bytes = core::kDdpFirstBucketBytes;
  b.bucket_cap_bytes = core::kDdpBucketCapBytes;
  const SimRun defaults = RunTwo(model, b, 3);
  ASSERT_FALSE(defaults.deadlocked) << defaults.deadlock_report;
  for (const WorkerRun& w : defaults.workers) {
    EXPECT_NEAR(static_cast<double>(w.iteration_end[0] - w.iteration_begin[0]), first,
                start_header + 4);
    for (size_t c = 1; c < 3; ++c) {
      EXPECT_NEAR(static_cast<double>(w.iteration_end[c] - w.iteration_begin[c]),
                  RingOfTwoNs(2'202'400) + RingOfTwoNs(4'004'000), 6);
    }
  }
}

// NCCL's tree on two machines (core/tree.h): tree 0 is 1 -> 0, tree 1 is 0 -> 1, so each
// direction of the link carries S (half 0 one way, half 1 the other, up then down), as the ring
// of two does. The tree pipelines its pieces (TreePieceBytes: 128 KiB chunks here, depth 1):
// each bucket takes at least S at the link's rate, and at most the ring of two plus one piece's
// round trip and every piece's headers.
TEST(BaselineSim, TreeOnTwoMachinesMovesWhatTheRingOfTwoMovesPipelined) {
  const core::Model model = core::Model::Build(ThreeFc());
  core::BaselineConfig b;
  b.kind = core::Baseline::kDdp;
  b.first_bucket_bytes = 100 << 10;
  b.bucket_cap_bytes = 3 << 19;
  b.algorithm = core::AllreduceAlgorithm::kTree;
  double lo = 0, hi = 0;
  for (int64_t s : {200'400, 2'002'000, 4'004'000}) {
    const int64_t piece = core::TreePieceBytes(s, int64_t{1} << 30, 1);
    const double pieces = std::ceil(static_cast<double>(s) / piece);
    lo += s / kBytesPerNs;
    hi += RingOfTwoNs(s) + 2 * (kLatencyNs + (piece / 2.0) / kBytesPerNs) +
          4 * pieces * core::Message::kHeaderBytes / kBytesPerNs;
  }
  EXPECT_EQ(core::TreePieceBytes(4'004'000, int64_t{1} << 30, 1), 262'144);
  const SimRun run = RunTwo(model, b, 3);
  ASSERT_FALSE(run.deadlocked) << run.deadlock_report;
  for (const WorkerRun& w : run.workers) {
    for (size_t c = 1; c < 3; ++c) {
      const double t = static_cast<double>(w.iteration_end[c] - w.iteration_begin[c]);
      EXPECT_GE(t, lo) << "clock " << c;
      EXPECT_LE(t, hi) << "clock " << c;
    }
  }
}

// Where latency rules (one gradient of 10 values on 8 machines), the ring takes 2(P-1) = 14 steps
// one after another and the tree twice its depth, 2 x 3: up 1 -> 2 -> 4 -> 0 and back down in
// tree 0 (tree 1 mirrors it). Each step is a latency plus a message of a few bytes.
TEST(BaselineSim, TreeTakesTwiceItsDepthInStepsWhereTheRingTakesTwicePMinusOne) {
  const core::Model model = core::Model::Build(testing::FcChainSpec("tiny", 4, {2}));
  core::BaselineConfig b;
  b.kind = core::Baseline::kDdp;
  const double step_max = kLatencyNs + 2 * (core::Message::kHeaderBytes + 40) / kBytesPerNs;
  auto clock1 = [&](core::AllreduceAlgorithm a) {
    b.algorithm = a;
    const SimRun run = RunOn(model, b, 3, 8);
    EXPECT_FALSE(run.deadlocked) << run.deadlock_report;
    const WorkerRun& w = run.workers.at(0);
    return static_cast<double>(w.iteration_end.at(1) - w.iteration_begin.at(1));
  };
  const double tree = clock1(core::AllreduceAlgorithm::kTree);
  const double ring = clock1(core::AllreduceAlgorithm::kRing);
  EXPECT_GE(tree, 6 * kLatencyNs);
  EXPECT_LE(tree, 6 * step_max);
  EXPECT_GE(ring, 14 * kLatencyNs);
  EXPECT_LE(ring, 14 * step_max);
}

// allreduce_algorithm auto runs each collective as NCCL's tuning model chooses
// (core/nccl_tuning.h): at 10 GbE one gradient of 10 values is latency (the tree: on 8 machines
// 92 us against the ring's 388 us in NCCL's model) and buckets of 0.2 to 6 MB are bandwidth (the
// ring, which between two processes moves each byte once per direction, as the tree does, at
// NCCL's full rate). So each run equals the run of the algorithm chosen, to the nanosecond.
TEST(BaselineSim, AutoRunsTheAlgorithmNcclChoosesForEachBucket) {
  auto iterations = [](const core::Model& model, core::BaselineConfig b, int machines) {
    b.nccl.ranks = b.nccl.nodes = machines;
    b.nccl.net_GBps = b.nccl.intra_GBps = kGbps / 8;
    const SimRun run = RunOn(model, b, 3, machines);
    EXPECT_FALSE(run.deadlocked) << run.deadlock_report;
    std::vector<core::TimeNs> t;
    for (const WorkerRun& w : run.workers) {
      for (size_t c = 0; c < w.iteration_end.size(); ++c) {
        t.push_back(w.iteration_end[c] - w.iteration_begin[c]);
      }
    }
    return t;
  };
  auto with = [](core::BaselineConfig b, core::AllreduceAlgorithm a) {
    b.algorithm = a;
    return b;
  };
  core::BaselineConfig b;
  b.kind = core::Baseline::kDdp;
  b.first_bucket_bytes = 100 << 10;
  b.bucket_cap_bytes = 3 << 19;
  const core::Model tiny = core::Model::Build(testing::FcChainSpec("tiny", 4, {2}));
  const core::Model fc = core::Model::Build(ThreeFc());
  const core::AllreduceAlgorithm kAuto = core::AllreduceAlgorithm::kAuto;
  const core::AllreduceAlgorithm kRing = core::AllreduceAlgorithm::kRing;
  const core::AllreduceAlgorithm kTree = core::AllreduceAlgorithm::kTree;
  EXPECT_EQ(iterations(tiny, with(b, kAuto), 8), iterations(tiny, with(b, kTree), 8));
  EXPECT_EQ(iterations(fc, with(b, kAuto), 8), iterations(fc, with(b, kRing), 8));
  EXPECT_NE(iterations(fc, with(b, kTree), 8), iterations(fc, with(b, kRing), 8));
  EXPECT_EQ(iterations(tiny, with(b, kAuto), 2), iterations(tiny, with(b, kTree), 2));
  EXPECT_EQ(iterations(fc, with(b, kAuto), 2), iterations(fc, with(b, kRing), 2));
}

// With a process per device, DDP's ring between the two devices of one machine crosses its
// NVLink (cluster.local_copies: interconnect): each step both devices copy S/2 (plus the header)
// at once, each at the link's rate after its latency; free copies (the default) take no time.
TEST(BaselineSim, DdpOnTwoDevicesOfOneMachineCrossesTheirLink) {
  const core::Model model = core::Model::Build(ThreeFc());
  core::BaselineConfig b;
  b.kind = core::Baseline::kDdp;
  b.first_bucket_bytes = 100 << 10;
  b.bucket_cap_bytes = 3 << 19;
  constexpr double kLinkBytesPerNs = 50;  // 50 GB/s
  constexpr int64_t kLinkLatencyNs = 2000;
  auto ring = [&](int64_t s) {
    return 2 * (kLinkLatencyNs + (s / 2 + core::Message::kHeaderBytes) / kLinkBytesPerNs);
  };
  for (bool timed : {false, true}) {
    SimJobConfig cfg;
    cfg.model = &model;
    cfg.layout = core::JobLayout::Build(1, 2, 1, /*colocated=*/true);
    cfg.protocol.chunk_bytes = int64_t{1} << 30;
    cfg.protocol.iterations = 3;
    cfg.protocol.scheme_of_layer.assign(model.layers().size(), core::Scheme::kAllreduce);
    cfg.protocol.baseline = b;
    cfg.network.host_bandwidth_Bps = kGbps * 1e9 / 8;
    cfg.network.latency_ns = kLatencyNs;
    cfg.interconnect.kind = config::InterconnectKind::kNvlink;
    cfg.interconnect.link_Bps = kLinkBytesPerNs * 1e9;
    cfg.interconnect.link_latency_ns = kLinkLatencyNs;
    cfg.interconnect.pcie_Bps = 10e9;
    cfg.interconnect.host_memory_Bps = 100e9;
    cfg.local_copy_devices = timed ? 2 : 0;
    cfg.worker_compute.assign(2, ZeroCompute(model));
    SimJob job(std::move(cfg));
    const SimRun run = job.Run();
    ASSERT_FALSE(run.deadlocked) << run.deadlock_report;
    const double rebuilt =
        timed ? ring(200'400) + ring(2'002'000) + ring(4'004'000) : 0.0;
    for (const WorkerRun& w : run.workers) {
      for (size_t c = 1; c < 3; ++c) {
        EXPECT_NEAR(static_cast<double>(w.iteration_end[c] - w.iteration_begin[c]), rebuilt, 6)
            << (timed ? "timed" : "free") << ", clock " << c;
      }
    }
  }
}

// Horovod with no compute: every gradient is ready at once, every worker reports it at its next
// cycle, worker 0 answers, and the fused all-reduce (shorter than a cycle here) ends before the
// next cycle: an iteration takes exactly one cycle, whatever the cycle.
TEST(BaselineSim, HorovodIterationWithoutComputeIsOneCycle) {
  const core::Model model = core::Model::Build(ThreeFc());
  ASSERT_LT(2 * kLatencyNs + RingOfTwoNs(6'206'400), 12e6);
  for (int64_t cycle_ms : {12, 20}) {
    core::BaselineConfig b;
    b.kind = core::Baseline::kHorovod;
    b.cycle_ns = cycle_ms * 1'000'000;
    const SimRun run = RunTwo(model, b, 4);
    ASSERT_FALSE(run.deadlocked) << run.deadlock_report;
    for (const WorkerRun& w : run.workers) {
      for (size_t c = 1; c < 4; ++c) {
        EXPECT_EQ(w.iteration_end[c] - w.iteration_begin[c], b.cycle_ns) << "clock " << c;
      }
    }
  }
}

// The baseline keys of a scenario change the simulated iteration, and a scenario without them
// is the one it was (the golden scenario, byte for byte: tests/sim/cluster_test.cc GoldenTrace).
TEST(BaselineSim, ScenarioKeysPickTheBaseline) {
  const std::string small = std::string(POSEIDON_SOURCE_DIR) + "/tests/golden/small.yaml";
  auto iteration = [&](std::vector<std::string> sets) {
    config::ScenarioSpec s = config::LoadScenarioFile(small, sets);
    SimOptions o;
    o.baseline = false;
    ScenarioResult r = SimulateScenario(s, o);
    EXPECT_FALSE(r.deadlocked) << r.deadlock_report;
    return r.iteration_ms;
  };
  const double ring = iteration({"iterations=4", "protocol.scheme=allreduce"});
  const double ddp = iteration({"iterations=4", "protocol.baseline=ddp"});
  const double hvd = iteration({"iterations=4", "protocol.baseline=horovod"});
  // CIFAR-10 quick's 0.58 MB of gradients fit DDP's first bucket: one all-reduce after the whole
  // backward pass, where Horovod overlaps its cycles with the backward pass.
  EXPECT_GT(ddp, hvd);
  EXPECT_NE(ddp, ring);
}

}  // namespace
}  // namespace poseidon::sim
