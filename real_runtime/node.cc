// real_runtime/node.cc: running one live process (node.h): its connections, the core messages
// and control frames it receives and sends, timers, membership and the end of the job. The
// class is node_host.h's.
#include "real_runtime/node_host.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "config/yaml_reader.h"
#include "core/message_rules.h"
#include "core/trace.h"
#include "real_runtime/compute_threads.h"
#include "real_runtime/control.h"

namespace poseidon::rt {

using config::ConfigError;
using Clock = std::chrono::steady_clock;


void NodeHost::Fail(int code, const std::string& why) {
  if (failed_) return;
  failed_ = true;
  exit_code_ = code;
  spdlog::error("{}: {}", Who(o_.rank), why);
  transport_->Close();
  io_.stop();
}

int NodeHost::Run() {
  const uint16_t port = rendezvous_->Start();
  if (o_.rank == 0) {
    if (o_.ready_fd >= 0) {
      const std::string line = fmt::format("{}\n", port);
      const ssize_t n = ::write(o_.ready_fd, line.data(), line.size());
      if (n != static_cast<ssize_t>(line.size())) {
        throw ConfigError("error: cannot report the coordinator's port to the launcher");
      }
    }
    actor_->OnStart(Now());
    actor_started_ = true;
    watchdog_->Progress();  // the watchdog starts with the job
    if (layout_.num_actors() == 1) MaybeFinishJob();
  }
  io_.run();
  streams_.clear();
  WriteTrace();
  if (!o_.decisions_file.empty()) {
    std::ofstream f(o_.decisions_file, std::ios::binary);
    f << decisions_.Text();
    if (!f) spdlog::error("{}: cannot write the decisions to {}", Who(o_.rank), o_.decisions_file);
  }
  return exit_code_;
}

// The watchdog found no progress: end the job with what every process waits for.
void NodeHost::OnStuck(const std::map<int, std::string>& answers) {
  std::string lines = "\n  " + coordinator_actor_->WaitingFor();
  for (int r = 1; r < layout_.num_actors(); ++r) {
    auto it = answers.find(r);
    lines += "\n  " + (it != answers.end()
                           ? it->second
                           : fmt::format("{}: no answer ({})", Who(r),
                                         transport_->is_up(r) ? "connected" : "not connected"));
  }
  Fail(kExitNoProgress,
       fmt::format("no worker finished an iteration for {} s; the job is stuck. What each "
                   "process waits for:{}\n(--progress-timeout SECONDS changes the bound, 0 "
                   "turns it off)",
                   o_.progress_timeout.count(), lines));
}

void NodeHost::OnPeerUp(int peer) {
  known_epoch_[peer] = transport_->peer_epoch(peer);
  if (o_.rank == 0 && coordinator_actor_->started() && ft_) {
    spdlog::info("{}: {} connected in epoch {}", Who(o_.rank), Who(peer), known_epoch_[peer]);
  }
  rendezvous_->OnPeerUp(peer);
  MaybeStartActor();
}

void NodeHost::OnPeerDown(int peer, const std::string& reason) {
  if (shutting_down_) {
    if (o_.rank == 0 && ++peers_down_after_shutdown_ == peers_up_at_shutdown_) {
      transport_->Close();
      io_.stop();
    }
    return;
  }
  if (actor_started_ && actor_->finished() && o_.rank != 0) {
    // Our part is done and the job is ending: peers close as they get the coordinator's
    // shutdown, which may reach them before it reaches us.
    spdlog::info("{}: {} closed after this process finished; exiting", Who(o_.rank), Who(peer));
    shutting_down_ = true;
    transport_->Close();
    io_.stop();
    return;
  }
  if (ft_ && (o_.rank == 0 || peer != 0)) {
    backlog_.erase(peer);  // what it had not received is recovered by the protocol
    if (!actor_started_ && o_.rejoin) return rendezvous_->Redial(peer);
    spdlog::warn("{}: lost {} ({}); the coordinator decides whether it is dead", Who(o_.rank),
                 Who(peer), reason);
    return;
  }
  if (ft_ && !actor_started_ && o_.rejoin) return rendezvous_->Redial(peer);
  Fail(kExitPeerLost, fmt::format("lost {} before the job ended: {}", Who(peer), reason));
}

bool NodeHost::Counts(int worker) const {
  return !protocol_.fault.evict_dead_workers || coordinator_actor_->alive(worker);
}

// A membership change the coordinator's core announced (rank 0: as it sends it; others: as it
// arrives): a dead incarnation is shut out for good.
void NodeHost::OnMembership(const core::Message& m) {
  const int who = m.step;
  if (who == o_.rank || who <= 0 || who >= layout_.num_actors()) return;
  if (m.chunk == core::kMemberDead) {
    const uint32_t dead_epoch = known_epoch_[who];
    spdlog::warn("{}: {} (epoch {}) declared dead; membership epoch {}", Who(o_.rank), Who(who),
                 dead_epoch, m.clock);
    transport_->RefuseEpochsBelow(who, dead_epoch + 1);
    backlog_.erase(who);
    if (o_.rank == 0 && o_.ready_fd >= 0) {
      // The launcher, if any, ends that incarnation should it still run (a stopped process).
      const std::string line = fmt::format("dead {} {}\n", who, dead_epoch);
      if (::write(o_.ready_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        spdlog::warn("{}: cannot tell the launcher that {} is dead: {}", Who(o_.rank), Who(who),
                     std::strerror(errno));
      }
    }
  } else {
    // Its new incarnation is connected (it dials everyone before it registers): older ones are
    // out for good.
    spdlog::info("{}: {} rejoined in epoch {}; membership epoch {}", Who(o_.rank), Who(who),
                 known_epoch_[who], m.clock);
    transport_->RefuseEpochsBelow(who, known_epoch_[who]);
  }
}

void NodeHost::OnControl(int peer, uint8_t type, std::vector<uint8_t> body) {
  auto bad = [&] {
    spdlog::warn("{}: dropped a malformed {} control frame from {} ({} bytes)", Who(o_.rank),
                 ControlName(type), Who(peer), body.size());
  };
  if (Rendezvous::Handles(type)) {
    if (!rendezvous_->OnControl(peer, type, body)) bad();
    return;
  }
  switch (type) {
    case kCtlLoss: {
      int64_t clock = 0;
      double loss = 0;
      if (o_.rank != 0 || !layout_.IsWorker(peer) || !DecodeLoss(body, &clock, &loss) ||
          clock < 0 || clock >= protocol_.iterations) {
        return bad();
      }
      watchdog_->Progress();
      report_->OnLoss(peer, clock, loss, [this](int w) { return Counts(w); });
      MaybeFinishJob();
      return;
    }
    case kCtlProgress: {
      int64_t clock = 0;
      if (o_.rank != 0 || !layout_.IsWorker(peer) || !DecodeI64(body, &clock)) return bad();
      watchdog_->Progress();
      return;
    }
    case kCtlStatusAsk: {
      if (peer != 0 || !body.empty()) return bad();
      std::string s = actor_started_ ? actor_->WaitingFor()
                                     : fmt::format("{}: not started (rendezvous)", Who(o_.rank));
      if (!restore_note_.empty()) s += "; " + restore_note_;
      transport_->SendControl(0, kCtlStatus, EncodeStatus(s));
      return;
    }
    case kCtlStatus: {
      std::string text;
      if (o_.rank != 0 || !watchdog_->asking() || !DecodeStatus(body, &text)) return bad();
      watchdog_->Answer(peer, std::move(text));
      return;
    }
    case kCtlAccuracy: {
      double acc = 0;
      if (o_.rank != 0 || !DecodeF64(body, &acc)) return bad();
      report_->SetAccuracy(acc);
      MaybeFinishJob();
      return;
    }
    case kCtlShutdown:
      if (peer != 0) return bad();
      shutting_down_ = true;
      transport_->Close();
      io_.stop();
      return;
    default:
      return bad();
  }
}

// A non-coordinator starts its actor once it is connected to every other process.
void NodeHost::MaybeStartActor() {
  if (o_.rank == 0 || actor_started_ || failed_ || !rendezvous_->Complete()) return;
  spdlog::info("{}: connected to all {} peers{}", Who(o_.rank), rendezvous_->peers(),
               o_.rejoin ? fmt::format(" (rejoining in epoch {})", o_.transport.epoch) : "");
  actor_started_ = true;
  actor_->OnStart(Now());
  AfterActorCall();
}

void NodeHost::OnMessage(core::Message msg) {
  if (failed_ || shutting_down_) return;
  if (!o_.trace_file.empty() && msg.sent_at > 0) {
    // The same event the simulator records: a message in flight from its send to its delivery
    // (both ends share the job's time base; the receiver is the one that knows the end).
    trace_.push_back(core::MessageEvent(msg, msg.sent_at, Now()));
  }
  if (!actor_started_) {
    if (ft_) {
      // A restarted process: what peers sent its dead predecessor's successor before it joined
      // is recovered by the protocol (rejoin, resent pushes).
      spdlog::info("{}: dropped {} before joining", Who(o_.rank), core::Describe(msg));
      return;
    }
    // Peers start once connected to everyone; a message can beat our own last connection.
    Fail(kExitPeerLost, "a core message arrived before this process was connected to all peers");
    return;
  }
  if (msg.type == core::MsgType::kMembership) OnMembership(msg);
  if (msg.type == core::MsgType::kHeartbeat) fault_.At("heartbeat", msg.clock);
  if (msg.type == core::MsgType::kParams && msg.step == -1) fault_.At("pull", msg.clock);
  if (msg.type == core::MsgType::kPushGrad) fault_.At("push", msg.clock);
  core::ProtocolError refused;
  try {
    refused = actor_->OnMessage(Now(), msg);
  } catch (const PayloadError& e) {
    refused = core::ProtocolError::Of(core::ProtocolErrorCode::kWrongShape, e.what());
  }
  if (refused.code == core::ProtocolErrorCode::kStateLost) {
    // Not the peer's fault, and no restart can cure it: the job ends, saying what to do.
    Fail(kExitStateLost,
         fmt::format("the job cannot go on: {}. {}", refused.what,
                     lost_advice_.empty() ? "Start the job again" : lost_advice_));
    return;
  }
  if (refused) return RefusePeer(msg, refused);
  AfterActorCall();
}

// The core refused what a peer sent (or the store its floats): that peer's connection closes,
// reported as a lost peer (fatal without fault tolerance, the coordinator's verdict with it).
void NodeHost::RefusePeer(const core::Message& msg, const core::ProtocolError& e) {
  const std::string reason = fmt::format("its {} was refused ({}: {})", core::Describe(msg),
                                         core::ProtocolErrorCodeName(e.code), e.what);
  spdlog::warn("{}: closing the connection with {}: {}", Who(o_.rank), Who(msg.from), reason);
  transport_->Disconnect(msg.from);
  OnPeerDown(msg.from, reason);
}

void NodeHost::Send(core::Message msg) {
  if (!o_.decisions_file.empty()) decisions_.Send(o_.rank, msg);
  if (msg.type == core::MsgType::kPushGrad) fault_.At("push", msg.clock);
  if (msg.type == core::MsgType::kParams && msg.step == -1) fault_.At("pull", msg.clock);
  const bool pull = msg.type == core::MsgType::kParams && msg.step == -1;
  if ((msg.type == core::MsgType::kPushGrad || pull) &&
      fault_.MalformsSend(pull ? "pull" : "push", msg.clock)) {
    msg.chunk = std::numeric_limits<int32_t>::max();  // names no chunk of any job
  }
  if (msg.type == core::MsgType::kMembership && o_.rank == 0 &&
      !announced_.count({msg.clock, msg.step})) {
    announced_.insert({msg.clock, msg.step});
    OnMembership(msg);
  }
  msg.sent_at = Now();
  const int peer = msg.to;
  std::deque<core::Message>& q = backlog_[peer];
  q.push_back(std::move(msg));
  TrySend(peer);
}

// Hands queued messages to the transport until its per-peer bound says wait (backpressure);
// on_sent calls back here.
void NodeHost::TrySend(int peer) {
  auto it = backlog_.find(peer);
  if (it == backlog_.end()) return;
  while (!it->second.empty() && !failed_) {
    if (!transport_->Send(it->second.front())) {
      if (!transport_->is_up(peer)) {
        if (ft_ && peer != 0) {
          // Lost, maybe dead: the protocol recovers what it misses when it is back.
          backlog_.erase(it);
          return;
        }
        Fail(kExitPeerLost, fmt::format("cannot send to {}: not connected", Who(peer)));
      }
      return;
    }
    it->second.pop_front();
  }
}

void NodeHost::SetTimer(core::TimeNs at, uint64_t timer_id) {
  auto t = std::make_unique<asio::steady_timer>(io_);
  // `at` is on the job's time base; this process's clock runs the clock offset behind it.
  t->expires_at(start_ + std::chrono::nanoseconds(at - rendezvous_->clock_offset()));
  t->async_wait([this, timer_id](const std::error_code& ec) {
    if (ec || failed_) return;
    timers_.erase(timer_id);
    actor_->OnTimer(Now(), timer_id);
    AfterActorCall();
  });
  timers_[timer_id] = std::move(t);
}

void NodeHost::Trace(const core::TraceEvent& event) {
  if (!o_.trace_file.empty()) trace_.push_back(event);
  if (!o_.decisions_file.empty()) decisions_.Trace(event);
}

// After the actor acted: a finished worker 1 measures test accuracy (on its compute stream,
// after everything queued there); the coordinator checks whether the job is over.
void NodeHost::AfterActorCall() {
  if (failed_) return;
  if (o_.rank == 0) {
    // The first progress window counts from the job's start, not the process's: start-up
    // (processes, data, rendezvous) is not training throughput.
    if (report_ && coordinator_actor_->started()) report_->OnJobStarted();
    // An eviction may complete rows.
    if (report_) report_->Flush([this](int w) { return Counts(w); });
    MaybeFinishJob();
    return;
  }
  if (is_worker_ && actor_->finished() && !evaluated_) Evaluate();
}

void NodeHost::MaybeFinishJob() {
  if (job_finished_ || !actor_->finished()) return;
  const bool all_losses = replay_ || report_->all_losses();
  const bool want_accuracy =
      o_.training.test && layout_.num_workers > 0 && Counts(layout_.worker(0));
  if (!all_losses || (want_accuracy && !report_->accuracy())) return;
  job_finished_ = true;
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  if (!report_->Finish(layout_.num_servers, seconds)) {
    Fail(kExitConfig, o_.training.csv + ": error: writing the CSV failed");
    return;
  }
  shutting_down_ = true;
  for (int r = 1; r < layout_.num_actors(); ++r) {
    if (transport_->is_up(r)) ++peers_up_at_shutdown_;
    transport_->SendControl(r, kCtlShutdown, {});
  }
  if (peers_up_at_shutdown_ == 0) io_.stop();
  // Peers close on shutdown; stop when all have, or after a grace period.
  shutdown_timer_ = std::make_unique<asio::steady_timer>(io_, std::chrono::seconds(10));
  shutdown_timer_->async_wait([this](const std::error_code& ec) {
    if (ec) return;
    transport_->Close();
    io_.stop();
  });
  if (layout_.num_actors() == 1) io_.stop();
}

void NodeHost::WriteTrace() {
  if (o_.trace_file.empty()) return;
  std::string json;
  core::AppendChromeTrace(trace_, layout_, model_, &json);
  std::ofstream f(o_.trace_file, std::ios::binary);
  f << json;
  if (!f) spdlog::error("{}: cannot write the trace to {}", Who(o_.rank), o_.trace_file);
}

int RunNode(const NodeOptions& options) {
  // Logs go to stderr (stdout carries the coordinator's progress), tagged with the rank.
  auto logger = spdlog::stderr_logger_mt(fmt::format("rank-{}", options.rank));
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  spdlog::set_default_logger(logger);
  // The kernels' share of this machine's cores (compute_threads.h), said once; a worker with
  // several devices divides it among them.
  const ThreadChoice threads = ChooseComputeThreads(std::getenv, UsableCores());
  const config::ScenarioSpec& s = options.scenario;
  const int devices = options.rank >= 1 && options.rank <= config::ProtocolWorkers(s)
                          ? config::DevicesPerWorker(s)
                          : 1;
  const int team = SetComputeThreads(threads.threads, devices);
  ApplyComputeThreadsHere();
  if (devices > 1) {
    spdlog::info("kernels use {} OpenMP thread{} per device ({} devices): {}", team,
                 team == 1 ? "" : "s", devices, threads.why);
  } else {
    spdlog::info("kernels use {}: {}",
                 team > 0 ? fmt::format("{} OpenMP thread{}", team, team == 1 ? "" : "s")
                          : std::string("OpenMP's team size"),
                 threads.why);
  }
  NodeHost host(options);
  return host.Run();
}

bool RankFromEnvironment(int* rank, int* size, std::string* source) {
  static const char* const kVars[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                         {"PMI_RANK", "PMI_SIZE"},
                                         {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& v : kVars) {
    const char* r = std::getenv(v[0]);
    const char* s = std::getenv(v[1]);
    if (!r || !s) continue;
    char* end = nullptr;
    const long rv = std::strtol(r, &end, 10);
    if (*r == '\0' || *end != '\0') continue;
    const long sv = std::strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || rv < 0 || sv <= rv) continue;
    *rank = static_cast<int>(rv);
    *size = static_cast<int>(sv);
    *source = std::string(v[0]) + "/" + v[1];
    return true;
  }
  return false;
}

}  // namespace poseidon::rt
