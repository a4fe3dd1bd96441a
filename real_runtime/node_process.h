// real_runtime/node_process.h: one live process, whatever its role (node_role.h).
//
// NodeProcess is the core::Host of the actor its role holds. It owns the asio loop, the transport
// and the rendezvous, queues what the actor sends (backpressure), arms its timers, records its
// trace and decision log, hands every arriving core message to the actor (the core refuses what
// does not fit and the process closes that peer's connection), answers the coordinator's status
// question, applies membership changes to its connections, and ends when the job ends or fails.
// It decides nothing about the protocol.
//
//   NodeProcess p(options);                 // throws config::ConfigError for bad options
//   p.SetRole(std::make_unique<ShardRole>(p, ...));
//   int code = p.Run();                     // a NodeExit
//
// Threads: everything here runs on the loop thread (Run's), but for Post-ed work. A program that
// embeds a worker (poseidon.torch) runs the loop on a thread of its own and reaches the process
// through Post only.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/coordinator.h"
#include "core/decision_log.h"
#include "core/job.h"
#include "real_runtime/fault_injection.h"
#include "real_runtime/node.h"
#include "real_runtime/node_role.h"
#include "real_runtime/rendezvous.h"
#include "real_runtime/transport.h"

namespace poseidon::rt {

class NodeProcess final : public core::Host {
 public:
  // Builds the transport and the rendezvous for `o.rank` of the scenario's layout. Throws
  // config::ConfigError for a rank outside the layout.
  explicit NodeProcess(const NodeOptions& o);
  ~NodeProcess() override;

  // The role this process hosts: before Run, or, in a job whose workers bring the model
  // (`model: torch`), once the job is known (on the loop thread): the actor then starts as soon as
  // the rendezvous is complete.
  void SetRole(std::unique_ptr<NodeRole> role);
  // The job's baseline, for the decisions recorded (core::DecisionLog::FollowBaseline).
  void FollowBaseline(const core::BaselineConfig& b) { decisions_.FollowBaseline(b); }
  bool has_role() const { return role_ != nullptr; }
  // Control frames no role takes yet (the job's description, before the role exists): true when
  // the handler took the frame. Before Run.
  using ControlHandler = std::function<bool(int peer, uint8_t type, const std::vector<uint8_t>&)>;
  void SetControlHandler(ControlHandler handler) { control_handler_ = std::move(handler); }
  // Runs `f` on the loop thread once this process is connected to every other (now, if it is).
  // Loop thread.
  void WhenConnected(std::function<void()> f);
  // Listens, runs the loop until the job ends, writes the trace and the decision log; returns a
  // NodeExit.
  int Run();
  // Ends the loop from another thread (a program embedding a worker that gives up); Run returns
  // `code`.
  void Stop(int code, const std::string& why);

  // core::Host.
  void Send(core::Message msg) override;
  void StartCompute(const core::ComputeTask& task) override;
  void SetTimer(core::TimeNs at, uint64_t timer_id) override;
  void Trace(const core::TraceEvent& event) override;

  // Services for the role (loop thread).
  const NodeOptions& options() const { return o_; }
  const core::JobLayout& layout() const { return layout_; }
  asio::io_context& io() { return io_; }
  Transport& transport() { return *transport_; }
  FaultInjector& fault() { return fault_; }
  // The job's time base: the coordinator's time since it started. Other processes add the offset
  // their clock sync estimated (rendezvous.h), so every process's trace shares it.
  core::TimeNs Now() const { return Local() + rendezvous_->clock_offset(); }
  std::chrono::steady_clock::time_point start() const { return start_; }
  std::string Who(int rank) const { return layout_.ActorName(rank); }
  int rank() const { return o_.rank; }
  bool failed() const { return failed_; }
  // Why the process failed (Fail's `why`), once it has.
  const std::string& failure() const { return failure_; }
  bool shutting_down() const { return shutting_down_; }
  bool actor_started() const { return actor_started_; }
  // Protocol.fault_tolerance is on: a lost peer is the coordinator's to judge.
  bool fault_tolerant() const { return fault_tolerance_.enabled(); }
  // Ends the process with `code` (the first failure wins), logging why.
  void Fail(int code, const std::string& why);
  // After every call into the actor: the role's follow-up.
  void AfterActorCall();
  // A compute task of this process ran from `begin` to now: traced, then given to the actor
  // (a checkpoint that cannot be written or a payload the store refuses fails the process).
  void TaskDone(const core::ComputeTask& task, core::TimeNs begin);
  // The coordinator ends the job: every process is told to exit (kCtlShutdown), or that the job
  // cannot run and why (kCtlJobRefused, `code` kExitConfig, `why` logged); the loop stops once
  // all closed, or after a grace period.
  void EndJob(int code = kExitOk, const std::string& why = "");
  // Starts the actor now (the coordinator's role, at OnProcessStart).
  void StartActor();

 private:
  core::TimeNs Local() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start_)
        .count();
  }
  void BuildRendezvous();
  void OnPeerUp(int peer);
  void OnPeerDown(int peer, const std::string& reason);
  void OnControl(int peer, uint8_t type, std::vector<uint8_t> body);
  void MaybeStartActor();
  void OnMessage(core::Message msg);
  void RefusePeer(const core::Message& msg, const core::ProtocolError& e);
  void TrySend(int peer);
  void OnMembership(const core::Message& m);
  // With a trace: records this process's CPU so far (core::ProcessCpuEvent) when `force` or when
  // kProcessCpuEveryNs has passed since the last record. Called where the loop thread is awake
  // anyway (a traced event, a message, a task's end), so that it never wakes the process itself.
  void RecordProcessCpu(bool force);
  void WriteTrace();

  NodeOptions o_;
  asio::io_context io_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  core::JobLayout layout_;
  core::FaultConfig fault_tolerance_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Rendezvous> rendezvous_;
  std::unique_ptr<NodeRole> role_;
  ControlHandler control_handler_;
  std::vector<std::function<void()>> when_connected_;
  core::Coordinator* coordinator_ = nullptr;  // rank 0: the role's actor
  FaultInjector fault_;                       // tests only: nothing unless given one
  int exit_code_ = kExitOk;
  bool failed_ = false;
  std::string failure_;
  bool actor_started_ = false;
  bool shutting_down_ = false;

  // Messages and timers.
  std::map<int, std::deque<core::Message>> backlog_;  // sends refused by backpressure
  std::map<uint64_t, std::unique_ptr<asio::steady_timer>> timers_;
  std::vector<core::TraceEvent> trace_;
  static constexpr core::TimeNs kProcessCpuEveryNs = 250'000;
  core::TimeNs process_cpu_at_ = 0;  // the last record's time
  bool process_cpu_recorded_ = false;
  core::DecisionLog decisions_;
  std::map<int, uint32_t> known_epoch_;          // per peer: the epoch its last connection bound
  std::set<std::pair<int64_t, int>> announced_;  // coordinator: (epoch, actor) acted on

  // The job's end (the coordinator's).
  int peers_down_after_shutdown_ = 0;
  int peers_up_at_shutdown_ = 0;
  std::unique_ptr<asio::steady_timer> shutdown_timer_;
  // A peer other than the coordinator was lost: the coordinator's shutdown may be on its way.
  static constexpr std::chrono::seconds kLossGrace{3};
  std::unique_ptr<asio::steady_timer> loss_timer_;
};

}  // namespace poseidon::rt
