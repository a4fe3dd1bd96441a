// A shard of a live job (real floats) refuses a push that carries no values before it changes any
// state: the core knows the job's payloads are real (ProtocolConfig::real_payloads) and checks the
// value count, not only the declared size. Reported by review: a peer holding the secret could send
// a push with no floats whose payload_bytes matched the chunk; the core took it on its size-only
// (phantom) path, counted the worker's push of that clock, and only then did the store refuse the
// missing values, so the worker's real push was later dropped as a duplicate.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/server.h"
#include "kernels/net.h"
#include "real_runtime/live_stores.h"
#include "tests/core/test_models.h"

namespace poseidon::rt {
namespace {

// Records what the shard asks of its host; the test runs the update tasks itself.
class RecordingHost final : public core::Host {
 public:
  void Send(core::Message msg) override { sent.push_back(std::move(msg)); }
  void StartCompute(const core::ComputeTask& task) override { tasks.push_back(task); }
  void SetTimer(core::TimeNs, uint64_t) override {}
  void Trace(const core::TraceEvent&) override {}
  std::vector<core::Message> sent;
  std::vector<core::ComputeTask> tasks;
};

class ShardPayloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = core::Model::Build(testing::SmallNetSpec());
    layout_ = core::JobLayout::Colocated(/*workers=*/2, /*servers=*/1);
    config_.real_payloads = true;
    placement_ = core::Placement::Build(model_, 1, config_.chunk_bytes, {});
    net_ = std::make_unique<kernels::Net>(model_, kernels::Backend::kReference, 1, /*seed=*/3);
    store_ = std::make_unique<LiveShardStore>(*net_, placement_, 0, core::Consistency::kBsp,
                                              kernels::SgdOptions{});
    shard_ = std::make_unique<core::ServerShard>(layout_.server(0), placement_, layout_, config_,
                                                 &host_, store_.get());
  }
  core::Message Push(int worker, float value, bool with_floats) const {
    const core::Chunk& c = placement_.chunks()[0];
    core::Message m;
    m.type = core::MsgType::kPushGrad;
    m.from = layout_.worker(worker);
    m.to = layout_.server(0);
    m.clock = 0;
    m.chunk = c.id;
    m.layer = c.layer;
    m.payload_bytes = c.bytes();
    if (with_floats) {
      m.data = std::make_shared<const std::vector<float>>(static_cast<size_t>(c.count), value);
    }
    return m;
  }

  core::Model model_;
  core::JobLayout layout_;
  core::ProtocolConfig config_;
  core::Placement placement_;
  std::unique_ptr<kernels::Net> net_;
  std::unique_ptr<LiveShardStore> store_;
  RecordingHost host_;
  std::unique_ptr<core::ServerShard> shard_;
};

TEST_F(ShardPayloadTest, APushWithoutItsFloatsIsRefusedBeforeAnythingCounts) {
  const std::vector<float> before = store_->values(0);
  const core::ProtocolError e = shard_->OnMessage(0, Push(0, 0.f, /*with_floats=*/false));
  EXPECT_EQ(e.code, core::ProtocolErrorCode::kWrongShape) << e.what;
  EXPECT_NE(e.what.find("no values"), std::string::npos) << e.what;

  // Nothing was counted: worker 0's real push of clock 0 still counts, and with worker 1's the
  // update averages both.
  EXPECT_FALSE(shard_->OnMessage(0, Push(0, 1.f, true)));
  EXPECT_FALSE(shard_->OnMessage(0, Push(1, 3.f, true)));
  EXPECT_EQ(shard_->duplicates(), 0);
  ASSERT_EQ(host_.tasks.size(), 1u);
  EXPECT_EQ(host_.tasks[0].peer, 2);  // the update averages two pushes
  shard_->OnComputeDone(1, host_.tasks[0]);
  const std::vector<float>& after = store_->values(0);
  const kernels::SgdOptions sgd;
  for (size_t i = 0; i < after.size(); ++i) {
    // The first SGD step (zero momentum history) with the mean gradient (1 + 3) / 2.
    ASSERT_FLOAT_EQ(after[i], before[i] - static_cast<float>(kernels::LearningRate(sgd, 0)) * 2.f)
        << "value " << i;
  }
}

TEST(PhantomPayloads, TheSimulatorsSizeOnlyMessagesStillPass) {
  // The same push with no floats is what the simulator sends: without real_payloads it is fine.
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const core::JobLayout layout = core::JobLayout::Colocated(2, 1);
  core::ProtocolConfig config;
  const core::Placement placement = core::Placement::Build(model, 1, config.chunk_bytes, {});
  RecordingHost host;
  core::PhantomShardStore store;
  core::ServerShard shard(layout.server(0), placement, layout, config, &host, &store);
  core::Message m;
  m.type = core::MsgType::kPushGrad;
  m.from = layout.worker(0);
  m.to = layout.server(0);
  m.chunk = 0;
  m.layer = placement.chunks()[0].layer;
  m.payload_bytes = placement.chunks()[0].bytes();
  EXPECT_FALSE(shard.OnMessage(0, m));
}

}  // namespace
}  // namespace poseidon::rt
