// The ring all-reduce's geometry (core/ring.h) and its data path through the core (the
// WorkerStore ring hooks that core/worker.cc calls), on the in-memory host with seeded random
// schedules and a store per worker that holds real floats.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/ring.h"
#include "tests/core/fake_cluster.h"
#include "tests/core/test_models.h"

namespace poseidon {
namespace {

using core::RingSpan;
using testing::FakeCluster;

// Every segment's float span: in order, without gaps or overlaps, covering the layer; each within
// one float of the segment's phantom byte count.
TEST(RingGeometry, SegmentFloatsPartitionTheLayer) {
  for (int64_t layer_bytes : {4, 40, 160, 1320, 18560}) {
    for (int64_t chunk : {4, 6, 1002, 1024, 1316, 1 << 20}) {
      for (int P : {1, 2, 3, 5, 7}) {
        const int pieces = core::RingPieces(layer_bytes, chunk);
        int64_t next = 0, bytes = 0;
        for (int k = 0; k < pieces; ++k) {
          const int64_t piece_bytes = std::min(chunk, layer_bytes - k * chunk);
          ASSERT_GT(piece_bytes, 0);
          for (int seg = 0; seg < P; ++seg) {
            const RingSpan f = core::RingSegmentFloats(layer_bytes, chunk, k, seg, P);
            const int64_t b = core::RingSegmentBytes(piece_bytes, seg, P);
            ASSERT_EQ(f.offset, next) << layer_bytes << "/" << chunk << "/" << P;
            ASSERT_GE(f.count, 0);
            EXPECT_LT(std::abs(4 * f.count - b), 4) << layer_bytes << "/" << chunk << "/" << P;
            next += f.count;
            bytes += b;
          }
        }
        EXPECT_EQ(next * 4, layer_bytes);
        EXPECT_EQ(bytes, layer_bytes);
      }
    }
  }
}

// Each worker sends each segment once per phase: in the reduce-scatter every segment but its
// successor's, in the all-gather every segment but its own.
TEST(RingGeometry, ReduceScatterThenAllGatherVisitEverySegment) {
  for (int P : {2, 3, 4, 7}) {
    for (int rank = 0; rank < P; ++rank) {
      std::set<int> reduce, gather;
      for (int t = 0; t < P - 1; ++t) reduce.insert(core::RingSegmentSent(rank, t, P));
      for (int t = P - 1; t < 2 * (P - 1); ++t) gather.insert(core::RingSegmentSent(rank, t, P));
      EXPECT_EQ(reduce.size(), static_cast<size_t>(P - 1));
      EXPECT_EQ(reduce.count((rank + 1) % P), 0u) << "reduced last, by this worker";
      EXPECT_EQ(gather.size(), static_cast<size_t>(P - 1));
      // The first gather step sends the segment this worker finished reducing.
      EXPECT_EQ(core::RingSegmentSent(rank, P - 1, P), (rank + 1) % P);
    }
  }
}

// A worker's store with real floats for ring layers. Its gradient of (layer, clock) is a seeded
// function of (worker, layer, clock): small integers (`exact`: every sum is exact whatever the
// order) or floats of mixed magnitudes (sums in different orders round differently). RingApply
// records the sum the ring built.
class RingFloatStore final : public core::WorkerStore {
 public:
  RingFloatStore(const core::Model& model, int worker, int workers, bool exact)
      : model_(model), worker_(worker), workers_(workers), exact_(exact) {}

  core::FloatBuffer GradientChunk(const core::Chunk&) override { return nullptr; }
  void WriteParams(const core::Chunk&, const core::Message&) override {}

  void RingBegin(int layer, int64_t clock) override {
    EXPECT_TRUE(begun_.insert({layer, clock}).second) << "RingBegin twice";
    std::vector<float>& sum = Sum(layer, clock);
    const std::vector<float> g = Gradient(model_, worker_, layer, clock, exact_);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
  }
  core::FloatBuffer RingSegment(int layer, int64_t clock, RingSpan span) override {
    EXPECT_TRUE(begun_.count({layer, clock})) << "sent before the own gradient was in";
    const std::vector<float>& sum = Sum(layer, clock);
    return std::make_shared<const std::vector<float>>(sum.begin() + span.offset,
                                                      sum.begin() + span.offset + span.count);
  }
  void RingReceive(const core::Message& m, RingSpan span, bool reduce) override {
    const int64_t got = m.data ? static_cast<int64_t>(m.data->size()) : 0;
    EXPECT_EQ(got, span.count);
    if (!begun_.count({m.layer, m.clock})) {
      ++early;
      EXPECT_TRUE(reduce) << "an all-gather step cannot beat the worker's own gradient";
    }
    std::vector<float>& sum = Sum(m.layer, m.clock);
    for (int64_t i = 0; i < span.count; ++i) {
      float& out = sum[static_cast<size_t>(span.offset + i)];
      out = reduce ? out + (*m.data)[static_cast<size_t>(i)] : (*m.data)[static_cast<size_t>(i)];
    }
  }
  void RingApply(int layer, int64_t clock, int workers) override {
    EXPECT_EQ(workers, workers_);
    auto it = sums_.find({layer, clock});
    ASSERT_NE(it, sums_.end());
    EXPECT_TRUE(reduced.emplace(std::make_pair(layer, clock), std::move(it->second)).second);
    sums_.erase(it);
  }

  static std::vector<float> Gradient(const core::Model& model, int worker, int layer,
                                     int64_t clock, bool exact) {
    std::mt19937_64 rng(static_cast<uint64_t>(worker * 1000003 + layer * 1009 + clock));
    std::vector<float> g(static_cast<size_t>(model.layers()[static_cast<size_t>(layer)].params));
    std::uniform_int_distribution<int> small(-50, 50), exponent(-12, 6);
    std::uniform_real_distribution<float> unit(-1.f, 1.f);
    for (float& x : g) {
      x = exact ? static_cast<float>(small(rng)) : std::ldexp(unit(rng), exponent(rng));
    }
    return g;
  }

  std::map<std::pair<int, int64_t>, std::vector<float>> reduced;  // the sums RingApply got
  int early = 0;  // steps that arrived before this worker's own gradient of their clock

 private:
  std::vector<float>& Sum(int layer, int64_t clock) {
    std::vector<float>& s = sums_[{layer, clock}];
    if (s.empty()) s.assign(static_cast<size_t>(model_.layers()[static_cast<size_t>(layer)].params), 0.f);
    return s;
  }
  const core::Model& model_;
  const int worker_, workers_;
  const bool exact_;
  std::set<std::pair<int, int64_t>> begun_;
  std::map<std::pair<int, int64_t>, std::vector<float>> sums_;
};

// Every worker ends each clock of each layer with the sum of the P workers' gradients: exactly
// for integer gradients; for rounding ones, bit-identical on every worker (each segment is
// reduced once and copied) and within rounding of the exact sum. Over many random schedules,
// with pieces and segments of uneven and zero float counts, DWBP on and off.
TEST(RingDataPath, EveryWorkerEndsWithTheSumOfAllGradients) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int iterations = 3;
  int early = 0, runs = 0;
  for (int P : {1, 2, 3, 5}) {
    for (int64_t chunk : {1024, 1316, 1002}) {
      for (bool exact : {true, false}) {
        for (uint64_t seed : {0, 3, 17}) {
          core::ProtocolConfig cfg;
          cfg.iterations = iterations;
          cfg.chunk_bytes = chunk;
          cfg.batch = 4;
          cfg.dwbp = seed != 3;
          cfg.scheme_of_layer.assign(model.layers().size(), core::Scheme::kAllreduce);
          std::vector<std::unique_ptr<RingFloatStore>> stores;
          std::vector<core::WorkerStore*> ptrs;
          for (int w = 0; w < P; ++w) {
            stores.push_back(std::make_unique<RingFloatStore>(model, w, P, exact));
            ptrs.push_back(stores.back().get());
          }
          FakeCluster c(model, core::JobLayout::Colocated(P, 1), cfg, seed, ptrs);
          c.on_deliver = [&](core::TimeNs, const core::Message& m) {
            if (m.type != core::MsgType::kRing) return;
            ASSERT_TRUE(m.data);
            EXPECT_LT(std::abs(4 * static_cast<int64_t>(m.data->size()) - m.payload_bytes), 4);
          };
          c.Run();
          const std::string where = "P " + std::to_string(P) + " chunk " + std::to_string(chunk) +
                                    (exact ? " exact" : " rounding") + " seed " +
                                    std::to_string(seed);
          ASSERT_TRUE(c.AllFinished()) << where;
          ++runs;
          for (int l : model.param_layers()) {
            for (int64_t clock = 0; clock < iterations; ++clock) {
              std::vector<std::vector<float>> g;
              for (int w = 0; w < P; ++w) {
                g.push_back(RingFloatStore::Gradient(model, w, l, clock, exact));
              }
              const std::vector<float>& first = stores[0]->reduced.at({l, clock});
              for (int w = 0; w < P; ++w) {
                const std::vector<float>& got = stores[static_cast<size_t>(w)]->reduced.at({l, clock});
                ASSERT_EQ(got.size(), g[0].size()) << where;
                EXPECT_TRUE(got == first) << where << ": worker " << w << " layer " << l
                                          << " clock " << clock << " differs from worker 0";
                for (size_t i = 0; i < got.size(); ++i) {
                  double want = 0, mag = 0;
                  for (int v = 0; v < P; ++v) {
                    want += g[static_cast<size_t>(v)][i];
                    mag += std::fabs(g[static_cast<size_t>(v)][i]);
                  }
                  if (exact) {
                    ASSERT_EQ(got[i], static_cast<float>(want))
                        << where << ": layer " << l << " clock " << clock << " float " << i;
                  } else {
                    ASSERT_NEAR(got[i], want, P * 6e-8 * mag)
                        << where << ": layer " << l << " clock " << clock << " float " << i;
                  }
                }
              }
            }
          }
          for (const auto& s : stores) {
            EXPECT_EQ(s->reduced.size(), model.param_layers().size() * iterations) << where;
            early += s->early;
          }
        }
      }
    }
  }
  EXPECT_EQ(runs, 4 * 3 * 2 * 3);
  // The schedules did deliver steps of the next clock before a worker's own gradient of it.
  EXPECT_GT(early, 0);
}

// The phantom stores the simulator uses see no floats: messages stay size-only.
TEST(RingDataPath, PhantomStoresSendSizesOnly) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg;
  cfg.iterations = 2;
  cfg.chunk_bytes = 1024;
  cfg.batch = 4;
  cfg.scheme_of_layer.assign(model.layers().size(), core::Scheme::kAllreduce);
  FakeCluster c(model, core::JobLayout::Colocated(3, 1), cfg, 5);
  int rings = 0;
  c.on_deliver = [&](core::TimeNs, const core::Message& m) {
    if (m.type != core::MsgType::kRing) return;
    ++rings;
    EXPECT_FALSE(m.data);
    EXPECT_GT(m.payload_bytes, 0);
  };
  c.Run();
  ASSERT_TRUE(c.AllFinished());
  EXPECT_GT(rings, 0);
}

}  // namespace
}  // namespace poseidon
