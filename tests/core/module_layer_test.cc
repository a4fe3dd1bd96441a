// A framework's layer table in the core: `module` layers (a module's own parameters, shape passing
// through; an nn.Linear's weight eligible for sufficient factors), models whose values are fp64
// (two words each, never split between chunks or ring segments), factors with as many rows as the
// batches had, and a worker whose own loop decides when the job ends (Worker::EndAt).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/message_rules.h"
#include "core/model.h"
#include "core/ring.h"
#include "tests/core/fake_cluster.h"

namespace poseidon {
namespace {

using core::LayerKind;
using core::LayerSpec;
using core::ModelSpec;

// data -> fc1 (Linear 6 -> 4, rows 3) -> act -> head (Linear 4 -> 2 without bias); the activation
// between has no parameters and is not in a framework's table, so the table is two modules.
ModelSpec TableSpec(int value_words = 1) {
  ModelSpec m;
  m.name = "table";
  m.input_c = m.input_h = m.input_w = 1;
  m.input_rank = 1;
  m.value_words = value_words;
  LayerSpec a;
  a.name = "fc1";
  a.kind = LayerKind::kModule;
  a.module_params = {{"weight", {4, 6}}, {"bias", {4}}};
  a.linear_in = 6;
  a.linear_out = 4;
  a.linear_rows = 3;
  LayerSpec b;
  b.name = "head";
  b.kind = LayerKind::kModule;
  b.module_params = {{"weight", {2, 4}}};
  b.linear_in = 4;
  b.linear_out = 2;
  m.layers = {a, b};
  return m;
}

TEST(ModuleLayer, ParametersShapesAndFactorsFromTheTable) {
  const core::Model m = core::Model::Build(TableSpec());
  ASSERT_EQ(m.layers().size(), 2u);
  const core::Layer& fc1 = m.layers()[0];
  ASSERT_EQ(fc1.blobs.size(), 2u);
  EXPECT_EQ(fc1.blobs[0].name, "fc1.weight");
  EXPECT_EQ(fc1.blobs[0].count, 24);
  EXPECT_EQ(fc1.blobs[1].count, 4);
  EXPECT_EQ(fc1.out, m.input_shape());  // the shape passes through
  EXPECT_TRUE(core::HasSufficientFactors(fc1));
  EXPECT_EQ(core::SfbFactorRows(fc1, 5), 15);         // batch 5 x 3 rows
  EXPECT_EQ(core::SfbFactorFloats(fc1, 5), 15 * 10);  // rows x (M + N)
  EXPECT_EQ(core::SfbMaxRows(fc1, 1), 4);             // min(M, N) beats the plan's 3 rows
  EXPECT_EQ(m.total_params(), 24 + 4 + 8);
  EXPECT_EQ(m.param_layers(), (std::vector<int>{0, 1}));
}

TEST(ModuleLayer, Fp64ValuesAreTwoWords) {
  const core::Model m = core::Model::Build(TableSpec(2));
  EXPECT_EQ(m.total_params(), 2 * (24 + 4 + 8));
  EXPECT_EQ(m.layers()[0].blobs[0].count, 48);
  EXPECT_EQ(core::SfbFactorFloats(m.layers()[0], 5), 2 * 15 * 10);
  // Chunks of 20 bytes (5 words) are cut at 4 words: no value is split.
  const core::Placement p = core::Placement::Build(m, 2, 20, {});
  int64_t words = 0;
  for (const core::Chunk& c : p.chunks()) {
    EXPECT_EQ(c.offset % 2, 0) << c.id;
    EXPECT_EQ(c.count % 2, 0) << c.id;
    words += c.count;
  }
  EXPECT_EQ(words, m.total_params());
}

TEST(ModuleLayer, BadTablesAreRefusedNamingTheLayer) {
  ModelSpec s = TableSpec();
  s.layers[0].linear_in = 5;  // 4 x 5 is not the weight's 24 values
  try {
    core::Model::Build(s);
    FAIL() << "built";
  } catch (const core::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'fc1' (module)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out x in weight"), std::string::npos) << e.what();
  }
  s = TableSpec();
  s.layers[1].module_params.clear();
  EXPECT_THROW(core::Model::Build(s), core::ModelError);
  s = TableSpec(3);
  EXPECT_THROW(core::Model::Build(s), core::ModelError);
}

// With two-word values every ring segment starts and ends on a whole value, and the segments
// still partition the layer.
TEST(RingGeometry, Fp64SegmentsNeverSplitAValue) {
  for (int64_t layer_values : {1, 5, 7, 330, 4640}) {
    const int64_t layer_bytes = 8 * layer_values;
    for (int64_t chunk : {8, 24, 1000, 1 << 20}) {
      for (int P : {1, 2, 3, 5, 7}) {
        int64_t next = 0;
        for (int k = 0; k < core::RingPieces(layer_bytes, chunk); ++k) {
          for (int seg = 0; seg < P; ++seg) {
            const core::RingSpan f = core::RingSegmentFloats(layer_bytes, chunk, k, seg, P, 2);
            ASSERT_EQ(f.offset, next);
            ASSERT_EQ(f.offset % 2, 0);
            ASSERT_EQ(f.count % 2, 0);
            next += f.count;
          }
        }
        EXPECT_EQ(next, 2 * layer_values) << layer_values << "/" << chunk << "/" << P;
      }
    }
  }
}

// Real factors carry the rows the worker's batches had: any whole number of rows up to
// SfbMaxRows passes the core's check; a partial row, none, or too many do not.
TEST(MessageRules, RealFactorsHaveAWholeNumberOfRows) {
  const core::Model m = core::Model::Build(TableSpec());
  const core::JobLayout layout = core::JobLayout::Colocated(2, 1);
  core::ProtocolConfig cfg;
  cfg.real_payloads = true;
  cfg.batch = 1;  // the plan's K = 3 rows; min(M, N) = 4
  cfg.scheme_of_layer = {core::Scheme::kSfb, core::Scheme::kPs};
  const core::Placement p = core::Placement::Build(m, 1, cfg.chunk_bytes, cfg.scheme_of_layer);
  const core::JobShape shape{&layout, &cfg, &p, &m, cfg.fault};
  auto factors = [&](size_t values) {
    core::Message f;
    f.type = core::MsgType::kFactors;
    f.from = layout.worker(0);
    f.to = layout.worker(1);
    f.layer = 0;
    f.data = std::make_shared<const std::vector<float>>(values, 1.f);
    f.payload_bytes = static_cast<int64_t>(values) * 4;
    return core::CheckMessageShape(shape, layout.worker(1), f);
  };
  EXPECT_FALSE(factors(10));      // 1 row (a small last batch)
  EXPECT_FALSE(factors(30));      // the plan's 3 rows
  EXPECT_FALSE(factors(40));      // 4 rows: min(M, N)
  EXPECT_TRUE(factors(50));       // 5 rows: more than any gradient needs
  EXPECT_TRUE(factors(25));       // half a row
  EXPECT_TRUE(factors(0));        // no rows
}

// A worker whose loop decides when to stop: the configuration's bound is never reached; EndAt
// after 3 clocks makes every worker finish with every layer at version 3.
TEST(Worker, EndAtFinishesAfterTheGivenClocks) {
  const core::Model m = core::Model::Build(TableSpec());
  core::ProtocolConfig cfg;
  cfg.iterations = int64_t{1} << 40;
  testing::FakeCluster c(m, core::JobLayout::Colocated(2, 1), cfg, /*seed=*/5);
  c.on_task_done = [&](core::TimeNs now, core::ActorId actor, const core::ComputeTask& t) {
    if (t.kind == core::TaskKind::kBackward && t.layer == 0 && t.clock == 2) {
      c.mutable_worker(actor - 1).EndAt(now, 3);
    }
  };
  c.Run();
  for (int w = 0; w < 2; ++w) {
    EXPECT_TRUE(c.worker(w).finished()) << c.worker(w).WaitingFor();
    EXPECT_EQ(c.worker(w).clock(), 3);
    for (int l : m.param_layers()) EXPECT_EQ(c.worker(w).version(l), 3);
  }
}

}  // namespace
}  // namespace poseidon

namespace poseidon {
namespace {

// The program's loop ends after the core has already asked for the next clock's forward pass
// (its parameters were fresh): EndAt drops it and the workers still finish.
TEST(Worker, EndAtDropsAForwardPassAlreadyAskedFor) {
  const core::Model m = core::Model::Build(TableSpec());
  core::ProtocolConfig cfg;
  cfg.iterations = int64_t{1} << 40;
  testing::FakeCluster c(m, core::JobLayout::Colocated(2, 1), cfg, /*seed=*/9);
  std::vector<bool> ended(2, false);
  c.on_task_done = [&](core::TimeNs now, core::ActorId actor, const core::ComputeTask& t) {
    const int w = actor - 1;
    if (t.kind == core::TaskKind::kForward && t.layer == 0 && t.clock == 3 && !ended[w]) {
      ended[w] = true;
      c.mutable_worker(w).EndAt(now, 3);
    }
  };
  c.Run();
  for (int w = 0; w < 2; ++w) {
    EXPECT_TRUE(c.worker(w).finished()) << c.worker(w).WaitingFor();
    EXPECT_EQ(c.worker(w).clock(), 3);
  }
}

}  // namespace
}  // namespace poseidon
