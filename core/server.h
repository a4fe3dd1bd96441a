// core/server.h: a parameter-server shard.
//
// The shard owns the chunks the Placement gives it.
//   BSP and SSP: for each chunk, the pushes of all P workers for clock c are summed; once they
//     are all in (and clock c-1 was applied), one optimizer step runs (a server-update task,
//     charged by the host) and the fresh chunk goes to every worker, tagged with clock c. Pushes
//     for later clocks from workers running ahead (SSP) wait in per-clock accumulators.
//   ASP: every push is applied on its own as it arrives and the fresh chunk goes back to the
//     worker that pushed it.
// With fault tolerance (FaultConfig) the shard also
//   - heartbeats to the coordinator;
//   - applies a push exactly once: a push it already holds or already applied, recognised by
//     (worker, clock, chunk), is not applied again; one of an applied clock is answered with the
//     chunk's current values (the worker that sent it again lost the answer);
//   - waits for the pushes of member workers only: a worker the coordinator evicted is no
//     longer waited for, and counts again once it rejoins;
//   - answers a rejoining worker's kRejoin with its chunks' current (and, under BSP, previous)
//     values;
//   - checkpoints through its store every checkpoint_every clocks, before it sends the values
//     that complete them, and can be restored from such a checkpoint (Restore).
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/host.h"
#include "core/job.h"
#include "core/message_rules.h"
#include "core/param_store.h"
#include "core/placement.h"
#include "core/send_queue.h"

namespace poseidon::core {

class ServerShard final : public Actor {
 public:
  ServerShard(ActorId id, const Placement& placement, const JobLayout& layout,
              const ProtocolConfig& config, Host* host, ShardStore* store);

  void OnStart(TimeNs now) override;
  ProtocolError OnMessage(TimeNs now, const Message& msg) override;
  void OnComputeDone(TimeNs now, const ComputeTask& task) override;
  void OnSent(TimeNs now, const Message& msg) override;
  void OnTimer(TimeNs now, uint64_t timer_id) override;
  bool finished() const override;
  std::string WaitingFor() const override;

  // Before OnStart: continue from a checkpoint (the store holds its values already).
  void Restore(const ShardCheckpoint& state);
  // Checkpoints now (a user's request), through the store.
  void RequestCheckpoint() { MaybeCheckpoint(/*force=*/true); }
  // Pushes not applied because they were sent again (tests, logs).
  int64_t duplicates() const { return duplicates_; }
  // Per-worker progress counters held (ASP: two per worker and chunk of this shard; else none).
  size_t per_worker_counters() const {
    size_t n = 0;
    for (const auto& v : asp_applied_) n += v.size();
    for (const auto& v : asp_received_) n += v.size();
    return n;
  }
  int64_t version(int32_t chunk) const { return version_[static_cast<size_t>(chunk)]; }

 private:
  ProtocolError OnPush(const Message& msg);
  ProtocolError CheckResendStart(const Chunk& c, int w, int64_t first) const;
  void MaybeUpdate(const Chunk& c);
  void SendParams(const Chunk& c, ActorId worker, int64_t clock, int32_t step, FloatBuffer values);
  void MaybeCheckpoint(bool force = false);
  int64_t Progress(int w) const;
  void OnMembership(const Message& msg);
  void OnRejoin(const Message& msg);

  const ActorId id_;
  const int shard_;
  const Placement& placement_;
  const JobLayout& layout_;
  const ProtocolConfig config_;
  const JobShape shape_;  // what every incoming message is checked against
  Host* const host_;
  ShardStore* const store_;
  SendQueue send_queue_;

  // Indexed by chunk id (only this shard's chunks are used).
  std::vector<int64_t> version_;  // BSP/SSP: clocks applied
  // BSP/SSP: per chunk, the workers whose push of each clock >= version is in (by worker index),
  // and where MaybeUpdate's scan for a missing member stopped: a clock's pushes only come in, so
  // it resumes there unless the membership changed since (member_epoch_), O(P) per chunk and
  // clock rather than per push.
  struct ClockPushes {
    std::vector<bool> who;
    int scan_next = 0;  // workers below it have pushed or are not members
    uint64_t scan_epoch = 0;
  };
  std::vector<std::map<int64_t, ClockPushes>> received_;
  uint64_t member_epoch_ = 0;
  std::vector<bool> updating_;
  // ASP only (empty otherwise): [chunk][worker] clocks applied / received, for this shard's
  // chunks (other chunks' rows stay empty).
  std::vector<std::vector<int64_t>> asp_applied_;
  std::vector<std::vector<int64_t>> asp_received_;
  std::vector<bool> member_;                        // by worker index
  int64_t duplicates_ = 0;
  int64_t checkpointed_floor_ = 0;
  // (chunk, worker) whose first resent push after a restart was checked (CheckResendStart).
  std::set<std::pair<int32_t, int>> resend_checked_;
  std::vector<int64_t> last_checkpoint_;  // per worker: its progress at the last checkpoint
};

}  // namespace poseidon::core
