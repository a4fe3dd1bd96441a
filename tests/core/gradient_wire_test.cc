// protocol.gradient_wire (core/messages.h WireFormat): in fp16 and bf16 every gradient message
// (PS push, SFB factors, ring step) carries 2 bytes per value, parameters keep theirs, and the
// protocol otherwise makes the same messages in the same order; a message in a format the job does
// not use is refused by the shape rules (message_rules.h).
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/message_rules.h"
#include "core/ring.h"
#include "tests/core/fake_cluster.h"
#include "tests/core/test_models.h"

namespace poseidon {
namespace {

using core::MsgType;
using core::WireFormat;
using testing::FakeCluster;

core::ProtocolConfig Config(core::Scheme fc, WireFormat wire, const core::Model& m) {
  core::ProtocolConfig cfg;
  cfg.iterations = 3;
  cfg.chunk_bytes = 1000;  // pieces and chunks that do not divide the layers evenly
  cfg.batch = 4;
  cfg.gradient_wire = wire;
  cfg.scheme_of_layer.assign(m.layers().size(), core::Scheme::kPs);
  for (const auto& l : m.layers()) {
    if (fc == core::Scheme::kAllreduce && !l.blobs.empty()) {
      cfg.scheme_of_layer[static_cast<size_t>(l.id)] = fc;
    } else if (l.kind == core::LayerKind::kFc) {
      cfg.scheme_of_layer[static_cast<size_t>(l.id)] = fc;
    }
  }
  return cfg;
}

struct Sent {
  core::Message msg;
  int64_t values = 0;  // 32-bit words the message's payload stands for
};

std::vector<Sent> RunJob(const core::Model& model, const core::ProtocolConfig& cfg, int P) {
  FakeCluster c(model, core::JobLayout::Colocated(P, 2), cfg);
  std::vector<Sent> out;
  c.on_deliver = [&](core::TimeNs, const core::Message& m) {
    Sent s{m, 0};
    if (m.type == MsgType::kPushGrad || m.type == MsgType::kParams) {
      s.values = c.placement().chunks()[static_cast<size_t>(m.chunk)].count;
    } else if (m.type == MsgType::kFactors) {
      s.values = core::SfbFactorFloats(model.layers()[static_cast<size_t>(m.layer)], cfg.batch);
    } else if (m.type == MsgType::kRing) {
      const core::Layer& L = model.layers()[static_cast<size_t>(m.layer)];
      const int seg = core::RingSegmentSent(c.layout().WorkerIndex(m.from), m.step, P);
      s.values = core::RingSegmentFloats(L.params * 4, cfg.chunk_bytes, m.chunk, seg, P).count;
    }
    out.push_back(s);
  };
  c.Run();
  EXPECT_TRUE(c.AllFinished());
  return out;
}

bool IsGradient(MsgType t) {
  return t == MsgType::kPushGrad || t == MsgType::kFactors || t == MsgType::kRing;
}

TEST(GradientWire, GradientsCarryTwoBytesPerValueAndEverythingElseIsUnchanged) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  for (core::Scheme scheme : {core::Scheme::kPs, core::Scheme::kSfb, core::Scheme::kAllreduce}) {
    const int P = 3;
    const std::vector<Sent> wide = RunJob(model, Config(scheme, WireFormat::kFp32, model), P);
    for (WireFormat wire : {WireFormat::kFp16, WireFormat::kBf16}) {
      SCOPED_TRACE(std::string(core::SchemeName(scheme)) + " " + core::WireFormatName(wire));
      const std::vector<Sent> narrow = RunJob(model, Config(scheme, wire, model), P);
      ASSERT_EQ(wide.size(), narrow.size());
      int64_t gradients = 0, wide_bytes = 0, narrow_bytes = 0;
      for (size_t i = 0; i < wide.size(); ++i) {
        const core::Message& a = wide[i].msg;
        const core::Message& b = narrow[i].msg;
        SCOPED_TRACE(core::Describe(a));
        // The same message, in the same order.
        ASSERT_EQ(a.type, b.type);
        ASSERT_EQ(a.from, b.from);
        ASSERT_EQ(a.to, b.to);
        ASSERT_EQ(a.clock, b.clock);
        ASSERT_EQ(a.chunk, b.chunk);
        ASSERT_EQ(a.layer, b.layer);
        ASSERT_EQ(a.step, b.step);
        EXPECT_EQ(a.wire, WireFormat::kFp32);
        wide_bytes += a.payload_bytes;
        narrow_bytes += b.payload_bytes;
        if (!IsGradient(a.type)) {
          EXPECT_EQ(b.wire, WireFormat::kFp32);
          EXPECT_EQ(b.payload_bytes, a.payload_bytes);
          continue;
        }
        ++gradients;
        EXPECT_EQ(b.wire, wire);
        EXPECT_EQ(b.payload_bytes, 2 * narrow[i].values);
        // fp32: 4 per value (a ring segment's phantom bytes to within one value).
        EXPECT_LT(std::abs(a.payload_bytes - 4 * wide[i].values), 4);
      }
      EXPECT_GT(gradients, 0);
      EXPECT_LT(narrow_bytes, wide_bytes);
    }
  }
}

TEST(GradientWire, AMessageInAFormatTheJobDoesNotUseIsRefused) {
  const core::Model m = core::Model::Build(testing::SmallNetSpec());
  core::ProtocolConfig cfg = Config(core::Scheme::kPs, WireFormat::kFp16, m);
  const core::JobLayout layout = core::JobLayout::Colocated(2, 1);
  const core::Placement p =
      core::Placement::Build(m, 1, cfg.chunk_bytes, cfg.scheme_of_layer, cfg.placement_policy);
  const core::JobShape shape{&layout, &cfg, &p, &m, cfg.fault};
  const core::Chunk& c = p.chunks()[0];
  core::Message push;
  push.type = MsgType::kPushGrad;
  push.from = layout.worker(0);
  push.to = layout.server(0);
  push.clock = 0;
  push.chunk = c.id;
  push.layer = c.layer;
  push.wire = WireFormat::kFp16;
  push.payload_bytes = 2 * c.count;
  EXPECT_FALSE(core::CheckMessageShape(shape, push.to, push));
  // Sized as fp32 in an fp16 job.
  core::Message wrong = push;
  wrong.payload_bytes = c.bytes();
  EXPECT_EQ(core::CheckMessageShape(shape, push.to, wrong).code, core::ProtocolErrorCode::kWrongShape);
  // Declared fp32 (or bf16) in an fp16 job.
  for (WireFormat w : {WireFormat::kFp32, WireFormat::kBf16}) {
    wrong = push;
    wrong.wire = w;
    const core::ProtocolError e = core::CheckMessageShape(shape, push.to, wrong);
    EXPECT_EQ(e.code, core::ProtocolErrorCode::kWrongShape);
    EXPECT_NE(e.what.find("protocol.gradient_wire"), std::string::npos) << e.what;
  }
  // Parameters travel as the job holds them, whatever the gradients do.
  core::Message params = push;
  params.type = MsgType::kParams;
  params.from = layout.server(0);
  params.to = layout.worker(0);
  params.payload_bytes = c.bytes();
  params.wire = WireFormat::kFp32;
  EXPECT_FALSE(core::CheckMessageShape(shape, params.to, params));
  params.wire = WireFormat::kFp16;
  const core::ProtocolError e = core::CheckMessageShape(shape, params.to, params);
  EXPECT_EQ(e.code, core::ProtocolErrorCode::kWrongShape);
  EXPECT_NE(e.what.find("params message in fp16"), std::string::npos) << e.what;
}

TEST(GradientWire, NamesRoundTrip) {
  for (WireFormat w : {WireFormat::kFp32, WireFormat::kFp16, WireFormat::kBf16}) {
    WireFormat back = WireFormat::kFp32;
    ASSERT_TRUE(core::WireFormatFromName(core::WireFormatName(w), &back));
    EXPECT_EQ(back, w);
  }
  WireFormat w = WireFormat::kFp16;
  EXPECT_FALSE(core::WireFormatFromName("fp8", &w));
  EXPECT_EQ(w, WireFormat::kFp16);
  EXPECT_EQ(core::WirePayloadBytes(WireFormat::kFp32, 1001, 250), 1001);
  EXPECT_EQ(core::WirePayloadBytes(WireFormat::kBf16, 1001, 250), 500);
}

}  // namespace
}  // namespace poseidon
