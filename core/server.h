// core/server.h: a parameter-server shard (bulk-synchronous).
//
// The shard owns the chunks the Placement gives it. For each chunk and clock c it waits for the
// gradient pushes of all P workers, runs one optimizer step on their sum (a server-update task,
// charged by the host), then sends the fresh parameters to every worker and moves the chunk to
// clock c+1. A push for any other clock than the chunk's current one is a protocol violation.
#pragma once

#include <string>
#include <vector>

#include "core/host.h"
#include "core/job.h"
#include "core/param_store.h"
#include "core/placement.h"

namespace poseidon::core {

class ServerShard final : public Actor {
 public:
  ServerShard(ActorId id, const Placement& placement, const JobLayout& layout,
              const ProtocolConfig& config, Host* host, ShardStore* store);

  void OnStart(TimeNs now) override;
  void OnMessage(TimeNs now, const Message& msg) override;
  void OnComputeDone(TimeNs now, const ComputeTask& task) override;
  bool finished() const override;
  std::string WaitingFor() const override;

 private:
  const ActorId id_;
  const int shard_;
  const Placement& placement_;
  const JobLayout& layout_;
  const ProtocolConfig config_;
  Host* const host_;
  ShardStore* const store_;

  // Indexed by chunk id (only this shard's chunks are used).
  std::vector<int> pushes_;
  std::vector<int64_t> clock_;
};

}  // namespace poseidon::core
