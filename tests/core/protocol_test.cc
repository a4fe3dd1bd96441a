// Protocol tests of the core's worker, shard and coordinator on an in-memory host.
#include <map>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "core/placement.h"
#include "tests/core/fake_cluster.h"
#include "tests/core/test_models.h"

namespace poseidon {
namespace {

using core::MsgType;
using core::TaskKind;
using testing::FakeCluster;

struct Counts {
  std::map<std::tuple<core::ActorId, int64_t, int32_t>, int> pushes;   // (shard, clock, chunk)
  std::map<std::tuple<core::ActorId, int64_t, int32_t>, int> params;   // (worker, clock, chunk)
};

TEST(Placement, CoversEveryBlobOnceAndBalancesShards) {
  core::Model m = core::Model::Build(testing::SmallNetSpec());
  for (int shards : {1, 2, 3, 7}) {
    for (int64_t chunk : {4, 64, 512, 1 << 20}) {
      core::Placement p = core::Placement::Build(m, shards, chunk);
      int64_t total = 0;
      int64_t max_chunk = 0;
      for (const core::Chunk& c : p.chunks()) {
        EXPECT_LE(c.bytes(), chunk);
        EXPECT_GT(c.count, 0);
        total += c.bytes();
        max_chunk = std::max(max_chunk, c.bytes());
      }
      EXPECT_EQ(total, m.total_params() * 4);
      EXPECT_EQ(p.total_bytes(), m.total_params() * 4);
      // Per blob: chunks are contiguous and cover [0, count).
      for (const core::Layer& l : m.layers()) {
        int64_t covered = 0;
        for (int32_t cid : p.chunks_of_layer(l.id)) covered += p.chunks()[cid].count;
        EXPECT_EQ(covered, l.params) << l.name;
      }
      int64_t lo = p.shard_bytes(0), hi = p.shard_bytes(0);
      for (int s = 0; s < shards; ++s) {
        lo = std::min(lo, p.shard_bytes(s));
        hi = std::max(hi, p.shard_bytes(s));
      }
      EXPECT_LE(hi - lo, max_chunk) << shards << " shards, chunk " << chunk;
    }
  }
}

// The papers' baselines: whole tensors, round-robin in model order or largest first.
TEST(Placement, TensorPoliciesPlaceEveryBlobWhole) {
  core::Model m = core::Model::Build(testing::SmallNetSpec());
  for (int shards : {1, 2, 3}) {
    for (core::PlacementPolicy policy :
         {core::PlacementPolicy::kTensorRoundRobin, core::PlacementPolicy::kTensorBySize}) {
      core::Placement p = core::Placement::Build(m, shards, /*chunk_bytes=*/4, {}, policy);
      size_t blobs = 0;
      for (const core::Layer& l : m.layers()) blobs += l.blobs.size();
      ASSERT_EQ(p.chunks().size(), blobs);  // one chunk per blob, whatever chunk_bytes says
      EXPECT_EQ(p.total_bytes(), m.total_params() * 4);
      for (const core::Chunk& c : p.chunks()) {
        EXPECT_EQ(c.offset, 0);
        EXPECT_EQ(c.count, m.layers()[c.layer].blobs[c.blob].count);
        if (policy == core::PlacementPolicy::kTensorRoundRobin) {
          EXPECT_EQ(c.shard, c.id % shards);
        }
      }
      for (int s = 0; s < shards; ++s) {
        int64_t bytes = 0;
        for (int32_t cid : p.chunks_of_shard(s)) bytes += p.chunks()[cid].bytes();
        EXPECT_EQ(bytes, p.shard_bytes(s));
      }
    }
    // Largest first onto the lightest shard: the biggest blob sits alone on shard 0 when it
    // outweighs the rest.
    core::Placement lpt = core::Placement::Build(m, shards, 4, {}, core::PlacementPolicy::kTensorBySize);
    int32_t biggest = 0;
    for (const core::Chunk& c : lpt.chunks()) {
      if (c.count > lpt.chunks()[biggest].count) biggest = c.id;
    }
    EXPECT_EQ(lpt.chunks()[biggest].shard, 0);
  }
  core::PlacementPolicy back = core::PlacementPolicy::kBalancedChunks;
  ASSERT_TRUE(core::PlacementPolicyFromName("by_size", &back));
  EXPECT_EQ(back, core::PlacementPolicy::kTensorBySize);
  EXPECT_FALSE(core::PlacementPolicyFromName("chunks", &back));
}

// A whole-tensor job runs to the end like a chunked one: every chunk pushed and answered.
TEST(Placement, AJobOnWholeTensorsFinishes) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg;
  cfg.iterations = 3;
  cfg.placement_policy = core::PlacementPolicy::kTensorRoundRobin;
  FakeCluster c(model, core::JobLayout::Colocated(2, 2), cfg, 0);
  int pushes = 0;
  c.on_deliver = [&](core::TimeNs, const core::Message& m) {
    if (m.type == MsgType::kPushGrad) ++pushes;
  };
  c.Run();
  size_t blobs = 0;
  for (const core::Layer& l : model.layers()) blobs += l.blobs.size();
  EXPECT_EQ(pushes, static_cast<int>(blobs) * 2 * 3);
  for (int w = 0; w < 2; ++w) EXPECT_TRUE(c.worker(w).finished());
}

class BspTest : public ::testing::TestWithParam<std::tuple<int, int, bool, bool, uint64_t>> {};

TEST_P(BspTest, EveryChunkIsPushedAndReturnedOncePerClock) {
  auto [workers, servers, dwbp, copies, seed] = GetParam();
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg;
  cfg.dwbp = dwbp;
  cfg.chunk_bytes = 256;  // several chunks per blob
  cfg.iterations = 3;
  cfg.device_copies = copies;
  FakeCluster c(model, core::JobLayout::Colocated(workers, servers), cfg, seed);
  Counts counts;
  // Clock at which each worker last started a forward pass, and the clock each (worker,
  // layer) was last synced for: a worker must never compute clock c+1 with a layer that is
  // not yet fresh for clock c (BSP).
  std::map<std::pair<core::ActorId, int>, int64_t> synced;
  c.on_deliver = [&](core::TimeNs, const core::Message& m) {
    if (m.type == MsgType::kPushGrad) counts.pushes[{m.to, m.clock, m.chunk}]++;
    if (m.type == MsgType::kParams) counts.params[{m.to, m.clock, m.chunk}]++;
  };
  c.on_task_done = [&](core::TimeNs, core::ActorId a, const core::ComputeTask& t) {
    if (t.kind == TaskKind::kForward && t.clock > 0) {
      for (int l : model.param_layers()) {
        auto it = synced.find({a, l});
        ASSERT_TRUE(it != synced.end() && it->second == t.clock - 1)
            << "worker " << a << " computed clock " << t.clock << " with stale " << l;
      }
    }
  };
  c.on_trace = [&](const core::TraceEvent& e) {
    if (e.kind == core::TraceKind::kLayerSynced) synced[{e.actor, e.layer}] = e.clock;
  };
  c.Run();
  ASSERT_TRUE(c.AllFinished());
  const auto& chunks = c.placement().chunks();
  for (int64_t clock = 0; clock < cfg.iterations; ++clock) {
    for (const core::Chunk& ch : chunks) {
      EXPECT_EQ((counts.pushes[{c.layout().server(ch.shard), clock, ch.id}]), workers);
      for (int w = 0; w < workers; ++w) {
        EXPECT_EQ((counts.params[{c.layout().worker(w), clock, ch.id}]), 1);
      }
    }
  }
  size_t expected_pushes = static_cast<size_t>(cfg.iterations) * chunks.size();
  EXPECT_EQ(counts.pushes.size(), expected_pushes);
  // Copies around every sync when parameters live on a device, never otherwise.
  int copy_tasks = 0;
  for (const auto& a : c.issued) {
    if (!a.is_message &&
        (a.task.kind == TaskKind::kCopyToHost || a.task.kind == TaskKind::kCopyToDevice)) {
      ++copy_tasks;
    }
  }
  EXPECT_EQ(copy_tasks,
            copies ? 2 * workers * cfg.iterations * static_cast<int>(model.param_layers().size())
                   : 0);
}

INSTANTIATE_TEST_SUITE_P(Schedules, BspTest,
                         ::testing::Combine(::testing::Values(1, 3), ::testing::Values(1, 2),
                                            ::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(0u, 7u, 12345u)));

// With DWBP the top layer's gradient leaves while lower layers still run backward; without it,
// nothing is pushed until the whole backward pass is over.
TEST(Dwbp, SyncStartsWhenTheLayersBackwardEnds) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  for (bool dwbp : {true, false}) {
    core::ProtocolConfig cfg;
    cfg.dwbp = dwbp;
    cfg.iterations = 1;
    FakeCluster c(model, core::JobLayout::Colocated(1, 1), cfg);
    c.Run();
    // Order of issue: index of the first push and of the last backward task.
    int first_push = -1, last_backward = -1, fc2_backward = -1;
    for (size_t i = 0; i < c.issued.size(); ++i) {
      const auto& a = c.issued[i];
      if (a.is_message && a.msg.type == MsgType::kPushGrad && first_push < 0) {
        first_push = static_cast<int>(i);
      }
      if (!a.is_message && a.task.kind == TaskKind::kBackward) {
        last_backward = static_cast<int>(i);
        if (model.layers()[a.task.layer].name == "fc2") fc2_backward = static_cast<int>(i);
      }
    }
    ASSERT_GE(first_push, 0);
    if (dwbp) {
      EXPECT_LT(first_push, last_backward) << "DWBP should push before backward ends";
      EXPECT_GT(first_push, fc2_backward);
    } else {
      EXPECT_GT(first_push, last_backward) << "without DWBP nothing is pushed during backward";
    }
  }
}

TEST(Coordinator, StartsOnlyWhenEveryoneRegistered) {
  core::Model model = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg;
  cfg.iterations = 1;
  FakeCluster c(model, core::JobLayout::Dedicated(2, 2), cfg);
  int registers_seen = 0;
  bool start_before_all = false;
  c.on_deliver = [&](core::TimeNs, const core::Message& m) {
    if (m.type == MsgType::kRegister) ++registers_seen;
    if (m.type == MsgType::kStart && registers_seen < 4) start_before_all = true;
  };
  c.Run();
  EXPECT_EQ(registers_seen, 4);
  EXPECT_FALSE(start_before_all);
  EXPECT_TRUE(c.AllFinished());
  bool job_done = false;
  for (const auto& e : c.trace) job_done |= e.kind == core::TraceKind::kJobDone;
  EXPECT_TRUE(job_done);
}

}  // namespace
}  // namespace poseidon
