// real_runtime/node_process.cc: one live process (node_process.h): its connections, the core
// messages and control frames it receives and sends, timers, membership and the end of the job.
#include "real_runtime/node_process.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "core/message_rules.h"
#include "core/trace.h"
#include "real_runtime/atomic_file.h"
#include "real_runtime/control.h"
#include "real_runtime/live_stores.h"

namespace poseidon::rt {

using config::ConfigError;

NodeProcess::NodeProcess(const NodeOptions& o)
    : o_(o), layout_(config::BuildLayout(o.scenario)), fault_tolerance_(config::BuildFault(o.scenario)) {
  const config::ScenarioSpec& s = o_.scenario;
  if (o_.rank < 0 || o_.rank >= layout_.num_actors()) {
    throw ConfigError(fmt::format(
        "error: rank {} is out of range: scenario {} has {} processes "
        "(coordinator 0, workers 1..{}, shards {}..{})",
        o_.rank, s.file, layout_.num_actors(), layout_.num_workers, layout_.num_workers + 1,
        layout_.num_actors() - 1));
  }
  if (o_.rejoin && !fault_tolerant()) {
    throw ConfigError(fmt::format("error: --rejoin needs protocol.fault_tolerance in {}", s.file));
  }
  if (o_.inject && o_.inject->rank == o_.rank && !o_.rejoin) {
    fault_ = FaultInjector(*o_.inject, Who(o_.rank),
                           layout_.IsServer(o_.rank)
                               ? fmt::format("{}/shard-{}.ckpt", o_.checkpoint_dir,
                                             layout_.ServerIndex(o_.rank))
                               : std::string());
  }
  TransportCallbacks cb;
  cb.on_peer_up = [this](int peer) { OnPeerUp(peer); };
  cb.on_peer_down = [this](int peer, const std::string& reason) { OnPeerDown(peer, reason); };
  cb.on_message = [this](core::Message m) { OnMessage(std::move(m)); };
  cb.on_control = [this](int peer, uint8_t type, std::vector<uint8_t> body) {
    OnControl(peer, type, std::move(body));
  };
  cb.on_sent = [this](const core::Message& m) {
    if (actor_started_ && !failed_ && role_) {
      role_->actor().OnSent(Now(), m);
      AfterActorCall();
    }
    TrySend(m.to);
  };
  o_.transport.num_ranks = layout_.num_actors();
  transport_ = std::make_unique<Transport>(io_, o_.rank, o_.transport, cb);
  BuildRendezvous();
}

NodeProcess::~NodeProcess() {
  if (role_) role_->StopCompute();  // joins the compute threads before what they use goes
}

void NodeProcess::SetRole(std::unique_ptr<NodeRole> role) {
  role_ = std::move(role);
  if (o_.rank == 0) coordinator_ = dynamic_cast<core::Coordinator*>(&role_->actor());
  POSEIDON_CHECK(o_.rank != 0 || coordinator_) << "rank 0 hosts the coordinator";
  MaybeStartActor();
}

void NodeProcess::Stop(int code, const std::string& why) {
  asio::post(io_, [this, code, why] { Fail(code, why); });
}

void NodeProcess::BuildRendezvous() {
  RendezvousOptions r;
  r.rank = o_.rank;
  r.num_actors = layout_.num_actors();
  r.coordinator_host = o_.coordinator_host;
  r.coordinator_port = o_.coordinator_port;
  r.listen_host = o_.listen_host;
  r.advertise_host = o_.advertise_host;
  r.rejoin = o_.rejoin;
  r.timeout = o_.rendezvous_timeout;
  Rendezvous::Callbacks cb;
  cb.name = [this](int rank) { return Who(rank); };
  cb.local = [this] { return Local(); };
  cb.alive = [this](int rank) { return coordinator_->alive(rank); };
  cb.registered = [this](int rank) { return coordinator_->registered(rank); };
  cb.started = [this] {
    return failed_ || shutting_down_ || (o_.rank == 0 ? coordinator_->started() : actor_started_);
  };
  cb.fail = [this](const std::string& why) { Fail(kExitPeerLost, why); };
  cb.progressed = [this] { MaybeStartActor(); };
  rendezvous_ = std::make_unique<Rendezvous>(io_, *transport_, std::move(r), std::move(cb));
}

void NodeProcess::Fail(int code, const std::string& why) {
  if (failed_) return;
  failed_ = true;
  exit_code_ = code;
  failure_ = why;
  spdlog::error("{}: {}", Who(o_.rank), why);
  transport_->Close();
  io_.stop();
}

int NodeProcess::Run() {
  POSEIDON_CHECK(role_ || o_.scenario.model_from_workers)
      << "NodeProcess::Run without a role, in a job whose model is known";
  POSEIDON_CHECK(o_.rank != 0 || role_) << "rank 0 runs the coordinator from the start";
  const uint16_t port = rendezvous_->Start();
  if (o_.rank == 0 && o_.ready_fd >= 0) {
    const std::string line = fmt::format("{}\n", port);
    const ssize_t n = ::write(o_.ready_fd, line.data(), line.size());
    if (n != static_cast<ssize_t>(line.size())) {
      throw ConfigError("error: cannot report the coordinator's port to the launcher");
    }
  }
  if (role_) role_->OnProcessStart();
  io_.run();
  if (role_) role_->StopCompute();
  RecordProcessCpu(true);
  WriteTrace();
  if (!o_.decisions_file.empty()) {
    std::ofstream f(o_.decisions_file, std::ios::binary);
    f << decisions_.Text();
    if (!f) spdlog::error("{}: cannot write the decisions to {}", Who(o_.rank), o_.decisions_file);
  }
  return exit_code_;
}

void NodeProcess::StartActor() {
  actor_started_ = true;
  role_->actor().OnStart(Now());
  AfterActorCall();
}

void NodeProcess::OnPeerUp(int peer) {
  known_epoch_[peer] = transport_->peer_epoch(peer);
  if (role_) role_->OnPeerUp(peer);
  rendezvous_->OnPeerUp(peer);
  MaybeStartActor();
}

void NodeProcess::OnPeerDown(int peer, const std::string& reason) {
  if (shutting_down_) {
    if (o_.rank == 0 && ++peers_down_after_shutdown_ == peers_up_at_shutdown_) {
      transport_->Close();
      io_.stop();
    }
    return;
  }
  if (actor_started_ && role_->actor().finished() && o_.rank != 0) {
    // Our part is done and the job is ending: peers close as they get the coordinator's
    // shutdown, which may reach them before it reaches us.
    spdlog::info("{}: {} closed after this process finished; exiting", Who(o_.rank), Who(peer));
    shutting_down_ = true;
    transport_->Close();
    io_.stop();
    return;
  }
  const bool ft = fault_tolerant();
  if (ft && (o_.rank == 0 || peer != 0)) {
    backlog_.erase(peer);  // what it had not received is recovered by the protocol
    if (!actor_started_ && o_.rejoin) return rendezvous_->Redial(peer);
    spdlog::warn("{}: lost {} ({}); the coordinator decides whether it is dead", Who(o_.rank),
                 Who(peer), reason);
    return;
  }
  if (ft && !actor_started_ && o_.rejoin) return rendezvous_->Redial(peer);
  const std::string why = fmt::format("lost {} before the job ended: {}", Who(peer), reason);
  if (o_.rank != 0 && peer != 0 && transport_->is_up(0)) {
    // The peer may have closed because the job is over, or refused: the coordinator's word can
    // reach it first. A process that cannot tell the end itself (a shard of a job whose workers'
    // loop decides it) waits for that word a moment before calling it a failure.
    if (!loss_timer_) {
      loss_timer_ = std::make_unique<asio::steady_timer>(io_, kLossGrace);
      loss_timer_->async_wait([this, why](const std::error_code& ec) {
        if (!ec && !shutting_down_) Fail(kExitPeerLost, why);
      });
    }
    return;
  }
  Fail(kExitPeerLost, why);
}

// A membership change the coordinator's core announced (rank 0: as it sends it; others: as it
// arrives): a dead incarnation is shut out for good.
void NodeProcess::OnMembership(const core::Message& m) {
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

void NodeProcess::OnControl(int peer, uint8_t type, std::vector<uint8_t> body) {
  auto bad = [&] {
    spdlog::warn("{}: dropped a malformed {} control frame from {} ({} bytes)", Who(o_.rank),
                 ControlName(type), Who(peer), body.size());
  };
  if (Rendezvous::Handles(type)) {
    if (!rendezvous_->OnControl(peer, type, body)) bad();
    return;
  }
  switch (type) {
    case kCtlStatusAsk: {
      if (peer != 0 || !body.empty()) return bad();
      std::string s = actor_started_ ? role_->actor().WaitingFor()
                      : role_        ? fmt::format("{}: not started (rendezvous)", Who(o_.rank))
                                     : fmt::format("{}: waiting for the job from the workers",
                                                   Who(o_.rank));
      if (role_) {
        if (const std::string note = role_->StatusNote(); !note.empty()) s += "; " + note;
      }
      transport_->SendControl(0, kCtlStatus, EncodeStatus(s));
      return;
    }
    case kCtlShutdown:
      if (peer != 0) return bad();
      shutting_down_ = true;
      transport_->Close();
      io_.stop();
      return;
    case kCtlJobRefused: {
      std::string why;
      if (peer != 0 || o_.rank == 0 || !DecodeJobText(body, &why)) return bad();
      Fail(kExitConfig, "the coordinator refused the job: " + why);
      return;
    }
    default:
      if (role_ && role_->OnControl(peer, type, body)) return;
      if (control_handler_ && control_handler_(peer, type, body)) return;
      bad();
  }
}

void NodeProcess::WhenConnected(std::function<void()> f) {
  when_connected_.push_back(std::move(f));
  MaybeStartActor();
}

// A non-coordinator starts its actor once it is connected to every other process.
void NodeProcess::MaybeStartActor() {
  if (o_.rank == 0 || failed_ || !rendezvous_->Complete()) return;
  std::vector<std::function<void()>> ready;
  ready.swap(when_connected_);
  for (auto& f : ready) f();
  if (!role_ || actor_started_ || failed_) return;
  spdlog::info("{}: connected to all {} peers{}", Who(o_.rank), rendezvous_->peers(),
               o_.rejoin ? fmt::format(" (rejoining in epoch {})", o_.transport.epoch) : "");
  StartActor();
}

void NodeProcess::OnMessage(core::Message msg) {
  if (failed_ || shutting_down_) return;
  if (!o_.trace_file.empty() && msg.sent_at > 0) {
    // The same event the simulator records: a message in flight from its send to its delivery
    // (both ends share the job's time base; the receiver is the one that knows the end).
    trace_.push_back(core::MessageEvent(msg, msg.sent_at, Now()));
    RecordProcessCpu(false);
  }
  if (!actor_started_) {
    if (fault_tolerant()) {
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
    refused = role_->actor().OnMessage(Now(), msg);
  } catch (const PayloadError& e) {
    refused = core::ProtocolError::Of(core::ProtocolErrorCode::kWrongShape, e.what());
  }
  if (refused.code == core::ProtocolErrorCode::kStateLost) {
    // Not the peer's fault, and no restart can cure it: the job ends, saying what to do.
    const std::string advice = role_->StateLostAdvice();
    Fail(kExitStateLost, fmt::format("the job cannot go on: {}. {}", refused.what,
                                     advice.empty() ? "Start the job again" : advice));
    return;
  }
  if (refused) return RefusePeer(msg, refused);
  role_->OnTaken(msg);
  AfterActorCall();
}

// The core refused what a peer sent (or the store its floats): that peer's connection closes,
// reported as a lost peer (fatal without fault tolerance, the coordinator's verdict with it).
void NodeProcess::RefusePeer(const core::Message& msg, const core::ProtocolError& e) {
  const std::string reason = fmt::format("its {} was refused ({}: {})", core::Describe(msg),
                                         core::ProtocolErrorCodeName(e.code), e.what);
  spdlog::warn("{}: closing the connection with {}: {}", Who(o_.rank), Who(msg.from), reason);
  transport_->Disconnect(msg.from);
  OnPeerDown(msg.from, reason);
}

void NodeProcess::Send(core::Message msg) {
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
void NodeProcess::TrySend(int peer) {
  auto it = backlog_.find(peer);
  if (it == backlog_.end()) return;
  while (!it->second.empty() && !failed_) {
    if (!transport_->Send(it->second.front())) {
      if (!transport_->is_up(peer)) {
        if (fault_tolerant() && peer != 0) {
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

void NodeProcess::StartCompute(const core::ComputeTask& task) {
  if (!o_.decisions_file.empty()) decisions_.Compute(o_.rank, task);
  role_->StartCompute(task);
}

void NodeProcess::SetTimer(core::TimeNs at, uint64_t timer_id) {
  auto t = std::make_unique<asio::steady_timer>(io_);
  // `at` is on the job's time base; this process's clock runs the clock offset behind it.
  t->expires_at(start_ + std::chrono::nanoseconds(at - rendezvous_->clock_offset()));
  t->async_wait([this, timer_id](const std::error_code& ec) {
    if (ec || failed_) return;
    timers_.erase(timer_id);
    role_->actor().OnTimer(Now(), timer_id);
    AfterActorCall();
  });
  timers_[timer_id] = std::move(t);
}

void NodeProcess::Trace(const core::TraceEvent& event) {
  if (!o_.trace_file.empty()) {
    trace_.push_back(event);
    RecordProcessCpu(false);
  }
  if (!o_.decisions_file.empty()) decisions_.Trace(event);
}

void NodeProcess::TaskDone(const core::ComputeTask& task, core::TimeNs begin) {
  if (failed_) return;
  const core::TimeNs now = Now();
  if (!o_.trace_file.empty()) {
    trace_.push_back(core::TaskEvent(o_.rank, task, begin, now));
    RecordProcessCpu(false);
  }
  try {
    role_->actor().OnComputeDone(now, task);
  } catch (const StorageError& e) {  // a checkpoint that cannot be written
    Fail(e.permanent() ? kExitStorage : kExitCompute, e.what());
    return;
  } catch (const std::runtime_error& e) {  // a PayloadError
    Fail(kExitCompute, e.what());
    return;
  }
  AfterActorCall();
}

void NodeProcess::AfterActorCall() {
  if (failed_ || !role_) return;
  role_->AfterActorCall();
}

void NodeProcess::EndJob(int code, const std::string& why) {
  if (shutting_down_ || failed_) return;
  shutting_down_ = true;
  if (code != kExitOk) {
    exit_code_ = code;
    spdlog::error("{}: {}", Who(o_.rank), why);
  }
  for (int r = 1; r < layout_.num_actors(); ++r) {
    if (transport_->is_up(r)) ++peers_up_at_shutdown_;
    if (code == kExitOk) {
      transport_->SendControl(r, kCtlShutdown, {});
    } else {
      transport_->SendControl(r, kCtlJobRefused, EncodeJobText(why));
    }
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

void NodeProcess::RecordProcessCpu(bool force) {
  if (o_.trace_file.empty() || !role_) return;
  const core::TimeNs now = Now();
  if (!force && process_cpu_recorded_ && now - process_cpu_at_ < kProcessCpuEveryNs) return;
  timespec cpu{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) != 0) return;  // no CPU clock: no counter
  process_cpu_at_ = now;
  process_cpu_recorded_ = true;
  trace_.push_back(core::ProcessCpuEvent(
      o_.rank, now, static_cast<int64_t>(cpu.tv_sec) * 1'000'000'000 + cpu.tv_nsec));
}

void NodeProcess::WriteTrace() {
  if (o_.trace_file.empty() || !role_) return;
  std::string json;
  core::AppendChromeTrace(trace_, layout_, role_->model(), &json);
  std::ofstream f(o_.trace_file, std::ios::binary);
  f << json;
  if (!f) spdlog::error("{}: cannot write the trace to {}", Who(o_.rank), o_.trace_file);
}

}  // namespace poseidon::rt
