// The simulated cluster against closed forms, a golden trace, and itself (determinism).
#include "sim/cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include <gtest/gtest.h>

#include "config/scenario.h"
#include "sim/simulation.h"
#include "sim/sweep.h"
#include "tests/core/test_models.h"

namespace poseidon::sim {
namespace {

// A compute model in which every layer's forward and backward take `layer_ms` and every copy
// and update takes no time.
cost::ComputeModel FixedCompute(const core::Model& model, double layer_ms) {
  config::ProfileSpec p;
  p.model = model.name();
  p.batch = 1;
  p.backend = "synthetic";
  for (const auto& l : model.layers()) p.layers[l.name] = {layer_ms, layer_ms};
  cost::ComputeModel c = cost::ComputeModel::FromProfile(model, p, 1, "zero-profile");
  c.set_host_memory_bandwidth(1e30);  // updates round to 0 ns
  c.set_pcie_bandwidth(0);
  return c;
}

cost::ComputeModel ZeroCompute(const core::Model& model) { return FixedCompute(model, 0); }

config::NetworkSpec Star(double gbps, int64_t latency_ns) {
  config::NetworkSpec n;
  n.host_bandwidth_Bps = gbps * 1e9 / 8;
  n.latency_ns = latency_ns;
  return n;
}

SimRun RunZeroCompute(const core::Model& model, core::JobLayout layout, config::NetworkSpec net,
                      int64_t chunk_bytes, int iterations) {
  SimJobConfig cfg;
  cfg.model = &model;
  cfg.layout = std::move(layout);
  cfg.protocol.chunk_bytes = chunk_bytes;
  cfg.protocol.iterations = iterations;
  cfg.protocol.dwbp = false;
  cfg.network = net;
  cfg.worker_compute.assign(cfg.layout.num_workers, ZeroCompute(model));
  SimJob job(std::move(cfg));
  return job.Run();
}

// A BSP iteration with P workers, one dedicated shard, zero compute and no overlap costs push
// incast plus pull fan-out: 2*P*S/B plus one latency each way.
TEST(SimJob, BspIterationIsIncastPlusFanOut) {
  const int64_t m = 1000, n = 250;  // 1 MB of weights in one chunk
  core::Model model = core::Model::Build(testing::SingleFcSpec(m, n));
  const int64_t s = 4 * m * n + core::Message::kHeaderBytes;  // wire bytes of one message
  const double gbps = 10;
  const double bytes_per_ns = gbps / 8;
  const int64_t latency = 5000;
  for (int p : {1, 2, 4, 8}) {
    SimRun run = RunZeroCompute(model, core::JobLayout::Dedicated(p, 1), Star(gbps, latency),
                                1 << 30, 3);
    ASSERT_FALSE(run.deadlocked) << run.deadlock_report;
    const double expected = 2.0 * latency + 2.0 * p * static_cast<double>(s) / bytes_per_ns;
    for (const WorkerRun& w : run.workers) {
      ASSERT_EQ(w.iteration_end.size(), 3u);
      // Clock 0 starts when the coordinator's start message arrives, which is earlier for the
      // worker on the coordinator's machine; from clock 1 on, every worker starts together.
      for (size_t c = 1; c < 3; ++c) {
        const double got = static_cast<double>(w.iteration_end[c] - w.iteration_begin[c]);
        EXPECT_NEAR(got, expected, 4.0) << p << " workers, clock " << c;
      }
    }
  }
}

// network.connections (and sender_queue_bytes): two workers on one machine push to a shard on
// another at the same instant. With one connection per machine pair the pushes leave one after the other (the first
// is delivered after S/B); with one per process pair they share the link (both after 2S/B).
TEST(SimJob, ConnectionsPerMachinePairSerialiseAndPerProcessPairShare) {
  const int64_t m = 1000, n = 250;
  core::Model model = core::Model::Build(testing::SingleFcSpec(m, n));
  const int64_t s = 4 * m * n + core::Message::kHeaderBytes;
  const double bytes_per_ns = 10.0 / 8;
  const int64_t latency = 5000;
  core::JobLayout layout = core::JobLayout::Dedicated(2, 1);
  layout.machine_of[static_cast<size_t>(layout.worker(1))] = 0;  // both workers on machine 0
  layout.machine_of[static_cast<size_t>(layout.server(0))] = 1;
  layout.num_machines = 2;
  auto push_deliveries = [&](config::ConnectionKind kind, int64_t sender_queue = 0,
                             int64_t chunk_bytes = 1 << 30) {
    SimJobConfig cfg;
    cfg.model = &model;
    cfg.layout = layout;
    cfg.protocol.chunk_bytes = chunk_bytes;
    cfg.protocol.iterations = 1;
    cfg.protocol.dwbp = false;
    cfg.network = Star(10, latency);
    cfg.network.connections = kind;
    cfg.network.sender_queue_bytes = sender_queue;
    cfg.worker_compute.assign(2, ZeroCompute(model));
    cfg.record_trace = true;
    SimJob job(std::move(cfg));
    SimRun run = job.Run();
    EXPECT_FALSE(run.deadlocked) << run.deadlock_report;
    std::vector<double> out;  // delivery - send of each push
    for (const core::TraceEvent& e : run.trace) {
      if (e.kind == core::TraceKind::kMessage && e.msg == core::MsgType::kPushGrad) {
        out.push_back(static_cast<double>(e.dur));
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  // (A push carries a few bytes of chunk header besides s: 64 ns of slack, against the
  // 800 000 ns that tell the two apart.)
  const double one = static_cast<double>(s) / bytes_per_ns + latency;
  const double two = 2.0 * static_cast<double>(s) / bytes_per_ns + latency;
  const std::vector<double> fifo = push_deliveries(config::ConnectionKind::kMachinePair);
  ASSERT_EQ(fifo.size(), 2u);
  EXPECT_NEAR(fifo[0], one, 64.0);
  EXPECT_NEAR(fifo[1], two, 64.0);
  const std::vector<double> shared = push_deliveries(config::ConnectionKind::kProcessPair);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_NEAR(shared[0], two, 64.0);
  EXPECT_EQ(shared[0], shared[1]);
  // sender_queue_bytes Q: the first push opened onto an idle NIC, and its first bytes went
  // straight out; at the same instant it has queued nothing ahead of the second, so they share
  // from the start (ReplayedMessages* below: what one opened earlier keeps queued).
  const int64_t q = 100'000;
  const std::vector<double> queued = push_deliveries(config::ConnectionKind::kProcessPair, q);
  ASSERT_EQ(queued.size(), 2u);
  EXPECT_EQ(queued, shared);
  // One connection per machine pair: the second push starts when the first has left, with no
  // other connection sending, so it does not wait.
  const std::vector<double> fifo_q = push_deliveries(config::ConnectionKind::kMachinePair, q);
  EXPECT_EQ(fifo_q, fifo);
  // Two chunks per push: each connection has two messages of h bytes to send. A1 and B1 share
  // from the start (above); B1, opened while A1 was sending, keeps q queued. A connection's second
  // message continues its stream and does not wait behind the other connection again: A2 and B2
  // start as A1 and B1 end. Deliveries (x B): 2h, 2h, 4h, 4h. (Had A2 waited behind B's q, it
  // would end at 4h + q.)
  const int64_t h = 2 * m * n + core::Message::kHeaderBytes;
  const std::vector<double> chunked =
      push_deliveries(config::ConnectionKind::kProcessPair, q, 2 * m * n);
  ASSERT_EQ(chunked.size(), 4u);
  const double expected[4] = {static_cast<double>(2 * h), static_cast<double>(2 * h),
                              static_cast<double>(4 * h), static_cast<double>(4 * h)};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(chunked[i], expected[i] / bytes_per_ns + latency, 128.0) << i;
  }
}

// ReplayMessages: the messages of a simulated run, replayed at their send times through a job
// with the same network, are delivered when the run delivered them (no burst and no sender
// queue here: with them, messages sent at one instant on different connections would depend on
// the order in which they are handed over, which a trace does not keep).
TEST(SimJob, ReplayingARunsOwnMessagesReproducesItsDeliveries) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  for (config::ConnectionKind kind :
       {config::ConnectionKind::kMachinePair, config::ConnectionKind::kProcessPair}) {
    auto make = [&] {
      SimJobConfig cfg;
      cfg.model = &model;
      cfg.layout = core::JobLayout::Colocated(4, 2);
      cfg.protocol.chunk_bytes = 4096;
      cfg.protocol.iterations = 3;
      cfg.protocol.dwbp = true;
      cfg.network = Star(1, 5000);
      cfg.network.connections = kind;
      cfg.network.fairness_alpha = 1;
      cfg.worker_compute.assign(4, ZeroCompute(model));
      cfg.record_trace = true;
      return cfg;
    };
    SimJobConfig cfg = make();
    const core::JobLayout layout = cfg.layout;
    SimJob job(std::move(cfg));
    const SimRun run = job.Run();
    ASSERT_FALSE(run.deadlocked) << run.deadlock_report;
    // A connection's messages in their send order: by send time, then by delivery (in order).
    std::vector<core::TraceEvent> sent;
    for (const core::TraceEvent& e : run.trace) {
      if (e.kind == core::TraceKind::kMessage && !layout.SameMachine(e.actor, e.peer)) {
        sent.push_back(e);
      }
    }
    std::stable_sort(sent.begin(), sent.end(), [](const auto& a, const auto& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.ts + a.dur < b.ts + b.dur;
    });
    ASSERT_GT(sent.size(), 20u);
    std::vector<SimJob::ReplayMessage> replay;
    for (const core::TraceEvent& e : sent) replay.push_back({e.ts, e.actor, e.peer, e.bytes});
    SimJob again(make());
    const std::vector<TimeNs> delivered = again.ReplayMessages(replay);
    ASSERT_EQ(delivered.size(), sent.size());
    for (size_t i = 0; i < sent.size(); ++i) {
      EXPECT_EQ(delivered[i], sent[i].ts + sent[i].dur) << i << ": " << sent[i].actor << " -> "
                                                        << sent[i].peer;
    }
  }
}

// ReplayMessages against closed forms: two messages on one connection leave one after the
// other; a message on another connection of the same machine, started while the first is
// sending, waits behind its queued bytes (sender_queue_bytes) and then shares the link.
TEST(SimJob, ReplayedMessagesShareConnectionsAndLinks) {
  core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));
  SimJobConfig cfg;
  cfg.model = &model;
  cfg.layout = core::JobLayout::Dedicated(2, 1);  // workers on machines 0, 1; shard on 2
  cfg.protocol.iterations = 1;
  cfg.network = Star(10, 5000);
  cfg.network.connections = config::ConnectionKind::kProcessPair;
  cfg.network.sender_queue_bytes = 100'000;
  cfg.worker_compute.assign(2, ZeroCompute(model));
  const core::ActorId w0 = cfg.layout.worker(0), w1 = cfg.layout.worker(1), s0 = cfg.layout.server(0);
  const double bytes_per_ns = 10.0 / 8;
  const int64_t p = 1'000'000, h = p + core::Message::kHeaderBytes;
  SimJob job(std::move(cfg));
  // w0 -> s0 twice at 0 (one connection), s0 -> w0 at 0 (another machine's NIC), s0 -> w1 at
  // 100 us (s0's second connection: waits 100 000 bytes behind s0 -> w0, then they share).
  const std::vector<TimeNs> d = job.ReplayMessages(
      {{0, w0, s0, p}, {0, w0, s0, p}, {0, s0, w0, p}, {100'000, s0, w1, p}});
  ASSERT_EQ(d.size(), 4u);
  const double one = static_cast<double>(h) / bytes_per_ns;
  EXPECT_NEAR(static_cast<double>(d[0]), one + 5000, 2.0);
  EXPECT_NEAR(static_cast<double>(d[1]), 2 * one + 5000, 2.0);
  // s0 -> w0 alone until 180 us (s0 -> w1, sent at 100 us, waits 100 000 bytes at the link
  // rate behind it), then both at half the rate; s0's link is busy from 0 to 2h/B.
  const double start = 100'000 + 100'000 / bytes_per_ns;
  EXPECT_NEAR(static_cast<double>(d[2]),
              start + (static_cast<double>(h) - start * bytes_per_ns) / (bytes_per_ns / 2) + 5000,
              2.0);
  EXPECT_NEAR(static_cast<double>(d[3]), 2 * one + 5000, 2.0);
}

// sender_queue_bytes q: a connection that opens onto a NIC with no other message of >= q bytes
// sends its first bytes straight out, and its queue fills behind them as the link drains; a
// second connection opened t later waits min(q, t x B) behind it, not q (live, two parameter
// messages written 50 us apart on an idle tbf link: the second one GSO packet behind, not two;
// docs/validation.md, "A queue that has not filled yet"). A third, opened while the second is
// queued, waits behind the second's whole q as well.
TEST(SimJob, AConnectionOpenedOntoAnIdleNicHasQueuedOnlyWhatTheLinkDrainedSince) {
  core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));
  SimJobConfig cfg;
  cfg.model = &model;
  cfg.layout = core::JobLayout::Dedicated(3, 1);  // workers on machines 0, 1, 2; shard on 3
  cfg.protocol.iterations = 1;
  cfg.network = Star(10, 5000);
  cfg.network.connections = config::ConnectionKind::kProcessPair;
  const int64_t q = 100'000;
  cfg.network.sender_queue_bytes = q;
  cfg.worker_compute.assign(3, ZeroCompute(model));
  const core::ActorId s0 = cfg.layout.server(0);
  const core::ActorId w0 = cfg.layout.worker(0), w1 = cfg.layout.worker(1),
                      w2 = cfg.layout.worker(2);
  const double bytes_per_ns = 10.0 / 8;
  const int64_t p = 1'000'000, h = p + core::Message::kHeaderBytes;
  SimJob job(std::move(cfg));
  // s0 -> w0 at 0 on an idle NIC; s0 -> w1 at 40 us: s0 -> w0 has queued 40 us x B = 50 000
  // bytes (< q), so s0 -> w1 starts at 80 us; s0 -> w2 at 60 us: 75 000 of s0 -> w0's and all
  // q of s0 -> w1's (opened onto a busy NIC), so it starts at 60 + (75 000 + q) / B = 200 us.
  const std::vector<TimeNs> d =
      job.ReplayMessages({{0, s0, w0, p}, {40'000, s0, w1, p}, {60'000, s0, w2, p}});
  ASSERT_EQ(d.size(), 3u);
  const double b = bytes_per_ns;
  const double start1 = 40'000 + 50'000 / b, start2 = 60'000 + (75'000 + q) / b;
  // Fluid: s0 -> w0 alone until start1, then shared by two until start2, then by three.
  const double sent0 = start1 * b + (start2 - start1) * b / 2;  // s0 -> w0's bytes by start2
  const double sent1 = (start2 - start1) * b / 2;
  ASSERT_LT(sent0, static_cast<double>(h));
  // All three at a third of the link: s0 -> w0 ends first, then the other two at a half.
  const double end0 = start2 + (static_cast<double>(h) - sent0) / (b / 3);
  const double sent1_at_end0 = sent1 + (end0 - start2) * b / 3;
  const double sent2_at_end0 = (end0 - start2) * b / 3;
  const double end1 = end0 + (static_cast<double>(h) - sent1_at_end0) / (b / 2);
  const double sent2_at_end1 = sent2_at_end0 + (end1 - end0) * b / 2;
  const double end2 = end1 + (static_cast<double>(h) - sent2_at_end1) / b;
  EXPECT_NEAR(static_cast<double>(d[0]), end0 + 5000, 4.0);
  EXPECT_NEAR(static_cast<double>(d[1]), end1 + 5000, 4.0);
  EXPECT_NEAR(static_cast<double>(d[2]), end2 + 5000, 4.0);
  // The link was busy throughout: the last delivery is all three messages at its rate.
  EXPECT_NEAR(static_cast<double>(d[2]), 3 * static_cast<double>(h) / b + 5000, 4.0);
}

// The host CPU (NetworkSpec::host_cores): every message, local ones too, is processed on its
// receiving process, one at a time, and on one of the shared cores.
TEST(SimJob, HostCpuProcessesEveryMessageOnSharedCores) {
  const int64_t m = 1000, n = 250;  // 1 MB of weights in one chunk, 1 kB of bias in another
  core::Model model = core::Model::Build(testing::SingleFcSpec(m, n));
  config::NetworkSpec net = Star(1e6, 0);  // the links take no time
  net.host_message_ns = 10000;
  net.host_ns_per_byte = 1;
  const double weights = 10000 + 4.0 * m * n, bias = 10000 + 4.0 * n;
  auto iteration = [&](core::JobLayout layout, int cores) {
    config::NetworkSpec c = net;
    c.host_cores = cores;
    SimRun run = RunZeroCompute(model, std::move(layout), c, 1 << 30, 3);
    EXPECT_FALSE(run.deadlocked) << run.deadlock_report;
    const WorkerRun& w = run.workers.back();
    return static_cast<double>(w.iteration_end[2] - w.iteration_end[1]);
  };
  // One machine: the worker's push is processed by the shard, then its pull by the worker.
  const double local = iteration(core::JobLayout::Colocated(1, 1), 1);
  EXPECT_GE(local, 2 * weights - 1);
  EXPECT_LE(local, 2 * weights + 2 * bias + 1);
  // Four workers, one dedicated shard: its process takes the four pushes one after another;
  // the four pulls go to four processes, in parallel on four cores, one after another on one.
  const double one = iteration(core::JobLayout::Dedicated(4, 1), 1);
  const double four = iteration(core::JobLayout::Dedicated(4, 1), 4);
  EXPECT_GE(four, 5 * weights - 1);
  EXPECT_LE(four, 5 * weights + 8 * bias + 1);
  EXPECT_GE(one, 8 * weights - 1);
  // Without cores the host CPU is not modelled: a local iteration costs nothing.
  EXPECT_EQ(iteration(core::JobLayout::Colocated(1, 1), 0), 0);
}

// Two workers on machines 0 and 1, a shard on machine 2, links that take (next to) no time:
// what the host CPU tests replay messages on.
SimJobConfig TwoWorkersAndAShard(const core::Model& model) {
  SimJobConfig cfg;
  cfg.model = &model;
  cfg.layout = core::JobLayout::Dedicated(2, 1);
  cfg.protocol.iterations = 1;
  cfg.network = Star(1e9, 0);
  cfg.worker_compute.assign(2, ZeroCompute(model));
  return cfg;
}

// Each delivery within 2 ns of the one wanted (the links take a nanosecond or two).
void ExpectDeliveries(const std::vector<TimeNs>& got, const std::vector<TimeNs>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2) << i;
}

// Replays two messages of p payload bytes sent at 0 between shard 0 and workers 0 and 1 of
// cfg's layout, to the shard or from it, and returns when each is delivered.
std::vector<TimeNs> ReplayBetweenShardAndWorkers(SimJobConfig cfg, int64_t p, bool to_shard) {
  const core::ActorId w0 = cfg.layout.worker(0), w1 = cfg.layout.worker(1);
  const core::ActorId s0 = cfg.layout.server(0);
  SimJob job(std::move(cfg));
  if (to_shard) return job.ReplayMessages({{0, w0, s0, p}, {0, w1, s0, p}});
  return job.ReplayMessages({{0, s0, w0, p}, {0, s0, w1, p}});
}

// NetworkSpec::host_kernel_ns_per_byte: the kernel's CPU for a message between machines takes a
// shared core, not the receiving process, so it delays only what waits for that core.
TEST(SimJob, KernelCpuTakesASharedCoreButNotTheProcess) {
  core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));
  const int64_t p = 100'000, wire = p + core::Message::kHeaderBytes;
  auto deliveries = [&](int cores, double kernel_ns_per_byte) {
    SimJobConfig cfg = TwoWorkersAndAShard(model);
    cfg.network.host_cores = cores;
    cfg.network.host_kernel_ns_per_byte = kernel_ns_per_byte;
    return ReplayBetweenShardAndWorkers(std::move(cfg), p, /*to_shard=*/false);
  };
  // One core: the first message's kernel work holds it, then the second's; each process reads
  // its message once the core is free.
  ExpectDeliveries(deliveries(1, 1.0), {wire, 2 * wire});
  // Two cores: the first process reads at once on the core the kernel left free; the second
  // waits for the first core the kernel work frees.
  ExpectDeliveries(deliveries(2, 1.0), {0, wire});
  ExpectDeliveries(deliveries(1, 0), {0, 0});
}

// NetworkSpec::host_byte_cpu and host_tag_ns_per_byte. Two workers send a shard p bytes each at
// once over 1 Gbit/s links; both last bytes arrive at A. after_arrival: the shard's process spends
// each message's fixed and per-byte CPU (and the tag's check) after A, one message after the
// other. streamed: the per-byte CPU ran while the bytes came in, so only the fixed cost and the
// tag's check follow A, unless the cores were still busy with it then. A message between processes
// of one machine costs after_arrival's CPU either way (its copy is the transfer).
TEST(SimJob, StreamedByteCpuRunsWhileTheBytesArrive) {
  core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));
  const int64_t p = 100'000;
  const double m = 5000, tag = 0.1;
  auto deliveries = [&](core::JobLayout layout, int cores, config::HostByteCpu when,
                        double ns_per_byte, double kernel_ns_per_byte) {
    SimJobConfig cfg = TwoWorkersAndAShard(model);
    cfg.layout = std::move(layout);
    cfg.network = Star(1, 0);
    cfg.network.host_cores = cores;
    if (ns_per_byte > 0) {
      cfg.network.host_message_ns = m;
      cfg.network.host_ns_per_byte = ns_per_byte;
      cfg.network.host_tag_ns_per_byte = tag;
    }
    cfg.network.host_kernel_ns_per_byte = kernel_ns_per_byte;
    cfg.network.host_byte_cpu = when;
    return ReplayBetweenShardAndWorkers(std::move(cfg), p, /*to_shard=*/true);
  };
  using config::HostByteCpu;
  const core::JobLayout apart = core::JobLayout::Dedicated(2, 1);
  const std::vector<TimeNs> free = deliveries(apart, 2, HostByteCpu::kAfterArrival, 0, 0);
  ASSERT_EQ(free.size(), 2u);
  const TimeNs a = free[0];
  ASSERT_NEAR(free[1], a, 2);
  ASSERT_GT(a, 1'000'000);  // 2 x 100 kB at 1 Gbit/s: 1.6 ms
  const auto ns = [](double x) { return static_cast<TimeNs>(std::llround(x)); };
  const TimeNs tags = ns(tag * p);
  // after_arrival: 1 ns/B after the last byte, message after message.
  const TimeNs after = ns(m + 1.0 * p) + tags;
  ExpectDeliveries(deliveries(apart, 2, HostByteCpu::kAfterArrival, 1.0, 0),
                   {a + after, a + 2 * after});
  // streamed: the bytes' CPU (100 us each, on two cores, and the kernel's alike) was done
  // before A.
  const TimeNs fixed = ns(m) + tags;
  ExpectDeliveries(deliveries(apart, 2, HostByteCpu::kStreamed, 1.0, 1.0),
                   {a + fixed, a + 2 * fixed});
  // streamed on one core at 12 ns/B: the core reads the two messages' bytes from their first
  // byte, one after the other, until 2 x 1.2 ms, past A; then the process takes each in turn.
  const TimeNs bytes = ns(12.0 * p);
  ASSERT_LT(bytes, a);
  ASSERT_GT(2 * bytes, a);
  ExpectDeliveries(deliveries(apart, 1, HostByteCpu::kStreamed, 12.0, 0),
                   {2 * bytes + fixed, 2 * bytes + 2 * fixed});
  // On three cores, with the kernel's share as large (12 ns per wire byte): from the first bytes
  // on, the first message's kernel work and reads take two cores and the second's kernel work the
  // third; its reads follow the first's (1.2 ms later) and end at 2.4 ms, after A. The first
  // message is the process's at A; the second only at 2.4 ms, though a core is free before.
  ExpectDeliveries(deliveries(apart, 3, HostByteCpu::kStreamed, 12.0, 12.0),
                   {a + fixed, 2 * bytes + fixed});
  // Between processes of one machine (worker 0 and shard 0 share machine 0), streamed or not,
  // the per-byte CPU follows the message's arrival. Worker 1's message, from machine 1, is
  // streamed.
  const core::JobLayout together = core::JobLayout::Colocated(2, 1);
  const std::vector<TimeNs> local = deliveries(together, 2, HostByteCpu::kStreamed, 1.0, 0);
  const std::vector<TimeNs> local_free = deliveries(together, 2, HostByteCpu::kAfterArrival, 0, 0);
  ASSERT_EQ(local.size(), 2u);
  EXPECT_NEAR(local[0], local_free[0] + after, 2);
  EXPECT_NEAR(local[1], std::max(local_free[1], local[0]) + fixed, 2);
}

// NetworkSpec::host_reads_hold_receiver: a streamed message's per-byte CPU (the kernel's and the
// process's reads) also holds its receiving process's one thread. Two workers on machines of
// their own send the shard p bytes each at once; both last bytes arrive at A. On two cores the
// two messages' bytes were read side by side, long before A, so each is the shard's at A plus its
// fixed cost. Held by the shard, the second message's bytes are read after the first's, until
// 2 x h (h: one message's kernel work and reads), past A, and the first message, which arrived at
// A, waits for that too: the thread is one.
TEST(SimJob, StreamedReadsCanHoldTheReceivingProcess) {
  core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));
  const int64_t p = 100'000, wire = p + core::Message::kHeaderBytes;
  const double m = 5000, read_ns_per_byte = 6, kernel_ns_per_byte = 6;
  auto deliveries = [&](bool hold) {
    SimJobConfig cfg = TwoWorkersAndAShard(model);
    cfg.layout = core::JobLayout::Dedicated(2, 1);
    cfg.network = Star(1, 0);
    cfg.network.host_cores = 2;
    cfg.network.host_message_ns = m;
    cfg.network.host_ns_per_byte = read_ns_per_byte;
    cfg.network.host_kernel_ns_per_byte = kernel_ns_per_byte;
    cfg.network.host_byte_cpu = config::HostByteCpu::kStreamed;
    cfg.network.host_reads_hold_receiver = hold;
    return ReplayBetweenShardAndWorkers(std::move(cfg), p, /*to_shard=*/true);
  };
  const std::vector<TimeNs> side_by_side = deliveries(false);
  ASSERT_EQ(side_by_side.size(), 2u);
  const TimeNs fixed = static_cast<TimeNs>(m);
  const TimeNs a = side_by_side[0] - fixed;
  EXPECT_NEAR(side_by_side[1], a + 2 * fixed, 2);
  const auto h = static_cast<TimeNs>(
      std::llround(kernel_ns_per_byte * static_cast<double>(wire) + read_ns_per_byte * p));
  ASSERT_LT(h, a);      // either message's reads alone end before A
  ASSERT_GT(2 * h, a);  // both, one after the other, do not
  ExpectDeliveries(deliveries(true), {2 * h + fixed, 2 * h + 2 * fixed});
}

// NetworkSpec::host_wakeup_cpu_ns: a wake-up also costs CPU on a shared core. Two messages
// reach two sleeping processes at once (the links take no time, messages no CPU of their own):
// each is taken a wake-up later, and its wake-up's CPU holds a core before the message is read.
TEST(SimJob, AWakeUpsCpuTakesASharedCore) {
  core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));
  const int64_t p = 100;
  const TimeNs wake = 100'000, cpu = 30'000;
  auto deliveries = [&](int cores, TimeNs wakeup_cpu_ns) {
    SimJobConfig cfg = TwoWorkersAndAShard(model);
    cfg.network.host_cores = cores;
    cfg.network.host_wakeup_ns = static_cast<double>(wake);
    cfg.network.host_wakeup_cpu_ns = static_cast<double>(wakeup_cpu_ns);
    return ReplayBetweenShardAndWorkers(std::move(cfg), p, /*to_shard=*/false);
  };
  // One core: the first process's wake-up holds it, then the second's.
  ExpectDeliveries(deliveries(1, cpu), {wake + cpu, wake + 2 * cpu});
  // Two cores: side by side.
  ExpectDeliveries(deliveries(2, cpu), {wake + cpu, wake + cpu});
  // Free wake-ups: the wake-up's latency only.
  ExpectDeliveries(deliveries(1, 0), {wake, wake});
}

// Two workers and a shard on the queue model over 100 Mbit/s links (`latency_ns` one way), with
// windows that never limit, a send buffer of `send_buffer_bytes` and a priority window below every
// message; `tune` sets more keys. Returns the traced messages `keep` selects (given worker 0), by
// their start.
std::vector<core::TraceEvent> WindowedMessages(
    const core::Model& model, int64_t latency_ns, int64_t send_buffer_bytes,
    const std::function<void(SimJobConfig&)>& tune,
    const std::function<bool(const core::TraceEvent&, core::ActorId)>& keep) {
  SimJobConfig cfg = TwoWorkersAndAShard(model);
  cfg.network = Star(0.1, latency_ns);
  cfg.network.model = config::NetworkModelKind::kQueue;
  cfg.network.connections = config::ConnectionKind::kProcessPair;
  cfg.network.initial_window_bytes = 1 << 30;  // windows that never limit
  cfg.network.send_buffer_bytes = send_buffer_bytes;
  cfg.protocol.priority_window_bytes = 1;
  cfg.record_trace = true;
  tune(cfg);
  const core::ActorId w0 = cfg.layout.worker(0);
  SimJob job(std::move(cfg));
  const SimRun run = job.Run();
  EXPECT_FALSE(run.deadlocked);
  std::vector<core::TraceEvent> kept;
  for (const core::TraceEvent& e : run.trace) {
    if (e.kind == core::TraceKind::kMessage && keep(e, w0)) kept.push_back(e);
  }
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.ts < b.ts; });
  return kept;
}

// NetworkSpec::send_buffer_bytes: a sender is told that a message has left (Actor::OnSent) once
// its connection's send buffer has taken it, as the live transport's on_sent says once the last
// byte is written to the socket, not once its last byte has left the machine. With a priority
// window below every message the shard hands a worker one params message at a time: with a
// buffer that holds them all, each is handed over while the one before it is still being sent;
// without one (real clusters' senders) only once the one before it has left.
TEST(SimJob, ASendersWindowCountsOnlyWhatItsSocketHasNotTaken) {
  core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));  // 1 MB: 2 chunks
  constexpr int64_t kLatency = 50'000;  // a message's last byte leaves this long before it arrives
  auto params_to_w0 = [&](int64_t send_buffer_bytes) {
    return WindowedMessages(
        model, kLatency, send_buffer_bytes, [](SimJobConfig&) {},
        [](const core::TraceEvent& e, core::ActorId w0) {
          return e.msg == core::MsgType::kParams && e.peer == w0;
        });
  };
  const std::vector<core::TraceEvent> buffered = params_to_w0(1 << 30);
  ASSERT_EQ(buffered.size(), 2u);
  for (size_t i = 1; i < buffered.size(); ++i) {
    EXPECT_LT(buffered[i].ts, buffered[i - 1].ts + buffered[i - 1].dur - kLatency) << i;
  }
  // A buffer smaller than the messages tells the sender when each has left, as without one.
  for (int64_t b : {int64_t{0}, int64_t{1000}}) {
    const std::vector<core::TraceEvent> unbuffered = params_to_w0(b);
    ASSERT_EQ(unbuffered.size(), 2u);
    for (size_t i = 1; i < unbuffered.size(); ++i) {
      EXPECT_GE(unbuffered[i].ts, unbuffered[i - 1].ts + unbuffered[i - 1].dur - kLatency)
          << b << " " << i;
    }
  }
}

// NetworkSpec::host_write_share: writing a message into its socket costs its sender that share of
// the message's per-byte CPU, on its one thread and a shared core, before the sender is told it is
// written. A worker's backward pass yields both chunks of its one layer at once; with a priority
// window below every message it hands the second push over once the first is written: a write's
// time after it, where a free write hands both over together.
TEST(SimJob, AWriteCostsItsSenderItsShareBeforeItIsToldTheMessageIsWritten) {
  core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));  // 1 MB: 2 chunks
  constexpr double kNsPerByte = 2.0;
  auto pushes_of_w0 = [&](double share) {
    return WindowedMessages(
        model, 50'000, 1 << 30,
        [&](SimJobConfig& cfg) {
          cfg.network.host_cores = 2;
          cfg.network.host_ns_per_byte = kNsPerByte;
          cfg.network.host_write_share = share;
        },
        [](const core::TraceEvent& e, core::ActorId w0) {
          return e.msg == core::MsgType::kPushGrad && e.actor == w0;
        });
  };
  const std::vector<core::TraceEvent> free_write = pushes_of_w0(0);
  const std::vector<core::TraceEvent> costly = pushes_of_w0(0.5);
  ASSERT_GE(free_write.size(), 2u);
  ASSERT_EQ(costly.size(), free_write.size());
  EXPECT_EQ(free_write[1].ts, free_write[0].ts);
  // The first chunk's write: 0.5 x 2 ns/B x its 512 KiB, on a core nobody else holds then.
  const int64_t write_ns = std::llround(0.5 * kNsPerByte * (512 * 1024));
  EXPECT_EQ(costly[1].ts - costly[0].ts, write_ns);
}

// NetworkSpec::process_ns_per_byte (a framework's RPC runtime on a real cluster): a process takes
// the messages it receives one at a time, each for that many ns per payload byte, on its own core;
// two processes take theirs at once.
TEST(SimJob, AProcessTakesItsMessagesOneAtATimeOnItsOwnCore) {
  core::Model model = core::Model::Build(testing::SingleFcSpec(1000, 250));
  const int64_t p = 100'000;
  auto deliveries = [&](double ns_per_byte, bool to_one) {
    SimJobConfig cfg = TwoWorkersAndAShard(model);
    cfg.network.process_ns_per_byte = ns_per_byte;
    const core::ActorId w0 = cfg.layout.worker(0), w1 = cfg.layout.worker(1);
    const core::ActorId s0 = cfg.layout.server(0);
    SimJob job(std::move(cfg));
    if (to_one) return job.ReplayMessages({{0, w0, s0, p}, {0, w1, s0, p}, {5 * p, w0, s0, p}});
    return job.ReplayMessages({{0, s0, w0, p}, {0, s0, w1, p}});
  };
  // Two pushes into one shard: the second waits for the first; a third, arriving after both,
  // waits for nothing.
  ExpectDeliveries(deliveries(2.0, true), {2 * p, 4 * p, 7 * p});
  // Two pulls into two workers: each on its own process, at once.
  ExpectDeliveries(deliveries(2.0, false), {2 * p, 2 * p});
  // Without it a message costs nothing on arrival.
  ExpectDeliveries(deliveries(0, true), {0, 0, 5 * p});
}

// SimJobConfig::input_samples_per_s: a machine's input pipeline serves its devices together; once
// what it had prefetched is spent, a machine whose devices need B samples an iteration between
// them runs an iteration every B / rate, however fast they compute.
TEST(SimJob, AMachinesInputPipelineBoundsItsDevices) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int64_t batch = 32;
  const double rate = 640;  // samples/s: 50 ms a batch
  auto spacing = [&](int machines, int workers_per_machine, double samples_per_s) {
    SimJobConfig cfg;
    cfg.model = &model;
    cfg.layout = core::JobLayout::Build(machines, workers_per_machine, 1, true);
    cfg.protocol.chunk_bytes = 1 << 30;
    cfg.protocol.iterations = 12;
    cfg.network = Star(100, 0);
    cfg.worker_compute.assign(static_cast<size_t>(cfg.layout.num_workers), FixedCompute(model, 1));
    cfg.input_samples_per_s = samples_per_s;
    cfg.input_batch = batch;
    cfg.input_prefetch_samples = 2.0 * batch * workers_per_machine;
    SimJob job(std::move(cfg));
    const SimRun run = job.Run();
    EXPECT_FALSE(run.deadlocked) << run.deadlock_report;
    const WorkerRun& w = run.workers.back();
    return static_cast<double>(w.iteration_begin[11] - w.iteration_begin[10]);
  };
  const double free = spacing(1, 2, 0);
  EXPECT_LT(free, 20e6);  // the compute alone: a few layers at 1 ms each way
  // Two devices on one machine share its pipeline: 2 batches an iteration, 100 ms.
  EXPECT_NEAR(spacing(1, 2, rate), 2 * batch / rate * 1e9, 2);
  // One device on each of two machines: a pipeline each, 50 ms.
  EXPECT_NEAR(spacing(2, 1, rate), batch / rate * 1e9, 2);
  // A pipeline faster than the devices leaves them as they were.
  EXPECT_EQ(spacing(1, 2, 1e9), free);
}

// NetworkSpec::host_wakeup_ns: a protocol thread that sleeps learns of an event a wake-up late,
// and compute tasks are timed as a live run that replays them does (cost::kReplayAbsorbNs).
TEST(SimJob, AProtocolThreadWakesLateButAReplayedPassDoesNotDrift) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  const TimeNs wake = 100'000, handoff = 10'000;
  struct Seen {
    std::vector<core::TraceEvent> forward;  // clock 1's forward tasks, in order
    TimeNs min_push = -1;                   // the shortest push's time in flight
  };
  auto run = [&](double layer_ms, TimeNs wakeup_ns) {
    SimJobConfig cfg;
    cfg.model = &model;
    cfg.layout = core::JobLayout::Colocated(1, 1);
    cfg.protocol.chunk_bytes = 1 << 30;
    cfg.protocol.iterations = 2;
    cfg.protocol.dwbp = false;
    cfg.network = Star(10, 0);
    cfg.network.host_cores = 1;  // messages cost no CPU: only the wake-ups count
    cfg.network.host_wakeup_ns = static_cast<double>(wakeup_ns);
    cfg.network.host_handoff_ns = static_cast<double>(handoff);
    cfg.worker_compute.assign(1, FixedCompute(model, layer_ms));
    cfg.record_trace = true;
    SimJob job(std::move(cfg));
    SimRun r = job.Run();
    EXPECT_FALSE(r.deadlocked) << r.deadlock_report;
    Seen s;
    for (const core::TraceEvent& e : r.trace) {
      if (e.kind == core::TraceKind::kTask && e.task == core::TaskKind::kForward && e.clock == 1) {
        s.forward.push_back(e);
      }
      if (e.kind == core::TraceKind::kMessage && e.msg == core::MsgType::kPushGrad) {
        s.min_push = s.min_push < 0 ? e.dur : std::min(s.min_push, e.dur);
      }
    }
    std::sort(s.forward.begin(), s.forward.end(),
              [](const core::TraceEvent& a, const core::TraceEvent& b) { return a.ts < b.ts; });
    return s;
  };
  // Tasks of 1 ms: each stream thread sleeps to its task's end and is seen a wake-up after it,
  // and the next task, handed over then, starts at that end: the pass keeps its modelled times.
  Seen slow = run(1.0, wake);
  ASSERT_EQ(slow.forward.size(), 6u);
  for (size_t k = 0; k < slow.forward.size(); ++k) {
    EXPECT_EQ(slow.forward[k].dur, 1'000'000 + wake) << k;
    if (k > 0) {
      EXPECT_EQ(slow.forward[k].ts, slow.forward[k - 1].ts + 1'000'000) << k;
    }
  }
  // A push reaches the idle shard's process a wake-up after it was sent (the link takes no time).
  EXPECT_EQ(slow.min_push, wake);
  // Tasks of 20 us, shorter than a wake-up: from the second on, each has ended before it is
  // handed over and comes back a hand-off later, so the pass falls behind by a hand-off a task
  // while their modelled starts stay back to back (the lag is under cost::kReplayAbsorbNs).
  Seen fast = run(0.02, wake);
  ASSERT_EQ(fast.forward.size(), 6u);
  for (size_t k = 1; k < fast.forward.size(); ++k) {
    const core::TraceEvent &a = fast.forward[k - 1], &b = fast.forward[k];
    EXPECT_EQ(b.ts, a.ts + 20'000) << k;
    EXPECT_EQ(b.ts + b.dur, a.ts + a.dur + handoff) << k;
  }
  // No wake-up: the hand-off key does nothing, tasks take their modelled time.
  Seen none = run(0.02, 0);
  ASSERT_EQ(none.forward.size(), 6u);
  for (const core::TraceEvent& e : none.forward) EXPECT_EQ(e.dur, 20'000);
  EXPECT_EQ(none.min_push, 0);
}

// Co-located shards: a single worker's traffic never leaves its machine.
TEST(SimJob, OneColocatedNodeSendsNothingOverTheNetwork) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  SimRun run = RunZeroCompute(model, core::JobLayout::Colocated(1, 1), Star(10, 5000), 256, 2);
  EXPECT_FALSE(run.deadlocked);
  EXPECT_EQ(run.network_messages, 0u);
  EXPECT_EQ(run.workers[0].iteration_end.back(), 0);  // zero compute, zero network
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kSrc = POSEIDON_SOURCE_DIR;

// Golden trace: any change of the models' prediction shows up as a diff of this reviewed file.
// Regenerate (and review the diff) with: POSEIDON_REGENERATE_GOLDEN=1 ctest -R Golden
TEST(SimJob, GoldenTrace) {
  config::ScenarioSpec s = config::LoadScenarioFile(kSrc + "/tests/golden/small.yaml");
  SimOptions opts;
  opts.record_trace = true;
  opts.baseline = false;
  ScenarioResult r = SimulateScenario(s, opts);
  ASSERT_FALSE(r.deadlocked);
  const std::string golden = kSrc + "/tests/golden/small_trace.json";
  const std::string text = r.chrome_trace + FormatResult(r, OutputFormat::kJson);
  if (std::getenv("POSEIDON_REGENERATE_GOLDEN")) {
    std::ofstream(golden, std::ios::binary) << text;
    GTEST_SKIP() << "regenerated " << golden;
  }
  EXPECT_EQ(text, ReadFile(golden)) << "simulator output changed; if intended, regenerate with "
                                       "POSEIDON_REGENERATE_GOLDEN=1 and review the diff";
}

// Simulates `s` twice with a trace; the two results and traces must be byte-identical.
ScenarioResult SimulateTwiceIdentically(const config::ScenarioSpec& s, SimOptions opts) {
  opts.record_trace = true;
  ScenarioResult a = SimulateScenario(s, opts);
  ScenarioResult b = SimulateScenario(s, opts);
  EXPECT_EQ(FormatResult(a, OutputFormat::kJson), FormatResult(b, OutputFormat::kJson));
  EXPECT_EQ(a.chrome_trace, b.chrome_trace);
  return a;
}

TEST(SimJob, SameScenarioAndSeedGiveIdenticalOutput) {
  config::ScenarioSpec s = config::LoadScenarioFile(kSrc + "/scenarios/demo.yaml");
  EXPECT_GT(SimulateTwiceIdentically(s, {}).speedup, 0);
}

// The same with the emulated networks' models: at 100 Mbit/s alpha-fair sharing (warm-started
// from the last solve), token buckets and sender queues, one connection per pair of processes; at
// 1 Gbit/s the queue model (shared sending NICs, FIFO receiving links with a limit).
TEST(SimJob, EmulatedNetworkModelsGiveIdenticalOutputForTheSameScenario) {
  config::ScenarioSpec s = config::LoadScenarioFile(kSrc + "/scenarios/validation/mlp_1g.yaml");
  ASSERT_EQ(s.network.model, config::NetworkModelKind::kQueue);
  ASSERT_GT(s.network.queue_limit_bytes, 0);
  s.workers = 4;
  SimOptions opts;
  opts.baseline = false;
  EXPECT_GT(SimulateTwiceIdentically(s, opts).iteration_ms, 0);
  config::ScenarioSpec f = config::LoadScenarioFile(
      kSrc + "/scenarios/validation/mlp_1g.yaml", {"cluster.network.file=emulated_100mbit"});
  ASSERT_EQ(f.network.model, config::NetworkModelKind::kQueue);
  ASSERT_GT(f.network.initial_window_bytes, 0);
  ASSERT_GT(f.network.segment_bytes, 0);
  ASSERT_GT(f.network.burst_bytes, 0);
  ASSERT_GT(f.network.sender_queue_bytes, 0);
  f.workers = 4;
  // The MLP with PS on 4 workers fills the shards' 1.25 MB queues: Reno's losses halve the
  // pushes' windows, identically from run to run, and the job is slower than where a full queue
  // only holds its senders to its rate.
  ASSERT_GT(f.network.loss_packet_bytes, 0);
  const double lossy = SimulateTwiceIdentically(f, opts).iteration_ms;
  f.network.segment_bytes = 0;
  f.network.loss_packet_bytes = 0;
  const double lossless = SimulateTwiceIdentically(f, opts).iteration_ms;
  EXPECT_GT(lossy, lossless * 1.03) << lossy << " ms with losses, " << lossless << " without";
  // The flow model with the reverse-path weight (the file's model for such jobs until
  // 2026-12-05): the shards' machines exchange both ways, so the flows between them also pay for
  // the full queues their acknowledgements cross, and the job is slower (docs/validation.md, "A
  // busy reverse path": 1555 -> 1654 ms).
  f.network.model = config::NetworkModelKind::kFlow;
  f.network.fairness_alpha = 0.72;
  f.network.ack_path_weight = 0.41;
  const double with_weight = SimulateTwiceIdentically(f, opts).iteration_ms;
  EXPECT_GT(with_weight, 0);
  f.network.ack_path_weight = 0;
  const double without = SimulateTwiceIdentically(f, opts).iteration_ms;
  EXPECT_GT(with_weight, without * 1.03) << with_weight << " ms with the weight, " << without
                                         << " ms without";
}

// loss_packet_bytes (the emulated files' 16384): the MLP with PS on 3 workers and 2 dedicated
// shards under BSP at 100 Mbit/s. Once slow start's losses are over, a loss at a shard's full queue
// halves one drawn push connection, so the pushes share the shard unequally and each chunk's pull
// waits for its slowest push: slower than where every sender halves alike (1103.6 ms), whatever
// the seed; the same seed gives the same bytes. With every sender halving the seed changes nothing
// (nothing else in this job draws).
TEST(SimJob, DrawnLossesSlowABspJobThatWaitsForItsSlowestPush) {
  config::ScenarioSpec s =
      config::LoadScenarioFile(kSrc + "/scenarios/validation/mlp_1g.yaml",
                               {"cluster.network.file=emulated_100mbit", "cluster.workers=3",
                                "cluster.servers=2", "cluster.placement=dedicated"});
  ASSERT_GT(s.network.loss_packet_bytes, 0);
  SimOptions opts;
  opts.baseline = false;
  config::ScenarioSpec all = s;
  all.network.loss_packet_bytes = 0;
  const std::string every_sender = FormatResult(SimulateScenario(all, opts), OutputFormat::kJson);
  const double alike = SimulateScenario(all, opts).iteration_ms;
  for (const uint64_t seed : {1, 2, 3}) {
    s.seed = seed;
    const double drawn = SimulateTwiceIdentically(s, opts).iteration_ms;
    EXPECT_GT(drawn, alike * 1.03)
        << "seed " << seed << ": " << drawn << " ms drawn, " << alike << " ms every sender halving";
    all.seed = seed;
    EXPECT_EQ(FormatResult(SimulateScenario(all, opts), OutputFormat::kJson), every_sender);
  }
}

// record_windows: the congestion windows of the MLP with PS on 3 workers and 2 co-located shards
// at 100 Mbit/s (held-out set 29's d23), named by connection. Slow start overfills the shards'
// queues, so the pushes between machines lose; a worker's push to the shard on its own machine
// never crosses a link and keeps its first window. The windows only observe: the result is the
// same bytes with them. With a connection per machine pair they are named by machine.
TEST(SimJob, RecordedWindowsNameEachConnectionAndOnlyObserve) {
  config::ScenarioSpec s =
      config::LoadScenarioFile(kSrc + "/scenarios/validation/mlp_1g.yaml",
                               {"cluster.network.file=emulated_100mbit", "cluster.workers=3",
                                "cluster.servers=2", "cluster.placement=colocated",
                                "protocol.dwbp=false", "iterations=4", "warmup_iterations=1"});
  SimOptions opts;
  opts.baseline = false;
  const std::string plain = FormatResult(SimulateScenario(s, opts), OutputFormat::kJson);
  opts.record_windows = true;
  const ScenarioResult r = SimulateScenario(s, opts);
  EXPECT_EQ(FormatResult(r, OutputFormat::kJson), plain);
  const std::string& w = r.windows;
  for (const char* pushed : {"worker 0 -> shard 1", "worker 1 -> shard 0", "worker 2 -> shard 0",
                             "worker 2 -> shard 1"}) {
    const size_t at = w.find(std::string(pushed) + ": ");
    ASSERT_NE(at, std::string::npos) << pushed << " missing from:\n" << w;
    EXPECT_NE(w.substr(at + std::string(pushed).size() + 2, 2), "0 ")
        << pushed << " lost nothing:\n"
        << w;
  }
  // Local traffic never crosses a link: no window was ever made for it.
  EXPECT_EQ(w.find("worker 0 -> shard 0:"), std::string::npos) << w;
  EXPECT_NE(w.find(" s loss: window "), std::string::npos) << w;
  EXPECT_NE(w.find("  at the end: window "), std::string::npos) << w;

  s.network.connections = config::ConnectionKind::kMachinePair;
  const std::string machines = SimulateScenario(s, opts).windows;
  EXPECT_NE(machines.find("machine 1 -> machine 0: "), std::string::npos) << machines;
  EXPECT_EQ(machines.find("worker"), std::string::npos) << machines;

  s.network.initial_window_bytes = 0;  // no windows, no segments
  s.network.segment_bytes = 0;
  s.network.send_buffer_bytes = 0;
  s.network.loss_packet_bytes = 0;
  EXPECT_EQ(SimulateScenario(s, opts).windows.rfind("no congestion windows", 0), 0u);
}

// model auto (the 100 Mbit/s file's model until 2026-12-05, with its flow-model keys then): a job
// whose traffic fills a receiving queue is simulated by the flow model, one whose traffic never
// does by the queue model, output for output.
TEST(SimJob, AutoNetworkModelIsTheQueueModelUnlessAQueueFills) {
  SimOptions opts;
  opts.baseline = false;
  auto json_with = [&](config::ScenarioSpec s, config::NetworkModelKind kind) {
    s.network.model = kind;
    return FormatResult(SimulateScenario(s, opts), OutputFormat::kJson);
  };
  // The MLP with PS on 4 workers fills the shards' 1.25 MB queues (3.7 MB to each per
  // iteration): the flow model.
  config::ScenarioSpec mlp = config::LoadScenarioFile(
      kSrc + "/scenarios/validation/mlp_1g.yaml",
      {"cluster.network.file=emulated_100mbit", "cluster.workers=4"});
  mlp.network.fairness_alpha = 0.72;
  mlp.network.ack_path_weight = 0.41;
  mlp.network.segment_bytes = 0;  // auto's queue model without Reno's losses, as then
  mlp.network.loss_packet_bytes = 0;
  const std::string mlp_auto = json_with(mlp, config::NetworkModelKind::kAuto);
  EXPECT_EQ(mlp_auto, json_with(mlp, config::NetworkModelKind::kFlow));
  EXPECT_NE(mlp_auto, json_with(mlp, config::NetworkModelKind::kQueue));
  // The vision transformer's 72 small pushes (278 KB to each shard per worker and iteration)
  // never fill one: the queue model.
  config::ScenarioSpec vit = config::LoadScenarioFile(
      kSrc + "/scenarios/validation/mlp_1g.yaml",
      {"cluster.network.file=emulated_100mbit", "cluster.workers=4", "model=fmnist_vit",
       "batch_per_worker=32", "cluster.profile=fmnist_vit_cpu_b32"});
  vit.network.segment_bytes = 0;
  vit.network.loss_packet_bytes = 0;
  const std::string vit_auto = json_with(vit, config::NetworkModelKind::kAuto);
  EXPECT_EQ(vit_auto, json_with(vit, config::NetworkModelKind::kQueue));
  EXPECT_NE(vit_auto, json_with(vit, config::NetworkModelKind::kFlow));
  // Without a queue limit no queue fills, and auto would silently be the queue model.
  vit.network.queue_limit_bytes = 0;
  EXPECT_THROW(json_with(vit, config::NetworkModelKind::kAuto), std::invalid_argument);
}

// congested_flow_weight counts a receiving queue as standing only from 1 ms of its rate on:
// without that threshold two receivers whose queues each other's weights filled and drained
// flipped the weights at every nanosecond (held-out set 8's d04: 7 workers of the vision
// transformer with SFB under ASP at 100 Mbit/s did not finish one iteration in 100 s). With it
// the run takes as many events as with an equal split, within a factor of two.
TEST(SimJob, CongestedFlowWeightsDoNotFlipEveryNanosecond) {
  SimOptions opts;
  opts.baseline = false;
  config::ScenarioSpec s = config::LoadScenarioFile(
      kSrc + "/scenarios/validation/mlp_1g.yaml",
      {"cluster.network.file=emulated_100mbit", "model=fmnist_vit", "batch_per_worker=32",
       "cluster.profile=fmnist_vit_cpu_b32", "cluster.workers=7", "cluster.servers=7",
       "cluster.placement=colocated", "protocol.scheme=sfb", "protocol.consistency.model=asp",
       "protocol.gate=per_layer", "protocol.dwbp=false", "protocol.priority_window_kib=64",
       "iterations=3", "warmup_iterations=1"});
  ASSERT_LT(s.network.congested_flow_weight, 1);  // the file's measured weight
  const ScenarioResult weighted = SimulateScenario(s, opts);
  s.network.congested_flow_weight = 1;
  const ScenarioResult equal = SimulateScenario(s, opts);
  EXPECT_GT(weighted.iteration_ms, 0);
  EXPECT_LT(weighted.events, 2 * equal.events) << equal.events;
}

// model auto with auto_flow_message_bytes: a job that sends a message at least that long between
// machines is simulated by the flow model even though no queue fills; shorter messages leave
// the choice to the queues. The CNN with PS on 4 workers at 100 Mbit/s sends 200 KiB chunks and
// fills no queue; the vision transformer's pushes are at most 33 KB.
TEST(SimJob, AutoNetworkModelTakesTheFlowModelForLongMessages) {
  SimOptions opts;
  opts.baseline = false;
  auto json_with = [&](config::ScenarioSpec s, config::NetworkModelKind kind, int64_t bytes) {
    s.network.model = kind;
    s.network.auto_flow_message_bytes = bytes;
    return FormatResult(SimulateScenario(s, opts), OutputFormat::kJson);
  };
  config::ScenarioSpec cnn = config::LoadScenarioFile(
      kSrc + "/scenarios/validation/mlp_1g.yaml",
      {"cluster.network.file=emulated_100mbit", "cluster.workers=4", "model=fmnist_cnn",
       "cluster.profile=fmnist_cnn_cpu_b64"});
  const std::string queue = json_with(cnn, config::NetworkModelKind::kQueue, 0);
  const std::string flow = json_with(cnn, config::NetworkModelKind::kFlow, 0);
  ASSERT_NE(queue, flow);
  EXPECT_EQ(json_with(cnn, config::NetworkModelKind::kAuto, 0), queue);  // off: as before
  EXPECT_EQ(json_with(cnn, config::NetworkModelKind::kAuto, 64 << 10), flow);
  EXPECT_EQ(json_with(cnn, config::NetworkModelKind::kAuto, 1 << 20), queue);  // none that long
  config::ScenarioSpec vit = config::LoadScenarioFile(
      kSrc + "/scenarios/validation/mlp_1g.yaml",
      {"cluster.network.file=emulated_100mbit", "cluster.workers=4", "model=fmnist_vit",
       "batch_per_worker=32", "cluster.profile=fmnist_vit_cpu_b32"});
  EXPECT_EQ(json_with(vit, config::NetworkModelKind::kAuto, 64 << 10),
            json_with(vit, config::NetworkModelKind::kQueue, 0));
}

// network.connection_gbps (a cloud's cap on one flow): two machines talk over one connection
// each way, so a cap of a quarter of the NIC makes their communication 4x as long; eight machines
// each talk to seven others at once and fill their NICs anyway; a cap at or above the NIC's rate
// changes nothing, byte for byte.
TEST(SimJob, AConnectionCapSlowsAPairOfMachinesAndNotACluster) {
  SimOptions opts;
  opts.baseline = false;
  auto run = [&](int machines, const std::string& cap) {
    return SimulateScenario(
        config::LoadScenarioFile(kSrc + "/scenarios/demo.yaml",
                                 {"model=alexnet", "cluster.machines=" + std::to_string(machines),
                                  "cluster.network.connection_gbps=" + cap}),
        opts);
  };
  const ScenarioResult two = run(2, "0"), two_capped = run(2, "2.5");
  EXPECT_NEAR(two_capped.communication_ms, 4 * two.communication_ms, 0.01 * two.communication_ms);
  EXPECT_GT(two_capped.iteration_ms, 2 * two.iteration_ms);
  const ScenarioResult eight = run(8, "0"), eight_capped = run(8, "2.5");
  EXPECT_NEAR(eight_capped.iteration_ms, eight.iteration_ms, 1e-3 * eight.iteration_ms);
  EXPECT_EQ(FormatResult(run(2, "10"), OutputFormat::kJson),
            FormatResult(two, OutputFormat::kJson));
}

// A scenario with fault tolerance simulates its heartbeats (timers, small messages to the
// coordinator) without a failure: the job ends, deterministically, and the heartbeats cost
// next to nothing next to the training traffic.
TEST(SimJob, FaultToleranceHeartbeatsRunAndCostLittle) {
  config::ScenarioSpec s = config::LoadScenarioFile(kSrc + "/scenarios/live/fmnist_mlp_ft.yaml");
  s.iterations = 30;
  ASSERT_TRUE(s.fault.enabled);
  ScenarioResult with = SimulateScenario(s, {});
  ScenarioResult again = SimulateScenario(s, {});
  EXPECT_EQ(FormatResult(with, OutputFormat::kJson), FormatResult(again, OutputFormat::kJson));
  s.fault = {};
  ScenarioResult without = SimulateScenario(s, {});
  EXPECT_GT(with.network_messages, without.network_messages);  // heartbeats were sent
  EXPECT_NEAR(with.iteration_ms, without.iteration_ms, 0.01 * without.iteration_ms);
}

TEST(Sweep, OutputDoesNotDependOnThreadCount) {
  config::SweepSpec sw = config::LoadSweepFile(kSrc + "/tests/golden/small_sweep.yaml");
  ASSERT_EQ(sw.points.size(), 6u);
  std::string one = RunSweep(sw, 1, nullptr);
  std::string two = RunSweep(sw, 2, nullptr);
  EXPECT_EQ(one, two);
  // Header plus one row per point, in row-major order (first axis slowest).
  EXPECT_EQ(std::count(one.begin(), one.end(), '\n'), 7);
  EXPECT_NE(one.find("\n1,1,"), std::string::npos);
}

// More bandwidth never slows an iteration down; more workers never raise throughput per
// worker above one node's.
TEST(Sweep, MonotoneInBandwidth) {
  config::SweepSpec sw = config::LoadSweepFile(kSrc + "/tests/golden/small_sweep.yaml");
  double last = 0;
  for (const auto& p : sw.points) {
    if (p.scenario.workers != 2) continue;
    ScenarioResult r = SimulateScenario(p.scenario, {});
    if (last > 0) {
      EXPECT_LE(r.iteration_ms, last + 1e-9) << p.values[1].second;
    }
    last = r.iteration_ms;
    EXPECT_LE(r.speedup, 2.0 + 1e-9);
  }
}

}  // namespace
}  // namespace poseidon::sim
