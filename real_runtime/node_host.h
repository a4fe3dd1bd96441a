// real_runtime/node_host.h: NodeHost, the core::Host of one live process (node.h). Internal to
// the runtime; its member functions are defined by job:
//   node.cc          running the process: connections, core messages and control frames, timers,
//                    membership, the end of the job
//   node_build.cc    building the actor and its stores, the transport, the rendezvous and the
//                    coordinator's watchdog
//   node_compute.cc  running compute tasks on the streams (real or replayed) and the finished
//                    worker's evaluation
// The parts with a job of their own are classes elsewhere: Rendezvous (rendezvous.h),
// ProgressWatchdog, WorkerCompute, the stores (live_stores.h), JobReport, FaultInjector.
#pragma once

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/coordinator.h"
#include "core/decision_log.h"
#include "core/placement.h"
#include "core/server.h"
#include "core/worker.h"
#include "kernels/kernel.h"
#include "real_runtime/compute_streams.h"
#include "real_runtime/fault_injection.h"
#include "real_runtime/job_report.h"
#include "real_runtime/live_stores.h"
#include "real_runtime/node.h"
#include "real_runtime/progress_watchdog.h"
#include "real_runtime/rendezvous.h"
#include "real_runtime/transport.h"
#include "real_runtime/worker_compute.h"

namespace poseidon::rt {

class NodeHost final : public core::Host {
 public:
  // Throws config::ConfigError for options the job cannot run with (see RunNode).
  explicit NodeHost(const NodeOptions& o);
  ~NodeHost() override;
  int Run();

  void Send(core::Message msg) override;
  void StartCompute(const core::ComputeTask& task) override;
  void SetTimer(core::TimeNs at, uint64_t timer_id) override;
  void Trace(const core::TraceEvent& event) override;

 private:
  // The job's time base: the coordinator's time since it started. Other processes add the
  // offset their clock sync estimated (rendezvous.h), so every process's trace shares it.
  core::TimeNs Now() const { return Local() + rendezvous_->clock_offset(); }
  core::TimeNs Local() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start_)
        .count();
  }
  std::string Who(int rank) const { return layout_.ActorName(rank); }
  void Fail(int code, const std::string& why);
  void AfterActorCall();

  // Building the actor and its stores.
  void BuildActor(kernels::Backend backend);
  void BuildShard();
  void BuildRendezvous();

  // Connections.
  void OnPeerUp(int peer);
  void OnPeerDown(int peer, const std::string& reason);
  void OnControl(int peer, uint8_t type, std::vector<uint8_t> body);
  void MaybeStartActor();

  // Messages.
  void OnMessage(core::Message msg);
  void RefusePeer(const core::Message& msg, const core::ProtocolError& e);
  void TrySend(int peer);

  // Compute.
  void RunTask(const core::ComputeTask& task, core::TimeNs begin);
  void TaskDone(const core::ComputeTask& task, core::TimeNs begin, std::optional<double> loss);

  // Fault tolerance.
  void OnMembership(const core::Message& m);
  bool Counts(int worker) const;  // coordinator: worker still counts (not evicted)

  // Coordinator bookkeeping.
  void OnStuck(const std::map<int, std::string>& answers);
  void MaybeFinishJob();
  void WriteTrace();
  void SaveParams();
  void Evaluate();

  NodeOptions o_;
  asio::io_context io_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  core::Model model_;
  core::JobLayout layout_;
  core::ProtocolConfig protocol_;
  std::optional<core::Placement> placement_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Rendezvous> rendezvous_;
  std::unique_ptr<core::Actor> actor_;
  core::ServerShard* shard_actor_ = nullptr;
  core::Worker* worker_actor_ = nullptr;
  core::Coordinator* coordinator_actor_ = nullptr;
  bool is_worker_ = false, is_server_ = false;
  bool replay_ = false;
  bool ft_ = false;      // fault tolerance on
  FaultInjector fault_;  // tests only: nothing unless given one
  int exit_code_ = kExitOk;
  bool failed_ = false;
  bool actor_started_ = false;
  bool shutting_down_ = false;

  // Messages and timers.
  std::map<int, std::deque<core::Message>> backlog_;  // sends refused by backpressure
  std::map<uint64_t, std::unique_ptr<asio::steady_timer>> timers_;
  std::vector<core::TraceEvent> trace_;
  core::DecisionLog decisions_;
  std::map<int, uint32_t> known_epoch_;          // per peer: the epoch its last connection bound
  std::set<std::pair<int64_t, int>> announced_;  // coordinator: (epoch, actor) acted on

  // Compute: a worker's real compute, a shard's values, or the replayed model and zero stores.
  std::unique_ptr<WorkerCompute> worker_compute_;
  std::unique_ptr<LiveShardStore> shard_store_;
  std::optional<ReplayedCompute> replayed_;
  std::unique_ptr<core::WorkerStore> replay_worker_store_;
  std::unique_ptr<core::ShardStore> replay_shard_store_;
  std::map<int, std::unique_ptr<Executor>> streams_;  // one per core stream, on first use
  std::atomic<bool> compute_failed_{false};
  bool evaluated_ = false;    // a finished worker saved its parameters and measured accuracy
  std::string restore_note_;  // a restarted shard: what it was restored from
  std::string lost_advice_;   // and what to do should its state prove too old (kStateLost)

  // Coordinator.
  std::optional<JobReport> report_;
  std::unique_ptr<ProgressWatchdog> watchdog_;
  bool job_finished_ = false;
  int peers_down_after_shutdown_ = 0;
  int peers_up_at_shutdown_ = 0;
  std::unique_ptr<asio::steady_timer> shutdown_timer_;
};

}  // namespace poseidon::rt
