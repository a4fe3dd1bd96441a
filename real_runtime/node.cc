#include "real_runtime/node.h"

#include <unistd.h>

#include <asio.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <limits>
#include <thread>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "core/coordinator.h"
#include "core/decision_log.h"
#include "core/placement.h"
#include "core/server.h"
#include "core/trace.h"
#include "core/worker.h"
#include "kernels/data/idx.h"
#include "kernels/kernel.h"
#include "kernels/net.h"
#include "kernels/training.h"
#include "real_runtime/live_stores.h"
#include "sim/compute_model.h"

namespace poseidon::rt {
namespace {

using config::ConfigError;
using Clock = std::chrono::steady_clock;

// Runtime control frames (transport.h passes them through untouched).
enum Control : uint8_t {
  kCtlHello = 64,     // any -> coordinator: u16 port, host bytes (where I listen)
  kCtlPeers = 65,     // coordinator -> any: n x (u32 rank, u16 port, u8 len, host)
  kCtlLoss = 66,      // worker -> coordinator: i64 clock, f64 loss
  kCtlAccuracy = 67,  // worker -> coordinator: f64 test accuracy
  kCtlShutdown = 68,  // coordinator -> any: the job is over, exit
  kCtlClockPing = 69, // any -> coordinator: i64 local send time
  kCtlClockPong = 70, // coordinator -> any: i64 that time, i64 coordinator's job time
};

// Clock pings per process: the offset of the sample with the smallest round trip is kept.
constexpr int kClockPings = 8;

// Little-endian helpers for the control bodies.
void Put(std::vector<uint8_t>* b, const void* p, size_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  b->insert(b->end(), c, c + n);
}
template <typename T>
void PutValue(std::vector<uint8_t>* b, T v) {
  Put(b, &v, sizeof v);
}
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > b_.size()) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(size_t n, std::string* s) {
    if (pos_ + n > b_.size()) return false;
    s->assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

// One thread running posted jobs in order: a compute stream.
class Executor {
 public:
  Executor() : thread_([this] { Loop(); }) {}
  ~Executor() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stop_ and nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

struct PeerAddress {
  std::string host;
  uint16_t port = 0;
};

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
  void SendPeerTable();

  // Messages.
  void OnMessage(core::Message msg);
  std::string CheckIncoming(const core::Message& m) const;
  void TrySend(int peer);

  // Compute.
  void RunTask(const core::ComputeTask& task, core::TimeNs begin);
  void TaskDone(const core::ComputeTask& task, core::TimeNs begin, std::optional<double> loss);

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
  std::array<core::TimeNs, core::kNumStreams> replay_stream_end_{};  // per stream, compute threads
  std::optional<sim::ComputeModel> replay_model_;
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
  struct LossRow {
    double sum = 0;
    int count = 0;
  };
  std::map<int64_t, LossRow> losses_;
  int64_t next_row_ = 0;  // first clock not yet reported
  double window_loss_ = 0;
  int64_t window_n_ = 0;
  Clock::time_point window_start_ = Clock::now();
  std::optional<double> accuracy_;
  std::ofstream csv_;
  bool job_finished_ = false;
  int peers_down_after_shutdown_ = 0;
  std::unique_ptr<asio::steady_timer> shutdown_timer_;
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
    replay_model_.emplace(std::move(cm));
    o_.training.test = false;
  }
  protocol_ = config::BuildProtocol(s, model_, s.workers, s.servers, device_copies);
  placement_ = core::Placement::Build(model_, s.servers, protocol_.chunk_bytes,
                                      protocol_.scheme_of_layer);
  is_worker_ = layout_.IsWorker(o_.rank);
  is_server_ = layout_.IsServer(o_.rank);

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
    actor_ = std::make_unique<core::ServerShard>(o_.rank, *placement_, layout_, protocol_, this,
                                                 shard_store_.get());
  } else {
    actor_ = std::make_unique<core::Coordinator>(layout_, this);
    if (!o_.training.csv.empty()) {
      csv_.open(o_.training.csv, std::ios::binary);
      if (!csv_) {
        throw ConfigError(fmt::format("{}: error: cannot write file; check the folder exists and "
                                      "is writable",
                                      o_.training.csv));
      }
      csv_ << "iteration,loss,test_accuracy,seconds\n";
    }
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
      ::close(o_.ready_fd);
      if (n != static_cast<ssize_t>(line.size())) {
        throw ConfigError("error: cannot report the coordinator's port to the launcher");
      }
    }
    actor_->OnStart(Now());
    actor_started_ = true;
    if (layout_.num_actors() == 1) MaybeFinishJob();
  } else {
    const uint16_t port = transport_->Listen(o_.listen_host, 0);
    addresses_[o_.rank] = {o_.advertise_host.empty() ? o_.listen_host : o_.advertise_host, port};
    transport_->Connect(0, o_.coordinator_host, o_.coordinator_port);
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

void NodeHost::OnPeerUp(int peer) {
  if (o_.rank != 0 && peer == 0) {
    std::vector<uint8_t> b;
    PutValue<uint16_t>(&b, addresses_[o_.rank].port);
    Put(&b, addresses_[o_.rank].host.data(), addresses_[o_.rank].host.size());
    transport_->SendControl(0, kCtlHello, std::move(b));
    std::vector<uint8_t> ping;
    PutValue<int64_t>(&ping, Local());
    transport_->SendControl(0, kCtlClockPing, std::move(ping));
  }
  MaybeStartActor();
}

void NodeHost::OnPeerDown(int peer, const std::string& reason) {
  if (shutting_down_) {
    if (o_.rank == 0 && ++peers_down_after_shutdown_ == layout_.num_actors() - 1) {
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
  Fail(kExitPeerLost, fmt::format("lost {} before the job ended: {}", Who(peer), reason));
}

void NodeHost::OnControl(int peer, uint8_t type, std::vector<uint8_t> body) {
  Reader r(body);
  auto bad = [&](const char* what) {
    spdlog::warn("{}: dropped a malformed {} control frame from {} ({} bytes)", Who(o_.rank), what,
                 Who(peer), body.size());
  };
  switch (type) {
    case kCtlHello: {
      uint16_t port = 0;
      std::string host;
      if (o_.rank != 0 || !r.Get(&port) || !r.GetString(body.size() - 2, &host) || host.empty() ||
          host.size() > 255) {
        return bad("hello");
      }
      addresses_[peer] = {host, port};
      if (static_cast<int>(addresses_.size()) == layout_.num_actors() - 1) SendPeerTable();
      return;
    }
    case kCtlPeers: {
      if (peer != 0 || table_received_) return bad("peer table");
      uint32_t n = 0;
      if (!r.Get(&n) || n > static_cast<uint32_t>(layout_.num_actors())) return bad("peer table");
      std::map<int, PeerAddress> table;
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t rank = 0;
        uint16_t port = 0;
        uint8_t len = 0;
        std::string host;
        if (!r.Get(&rank) || !r.Get(&port) || !r.Get(&len) || !r.GetString(len, &host) ||
            rank == 0 || rank >= static_cast<uint32_t>(layout_.num_actors())) {
          return bad("peer table");
        }
        table[static_cast<int>(rank)] = {host, port};
      }
      table_received_ = true;
      for (const auto& [rank, addr] : table) {
        if (rank < o_.rank) transport_->Connect(rank, addr.host, addr.port);
      }
      MaybeStartActor();
      return;
    }
    case kCtlLoss: {
      int64_t clock = 0;
      double loss = 0;
      if (o_.rank != 0 || !layout_.IsWorker(peer) || !r.Get(&clock) || !r.Get(&loss) ||
          clock < 0 || clock >= protocol_.iterations) {
        return bad("loss");
      }
      OnLoss(peer, clock, loss);
      MaybeFinishJob();
      return;
    }
    case kCtlAccuracy: {
      double acc = 0;
      if (o_.rank != 0 || !r.Get(&acc)) return bad("accuracy");
      accuracy_ = acc;
      MaybeFinishJob();
      return;
    }
    case kCtlClockPing: {
      int64_t t1 = 0;
      if (o_.rank != 0 || !r.Get(&t1)) return bad("clock ping");
      std::vector<uint8_t> b;
      PutValue<int64_t>(&b, t1);
      PutValue<int64_t>(&b, Now());
      transport_->SendControl(peer, kCtlClockPong, std::move(b));
      return;
    }
    case kCtlClockPong: {
      int64_t t1 = 0, coord = 0;
      if (peer != 0 || !r.Get(&t1) || !r.Get(&coord) || pongs_ >= kClockPings) return bad("clock pong");
      const core::TimeNs t2 = Local();
      if (t2 - t1 < best_rtt_) {
        best_rtt_ = t2 - t1;
        clock_offset_ = coord + best_rtt_ / 2 - t2;
      }
      if (++pongs_ < kClockPings) {
        std::vector<uint8_t> ping;
        PutValue<int64_t>(&ping, Local());
        transport_->SendControl(0, kCtlClockPing, std::move(ping));
      } else {
        spdlog::info("{}: clock offset to the coordinator {} us (round trip {} us)", Who(o_.rank),
                     clock_offset_ / 1000, best_rtt_ / 1000);
      }
      MaybeStartActor();
      return;
    }
    case kCtlShutdown:
      if (peer != 0) return bad("shutdown");
      shutting_down_ = true;
      transport_->Close();
      io_.stop();
      return;
    default:
      return bad("unknown");
  }
}

void NodeHost::SendPeerTable() {
  std::vector<uint8_t> b;
  PutValue<uint32_t>(&b, static_cast<uint32_t>(addresses_.size()));
  for (const auto& [rank, addr] : addresses_) {
    PutValue<uint32_t>(&b, static_cast<uint32_t>(rank));
    PutValue<uint16_t>(&b, addr.port);
    PutValue<uint8_t>(&b, static_cast<uint8_t>(addr.host.size()));
    Put(&b, addr.host.data(), addr.host.size());
  }
  for (const auto& [rank, addr] : addresses_) transport_->SendControl(rank, kCtlPeers, b);
}

// A non-coordinator starts its actor once it is connected to every other process.
void NodeHost::MaybeStartActor() {
  if (o_.rank == 0 || actor_started_ || !table_received_ || pongs_ < kClockPings) return;
  for (int r = 0; r < layout_.num_actors(); ++r) {
    if (r != o_.rank && !transport_->is_up(r)) return;
  }
  spdlog::info("{}: connected to all {} peers", Who(o_.rank), layout_.num_actors() - 1);
  actor_started_ = true;
  actor_->OnStart(Now());
  AfterActorCall();
}

std::string NodeHost::CheckIncoming(const core::Message& m) const {
  using core::MsgType;
  const int chunks = static_cast<int>(placement_->chunks().size());
  const int layers = static_cast<int>(model_.layers().size());
  auto clock_ok = [&] { return m.clock >= 0 && m.clock <= protocol_.iterations; };
  switch (m.type) {
    case MsgType::kRegister:
    case MsgType::kDone:
      if (o_.rank != 0) return "only the coordinator takes register/done";
      return "";
    case MsgType::kStart:
      if (m.from != 0) return "start from a process that is not the coordinator";
      return "";
    case MsgType::kPushGrad: {
      if (!is_server_ || !layout_.IsWorker(m.from)) return "a push not from a worker to a shard";
      if (m.chunk < 0 || m.chunk >= chunks) return fmt::format("unknown chunk {}", m.chunk);
      const core::Chunk& c = placement_->chunks()[static_cast<size_t>(m.chunk)];
      if (c.shard != layout_.ServerIndex(o_.rank)) return "a push for a chunk another shard owns";
      if (!clock_ok() || !m.data || static_cast<int64_t>(m.data->size()) != c.count) {
        return fmt::format("push for chunk {} clock {} with {} values (needs {})", m.chunk, m.clock,
                           m.data ? static_cast<int64_t>(m.data->size()) : 0, c.count);
      }
      return "";
    }
    case MsgType::kParams: {
      if (!is_worker_ || !layout_.IsServer(m.from)) return "parameters not from a shard";
      if (m.chunk < 0 || m.chunk >= chunks) return fmt::format("unknown chunk {}", m.chunk);
      const core::Chunk& c = placement_->chunks()[static_cast<size_t>(m.chunk)];
      if (layout_.server(c.shard) != m.from) return "parameters from a shard that does not own them";
      if (!clock_ok() || !m.data || static_cast<int64_t>(m.data->size()) != c.count) {
        return fmt::format("parameters of chunk {} clock {} with {} values (needs {})", m.chunk,
                           m.clock, m.data ? static_cast<int64_t>(m.data->size()) : 0, c.count);
      }
      return "";
    }
    case MsgType::kFactors: {
      if (!is_worker_ || !layout_.IsWorker(m.from) || m.from == o_.rank) {
        return "factors not from another worker";
      }
      if (m.layer < 0 || m.layer >= layers || protocol_.SchemeOf(m.layer) != core::Scheme::kSfb) {
        return fmt::format("factors for layer {}, which does not go by SFB", m.layer);
      }
      const core::Layer& L = model_.layers()[static_cast<size_t>(m.layer)];
      const int64_t want = o_.scenario.batch_per_worker * (L.fc_in + L.fc_out);
      if (!clock_ok() || !m.data || static_cast<int64_t>(m.data->size()) != want) {
        return fmt::format("factors of layer {} with {} values (needs {})", L.name,
                           m.data ? static_cast<int64_t>(m.data->size()) : 0, want);
      }
      return "";
    }
    default:
      return fmt::format("message type {} is not used by live runs", core::MsgTypeName(m.type));
  }
}

void NodeHost::OnMessage(core::Message msg) {
  if (failed_ || shutting_down_) return;
  const std::string problem = CheckIncoming(msg);
  if (!problem.empty()) {
    spdlog::warn("{}: dropped a message from {}: {} ({})", Who(o_.rank), Who(msg.from), problem,
                 core::Describe(msg));
    return;
  }
  if (!o_.trace_file.empty() && msg.sent_at > 0) {
    // The same event the simulator records: a message in flight from its send to its delivery
    // (both ends share the job's time base; the receiver is the one that knows the end).
    trace_.push_back(core::MessageEvent(msg, msg.sent_at, Now()));
  }
  if (!actor_started_) {
    // Peers start once connected to everyone; a message can beat our own last connection.
    Fail(kExitPeerLost, "a core message arrived before this process was connected to all peers");
    return;
  }
  try {
    actor_->OnMessage(Now(), msg);
  } catch (const PayloadError& e) {
    spdlog::warn("{}: dropped a message from {}: {}", Who(o_.rank), Who(msg.from), e.what());
    return;
  }
  AfterActorCall();
}

void NodeHost::Send(core::Message msg) {
  if (!o_.decisions_file.empty()) decisions_.Send(o_.rank, msg);
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
    // Sleep the task's modelled time from when its stream starts it (tasks on one stream queue).
    const sim::ComputeModel& cm = *replay_model_;
    int64_t ns = 0;
    switch (task.kind) {
      case core::TaskKind::kForward: ns = cm.fwd_ns(task.layer); break;
      case core::TaskKind::kBackward: ns = cm.bwd_ns(task.layer); break;
      case core::TaskKind::kCopyToHost:
      case core::TaskKind::kCopyToDevice: ns = cm.CopyNs(task.bytes); break;
      case core::TaskKind::kServerUpdate: ns = cm.UpdateNs(task.bytes); break;
      case core::TaskKind::kSfbRebuild:
        ns = cm.SfbRebuildNs(task.layer, o_.scenario.batch_per_worker);
        break;
    }
    // Like a device queue: a task the core starts right after the previous one on this stream
    // ended (within kAbsorbNs of it: the loop's hand-off latency on a busy host) starts when
    // that one ended, as in the simulator where the next task starts at the same instant.
    // Sleeping until an absolute deadline also keeps sleep overshoot from accumulating.
    constexpr core::TimeNs kAbsorbNs = 1'000'000;
    const int stream = static_cast<int>(core::StreamOf(task.kind));
    core::TimeNs& last_end = replay_stream_end_[static_cast<size_t>(stream)];
    const core::TimeNs start = begin - last_end <= kAbsorbNs ? last_end : begin;
    last_end = start + ns;
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::max<core::TimeNs>(0, last_end - Now())));
    asio::post(io_, [this, task, start] { TaskDone(task, start, std::nullopt); });
    return;
  }
  try {
    switch (task.kind) {
      case core::TaskKind::kForward: {
        if (task.layer == 0) {
          batches_->Next(images_.data(), labels_.data());
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
  if (!o_.trace_file.empty()) {
    core::TraceEvent e;
    e.kind = core::TraceKind::kTask;
    e.ts = begin;
    e.dur = now - begin;
    e.actor = o_.rank;
    e.layer = task.layer;
    e.chunk = task.chunk;
    e.clock = task.clock;
    e.bytes = task.bytes;
    e.task = task.kind;
    trace_.push_back(e);
  }
  if (loss) {
    if (!std::isfinite(*loss)) {
      Fail(kExitCompute, fmt::format("the loss diverged ({}) at iteration {}; lower --lr", *loss,
                                     task.clock + 1));
      return;
    }
    std::vector<uint8_t> b;
    PutValue<int64_t>(&b, task.clock);
    PutValue<double>(&b, *loss);
    transport_->SendControl(0, kCtlLoss, std::move(b));
  }
  try {
    actor_->OnComputeDone(now, task);
  } catch (const PayloadError& e) {
    Fail(kExitCompute, e.what());
    return;
  }
  AfterActorCall();
}

void NodeHost::SetTimer(core::TimeNs at, uint64_t timer_id) {
  auto t = std::make_unique<asio::steady_timer>(io_);
  t->expires_at(start_ + std::chrono::nanoseconds(at));
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
      std::vector<uint8_t> b;
      PutValue<double>(&b, acc);
      transport_->SendControl(0, kCtlAccuracy, std::move(b));
    });
  });
}

void NodeHost::OnLoss(int worker, int64_t clock, double loss) {
  (void)worker;
  LossRow& row = losses_[clock];
  row.sum += loss;
  ++row.count;
  const int P = layout_.num_workers;
  const int64_t interval = std::max<int64_t>(1, o_.training.print_interval);
  while (!losses_.empty() && losses_.begin()->first == next_row_ &&
         losses_.begin()->second.count == P) {
    window_loss_ += losses_.begin()->second.sum / P;
    ++window_n_;
    losses_.erase(losses_.begin());
    const int64_t it = ++next_row_;
    if (it % interval != 0 && it != protocol_.iterations) continue;
    const Clock::time_point now = Clock::now();
    const double window_s = std::chrono::duration<double>(now - window_start_).count();
    const double images = static_cast<double>(window_n_ * P * o_.scenario.batch_per_worker);
    const double mean = window_loss_ / static_cast<double>(window_n_);
    fmt::print("iter {:>6}  loss {:.4f}  {:.0f} images/s ({} workers)\n", it, mean,
               window_s > 0 ? images / window_s : 0.0, P);
    std::fflush(stdout);
    if (csv_.is_open() && it != protocol_.iterations) {
      csv_ << fmt::format("{},{:.6f},,{:.3f}\n", it, mean,
                          std::chrono::duration<double>(now - start_).count());
    }
    if (it == protocol_.iterations) {
      // The last row waits for the test accuracy.
      window_loss_ = mean;
      window_n_ = 1;
      return;
    }
    window_loss_ = 0;
    window_n_ = 0;
    window_start_ = now;
  }
}

void NodeHost::MaybeFinishJob() {
  if (job_finished_ || !actor_->finished()) return;
  const bool all_losses = replay_ || next_row_ == protocol_.iterations;
  const bool want_accuracy = o_.training.test && layout_.num_workers > 0;
  if (!all_losses || (want_accuracy && !accuracy_)) return;
  job_finished_ = true;
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  if (accuracy_) {
    fmt::print("iter {:>6}  test accuracy {:.4f}\n", protocol_.iterations, *accuracy_);
  }
  if (csv_.is_open()) {
    csv_ << fmt::format("{},{:.6f},{},{:.3f}\n", protocol_.iterations, window_loss_,
                        accuracy_ ? fmt::format("{:.6f}", *accuracy_) : "", seconds);
    csv_.flush();
    if (!csv_) {
      Fail(kExitConfig, o_.training.csv + ": error: writing the CSV failed");
      return;
    }
    fmt::print("learning curve written to {}\n", o_.training.csv);
  }
  fmt::print("job done: {} workers, {} shards, {} iterations in {:.2f} s\n", layout_.num_workers,
             layout_.num_servers, protocol_.iterations, seconds);
  std::fflush(stdout);
  shutting_down_ = true;
  for (int r = 1; r < layout_.num_actors(); ++r) transport_->SendControl(r, kCtlShutdown, {});
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
  const core::Model model = config::BuildScenarioModel(s);
  const core::ProtocolConfig p = config::BuildProtocol(s, model, s.workers, s.servers, false);
  for (const core::Layer& l : model.layers()) {
    if (p.SchemeOf(l.id) == core::Scheme::kAllreduce) {
      config::FailAt(s.protocol_loc,
                     fmt::format("layer '{}' is planned for ring all-reduce, which live runs do "
                                 "not carry yet (the simulator does); set protocol.scheme to ps, "
                                 "sfb or auto, and no layer_schemes entry to allreduce",
                                 l.name));
    }
  }
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
