// The intra-machine model (cost/intra_machine.h) against closed forms: what one local reduction or
// broadcast costs alone, and how two of them and the NIC share host memory.
#include "cost/intra_machine.h"

#include <gtest/gtest.h>

#include "sim/cluster.h"
#include "tests/core/test_models.h"

namespace poseidon::sim {
namespace {

config::InterconnectSpec Spec(config::InterconnectKind kind, config::ReduceOn on) {
  config::InterconnectSpec s;
  s.kind = kind;
  s.reduce_on = on;
  s.link_Bps = 100e9;
  s.pcie_Bps = 10e9;
  s.host_memory_Bps = 100e9;
  s.link_latency_ns = 1000;
  return s;
}

TEST(IntraMachine, AloneCostsAreTheStagesClosedForms) {
  using config::InterconnectKind;
  using config::ReduceOn;
  const int64_t S = 8'000'000;
  {  // CPU devices: sums and copies in host memory only.
    config::InterconnectSpec s;
    s.host_memory_Bps = 10e9;
    const cost::IntraMachine m(s, 4, 1, 1e9);
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kReduce, S), 5 * S / 10);     // (D+1) S / H
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kBroadcast, S), 6 * S / 10);  // 2 (D-1) S / H
  }
  {  // NVLink, reduced on the devices: the ring, then 1/D of the sum each to the host.
    const cost::IntraMachine m(Spec(InterconnectKind::kNvlink, ReduceOn::kDevice), 8, 1, 1e9);
    const int64_t ring = 7 * 1000 + 7 * S / 8 / 100;             // (D-1) lambda + f S / L
    const int64_t up = 1000 + std::max(S / 8 / 10, S / 100);     // lambda + max(S/D/C, S/H)
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kReduce, S), ring + up);
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kBroadcast, S), ring + up);
  }
  {  // PCIe peers: the ring crosses the devices' PCIe links.
    const cost::IntraMachine m(Spec(InterconnectKind::kPcie, ReduceOn::kDevice), 8, 1, 1e9);
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kReduce, S),
              7 * 1000 + 7 * S / 8 / 10 + 1000 + std::max(S / 8 / 10, S / 100));
  }
  {  // Reduced on the host: every device's copy up, then the CPU's sum.
    const cost::IntraMachine m(Spec(InterconnectKind::kNvlink, ReduceOn::kHost), 4, 1, 1e9);
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kReduce, S),
              1000 + std::max(S / 10, 4 * S / 100) + 5 * S / 100);
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kBroadcast, S), 1000 + std::max(S / 10, 4 * S / 100));
  }
}

// Runs the machine's events until every op ended; returns each tag's end.
std::map<uint64_t, TimeNs> RunToEnd(cost::IntraMachine& m, TimeNs next) {
  std::map<uint64_t, TimeNs> ends;
  while (next != kNever) {
    std::vector<uint64_t> done;
    const TimeNs at = next;
    next = m.Advance(at, 0, &done);
    for (uint64_t t : done) ends[t] = at;
  }
  return ends;
}

// One device's copy (a message between processes of one machine): alone, lambda plus the bytes
// over one device's link; as many at once as there are devices (a ring step), each still at the
// link's rate; twice as many, half of it.
TEST(IntraMachine, DeviceCopiesTakeOneDevicesLinkAndShareItOnlyBeyondOnePerDevice) {
  using config::InterconnectKind;
  using config::ReduceOn;
  const int64_t S = 8'000'000;
  {
    const cost::IntraMachine m(Spec(InterconnectKind::kNvlink, ReduceOn::kDevice), 4, 1, 1e9);
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kPeerCopy, S), 1000 + S / 100);        // lambda + S / L
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kToHost, S), 1000 + std::max(S / 10, S / 100));
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kFromHost, S), 1000 + S / 10);         // S / C
  }
  {  // PCIe peers: up the source's link and down the destination's.
    const cost::IntraMachine m(Spec(InterconnectKind::kPcie, ReduceOn::kDevice), 4, 1, 1e9);
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kPeerCopy, S), 1000 + S / 10);
  }
  {  // CPU devices: read and written in host memory.
    config::InterconnectSpec s;
    s.host_memory_Bps = 10e9;
    const cost::IntraMachine m(s, 4, 1, 1e9);
    EXPECT_EQ(m.AloneNs(cost::IntraOp::kPeerCopy, S), 2 * S / 10);
  }
  for (int copies : {4, 8}) {
    cost::IntraMachine m(Spec(InterconnectKind::kNvlink, ReduceOn::kDevice), 4, 1, 1e9);
    TimeNs next = kNever;
    for (int i = 0; i < copies; ++i) {
      next = m.Start(0, 0, cost::IntraOp::kPeerCopy, S, static_cast<uint64_t>(i));
    }
    const auto ends = RunToEnd(m, next);
    ASSERT_EQ(ends.size(), static_cast<size_t>(copies));
    for (const auto& [tag, end] : ends) {
      EXPECT_EQ(end, 1000 + (copies / 4) * S / 100) << copies << " copies, tag " << tag;
    }
  }
}

TEST(IntraMachine, TwoOpsShareHostMemoryBySlowingDownAlike) {
  // CPU devices, D = 2: a reduction moves 3S, a broadcast 2S, each alone at H. Together each
  // runs at H/2; the broadcast ends at 4S/H, and the reduction, with S left, at 5S/H.
  config::InterconnectSpec s;
  s.host_memory_Bps = 1e9;  // 1 byte per ns
  cost::IntraMachine m(s, 2, 1, 1e9);
  const int64_t S = 1'000'000;
  m.Start(0, 0, cost::IntraOp::kReduce, S, 1);
  const TimeNs next = m.Start(0, 0, cost::IntraOp::kBroadcast, S, 2);
  const auto ends = RunToEnd(m, next);
  EXPECT_NEAR(static_cast<double>(ends.at(2)), 4.0 * S, 2);
  EXPECT_NEAR(static_cast<double>(ends.at(1)), 5.0 * S, 2);
}

TEST(IntraMachine, ABusyNicTakesItsShareOfHostMemory) {
  // A reduction alone at H and a NIC direction wanting H/2: both slowed to 2/3, the reduction's
  // 3S then take 4.5 S/H; once the NIC stops, the rest runs at H.
  config::InterconnectSpec s;
  s.host_memory_Bps = 1e9;
  cost::IntraMachine m(s, 2, 1, /*nic_Bps=*/0.5e9);
  const int64_t S = 1'000'000;
  m.SetNic(0, 0, 1);
  const auto busy = RunToEnd(m, m.Start(0, 0, cost::IntraOp::kReduce, S, 7));
  EXPECT_NEAR(static_cast<double>(busy.at(7)), 4.5 * S, 2);

  cost::IntraMachine n(s, 2, 1, 0.5e9);
  n.SetNic(0, 0, 2);  // both directions: H/2 + H/2 against the reduction's H: each at 1/2
  TimeNs next = n.Start(0, 0, cost::IntraOp::kReduce, S, 8);
  // At 2S (S of 3S moved) the NIC goes idle; the 2S left run at H.
  std::vector<uint64_t> done;
  next = n.Advance(2 * S, 0, &done);
  next = n.SetNic(2 * S, 0, 0);
  EXPECT_TRUE(done.empty());
  const auto ends = RunToEnd(n, next);
  EXPECT_NEAR(static_cast<double>(ends.at(8)), 4.0 * S, 2);
}

// Every layer's forward and backward pass take fwd_ms and bwd_ms; a CPU device (no copies).
cost::ComputeModel Fixed(const core::Model& model, double fwd_ms, double bwd_ms) {
  config::ProfileSpec p;
  p.model = model.name();
  p.batch = 1;
  p.backend = "synthetic";
  for (const auto& l : model.layers()) p.layers[l.name] = {fwd_ms, bwd_ms};
  cost::ComputeModel c = cost::ComputeModel::FromProfile(model, p, 1, "fixed");
  c.set_pcie_bandwidth(0);
  return c;
}

// With nothing but the local operations to do (one machine, zero compute, its own shard), an
// iteration is one local reduction and one broadcast per layer, back to back.
TEST(IntraMachine, AJobOfOneMachineIsItsLocalOperations) {
  const core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));
  cost::ComputeModel zero = Fixed(model, 0, 0);
  zero.set_host_memory_bandwidth(1e30);  // the shard's update rounds to 0 ns
  for (int devices : {2, 4}) {
    SimJobConfig cfg;
    cfg.model = &model;
    cfg.layout = core::JobLayout::Colocated(1, 1);
    cfg.protocol.iterations = 3;
    cfg.protocol.devices_per_machine = devices;
    cfg.interconnect.host_memory_Bps = 10e9;
    cfg.worker_compute.assign(1, zero);
    SimJob job(cfg);
    const SimRun run = job.Run();
    ASSERT_FALSE(run.deadlocked) << run.deadlock_report;
    const cost::IntraMachine m(cfg.interconnect, devices, 1, cfg.network.host_bandwidth_Bps);
    const int64_t bytes = 4 * 1000 * 250;
    const TimeNs expected =
        m.AloneNs(cost::IntraOp::kReduce, bytes) + m.AloneNs(cost::IntraOp::kBroadcast, bytes);
    const WorkerRun& w = run.workers[0];
    for (size_t c = 1; c < 3; ++c) {
      EXPECT_EQ(w.iteration_begin[c] - w.iteration_begin[c - 1], expected) << devices;
    }
  }
}

// The network sees machines: with local operations that cost nothing, M machines of D devices
// run every iteration exactly as M machines of one device (each device computes its own batch).
TEST(IntraMachine, FreeLocalOperationsLeaveTheMachinesIterationAsOneDevices) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const cost::ComputeModel compute = Fixed(model, 0.05, 0.1);
  auto run = [&](int devices) {
    SimJobConfig cfg;
    cfg.model = &model;
    cfg.layout = core::JobLayout::Colocated(3, 3);
    cfg.protocol.iterations = 4;
    cfg.protocol.chunk_bytes = 512;
    cfg.protocol.devices_per_machine = devices;
    cfg.network.host_bandwidth_Bps = 1e8;
    cfg.interconnect.host_memory_Bps = 1e30;  // local operations round to 0 ns
    cfg.worker_compute.assign(3, compute);
    SimJob job(cfg);
    return job.Run();
  };
  const SimRun one = run(1), four = run(4);
  ASSERT_FALSE(four.deadlocked) << four.deadlock_report;
  for (size_t w = 0; w < 3; ++w) {
    EXPECT_EQ(one.workers[w].iteration_begin, four.workers[w].iteration_begin);
    EXPECT_EQ(one.workers[w].synced, four.workers[w].synced);
  }
  EXPECT_EQ(one.network_messages, four.network_messages);
  EXPECT_EQ(one.network_payload_bytes, four.network_payload_bytes);
}

}  // namespace
}  // namespace poseidon::sim
