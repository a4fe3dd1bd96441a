// real_runtime/shard_role.h: a server shard of a live job (node_role.h): the core's ServerShard
// over the values of the chunks it owns (live_stores.h: real values with the optimizer's state,
// checkpointed when the scenario asks; or zeros of the real sizes when compute is replayed), its
// updates run on the shard's server stream. A restarted or resumed shard starts from its
// checkpoint.
#pragma once

#include <memory>
#include <string>

#include "core/server.h"
#include "real_runtime/compute_streams.h"
#include "real_runtime/live_job.h"
#include "real_runtime/live_stores.h"
#include "real_runtime/node_process.h"
#include "real_runtime/node_role.h"

namespace poseidon::rt {

class ShardRole final : public NodeRole {
 public:
  // Throws config::ConfigError (a checkpoint that cannot be read, --resume without one).
  ShardRole(NodeProcess& process, LiveJob job);

  core::Actor& actor() override { return *shard_; }
  const core::Model& model() const override { return job_.model; }
  void StartCompute(const core::ComputeTask& task) override;
  std::string StatusNote() const override { return restore_note_; }
  std::string StateLostAdvice() const override { return lost_advice_; }
  void StopCompute() override { streams_.Stop(); }

 private:
  void BuildRealShard();

  NodeProcess& p_;
  LiveJob job_;
  std::unique_ptr<core::ShardStore> store_;  // LiveShardStore, or ReplayShardStore
  LiveShardStore* live_store_ = nullptr;
  std::unique_ptr<core::ServerShard> shard_;
  Streams streams_;
  std::string restore_note_;  // a restarted shard: what it was restored from
  std::string lost_advice_;   // and what to do should its state prove too old (kStateLost)
};

}  // namespace poseidon::rt
