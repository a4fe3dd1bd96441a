// core/server.h: a parameter-server shard.
//
// The shard owns the chunks the Placement gives it.
//   BSP and SSP: for each chunk, the pushes of all P workers for clock c are summed; once they
//     are all in (and clock c-1 was applied), one optimizer step runs (a server-update task,
//     charged by the host) and the fresh chunk goes to every worker, tagged with clock c. Pushes
//     for later clocks from workers running ahead (SSP) wait in per-clock accumulators.
//   ASP: every push is applied on its own as it arrives and the fresh chunk goes back to the
//     worker that pushed it.
#pragma once

#include <string>
#include <vector>

#include "core/clock_counter.h"
#include "core/host.h"
#include "core/job.h"
#include "core/param_store.h"
#include "core/placement.h"
#include "core/send_queue.h"

namespace poseidon::core {

class ServerShard final : public Actor {
 public:
  ServerShard(ActorId id, const Placement& placement, const JobLayout& layout,
              const ProtocolConfig& config, Host* host, ShardStore* store);

  void OnStart(TimeNs now) override;
  void OnMessage(TimeNs now, const Message& msg) override;
  void OnComputeDone(TimeNs now, const ComputeTask& task) override;
  void OnSent(TimeNs now, const Message& msg) override;
  bool finished() const override;
  std::string WaitingFor() const override;

 private:
  void MaybeUpdate(const Chunk& c);

  const ActorId id_;
  const int shard_;
  const Placement& placement_;
  const JobLayout& layout_;
  const ProtocolConfig config_;
  Host* const host_;
  ShardStore* const store_;
  SendQueue send_queue_;

  // Indexed by chunk id (only this shard's chunks are used).
  std::vector<ClockCounter> pushes_;
  std::vector<bool> updating_;
  std::vector<int64_t> applied_;  // ASP: pushes applied
};

}  // namespace poseidon::core
