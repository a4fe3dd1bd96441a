// SSP/ASP, SFB, ring all-reduce, per-layer gating and priorities in the core, on the in-memory
// host with seeded random schedules.
#include <algorithm>
#include <functional>
#include <map>
#include <tuple>

#include <gtest/gtest.h>

#include "core/sacp.h"
#include "core/send_queue.h"
#include "tests/core/fake_cluster.h"
#include "tests/core/test_models.h"

namespace poseidon {
namespace {

using core::MsgType;
using core::TaskKind;
using core::TraceKind;
using testing::FakeCluster;

core::ProtocolConfig Config(core::Consistency c, int64_t s, int iterations = 6) {
  core::ProtocolConfig cfg;
  cfg.consistency = c;
  cfg.staleness = s;
  cfg.iterations = iterations;
  cfg.chunk_bytes = 1024;
  cfg.batch = 4;
  return cfg;
}

std::vector<core::Scheme> Schemes(const core::Model& m, core::Scheme fc) {
  std::vector<core::Scheme> v(m.layers().size(), core::Scheme::kPs);
  for (const auto& l : m.layers()) {
    if (l.kind == core::LayerKind::kFc) v[static_cast<size_t>(l.id)] = fc;
  }
  return v;
}

// Watches a run and checks the SSP invariants at every forward task:
//  (1) a worker at clock c computes layer l only with version(l) >= c - s (every update of
//      clocks <= c - s - 1 is in);
//  (2) the fastest worker is never more than s clocks ahead of the slowest: a worker beginning
//      clock c has a peer that completed fewer than c - s iterations never.
struct SspWatcher {
  SspWatcher(FakeCluster* c, int workers, int64_t s) : ticks(workers, 0), slack(s) {
    c->on_trace = [this, c](const core::TraceEvent& e) {
      if (e.kind == TraceKind::kIterationBegin) {
        const int w = c->layout().WorkerIndex(e.actor);
        const int64_t slowest = *std::min_element(ticks.begin(), ticks.end());
        EXPECT_LE(e.clock - slowest, slack) << "worker " << w << " ran ahead";
        max_lead = std::max(max_lead, e.clock - slowest);
      }
    };
    c->on_task_done = [this, c](core::TimeNs, core::ActorId a, const core::ComputeTask& t) {
      if (t.kind == TaskKind::kBackward && t.layer == 0) {
        ticks[static_cast<size_t>(c->layout().WorkerIndex(a))] = t.clock + 1;  // clock ticks
      }
      if (t.kind != TaskKind::kForward) return;
      if (c->placement().chunks_of_layer(t.layer).empty() && !has_params(t.layer)) return;
      const int w = c->layout().WorkerIndex(a);
      const int64_t v = c->worker(w).version(t.layer);
      {
        EXPECT_GE(v, t.clock - slack) << "worker " << w << " computed layer " << t.layer
                                      << " at clock " << t.clock << " with version " << v;
      }
      ++forward_tasks;
    };
  }
  std::function<bool(int)> has_params;
  std::vector<int64_t> ticks;  // iterations completed per worker
  int64_t slack;
  int64_t max_lead = 0;
  int forward_tasks = 0;
};

class SspProperty
    : public ::testing::TestWithParam<std::tuple<int64_t, core::Scheme, core::Gate, uint64_t>> {};

TEST_P(SspProperty, InvariantsHoldOnRandomSchedules) {
  auto [s, fc_scheme, gate, seed] = GetParam();
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg = Config(s == 0 ? core::Consistency::kBsp : core::Consistency::kSsp, s);
  cfg.gate = gate;
  cfg.scheme_of_layer = Schemes(model, fc_scheme);
  const int workers = 4;
  FakeCluster c(model, core::JobLayout::Colocated(workers, 2), cfg, seed);
  SspWatcher watch(&c, workers, s);
  watch.has_params = [&](int l) { return !model.layers()[static_cast<size_t>(l)].blobs.empty(); };
  c.Run();
  ASSERT_TRUE(c.AllFinished());
  EXPECT_GT(watch.forward_tasks, 0);
  for (int w = 0; w < workers; ++w) {
    for (int l : model.param_layers()) EXPECT_EQ(c.worker(w).version(l), cfg.iterations);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, SspProperty,
    ::testing::Combine(::testing::Values(0, 1, 3),
                       ::testing::Values(core::Scheme::kPs, core::Scheme::kSfb),
                       ::testing::Values(core::Gate::kAllLayers, core::Gate::kPerLayer),
                       ::testing::Values(1u, 2u, 3u, 99u)));

// Random schedules do let workers drift apart under SSP (otherwise the property test above
// would prove little).
TEST(Ssp, WorkersDoRunAheadWithinTheBound) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  int64_t max_lead = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    FakeCluster c(model, core::JobLayout::Colocated(4, 2), Config(core::Consistency::kSsp, 2),
                  seed);
    SspWatcher watch(&c, 4, 2);
    watch.has_params = [&](int l) { return !model.layers()[static_cast<size_t>(l)].blobs.empty(); };
    c.Run();
    max_lead = std::max(max_lead, watch.max_lead);
  }
  EXPECT_GE(max_lead, 1);
  EXPECT_LE(max_lead, 2);
}

TEST(Asp, EveryPushIsAppliedAndAnsweredOnItsOwn) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  for (uint64_t seed : {0u, 5u, 17u}) {
    core::ProtocolConfig cfg = Config(core::Consistency::kAsp, 0);
    FakeCluster c(model, core::JobLayout::Colocated(3, 2), cfg, seed);
    std::map<core::ActorId, int> params_to;
    int pushes = 0;
    c.on_deliver = [&](core::TimeNs, const core::Message& m) {
      if (m.type == MsgType::kParams) params_to[m.to]++;
      if (m.type == MsgType::kPushGrad) ++pushes;
    };
    c.Run();
    ASSERT_TRUE(c.AllFinished());
    // One answer per push, to the pusher only.
    const int per_worker = static_cast<int>(cfg.iterations) * static_cast<int>(c.placement().chunks().size());
    EXPECT_EQ(pushes, 3 * per_worker);
    for (int w = 0; w < 3; ++w) EXPECT_EQ(params_to[c.layout().worker(w)], per_worker);
  }
}

// A shard keeps per-worker progress only under ASP, and only for its own chunks: one vector per
// chunk of the model in every shard made shards x chunks x workers counters (7.8 GB for AlexNet
// at 1,024 workers, docs/performance.md).
TEST(Asp, ShardsKeepPerWorkerCountersForTheirOwnChunksOnly) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int workers = 6, shards = 3;
  for (core::Consistency c : {core::Consistency::kBsp, core::Consistency::kSsp,
                              core::Consistency::kAsp}) {
    core::ProtocolConfig cfg = Config(c, 1, 2);
    cfg.chunk_bytes = 1024;  // several chunks per shard
    FakeCluster cluster(model, core::JobLayout::Colocated(workers, shards), cfg, 3);
    ASSERT_GT(cluster.placement().chunks().size(), static_cast<size_t>(2 * shards));
    for (int s = 0; s < shards; ++s) {
      const size_t own = cluster.placement().chunks_of_shard(s).size();
      EXPECT_EQ(cluster.shard(s).per_worker_counters(),
                c == core::Consistency::kAsp ? 2 * own * workers : 0u)
          << "shard " << s;
    }
    cluster.Run();
    EXPECT_TRUE(cluster.AllFinished()) << static_cast<int>(c);
  }
}

TEST(Sfb, FactorsGoToEveryPeerAndAreRebuiltOnce) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 4;
  core::ProtocolConfig cfg = Config(core::Consistency::kBsp, 0, 3);
  cfg.scheme_of_layer = Schemes(model, core::Scheme::kSfb);
  FakeCluster c(model, core::JobLayout::Colocated(P, 2), cfg, 7);
  std::map<std::tuple<core::ActorId, int, int64_t>, int> factors;  // (to, layer, clock)
  int rebuilds = 0;
  c.on_deliver = [&](core::TimeNs, const core::Message& m) {
    if (m.type != MsgType::kFactors) return;
    factors[{m.to, m.layer, m.clock}]++;
    const core::Layer& L = model.layers()[static_cast<size_t>(m.layer)];
    EXPECT_EQ(m.payload_bytes, cfg.batch * (L.fc_in + L.fc_out) * 4) << L.name;
  };
  c.on_task_done = [&](core::TimeNs, core::ActorId, const core::ComputeTask& t) {
    rebuilds += t.kind == TaskKind::kSfbRebuild;
  };
  c.Run();
  ASSERT_TRUE(c.AllFinished());
  int fc_layers = 0;
  for (const auto& l : model.layers()) fc_layers += l.kind == core::LayerKind::kFc;
  EXPECT_EQ(factors.size(), static_cast<size_t>(P * fc_layers * 3));
  for (const auto& [key, n] : factors) EXPECT_EQ(n, P - 1);
  EXPECT_EQ(rebuilds, P * (P - 1) * fc_layers * 3);
  // FC weights never reach a shard; their biases do.
  for (const core::Chunk& ch : c.placement().chunks()) {
    const core::Layer& L = model.layers()[static_cast<size_t>(ch.layer)];
    if (L.kind == core::LayerKind::kFc) {
      EXPECT_EQ(ch.blob, 1) << L.name;
    }
  }
}

TEST(Allreduce, RingMovesTwoPMinusOneOverPOfTheLayer) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  for (int P : {1, 2, 3, 5}) {
    core::ProtocolConfig cfg = Config(core::Consistency::kBsp, 0, 3);
    cfg.scheme_of_layer.assign(model.layers().size(), core::Scheme::kAllreduce);
    FakeCluster c(model, core::JobLayout::Colocated(P, 1), cfg, 11);
    std::map<core::ActorId, int64_t> sent_bytes;
    int pushes = 0;
    c.on_deliver = [&](core::TimeNs, const core::Message& m) {
      if (m.type == MsgType::kRing) {
        sent_bytes[m.from] += m.payload_bytes;
        EXPECT_EQ(m.to, c.layout().worker((c.layout().WorkerIndex(m.from) + 1) % P));
      }
      pushes += m.type == MsgType::kPushGrad;
    };
    c.Run();
    ASSERT_TRUE(c.AllFinished()) << P << " workers";
    EXPECT_EQ(pushes, 0);
    EXPECT_TRUE(c.placement().chunks().empty());
    // Per clock each worker sends 2(P-1) segments of every piece: 2(P-1)/P of the model, to
    // within one byte per piece and step of rounding.
    const double model_bytes = static_cast<double>(model.total_params() * 4);
    for (int w = 0; w < P; ++w) {
      const double per_clock = static_cast<double>(sent_bytes[c.layout().worker(w)]) / 3;
      EXPECT_NEAR(per_clock, 2.0 * (P - 1) / P * model_bytes, 64.0) << P << " workers";
    }
  }
}

TEST(Priorities, QueuedSendsGoLowestLayerFirstWithinTheWindow) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg = Config(core::Consistency::kBsp, 0, 2);
  cfg.priority_window_bytes = 512;
  cfg.dwbp = false;  // every layer's chunks are queued at once, so order is up to the queue
  FakeCluster c(model, core::JobLayout::Dedicated(1, 1), cfg);
  std::map<std::pair<core::ActorId, core::ActorId>, int64_t> in_flight;
  std::vector<int> push_layers;
  c.on_deliver = [&](core::TimeNs, const core::Message& m) {
    if (m.type == MsgType::kPushGrad && m.clock == 0) push_layers.push_back(m.layer);
  };
  c.Run();
  ASSERT_TRUE(c.AllFinished());
  ASSERT_FALSE(push_layers.empty());
  // After the first window's worth, pushes come in non-decreasing layer order.
  size_t first_ordered = 0;
  while (first_ordered + 1 < push_layers.size() &&
         push_layers[first_ordered] >= push_layers[first_ordered + 1]) {
    ++first_ordered;
  }
  EXPECT_TRUE(std::is_sorted(push_layers.begin() + static_cast<long>(first_ordered) + 1,
                             push_layers.end()));
  // Without priorities (window 0), no DWBP: pushes go top layer first.
  cfg.priority_window_bytes = 0;
  FakeCluster plain(model, core::JobLayout::Dedicated(1, 1), cfg);
  std::vector<int> plain_layers;
  plain.on_deliver = [&](core::TimeNs, const core::Message& m) {
    if (m.type == MsgType::kPushGrad && m.clock == 0) plain_layers.push_back(m.layer);
  };
  plain.Run();
  EXPECT_GT(plain_layers.front(), plain_layers.back());
}

// A host that only records what it is asked to send.
class RecordingHost final : public core::Host {
 public:
  void Send(core::Message msg) override { sent.push_back(std::move(msg)); }
  void StartCompute(const core::ComputeTask&) override {}
  void SetTimer(core::TimeNs, uint64_t) override {}
  void Trace(const core::TraceEvent&) override {}
  std::vector<core::Message> sent;
};

core::Message Factors(int64_t clock, int layer, int64_t bytes) {
  core::Message m;
  m.type = MsgType::kFactors;
  m.from = 1;
  m.to = 2;
  m.clock = clock;
  m.layer = layer;
  m.payload_bytes = bytes;
  return m;
}

// Under SSP a sender may hold several clocks' messages for one peer, which needs the older clock
// complete before it goes on: an older clock's message goes before a newer clock's whatever their
// layers, and within a clock the lower layer first. (By layer alone, the newer clocks' lower
// layers kept overtaking an older clock's top layer while the backlog lasted.)
TEST(Priorities, AnOlderClockGoesBeforeANewerClocksLowerLayers) {
  RecordingHost host;
  core::SendQueue q(&host, /*window_bytes=*/1);
  q.Send(Factors(4, 8, 100), 8);  // goes at once: nothing in flight
  q.Send(Factors(4, 9, 100), 9);  // the top layer of clock 4, queued
  q.Send(Factors(5, 0, 100), 0);
  q.Send(Factors(5, 1, 100), 1);
  q.Send(Factors(6, 0, 100), 0);
  ASSERT_EQ(host.sent.size(), 1u);
  for (int i = 0; i < 4; ++i) q.OnSent(host.sent.back());
  ASSERT_EQ(host.sent.size(), 5u);
  const std::vector<std::pair<int64_t, int>> want = {{4, 8}, {4, 9}, {5, 0}, {5, 1}, {6, 0}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(host.sent[i].clock, want[i].first) << i;
    EXPECT_EQ(host.sent[i].layer, want[i].second) << i;
  }
}

}  // namespace
}  // namespace poseidon
