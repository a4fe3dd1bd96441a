// The baselines' collectives (core/collectives.h): DDP's bucket assignment, its rebuild after
// iteration 1 and its launch order; Horovod's fusion by threshold and its negotiation; and the
// data path of a fused ring through the per-layer ring buffers of the WorkerStore, on the
// in-memory host with seeded random schedules.
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/collectives.h"
#include "core/message_rules.h"
#include "core/tree.h"
#include "tests/core/fake_cluster.h"
#include "tests/core/test_models.h"

namespace poseidon {
namespace {

using core::Collective;
using core::GradTensor;
using testing::FakeCluster;

// data(1 x 1 x 40) -> fc1(30) -> fc2(20) -> fc3(10) -> loss: tensors (ready order) fc3.bias 40 B,
// fc3.weight 800 B, fc2.bias 80 B, fc2.weight 2400 B, fc1.bias 120 B, fc1.weight 4800 B.
core::ModelSpec ThreeFcSpec() { return testing::FcChainSpec("three_fc", 40, {30, 20, 10}); }

std::vector<GradTensor> Sized(std::vector<int64_t> counts) {
  std::vector<GradTensor> t;
  for (size_t i = 0; i < counts.size(); ++i) {
    GradTensor g;
    g.layer = static_cast<int32_t>(counts.size() - i);
    g.count = counts[i];
    t.push_back(g);
  }
  return t;
}

TEST(Collectives, ReadyOrderIsTheLastLayersLastBlobFirst) {
  const core::Model model = core::Model::Build(ThreeFcSpec());
  const std::vector<GradTensor> t = core::GradientReadyOrder(model);
  ASSERT_EQ(t.size(), 6u);
  const std::vector<std::tuple<std::string, int, int64_t, int64_t>> want = {
      {"fc3", 1, 200, 10}, {"fc3", 0, 0, 200},   {"fc2", 1, 600, 20},
      {"fc2", 0, 0, 600},  {"fc1", 1, 1200, 30}, {"fc1", 0, 0, 1200}};
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(model.layers()[static_cast<size_t>(t[i].layer)].name, std::get<0>(want[i])) << i;
    EXPECT_EQ(t[i].blob, std::get<1>(want[i])) << i;
    EXPECT_EQ(t[i].offset, std::get<2>(want[i])) << i;
    EXPECT_EQ(t[i].count, std::get<3>(want[i])) << i;
  }
}

// compute_bucket_assignment_by_size: a bucket closes once its bytes reach its limit, the tensor
// crossing the limit in it; the first limit for the first bucket, the last for every later one.
TEST(Collectives, BucketsCloseAtTheirLimitWithTheCrossingTensorInside) {
  // 100, 300, 52, 600, 12 bytes.
  const std::vector<GradTensor> t = Sized({25, 75, 13, 150, 3});
  EXPECT_EQ(core::AssignBuckets(t, {250, 400}), (std::vector<int>{2, 4, 5}));
  EXPECT_EQ(core::AssignBuckets(t, {100, 1000}), (std::vector<int>{1, 5}));
  EXPECT_EQ(core::AssignBuckets(t, {100}), (std::vector<int>{1, 2, 4, 5}));
  EXPECT_EQ(core::AssignBuckets(t, {1 << 30}), (std::vector<int>{5}));
  // Exactly the limit closes the bucket.
  EXPECT_EQ(core::AssignBuckets(Sized({25, 25}), {100}), (std::vector<int>{1, 2}));
}

// DDP: one bucket in iteration 0 (bucket_size_limits = [sys.maxsize]), rebuilt after it with the
// first bucket's limit and then the cap.
TEST(Collectives, DdpHasOneBucketInIterationZeroAndRebuildsAfterIt) {
  const core::Model model = core::Model::Build(ThreeFcSpec());
  const std::vector<GradTensor> t = core::GradientReadyOrder(model);
  core::BaselineConfig b;
  b.kind = core::Baseline::kDdp;
  EXPECT_EQ(core::DdpBucketEnds(t, b, 0), (std::vector<int>{6}));
  EXPECT_EQ(core::DdpBucketEnds(t, b, 1), (std::vector<int>{6}));  // 8.24 kB < 1 MiB
  b.first_bucket_bytes = 800;                                      // fc3: 40 + 800
  b.bucket_cap_bytes = 2000;  // fc2: 80 + 2400; fc1: 120 + 4800
  EXPECT_EQ(core::DdpBucketEnds(t, b, 0), (std::vector<int>{6}));
  EXPECT_EQ(core::DdpBucketEnds(t, b, 1), (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(core::DdpBucketEnds(t, b, 7), (std::vector<int>{2, 4, 6}));
  core::CollectivePlan plan(model, b, 1000);
  ASSERT_EQ(plan.Ddp(1).size(), 3u);
  const Collective& c = plan.Ddp(1)[1];
  EXPECT_EQ(c.first, 2);
  EXPECT_EQ(c.end, 4);
  EXPECT_EQ(c.bytes, 2480);
  EXPECT_EQ(c.pieces, 3);
  EXPECT_EQ(c.piece_base, 1);  // fc3's 840 bytes are one piece
  EXPECT_EQ(model.layers()[static_cast<size_t>(c.first_layer)].name, "fc2");
  EXPECT_EQ(plan.max_pieces(), 1 + 1 + 1 + 3 + 1 + 5);
}

// Horovod's FuseResponses: the next tensor joins while the bytes stay within the threshold; a
// tensor above it goes alone.
TEST(Collectives, FusionTakesTensorsWhileWithinTheThreshold) {
  const std::vector<GradTensor> t = Sized({25, 75, 13, 150, 3});  // 100 300 52 600 12 bytes
  EXPECT_EQ(core::FuseTensors(t, 0, 5, 400), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(core::FuseTensors(t, 1, 3, 400), (std::vector<int>{3}));
  EXPECT_EQ(core::FuseTensors(t, 0, 5, 1 << 30), (std::vector<int>{5}));
  EXPECT_EQ(core::FuseTensors(t, 0, 5, 12), (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(core::FuseTensors(t, 2, 2, 400).empty());
}

TEST(Collectives, ASpanSplitsIntoTheTensorsItCrosses) {
  std::vector<GradTensor> t = Sized({3, 10, 4});
  t[0] = {5, 1, 10, 3};
  t[1] = {5, 0, 0, 10};
  t[2] = {2, 0, 0, 4};
  const std::vector<core::TensorPart> p = core::SplitCollectiveSpan(t, 0, 3, {2, 7});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].layer, 5);
  EXPECT_EQ(p[0].span.offset, 12);
  EXPECT_EQ(p[0].span.count, 1);
  EXPECT_EQ(p[0].at, 0);
  EXPECT_EQ(p[1].span.offset, 0);
  EXPECT_EQ(p[1].span.count, 6);
  EXPECT_EQ(p[1].at, 1);
  const std::vector<core::TensorPart> e = core::SplitCollectiveSpan(t, 1, 3, {10, 0});
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].span.count, 0);
  const std::vector<core::TensorPart> all = core::SplitCollectiveSpan(t, 0, 3, {0, 17});
  EXPECT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].at, 13);
}

// A worker's store with integer gradients (every sum exact): RingApply records the sum.
class ExactStore final : public core::WorkerStore {
 public:
  ExactStore(const core::Model& model, int worker) : model_(model), worker_(worker) {}
  core::FloatBuffer GradientChunk(const core::Chunk&) override { return nullptr; }
  void WriteParams(const core::Chunk&, const core::Message&) override {}
  void RingBegin(int layer, int64_t clock) override {
    EXPECT_TRUE(begun_.insert({layer, clock}).second) << "RingBegin twice";
    std::vector<float>& s = Sum(layer, clock);
    const std::vector<float> g = Gradient(model_, worker_, layer, clock);
    for (size_t i = 0; i < s.size(); ++i) s[i] += g[i];
  }
  core::FloatBuffer RingSegment(int layer, int64_t clock, core::RingSpan span) override {
    EXPECT_TRUE(begun_.count({layer, clock})) << "sent before the own gradient was in";
    const std::vector<float>& s = Sum(layer, clock);
    return std::make_shared<const std::vector<float>>(s.begin() + span.offset,
                                                      s.begin() + span.offset + span.count);
  }
  void RingReceive(const core::Message& m, core::RingSpan span, bool reduce) override {
    EXPECT_EQ(m.data ? static_cast<int64_t>(m.data->size()) : -1, span.count);
    std::vector<float>& s = Sum(m.layer, m.clock);
    for (int64_t i = 0; i < span.count; ++i) {
      float& out = s[static_cast<size_t>(span.offset + i)];
      out = reduce ? out + (*m.data)[static_cast<size_t>(i)] : (*m.data)[static_cast<size_t>(i)];
    }
  }
  void RingApply(int layer, int64_t clock, int) override {
    auto it = sums_.find({layer, clock});
    ASSERT_NE(it, sums_.end());
    EXPECT_TRUE(reduced.emplace(std::make_pair(layer, clock), it->second).second);
    sums_.erase(it);
  }
  static std::vector<float> Gradient(const core::Model& model, int worker, int layer,
                                     int64_t clock) {
    std::mt19937_64 rng(static_cast<uint64_t>(worker * 1000003 + layer * 1009 + clock));
    std::uniform_int_distribution<int> small(-50, 50);
    std::vector<float> g(static_cast<size_t>(model.layers()[static_cast<size_t>(layer)].params));
    for (float& x : g) x = static_cast<float>(small(rng));
    return g;
  }
  std::map<std::pair<int, int64_t>, std::vector<float>> reduced;

 private:
  std::vector<float>& Sum(int layer, int64_t clock) {
    std::vector<float>& s = sums_[{layer, clock}];
    if (s.empty())
      s.assign(static_cast<size_t>(model_.layers()[static_cast<size_t>(layer)].params), 0.f);
    return s;
  }
  const core::Model& model_;
  const int worker_;
  std::set<std::pair<int, int64_t>> begun_;
  std::map<std::pair<int, int64_t>, std::vector<float>> sums_;
};

core::ProtocolConfig BaselineConfig(const core::Model& model, core::Baseline kind) {
  core::ProtocolConfig cfg;
  cfg.iterations = 3;
  cfg.chunk_bytes = 1000;
  cfg.batch = 4;
  cfg.scheme_of_layer.assign(model.layers().size(), core::Scheme::kAllreduce);
  cfg.baseline.kind = kind;
  cfg.baseline.first_bucket_bytes = 800;
  cfg.baseline.bucket_cap_bytes = 2000;
  cfg.baseline.fusion_threshold_bytes = 2600;
  cfg.baseline.cycle_ns = 3;
  return cfg;
}

// NCCL's tuning inputs for `layout` at 10 GbE, machines joined inside by PCIe (12 GB/s): on 3+
// machines NCCL's tree takes collectives below about 90 KB, the ring larger ones.
core::NcclTopology TenGigabit(const core::JobLayout& layout) {
  core::NcclTopology t;
  t.ranks = layout.num_workers;
  t.nodes = layout.num_machines;
  t.net_GBps = 1.25;
  t.intra_GBps = 12;
  return t;
}

// data(1 x 1 x 64) -> fc1(512) -> fc2(64) -> fc3(10): tensors (ready order) fc3.bias 40 B,
// fc3.weight 2,560 B, fc2.bias 256 B, fc2.weight 131,072 B, fc1.bias 2,048 B, fc1.weight
// 131,072 B. With MixedBuckets, on 10 GbE: a small collective and two large ones.
core::ModelSpec MixedSpec() { return testing::FcChainSpec("mixed", 64, {512, 64, 10}); }
void MixedBuckets(core::ProtocolConfig* cfg, const core::JobLayout& layout) {
  cfg->chunk_bytes = 16384;
  cfg->baseline.first_bucket_bytes = 2600;
  cfg->baseline.bucket_cap_bytes = 100000;
  cfg->baseline.fusion_threshold_bytes = 140000;
  cfg->baseline.nccl = TenGigabit(layout);
}

// Every worker ends each clock of each layer with the exact sum of the P workers' gradients, with
// layers split between collectives and collectives cut into pieces, DWBP on and off. The tree
// runs on machines of one worker and of two (its chain inside a machine); auto on one machine
// (the ring always), two (the tree always) and more (both in one clock). `adjust` changes the
// configuration for a layout.
void ExpectSums(const core::Model& model, core::Baseline kind,
                core::AllreduceAlgorithm algorithm = core::AllreduceAlgorithm::kRing,
                void (*adjust)(core::ProtocolConfig*, const core::JobLayout&) = nullptr) {
  const bool tree = algorithm == core::AllreduceAlgorithm::kTree;
  const bool automatic = algorithm == core::AllreduceAlgorithm::kAuto;
  std::vector<core::JobLayout> layouts;
  for (int P : {1, 2, 3, 4}) {
    if ((!tree || P > 1) && (!automatic || P != 3)) {
      layouts.push_back(core::JobLayout::Colocated(P, 1));
    }
  }
  if (tree || automatic) {
    for (int machines : {5, 7}) layouts.push_back(core::JobLayout::Colocated(machines, 1));
    for (int machines : {2, 3}) layouts.push_back(core::JobLayout::Build(machines, 2, 1, true));
  }
  for (const core::JobLayout& layout : layouts) {
    const int P = layout.num_workers;
    for (uint64_t seed : {0, 5, 11, 12}) {
      core::ProtocolConfig cfg = BaselineConfig(model, kind);
      cfg.baseline.algorithm = algorithm;
      if (adjust) adjust(&cfg, layout);
      cfg.dwbp = seed != 5;
      std::vector<std::unique_ptr<ExactStore>> stores;
      std::vector<core::WorkerStore*> ptrs;
      for (int w = 0; w < P; ++w) {
        stores.push_back(std::make_unique<ExactStore>(model, w));
        ptrs.push_back(stores.back().get());
      }
      FakeCluster c(model, layout, cfg, seed, ptrs);
      c.deliver_timers = true;
      c.Run();
      const std::string where = std::string(core::BaselineName(kind)) + " " +
                                core::AllreduceAlgorithmName(algorithm) + " P " +
                                std::to_string(P) + " on " + std::to_string(layout.num_machines) +
                                " machines, seed " + std::to_string(seed);
      ASSERT_TRUE(c.AllFinished()) << where << ": " << c.worker(0).WaitingFor();
      for (int l : model.param_layers()) {
        for (int64_t clock = 0; clock < cfg.iterations; ++clock) {
          std::vector<float> want(
              static_cast<size_t>(model.layers()[static_cast<size_t>(l)].params));
          for (int w = 0; w < P; ++w) {
            const std::vector<float> g = ExactStore::Gradient(model, w, l, clock);
            for (size_t i = 0; i < want.size(); ++i) want[i] += g[i];
          }
          for (int w = 0; w < P; ++w) {
            EXPECT_EQ(stores[static_cast<size_t>(w)]->reduced.at({l, clock}), want)
                << where << " worker " << w << " layer " << l << " clock " << clock;
          }
        }
      }
    }
  }
}

TEST(Collectives, DdpBucketsGiveEveryWorkerTheSumOfAllGradients) {
  const core::Model model = core::Model::Build(ThreeFcSpec());
  ExpectSums(model, core::Baseline::kDdp);
}

TEST(Collectives, HorovodFusionGivesEveryWorkerTheSumOfAllGradients) {
  const core::Model model = core::Model::Build(ThreeFcSpec());
  ExpectSums(model, core::Baseline::kHorovod);
}

// The tree all-reduce (core/tree.h): the same exact sums on every worker, under shuffled
// schedules, on machines of one worker and of two.
TEST(Collectives, TreeAllReduceGivesEveryWorkerTheSumOfAllGradients) {
  const core::Model model = core::Model::Build(ThreeFcSpec());
  ExpectSums(model, core::Baseline::kDdp, core::AllreduceAlgorithm::kTree);
  ExpectSums(model, core::Baseline::kHorovod, core::AllreduceAlgorithm::kTree);
}

// auto: each collective runs what NCCL's tuning model chooses for its bytes, the small first
// bucket the tree and the large ones the ring on 3+ machines at 10 GbE; the sums stay exact.
TEST(Collectives, AutoRunsEachCollectiveByNcclsChoiceWithExactSums) {
  const core::Model model = core::Model::Build(MixedSpec());
  for (const core::JobLayout& layout :
       {core::JobLayout::Colocated(5, 1), core::JobLayout::Build(3, 2, 1, true)}) {
    core::ProtocolConfig cfg = BaselineConfig(model, core::Baseline::kDdp);
    cfg.baseline.algorithm = core::AllreduceAlgorithm::kAuto;
    MixedBuckets(&cfg, layout);
    const core::CollectivePlan plan(model, cfg.baseline, cfg.chunk_bytes, core::TreeDepth(layout));
    const std::vector<Collective>& cs = plan.Ddp(1);
    ASSERT_EQ(cs.size(), 3u);
    EXPECT_EQ(cs[0].bytes, 2600);
    EXPECT_EQ(cs[0].algorithm, core::AllreduceAlgorithm::kTree);
    EXPECT_EQ(cs[1].algorithm, core::AllreduceAlgorithm::kRing);
    EXPECT_EQ(cs[2].algorithm, core::AllreduceAlgorithm::kRing);
    for (const Collective& c : cs) {
      EXPECT_EQ(c.algorithm, core::NcclChooseAllreduce(c.bytes, cfg.baseline.nccl));
      // A tree's pieces are NCCL's tree chunks, a ring's chunk_bytes.
      EXPECT_EQ(c.piece_bytes, c.algorithm == core::AllreduceAlgorithm::kTree
                                   ? core::TreePieceBytes(c.bytes, cfg.chunk_bytes,
                                                          core::TreeDepth(layout))
                                   : cfg.chunk_bytes);
    }
    // Iteration 0's one bucket of everything (267 KB) goes by the ring.
    ASSERT_EQ(plan.Ddp(0).size(), 1u);
    EXPECT_EQ(plan.Ddp(0)[0].algorithm, core::AllreduceAlgorithm::kRing);
  }
  ExpectSums(model, core::Baseline::kDdp, core::AllreduceAlgorithm::kAuto, MixedBuckets);
  ExpectSums(model, core::Baseline::kHorovod, core::AllreduceAlgorithm::kAuto, MixedBuckets);
}

// Which collective each bucket step belongs to, by worker and clock, in the order sent; and when
// (in the host's sequence of actions) a worker's backward tasks ended and its steps arrived.
struct Recorder {
  explicit Recorder(FakeCluster* c) : c_(c) {
    c->on_task_done = [this](core::TimeNs, core::ActorId a, const core::ComputeTask& t) {
      if (t.kind == core::TaskKind::kBackward)
        backward_done[{a, t.layer, t.clock}] = c_->issued.size();
    };
    c->on_deliver = [this](core::TimeNs, const core::Message& m) {
      if (m.type == core::MsgType::kBucket) delivered.push_back({c_->issued.size(), m});
    };
  }
  FakeCluster* c_;
  std::map<std::tuple<core::ActorId, int, int64_t>, size_t> backward_done;
  std::vector<std::pair<size_t, core::Message>> delivered;
};

// DDP launches a bucket only once all its gradients are ready, strictly in bucket order, one at
// a time: a worker's first step of bucket k follows the backward pass of the bucket's earliest
// layer and the arrival of the last step of bucket k-1.
TEST(Collectives, DdpLaunchesEachBucketWhenReadyInOrderOneAtATime) {
  const core::Model model = core::Model::Build(ThreeFcSpec());
  for (int P : {2, 3}) {
    for (uint64_t seed : {0, 2, 9}) {
      core::ProtocolConfig cfg = BaselineConfig(model, core::Baseline::kDdp);
      FakeCluster c(model, core::JobLayout::Colocated(P, 1), cfg, seed);
      Recorder r(&c);
      c.Run();
      ASSERT_TRUE(c.AllFinished());
      const core::CollectivePlan plan(model, cfg.baseline, cfg.chunk_bytes);
      const int steps = 2 * (P - 1);
      // (worker, clock, collective) -> index of its first send; index its last step arrived (what a
      // worker sends in reaction to an event has the index the host had reached at the event).
      std::map<std::tuple<core::ActorId, int64_t, int>, size_t> first_sent, last_in;
      std::map<std::tuple<core::ActorId, int64_t, int>, int> arrived;
      std::map<std::pair<core::ActorId, int64_t>, int> last_coll;
      std::set<int> seen0, seen1;
      auto index = [&](const core::Message& m) {
        const std::vector<Collective>& cs = plan.Ddp(m.clock);
        const Collective* k = core::CollectivePlan::Holding(cs, m.chunk);
        EXPECT_NE(k, nullptr);
        return static_cast<int>(k - cs.data());
      };
      for (size_t i = 0; i < c.issued.size(); ++i) {
        const core::Message& m = c.issued[i].msg;
        if (!c.issued[i].is_message || m.type != core::MsgType::kBucket) continue;
        const int k = index(m);
        (m.clock == 0 ? seen0 : seen1).insert(k);
        auto [it, fresh] = first_sent.insert({{m.from, m.clock, k}, i});
        (void)it;
        int& last = last_coll.try_emplace({m.from, m.clock}, 0).first->second;
        EXPECT_GE(k, last) << "worker " << m.from << " went back to an earlier bucket";
        last = k;
        if (fresh) {
          const Collective& col = plan.Ddp(m.clock)[static_cast<size_t>(k)];
          EXPECT_GE(i, r.backward_done.at({m.from, col.first_layer, m.clock}))
              << "bucket " << k << " of clock " << m.clock << " before its gradients were ready";
        }
      }
      for (const auto& [i, m] : r.delivered) {
        const int k = index(m);
        const Collective& col = plan.Ddp(m.clock)[static_cast<size_t>(k)];
        if (++arrived[{m.to, m.clock, k}] == col.pieces * steps) last_in[{m.to, m.clock, k}] = i;
      }
      for (const auto& [key, i] : first_sent) {
        const auto [w, clock, k] = key;
        if (k == 0) continue;
        EXPECT_GE(i, last_in.at({w, clock, k - 1}))
            << "worker " << w << " began bucket " << k << " of clock " << clock << " while bucket "
            << k - 1 << " ran";
      }
      EXPECT_EQ(seen0, (std::set<int>{0})) << "iteration 0: one bucket";
      EXPECT_EQ(seen1, (std::set<int>{0, 1, 2})) << "rebuilt: three buckets";
    }
  }
}

// Horovod: every fused all-reduce holds whole tensors in the ready order, within the threshold
// unless it is one tensor; each clock's are answered by worker 0 after every worker's report.
TEST(Collectives, HorovodFusesAnsweredTensorsWithinTheThreshold) {
  const core::Model model = core::Model::Build(ThreeFcSpec());
  const std::vector<GradTensor> t = core::GradientReadyOrder(model);
  for (int P : {2, 3}) {
    for (uint64_t seed : {0, 4, 8}) {
      core::ProtocolConfig cfg = BaselineConfig(model, core::Baseline::kHorovod);
      FakeCluster c(model, core::JobLayout::Colocated(P, 1), cfg, seed);
      c.deliver_timers = true;
      c.Run();
      ASSERT_TRUE(c.AllFinished()) << c.worker(0).WaitingFor();
      const core::CollectivePlan plan(model, cfg.baseline, cfg.chunk_bytes);
      std::map<int64_t, std::vector<Collective>> groups;  // per clock, as answered to worker 1
      int reports = 0;
      for (const FakeCluster::Action& a : c.issued) {
        if (!a.is_message) continue;
        const core::Message& m = a.msg;
        if (m.type == core::MsgType::kReady) {
          EXPECT_EQ(m.to, c.layout().worker(0));
          ++reports;
        }
        if (m.type != core::MsgType::kResponse || m.to != c.layout().worker(1)) continue;
        std::vector<Collective>& g = groups[m.clock];
        EXPECT_EQ(m.step, g.empty() ? 0 : g.back().end) << "answers continue each other";
        plan.Append(core::FuseTensors(t, m.step, m.chunk, cfg.baseline.fusion_threshold_bytes), &g);
      }
      EXPECT_GE(reports, P - 1);
      for (int64_t clock = 0; clock < cfg.iterations; ++clock) {
        ASSERT_FALSE(groups[clock].empty());
        EXPECT_EQ(groups[clock].back().end, static_cast<int>(t.size())) << "clock " << clock;
        for (const Collective& g : groups[clock]) {
          EXPECT_TRUE(g.bytes <= cfg.baseline.fusion_threshold_bytes || g.end == g.first + 1)
              << g.bytes << " bytes in tensors " << g.first << ".." << g.end - 1;
        }
      }
      // Every bucket step names a piece of one of the answered fused all-reduces, and its layer.
      for (const FakeCluster::Action& a : c.issued) {
        if (!a.is_message || a.msg.type != core::MsgType::kBucket) continue;
        const Collective* g = core::CollectivePlan::Holding(groups[a.msg.clock], a.msg.chunk);
        ASSERT_NE(g, nullptr) << core::Describe(a.msg);
        EXPECT_EQ(a.msg.layer, g->first_layer);
      }
    }
  }
  // The fused groups themselves, for the answers above.
  EXPECT_EQ(core::FuseTensors(t, 0, 6, 2600), (std::vector<int>{3, 5, 6}));
}

// Step `s` of clock 1 of collective `c`'s first piece from worker `from` to worker `to`, carrying
// the floats that step carries under the collective's algorithm (a tree's half, a ring's
// segment), all ones.
core::Message BucketStep(const core::JobLayout& layout, const core::Collective& c, int from,
                         int to, int s) {
  const bool tree = c.algorithm == core::AllreduceAlgorithm::kTree;
  const int P = layout.num_workers;
  core::Message m;
  m.type = core::MsgType::kBucket;
  m.from = layout.worker(from);
  m.to = layout.worker(to);
  m.clock = 1;
  m.layer = c.first_layer;
  m.chunk = c.piece_base;
  m.step = s;
  const int seg = tree ? core::TreeHalf(s) % 2 : core::RingSegmentSent(from, s, P);
  const core::RingSpan span = core::RingSegmentFloats(c.bytes, c.piece_bytes, 0, seg, tree ? 2 : P);
  m.payload_bytes = span.count * 4;
  m.data = std::make_shared<const std::vector<float>>(static_cast<size_t>(span.count), 1.f);
  return m;
}

// A tree step is taken only from a child of its half's tree (up) or from the parent (down), with
// a step of the tree's four and the half's floats; anything else is the sender's error.
TEST(Collectives, TreeStepsFromAnyoneButTheTreeNeighboursAreRefused) {
  const core::Model model = core::Model::Build(ThreeFcSpec());
  core::ProtocolConfig cfg = BaselineConfig(model, core::Baseline::kDdp);
  cfg.baseline.algorithm = core::AllreduceAlgorithm::kTree;
  const core::JobLayout layout = core::JobLayout::Colocated(4, 1);
  const core::Placement placement = core::Placement::Build(
      model, layout.num_servers, cfg.chunk_bytes, cfg.scheme_of_layer, cfg.placement_policy);
  const core::CollectivePlan plan(model, cfg.baseline, cfg.chunk_bytes);
  const core::JobShape shape{&layout, &cfg, &placement, &model, cfg.fault, &plan};
  // Tree 0 over 4 machines: 0 <- 2 <- {1, 3}; tree 1 mirrors it: 3 <- 1 <- {0, 2}.
  const core::Collective& c = plan.Ddp(1).front();
  auto step = [&](int from, int to, int s) {
    return core::CheckMessageShape(shape, layout.worker(to), BucketStep(layout, c, from, to, s));
  };
  EXPECT_FALSE(step(1, 2, core::TreeStep(0, false)));  // up tree 0: 1 is a child of 2
  EXPECT_FALSE(step(2, 1, core::TreeStep(0, true)));   // down tree 0: 2 is 1's parent
  EXPECT_FALSE(step(0, 1, core::TreeStep(1, false)));  // up tree 1: 0 is a child of 1
  const core::ProtocolError not_child = step(0, 2, core::TreeStep(0, false));
  EXPECT_EQ(not_child.code, core::ProtocolErrorCode::kWrongSender);
  EXPECT_NE(not_child.what.find("not a child of worker 2 in tree 0"), std::string::npos)
      << not_child.what;
  EXPECT_EQ(step(3, 1, core::TreeStep(0, true)).code, core::ProtocolErrorCode::kWrongSender);
  EXPECT_EQ(step(1, 2, 4).code, core::ProtocolErrorCode::kOutOfRange);
  // The right neighbour with the other half's size.
  const core::ProtocolError short_half = [&] {
    core::Message x;
    x.type = core::MsgType::kBucket;
    x.from = layout.worker(1);
    x.to = layout.worker(2);
    x.clock = 1;
    x.layer = c.first_layer;
    x.chunk = c.piece_base;
    x.step = core::TreeStep(0, false);
    x.payload_bytes = 4;
    x.data = std::make_shared<const std::vector<float>>(1, 1.f);
    return core::CheckMessageShape(shape, x.to, x);
  }();
  EXPECT_EQ(short_half.code, core::ProtocolErrorCode::kWrongShape) << short_half.what;
}

// Horovod: a bucket step that arrived before the coordinator's answer and then does not fit the
// collective it belongs to is its sender's error. Worker 0 takes its own answer inside its
// negotiation cycle (a timer, where no peer's message could carry the error back): it must not
// abort, nor blame another peer; the forger's next message is refused with that error, which
// closes the forger's connection in a real host.
TEST(Collectives, HorovodBlamesAMisfitBufferedStepOnItsSender) {
  const core::Model model = core::Model::Build(ThreeFcSpec());
  for (int to : {0, 2}) for (uint64_t seed = 0; seed < 16; ++seed) {
    core::ProtocolConfig cfg = BaselineConfig(model, core::Baseline::kHorovod);
    FakeCluster c(model, core::JobLayout::Colocated(3, 1), cfg, seed);
    c.deliver_timers = true;
    const core::JobLayout& layout = c.layout();
    // Step 0 of clock 0's first piece from `to`'s predecessor in the ring (which the shape check
    // takes: the collective is not known yet), naming a layer no collective starts at (the loss,
    // which has no parameters).
    const int from = (to + 2) % 3;
    const int32_t loss = static_cast<int32_t>(model.layers().size()) - 1;
    ASSERT_TRUE(model.layers().back().blobs.empty());
    core::Message forged;
    forged.type = core::MsgType::kBucket;
    forged.from = layout.worker(from);
    forged.to = layout.worker(to);
    forged.clock = 0;
    forged.layer = loss;
    forged.chunk = 0;
    forged.step = 0;
    forged.payload_bytes = 4;
    ASSERT_FALSE(c.mutable_worker(to).OnMessage(0, forged)) << "buffered until the answer";
    std::vector<std::pair<core::Message, core::ProtocolError>> refused;
    c.on_refused = [&](const core::Message& m, const core::ProtocolError& e) {
      refused.emplace_back(m, e);
    };
    c.Run();
    ASSERT_FALSE(refused.empty()) << "worker " << to << " seed " << seed;
    for (const auto& [m, e] : refused) {
      EXPECT_EQ(m.from, forged.from)
          << "worker " << to << " seed " << seed << ": only the forger is refused";
      EXPECT_EQ(m.to, forged.to);
      EXPECT_EQ(e.code, core::ProtocolErrorCode::kOutOfRange) << e.what;
      EXPECT_NE(e.what.find("naming layer " + std::to_string(loss)), std::string::npos) << e.what;
    }
  }
}

// Under auto a step is judged by its collective's algorithm: the tree's neighbours for the small
// bucket, the ring's predecessor for a large one; a ring step into a tree collective (or the
// reverse) is the sender's error.
TEST(Collectives, AutoJudgesEachStepByItsCollectivesAlgorithm) {
  const core::Model model = core::Model::Build(MixedSpec());
  core::ProtocolConfig cfg = BaselineConfig(model, core::Baseline::kDdp);
  cfg.baseline.algorithm = core::AllreduceAlgorithm::kAuto;
  const core::JobLayout layout = core::JobLayout::Colocated(5, 1);
  MixedBuckets(&cfg, layout);
  const core::Placement placement = core::Placement::Build(
      model, layout.num_servers, cfg.chunk_bytes, cfg.scheme_of_layer, cfg.placement_policy);
  const core::CollectivePlan plan(model, cfg.baseline, cfg.chunk_bytes, core::TreeDepth(layout));
  const core::JobShape shape{&layout, &cfg, &placement, &model, cfg.fault, &plan};
  const core::Collective& tree = plan.Ddp(1)[0];
  const core::Collective& ring = plan.Ddp(1)[1];
  ASSERT_EQ(tree.algorithm, core::AllreduceAlgorithm::kTree);
  ASSERT_EQ(ring.algorithm, core::AllreduceAlgorithm::kRing);
  auto step = [&](const core::Collective& c, int from, int to, int s) {
    return core::CheckMessageShape(shape, layout.worker(to), BucketStep(layout, c, from, to, s));
  };
  // Tree 0 over 5 machines: 0 <- 4 <- 2 <- {1, 3}; worker 1 is a child of 2, and 1 precedes 2 in
  // the ring.
  EXPECT_FALSE(step(tree, 1, 2, core::TreeStep(0, false)));
  EXPECT_FALSE(step(ring, 1, 2, 0));
  // Worker 0 is no neighbour of 2 in tree 0 and does not precede it in the ring.
  EXPECT_EQ(step(tree, 0, 2, core::TreeStep(0, false)).code,
            core::ProtocolErrorCode::kWrongSender);
  // Worker 4 precedes 0 in the ring but sends into the small bucket, which runs the tree, where
  // 4 is 0's child in tree 0 but step 5 is no tree step.
  EXPECT_EQ(step(tree, 4, 0, 5).code, core::ProtocolErrorCode::kOutOfRange);
  // Worker 2 is 4's child in tree 0, not 4's predecessor in the ring: refused in the large one.
  EXPECT_EQ(step(ring, 2, 4, core::TreeStep(0, false)).code,
            core::ProtocolErrorCode::kWrongSender);
}

}  // namespace
}  // namespace poseidon
