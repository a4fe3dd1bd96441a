#include "real_runtime/node.h"

#include <unistd.h>

#include <asio.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "core/coordinator.h"
#include "core/decision_log.h"
#include "core/message_rules.h"
#include "core/placement.h"
#include "core/server.h"
#include "core/trace.h"
#include "core/worker.h"
#include "kernels/data/idx.h"
#include "kernels/kernel.h"
#include "kernels/memory_estimate.h"
#include "kernels/net.h"
#include "kernels/training.h"
#include "real_runtime/compute_streams.h"
#include "real_runtime/control.h"
#include "real_runtime/job_report.h"
#include "real_runtime/live_stores.h"
#include "real_runtime/worker_checkpoint.h"
#include "sim/compute_model.h"

namespace poseidon::rt {
namespace {

using config::ConfigError;
using Clock = std::chrono::steady_clock;

// Clock pings per process: the offset of the sample with the smallest round trip is kept.
constexpr int kClockPings = 8;

class NodeHost final : public core::Host {
 public:
  explicit NodeHost(const NodeOptions& o);
  ~NodeHost() override;
  int Run();

  void Send(core::Message msg) override;
  void StartCompute(const core::ComputeTask& task) override;
  void SetTimer(core::TimeNs at, uint64_t timer_id) override;
  void Trace(const core::TraceEvent& event) override;

 private:
  // The job's time base: the coordinator's time since it started. Other processes add the
  // offset they estimated with clock pings (NTP-style, best of kClockPings round trips), so
  // every process's trace shares one time base (on one host to within microseconds; across
  // hosts to within half the smallest round trip).
  core::TimeNs Now() const { return Local() + clock_offset_; }
  core::TimeNs Local() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count();
  }
  std::string Who(int rank) const { return layout_.ActorName(rank); }
  void Fail(int code, const std::string& why);
  void AfterActorCall();

  // Rendezvous.
  void OnPeerUp(int peer);
  void OnPeerDown(int peer, const std::string& reason);
  void OnControl(int peer, uint8_t type, std::vector<uint8_t> body);
  void MaybeStartActor();
  void SendPeerTable(int to);

  // Messages.
  void OnMessage(core::Message msg);
  void RefusePeer(const core::Message& msg, const core::ProtocolError& e);
  void TrySend(int peer);

  // Compute.
  void RunTask(const core::ComputeTask& task, core::TimeNs begin);
  void TaskDone(const core::ComputeTask& task, core::TimeNs begin, std::optional<double> loss);

  // Fault tolerance.
  FaultInjector fault_;  // tests only: nothing unless given one
  std::string WorkerCheckpointFile() const;
  void WriteWorkerCheckpoint();                  // compute thread
  void RestoreWorkerCheckpoint(int64_t clock);   // compute thread
  void OnMembership(const core::Message& m);
  void RetryConnect(int peer);
  bool Counts(int worker) const;  // coordinator: worker still counts (not evicted)

  // Coordinator bookkeeping.
  void OnLoss(int worker, int64_t clock, double loss);
  void MaybeFinishJob();
  void WriteTrace();
  void SaveParams();

  NodeOptions o_;
  asio::io_context io_;
  const Clock::time_point start_ = Clock::now();
  core::Model model_;
  core::JobLayout layout_;
  core::ProtocolConfig protocol_;
  std::optional<core::Placement> placement_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<core::Actor> actor_;
  int exit_code_ = kExitOk;
  bool failed_ = false;
  bool actor_started_ = false;
  bool shutting_down_ = false;
  std::map<int, PeerAddress> addresses_;  // coordinator: hellos; others: the table
  bool table_received_ = false;
  core::TimeNs clock_offset_ = 0;
  core::TimeNs best_rtt_ = std::numeric_limits<core::TimeNs>::max();
  int pongs_ = 0;
  std::map<int, std::deque<core::Message>> backlog_;  // sends refused by backpressure
  std::map<uint64_t, std::unique_ptr<asio::steady_timer>> timers_;
  std::vector<core::TraceEvent> trace_;
  core::DecisionLog decisions_;
  bool replay_ = false;
  bool ft_ = false;                          // fault tolerance on
  core::ServerShard* shard_actor_ = nullptr;
  core::Worker* worker_actor_ = nullptr;
  core::Coordinator* coordinator_actor_ = nullptr;
  std::map<int, uint32_t> known_epoch_;      // per peer: the epoch its last connection bound
  std::set<int> table_ranks_;                // the ranks this process must connect to
  std::map<int, int> connect_retries_;
  int64_t next_batch_ = 0;
  std::set<std::pair<int64_t, int>> announced_;  // coordinator: (epoch, actor) acted on                   // worker: the clock of the next batch to read
  std::optional<ReplayedCompute> replayed_;
  std::unique_ptr<core::WorkerStore> replay_worker_store_;
  std::unique_ptr<core::ShardStore> replay_shard_store_;

  // Worker.
  bool is_worker_ = false, is_server_ = false;
  std::unique_ptr<kernels::Net> net_;
  std::unique_ptr<LiveWorkerStore> worker_store_;
  std::unique_ptr<kernels::IdxDataset> train_, test_;
  std::unique_ptr<kernels::BatchSource> batches_;
  std::vector<float> images_;
  std::vector<int32_t> labels_;
  bool evaluated_ = false;
  // Shard.
  std::unique_ptr<LiveShardStore> shard_store_;
  // Compute streams (created on first use).
  std::map<int, std::unique_ptr<Executor>> streams_;
  std::atomic<bool> compute_failed_{false};

  // Coordinator.
  std::optional<JobReport> report_;  // the coordinator's
  bool job_finished_ = false;
  int peers_down_after_shutdown_ = 0;
  int peers_up_at_shutdown_ = 0;
  std::unique_ptr<asio::steady_timer> shutdown_timer_;
  std::unique_ptr<asio::steady_timer> rendezvous_timer_;
  // The progress watchdog (rank 0): re-armed whenever a worker finishes an iteration.
  std::unique_ptr<asio::steady_timer> progress_timer_, status_timer_;
  std::map<int, std::string> status_;  // answers to kCtlStatusAsk
  bool asked_status_ = false;
  std::string restore_note_;           // a restarted shard: what it was restored from
  void NoteProgress();
  void OnNoProgress();
  void EndForNoProgress();
  void ArmRendezvousTimeout();
  bool RendezvousDone() const;
};

NodeHost::NodeHost(const NodeOptions& o) : o_(o) {
  const config::ScenarioSpec& s = o_.scenario;
  model_ = config::BuildScenarioModel(s);
  layout_ = config::BuildLayout(s, s.workers, s.servers);
  if (o_.rank < 0 || o_.rank >= layout_.num_actors()) {
    throw ConfigError(fmt::format("error: rank {} is out of range: scenario {} has {} processes "
                                  "(coordinator 0, workers 1..{}, shards {}..{})",
                                  o_.rank, s.file, layout_.num_actors(), s.workers, s.workers + 1,
                                  layout_.num_actors() - 1));
  }
  CheckLiveScenario(s);
  if (o_.compute != "real" && o_.compute != "replay") {
    throw ConfigError(fmt::format("error: --compute must be real or replay, got '{}'", o_.compute));
  }
  replay_ = o_.compute == "replay";
  bool device_copies = false;
  if (replay_) {
    // The simulator's compute model, with the straggler slowdowns the scenario gives.
    sim::ComputeModel cm = sim::BuildComputeModel(s, model_);
    device_copies = cm.pcie_bandwidth_Bps() > 0;
    if (layout_.IsWorker(o_.rank)) {
      for (const auto& st : s.stragglers) {
        if (st.worker == layout_.WorkerIndex(o_.rank)) cm = cm.ScaledBy(st.slowdown);
      }
    }
    replayed_.emplace(std::move(cm), s.batch_per_worker);
    o_.training.test = false;
  }
  protocol_ = config::BuildProtocol(s, model_, s.workers, s.servers, device_copies);
  ft_ = protocol_.fault.enabled();
  if (protocol_.fault.checkpoint_every > 0 && o_.checkpoint_dir.empty()) {
    throw ConfigError(fmt::format("error: {}: protocol.fault_tolerance.checkpoint_every needs "
                                  "--checkpoint-dir DIR (poseidon launch passes one)",
                                  s.file));
  }
  if (o_.rejoin && !ft_) {
    throw ConfigError(fmt::format("error: --rejoin needs protocol.fault_tolerance in {}", s.file));
  }
  if (o_.rejoin && layout_.IsWorker(o_.rank)) {
    if (const int l = core::FirstLayerOffPs(model_, protocol_); l >= 0) {
      throw ConfigError(fmt::format(
          "error: a restarted worker cannot rejoin: {}; rejoining needs every layer on the "
          "parameter server (protocol.scheme: ps)",
          core::OffPsReason(model_, protocol_, l)));
    }
  }
  placement_ = core::Placement::Build(model_, s.servers, protocol_.chunk_bytes,
                                      protocol_.scheme_of_layer);
  is_worker_ = layout_.IsWorker(o_.rank);
  is_server_ = layout_.IsServer(o_.rank);
  if (o_.inject && o_.inject->rank == o_.rank && !o_.rejoin) {
    fault_ = FaultInjector(*o_.inject, Who(o_.rank),
                           is_server_ ? fmt::format("{}/shard-{}.ckpt", o_.checkpoint_dir,
                                                    layout_.ServerIndex(o_.rank))
                                      : std::string());
  }

  kernels::Backend backend;
  if (!kernels::BackendFromName(o_.training.backend, &backend)) {
    throw ConfigError(fmt::format("error: --backend: unknown backend '{}'; known: reference, cpu, "
                                  "cuda",
                                  o_.training.backend));
  }
  kernels::SgdOptions& sgd = o_.training.sgd;
  if (sgd.max_iter <= 1) sgd.max_iter = s.iterations;
  if (sgd.stepsize <= 1) sgd.stepsize = std::max<int64_t>(1, s.iterations / 3);

  if (replay_ && is_worker_) {
    replay_worker_store_ = std::make_unique<ReplayWorkerStore>(model_, s.batch_per_worker);
    actor_ = std::make_unique<core::Worker>(o_.rank, model_, *placement_, layout_, protocol_, this,
                                            replay_worker_store_.get());
  } else if (replay_ && is_server_) {
    replay_shard_store_ = std::make_unique<ReplayShardStore>();
    actor_ = std::make_unique<core::ServerShard>(o_.rank, *placement_, layout_, protocol_, this,
                                                 replay_shard_store_.get());
    if (o_.rejoin) {
      throw ConfigError("error: --rejoin of a shard needs --compute real (replayed shards hold no "
                        "values to checkpoint)");
    }
  } else if (is_worker_) {
    const std::string dir =
        o_.training.data_dir.empty() ? kernels::DefaultFashionMnistDir() : o_.training.data_dir;
    train_ = std::make_unique<kernels::IdxDataset>(kernels::FashionMnistTrain(dir));
    const core::Shape in = model_.input_shape();
    if (in.c != 1 || in.h != train_->rows || in.w != train_->cols) {
      throw ConfigError(fmt::format(
          "error: model '{}' expects {}x{}x{} input but the data in {} is 1x{}x{}; pick a model "
          "for this data set (e.g. fmnist_mlp, fmnist_cnn)",
          model_.name(), in.c, in.h, in.w, dir, train_->rows, train_->cols));
    }
    if (kernels::MainLossLayer(model_) < 0) {
      throw ConfigError(fmt::format("error: model '{}' has no softmax_loss layer to train",
                                    model_.name()));
    }
    const int w = layout_.WorkerIndex(o_.rank);
    batches_ = std::make_unique<kernels::BatchSource>(*train_, s.batch_per_worker * s.workers, w,
                                                      s.workers, s.seed);
    try {
      kernels::CheckNetFits(model_, s.batch_per_worker);  // before anything is allocated
    } catch (const kernels::MemoryError& e) {
      throw ConfigError(e.what());
    }
    net_ = std::make_unique<kernels::Net>(model_, backend, s.batch_per_worker, s.seed);
    if (o_.training.test && w == 0) {
      test_ = std::make_unique<kernels::IdxDataset>(kernels::FashionMnistTest(dir));
    }
    images_.resize(static_cast<size_t>(s.batch_per_worker * train_->rows * train_->cols));
    labels_.resize(static_cast<size_t>(s.batch_per_worker));
    worker_store_ = std::make_unique<LiveWorkerStore>(net_.get(), *placement_, sgd, o_.rank);
    actor_ = std::make_unique<core::Worker>(o_.rank, model_, *placement_, layout_, protocol_, this,
                                            worker_store_.get());
  } else if (is_server_) {
    // Every replica and every shard start from the values a Net built with the job's seed has.
    kernels::Net initial(model_, kernels::Backend::kReference, /*batch=*/1, s.seed);
    shard_store_ = std::make_unique<LiveShardStore>(initial, *placement_,
                                                    layout_.ServerIndex(o_.rank),
                                                    protocol_.consistency, sgd);
    auto shard = std::make_unique<core::ServerShard>(o_.rank, *placement_, layout_, protocol_, this,
                                                     shard_store_.get());
    if (ft_ && protocol_.consistency == core::Consistency::kBsp) shard_store_->KeepPrevious();
    if (fault_.at_checkpoint()) {
      shard_store_->SetCheckpointHook(
          [this](const core::ShardCheckpoint& state) { fault_.At("checkpoint", state.floor); });
    }
    if (!o_.checkpoint_dir.empty()) {
      const std::string file =
          fmt::format("{}/shard-{}.ckpt", o_.checkpoint_dir, layout_.ServerIndex(o_.rank));
      shard_store_->SetCheckpointFile(file);
      if (o_.rejoin && std::filesystem::exists(file)) {
        const core::ShardCheckpoint state = shard_store_->LoadCheckpoint();
        shard->Restore(state);
        spdlog::info("{}: restored from {}: every push of clocks below {} applied", Who(o_.rank),
                     file, state.floor);
        restore_note_ = fmt::format("restarted from {} (clocks below {})", file, state.floor);
      } else if (o_.rejoin) {
        spdlog::info("{}: no checkpoint at {} yet; starting from the initial values", Who(o_.rank),
                     file);
        restore_note_ = fmt::format(
            "restarted from the initial values: no checkpoint at {}; if the job was past its "
            "first checkpoint, the clocks before the pushes the workers keep cannot be replayed: "
            "put back the newest {} or start the job again",
            file, std::filesystem::path(file).filename().string());
      }
    }
    shard_actor_ = shard.get();
    actor_ = std::move(shard);
  } else {
    auto coordinator = std::make_unique<core::Coordinator>(layout_, this, protocol_.fault);
    coordinator_actor_ = coordinator.get();
    actor_ = std::move(coordinator);
    try {
      report_.emplace(layout_.num_workers, protocol_.iterations, s.batch_per_worker,
                      o_.training.print_interval, o_.training.csv, start_);
    } catch (const std::runtime_error& e) {
      throw ConfigError(e.what());
    }
  }

  if (is_worker_) {
    worker_actor_ = static_cast<core::Worker*>(actor_.get());
    if (o_.rejoin) worker_actor_->Rejoin();
  }
  for (int r = 0; r < layout_.num_actors(); ++r) {
    if (r != o_.rank) table_ranks_.insert(r);
  }

  TransportCallbacks cb;
  cb.on_peer_up = [this](int peer) { OnPeerUp(peer); };
  cb.on_peer_down = [this](int peer, const std::string& reason) { OnPeerDown(peer, reason); };
  cb.on_message = [this](core::Message m) { OnMessage(std::move(m)); };
  cb.on_control = [this](int peer, uint8_t type, std::vector<uint8_t> body) {
    OnControl(peer, type, std::move(body));
  };
  cb.on_sent = [this](const core::Message& m) {
    if (actor_started_ && !failed_) {
      actor_->OnSent(Now(), m);
      AfterActorCall();
    }
    TrySend(m.to);
  };
  o_.transport.num_ranks = layout_.num_actors();
  transport_ = std::make_unique<Transport>(io_, o_.rank, o_.transport, cb);
}

NodeHost::~NodeHost() {
  streams_.clear();  // joins the compute threads before the net goes
}

void NodeHost::Fail(int code, const std::string& why) {
  if (failed_) return;
  failed_ = true;
  exit_code_ = code;
  spdlog::error("{}: {}", Who(o_.rank), why);
  transport_->Close();
  io_.stop();
}

int NodeHost::Run() {
  if (o_.rank == 0) {
    const uint16_t port = transport_->Listen(o_.listen_host, o_.coordinator_port);
    spdlog::info("coordinator listening on {}:{} for {} processes", o_.listen_host, port,
                 layout_.num_actors() - 1);
    if (o_.ready_fd >= 0) {
      const std::string line = fmt::format("{}\n", port);
      const ssize_t n = ::write(o_.ready_fd, line.data(), line.size());
      if (n != static_cast<ssize_t>(line.size())) {
        throw ConfigError("error: cannot report the coordinator's port to the launcher");
      }
    }
    actor_->OnStart(Now());
    actor_started_ = true;
    NoteProgress();  // the watchdog starts with the job
    if (layout_.num_actors() == 1) MaybeFinishJob();
  } else {
    const uint16_t port = transport_->Listen(o_.listen_host, 0);
    addresses_[o_.rank] = {o_.advertise_host.empty() ? o_.listen_host : o_.advertise_host, port};
    transport_->Connect(0, o_.coordinator_host, o_.coordinator_port);
  }
  ArmRendezvousTimeout();
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

// The coordinator's watchdog: a worker finished an iteration.
void NodeHost::NoteProgress() {
  if (o_.rank != 0 || o_.progress_timeout.count() <= 0 || asked_status_) return;
  if (!progress_timer_) progress_timer_ = std::make_unique<asio::steady_timer>(io_);
  progress_timer_->expires_after(o_.progress_timeout);
  progress_timer_->async_wait([this](const std::error_code& ec) {
    if (!ec) OnNoProgress();
  });
}

// No worker finished an iteration for progress_timeout: ask every process what it waits for,
// give them 3 s to answer, then end the job with the answers (as the simulator's deadlock report).
void NodeHost::OnNoProgress() {
  if (failed_ || shutting_down_ || coordinator_actor_->finished()) return;
  asked_status_ = true;
  for (int r = 1; r < layout_.num_actors(); ++r) {
    if (transport_->is_up(r)) transport_->SendControl(r, kCtlStatusAsk, {});
  }
  status_timer_ = std::make_unique<asio::steady_timer>(io_, std::chrono::seconds(3));
  status_timer_->async_wait([this](const std::error_code& ec) {
    if (!ec) EndForNoProgress();
  });
}

void NodeHost::EndForNoProgress() {
  if (failed_) return;
  std::string lines = "\n  " + coordinator_actor_->WaitingFor();
  for (int r = 1; r < layout_.num_actors(); ++r) {
    auto it = status_.find(r);
    lines += "\n  " + (it != status_.end()
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

bool NodeHost::RendezvousDone() const {
  return o_.rank == 0 ? coordinator_actor_->started() : actor_started_;
}

// No silent wait for a process that never comes (it failed to start, or cannot reach us): past
// the bound the process fails and says who is missing.
void NodeHost::ArmRendezvousTimeout() {
  if (o_.rendezvous_timeout.count() <= 0) return;
  rendezvous_timer_ = std::make_unique<asio::steady_timer>(io_, o_.rendezvous_timeout);
  rendezvous_timer_->async_wait([this](const std::error_code& ec) {
    if (ec || failed_ || shutting_down_ || RendezvousDone()) return;
    std::vector<std::string> missing;
    for (int r = 1; r < layout_.num_actors(); ++r) {
      if (r == o_.rank) continue;
      const bool in = o_.rank == 0 ? coordinator_actor_->registered(r) : transport_->is_up(r);
      if (!in) missing.push_back(fmt::format("{} (rank {})", layout_.ActorName(r), r));
    }
    if (o_.rank != 0 && !transport_->is_up(0)) missing.insert(missing.begin(), "the coordinator (rank 0)");
    const int want = layout_.num_actors() - 1;
    Fail(kExitPeerLost,
         fmt::format("rendezvous not done after {} s: {} of {} {} {}; missing: {}. Were they "
                     "started, with --coordinator pointing here, the same scenario and secret? "
                     "(their logs say why not; --rendezvous-timeout SECONDS waits longer)",
                     o_.rendezvous_timeout.count(), want - static_cast<int>(missing.size()), want,
                     o_.rank == 0 ? "processes" : "peers",
                     o_.rank == 0 ? "registered" : "connected", fmt::join(missing, ", ")));
  });
}

void NodeHost::OnPeerUp(int peer) {
  known_epoch_[peer] = transport_->peer_epoch(peer);
  if (o_.rank == 0 && table_received_ && ft_) {
    spdlog::info("{}: {} connected in epoch {}", Who(o_.rank), Who(peer), known_epoch_[peer]);
  }
  if (o_.rank != 0 && peer == 0) {
    transport_->SendControl(0, kCtlHello, EncodeHelloCtl(addresses_[o_.rank]));
    transport_->SendControl(0, kCtlClockPing, EncodeI64(Local()));
  }
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
    if (!actor_started_ && o_.rejoin) return RetryConnect(peer);
    spdlog::warn("{}: lost {} ({}); the coordinator decides whether it is dead", Who(o_.rank),
                 Who(peer), reason);
    return;
  }
  if (ft_ && !actor_started_ && o_.rejoin) return RetryConnect(peer);
  Fail(kExitPeerLost, fmt::format("lost {} before the job ended: {}", Who(peer), reason));
}

// A restarted process may dial a peer before that peer noticed the old incarnation's close:
// try again a few times.
void NodeHost::RetryConnect(int peer) {
  if (++connect_retries_[peer] > 20) {
    Fail(kExitPeerLost, fmt::format("cannot reconnect to {} after 20 tries", Who(peer)));
    return;
  }
  auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(250));
  t->async_wait([this, t, peer](const std::error_code& ec) {
    if (ec || failed_) return;
    if (peer == 0) {
      transport_->Connect(0, o_.coordinator_host, o_.coordinator_port);
    } else if (auto it = addresses_.find(peer); it != addresses_.end()) {
      transport_->Connect(peer, it->second.host, it->second.port);
    }
  });
}


std::string NodeHost::WorkerCheckpointFile() const {
  return fmt::format("{}/worker-{}.ckpt", o_.checkpoint_dir, layout_.WorkerIndex(o_.rank));
}

// A worker's own state (worker_checkpoint.h): the clock of its next batch and its data
// stream's position.
void NodeHost::WriteWorkerCheckpoint() {
  WriteFileAtomically(WorkerCheckpointFile(),
                      EncodeWorkerCheckpoint({next_batch_, batches_->SaveState()}));
}

// A restarted worker continues its data stream from its checkpoint when that is not past the
// clock it rejoins at (it may have checkpointed a batch whose push never made it), else from the
// start; either way it then skips to the clock, so it reads what it would have read.
void NodeHost::RestoreWorkerCheckpoint(int64_t clock) {
  const std::string path = WorkerCheckpointFile();
  std::ifstream f(path, std::ios::binary);
  if (!f) return;
  const std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::optional<WorkerCheckpoint> c = DecodeWorkerCheckpoint(b);
  if (!c) {
    spdlog::warn("{}: {}: not a valid worker checkpoint (truncated or corrupt); reading the data "
                 "stream from its start instead",
                 Who(o_.rank), path);
    return;
  }
  const int64_t next = c->next_batch;
  if (next > clock) {
    spdlog::info("{}: {} is at clock {}, past the rejoin clock {}; reading the data stream from "
                 "its start",
                 Who(o_.rank), path, next, clock);
    return;
  }
  try {
    batches_->RestoreState(c->stream_state);
  } catch (const std::invalid_argument& e) {
    spdlog::warn("{}: {}: {}; reading the data stream from its start", Who(o_.rank), path, e.what());
    return;
  }
  next_batch_ = next;
  spdlog::info("{}: data stream restored from {} at clock {}", Who(o_.rank), path, next);
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
  switch (type) {
    case kCtlHello: {
      PeerAddress a;
      if (o_.rank != 0 || !DecodeHelloCtl(body, &a)) return bad();
      const bool rejoin = static_cast<int>(addresses_.size()) == layout_.num_actors() - 1;
      addresses_[peer] = a;
      if (rejoin) {
        // A restarted process: it gets the table of everyone alive.
        SendPeerTable(peer);
      } else if (static_cast<int>(addresses_.size()) == layout_.num_actors() - 1) {
        SendPeerTable(-1);
      }
      return;
    }
    case kCtlPeers: {
      std::map<int, PeerAddress> table;
      if (peer != 0 || table_received_ || !DecodePeers(body, layout_.num_actors(), &table)) {
        return bad();
      }
      table_received_ = true;
      if (o_.rejoin) table_ranks_ = {0};
      for (const auto& [rank, addr] : table) {
        if (rank == o_.rank) continue;
        addresses_[rank] = addr;
        // Everyone dials the peers of lower rank; a restarted process dials all (they listen).
        if (o_.rejoin) table_ranks_.insert(rank);
        if (rank < o_.rank || o_.rejoin) transport_->Connect(rank, addr.host, addr.port);
      }
      MaybeStartActor();
      return;
    }
    case kCtlLoss: {
      int64_t clock = 0;
      double loss = 0;
      if (o_.rank != 0 || !layout_.IsWorker(peer) || !DecodeLoss(body, &clock, &loss) ||
          clock < 0 || clock >= protocol_.iterations) {
        return bad();
      }
      NoteProgress();
      OnLoss(peer, clock, loss);
      MaybeFinishJob();
      return;
    }
    case kCtlProgress: {
      int64_t clock = 0;
      if (o_.rank != 0 || !layout_.IsWorker(peer) || !DecodeI64(body, &clock)) return bad();
      NoteProgress();
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
      if (o_.rank != 0 || !asked_status_ || !DecodeStatus(body, &text)) return bad();
      status_[peer] = std::move(text);
      if (static_cast<int>(status_.size()) == layout_.num_actors() - 1) EndForNoProgress();
      return;
    }
    case kCtlAccuracy: {
      double acc = 0;
      if (o_.rank != 0 || !DecodeF64(body, &acc)) return bad();
      report_->SetAccuracy(acc);
      MaybeFinishJob();
      return;
    }
    case kCtlClockPing: {
      int64_t t1 = 0;
      if (o_.rank != 0 || !DecodeI64(body, &t1)) return bad();
      transport_->SendControl(peer, kCtlClockPong, EncodePong(t1, Now()));
      return;
    }
    case kCtlClockPong: {
      int64_t t1 = 0, coord = 0;
      if (peer != 0 || !DecodePong(body, &t1, &coord) || pongs_ >= kClockPings) return bad();
      const core::TimeNs t2 = Local();
      if (t2 - t1 < best_rtt_) {
        best_rtt_ = t2 - t1;
        clock_offset_ = coord + best_rtt_ / 2 - t2;
      }
      if (++pongs_ < kClockPings) {
        transport_->SendControl(0, kCtlClockPing, EncodeI64(Local()));
      } else {
        spdlog::info("{}: clock offset to the coordinator {} us (round trip {} us)", Who(o_.rank),
                     clock_offset_ / 1000, best_rtt_ / 1000);
      }
      MaybeStartActor();
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

// To everyone (to = -1) at the start, or to one restarted process: then only the peers alive.
void NodeHost::SendPeerTable(int to) {
  std::map<int, PeerAddress> table;
  for (const auto& [rank, addr] : addresses_) {
    if (to < 0 || rank == to || coordinator_actor_->alive(rank)) table[rank] = addr;
  }
  const std::vector<uint8_t> b = EncodePeers(table);
  if (to >= 0) {
    transport_->SendControl(to, kCtlPeers, b);
    return;
  }
  for (const auto& [rank, addr] : addresses_) transport_->SendControl(rank, kCtlPeers, b);
}

// A non-coordinator starts its actor once it is connected to every other process.
void NodeHost::MaybeStartActor() {
  if (o_.rank == 0 || actor_started_ || !table_received_ || pongs_ < kClockPings) return;
  for (int r : table_ranks_) {
    if (!transport_->is_up(r)) return;
  }
  spdlog::info("{}: connected to all {} peers{}", Who(o_.rank), table_ranks_.size(),
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

void NodeHost::StartCompute(const core::ComputeTask& task) {
  if (!o_.decisions_file.empty()) decisions_.Compute(o_.rank, task);
  const int stream = static_cast<int>(core::StreamOf(task.kind));
  std::unique_ptr<Executor>& ex = streams_[stream];
  if (!ex) ex = std::make_unique<Executor>();
  const core::TimeNs begin = Now();
  ex->Post([this, task, begin] { RunTask(task, begin); });
}

// On a compute thread.
void NodeHost::RunTask(const core::ComputeTask& task, core::TimeNs begin) {
  if (compute_failed_) return;
  // The last layer's forward pass sets it; it may be NaN (a diverged loss, which TaskDone
  // reports), so NaN cannot also mean "no loss".
  std::optional<double> loss;
  if (replay_) {
    const core::TimeNs start = replayed_->Run(task, begin, [this] { return Now(); });
    asio::post(io_, [this, task, start] { TaskDone(task, start, std::nullopt); });
    return;
  }
  try {
    switch (task.kind) {
      case core::TaskKind::kForward: {
        if (task.layer == 0) {
          // The batch of this clock (a rejoining worker starts at a later clock).
          if (o_.rejoin && next_batch_ == 0) RestoreWorkerCheckpoint(task.clock);
          if (task.clock > next_batch_) batches_->Skip(task.clock - next_batch_);
          next_batch_ = task.clock + 1;
          batches_->Next(images_.data(), labels_.data());
          const int64_t every = protocol_.fault.checkpoint_every;
          if (every > 0 && next_batch_ % every == 0) WriteWorkerCheckpoint();
          net_->SetInput(images_.data(), labels_.data());
        }
        std::lock_guard<std::mutex> lock(worker_store_->LayerLock(task.layer));
        net_->ForwardLayer(task.layer, /*train=*/true);
        if (task.layer + 1 == static_cast<int>(model_.layers().size())) loss = net_->loss();
        break;
      }
      case core::TaskKind::kBackward: {
        if (task.layer + 1 == static_cast<int>(model_.layers().size())) net_->BeginBackward();
        std::lock_guard<std::mutex> lock(worker_store_->LayerLock(task.layer));
        net_->BackwardLayer(task.layer);
        break;
      }
      case core::TaskKind::kSfbRebuild:
        worker_store_->SfbRebuild(task.layer, task.clock, task.peer);
        break;
      case core::TaskKind::kCopyToHost:
      case core::TaskKind::kCopyToDevice:
        break;  // host-memory nets: nothing to copy
      case core::TaskKind::kServerUpdate:
        break;  // the store's Apply runs the step when the core takes the result
    }
  } catch (const StorageError& e) {
    // The worker's checkpoint, written between two tasks: a disk error, not the kernel's.
    compute_failed_ = true;
    const int code = e.permanent() ? kExitStorage : kExitCompute;
    const std::string why = e.what();
    asio::post(io_, [this, code, why] { Fail(code, why); });
    return;
  } catch (const std::exception& e) {
    compute_failed_ = true;
    const std::string why = fmt::format("{} of layer {} at clock {} failed: {}",
                                        core::TaskKindName(task.kind), task.layer, task.clock,
                                        e.what());
    asio::post(io_, [this, why] { Fail(kExitCompute, why); });
    return;
  }
  asio::post(io_, [this, task, begin, loss] { TaskDone(task, begin, loss); });
}

void NodeHost::TaskDone(const core::ComputeTask& task, core::TimeNs begin,
                        std::optional<double> loss) {
  if (failed_) return;
  const core::TimeNs now = Now();
  if (!o_.trace_file.empty()) trace_.push_back(core::TaskEvent(o_.rank, task, begin, now));
  if (loss) {
    if (!std::isfinite(*loss)) {
      Fail(kExitCompute, fmt::format("the loss diverged ({}) at iteration {}; lower --lr", *loss,
                                     task.clock + 1));
      return;
    }
    transport_->SendControl(0, kCtlLoss, EncodeLoss(task.clock, *loss));
  } else if (replay_ && task.kind == core::TaskKind::kBackward && task.layer == 0) {
    // An iteration's end, for the coordinator's progress watchdog.
    transport_->SendControl(0, kCtlProgress, EncodeI64(task.clock));
  }
  try {
    actor_->OnComputeDone(now, task);
  } catch (const StorageError& e) {  // a shard's checkpoint that cannot be written
    Fail(e.permanent() ? kExitStorage : kExitCompute, e.what());
    return;
  } catch (const std::runtime_error& e) {  // a PayloadError
    Fail(kExitCompute, e.what());
    return;
  }
  AfterActorCall();
}

void NodeHost::SetTimer(core::TimeNs at, uint64_t timer_id) {
  auto t = std::make_unique<asio::steady_timer>(io_);
  // `at` is on the job's time base; this process's clock runs clock_offset_ behind it.
  t->expires_at(start_ + std::chrono::nanoseconds(at - clock_offset_));
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
    // An eviction may complete rows.
    if (report_) report_->Flush([this](int w) { return Counts(w); });
    MaybeFinishJob();
    return;
  }
  if (!is_worker_ || !actor_->finished() || evaluated_) return;
  evaluated_ = true;
  if (!o_.training.save_params.empty()) SaveParams();
  if (!test_) return;
  std::unique_ptr<Executor>& ex = streams_[static_cast<int>(core::Stream::kCompute)];
  if (!ex) ex = std::make_unique<Executor>();
  ex->Post([this] {
    double acc = NAN;
    std::string error;
    try {
      acc = kernels::TestAccuracy(*net_, *test_);
    } catch (const std::exception& e) {
      error = e.what();
    }
    asio::post(io_, [this, acc, error] {
      if (!error.empty()) return Fail(kExitCompute, "test accuracy: " + error);
      transport_->SendControl(0, kCtlAccuracy, EncodeF64(acc));
    });
  });
}

void NodeHost::OnLoss(int worker, int64_t clock, double loss) {
  report_->OnLoss(worker, clock, loss, [this](int w) { return Counts(w); });
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

void NodeHost::SaveParams() {
  std::string path = o_.training.save_params;
  const size_t at = path.find("{rank}");
  if (at != std::string::npos) path.replace(at, 6, std::to_string(o_.rank));
  std::ofstream f(path, std::ios::binary);
  // No layer computes any more (the worker finished), so no lock is needed.
  f.write(reinterpret_cast<const char*>(net_->params()),
          static_cast<std::streamsize>(net_->num_params() * sizeof(float)));
  if (!f) {
    Fail(kExitConfig, path + ": error: cannot write the parameters; check the folder");
    return;
  }
  spdlog::info("{}: final parameters written to {}", Who(o_.rank), path);
}

void NodeHost::WriteTrace() {
  if (o_.trace_file.empty()) return;
  std::string json;
  core::AppendChromeTrace(trace_, layout_, model_, &json);
  std::ofstream f(o_.trace_file, std::ios::binary);
  f << json;
  if (!f) spdlog::error("{}: cannot write the trace to {}", Who(o_.rank), o_.trace_file);
}

}  // namespace

void CheckLiveScenario(const config::ScenarioSpec& s) {
  // Every scheme runs live (ps, sfb, allreduce); what is left to check is that the model and the
  // protocol plan build, so that a bad scenario fails once here, not in every process.
  const core::Model model = config::BuildScenarioModel(s);
  (void)config::BuildProtocol(s, model, s.workers, s.servers, false);
}

int RunNode(const NodeOptions& options) {
  // Logs go to stderr (stdout carries the coordinator's progress), tagged with the rank.
  auto logger = spdlog::stderr_logger_mt(fmt::format("rank-{}", options.rank));
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  spdlog::set_default_logger(logger);
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
