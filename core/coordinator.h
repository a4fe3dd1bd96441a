// core/coordinator.h: gates the start of a job, notices its end, and keeps its membership.
//
// Every worker and shard registers; when all have, the coordinator tells everyone to start.
// Workers report when they finished their last iteration; when all have, the job is done.
//
// With fault tolerance (FaultConfig) the coordinator also keeps the membership: workers and
// shards heartbeat to it; an actor it has heard nothing from for failure_timeout_ns is declared
// dead (a killed process and a stopped one look the same), the membership epoch goes up and
// every live actor gets a kMembership saying so. An actor that registers again after the start
// (a restarted process) is told to start, the epoch goes up and everyone hears it rejoined.
// A dead worker that is evicted (evict_dead_workers) no longer counts towards the job's end.
#pragma once

#include <string>
#include <vector>

#include "core/host.h"
#include "core/job.h"
#include "core/message_rules.h"

namespace poseidon::core {

class Coordinator final : public Actor {
 public:
  Coordinator(const JobLayout& layout, Host* host, FaultConfig fault = {});

  void OnStart(TimeNs now) override;
  ProtocolError OnMessage(TimeNs now, const Message& msg) override;
  void OnComputeDone(TimeNs now, const ComputeTask& task) override;
  void OnTimer(TimeNs now, uint64_t timer_id) override;
  bool finished() const override;
  std::string WaitingFor() const override;

  // The membership epoch: 0 at the start, +1 for every death and every rejoin.
  uint32_t epoch() const { return epoch_; }
  bool alive(ActorId a) const { return alive_[static_cast<size_t>(a)]; }
  // Every actor registered and was told to start.
  bool started() const { return started_; }
  bool registered(ActorId a) const { return registered_[static_cast<size_t>(a)]; }

 private:
  void Announce(TimeNs now, ActorId who, int32_t what);
  void SendMembership(ActorId to, ActorId who, int32_t what);
  void TraceJobDone(TimeNs now);

  const JobLayout& layout_;
  JobShape shape_;  // what every incoming message is checked against
  Host* const host_;
  const FaultConfig fault_;
  std::vector<bool> registered_;
  int num_registered_ = 0;
  bool started_ = false;
  std::vector<bool> done_;       // by actor id (workers; shards that finished, with faults on)
  std::vector<bool> alive_;      // by actor id
  std::vector<TimeNs> last_heard_;
  uint32_t epoch_ = 0;
};

}  // namespace poseidon::core
