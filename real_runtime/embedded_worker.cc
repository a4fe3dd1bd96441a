#include "real_runtime/embedded_worker.h"

#include <algorithm>

#include <asio.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "config/job_config.h"
#include "config/model_loader.h"
#include "config/yaml_reader.h"
#include "core/sacp.h"
#include "real_runtime/compute_streams.h"
#include "real_runtime/control.h"
#include "real_runtime/gradient_stores.h"
#include "real_runtime/live_job.h"
#include "real_runtime/node_process.h"
#include "real_runtime/worker_role.h"
#include "cost/sacp_timing.h"

namespace poseidon::rt {

using config::ConfigError;

// The worker's compute is the program's: a forward or backward task ends when the program has
// reported that module's pass of that clock (maybe before the core asked: iteration 0 runs before
// the job exists); SFB rebuilds run here, on a stream of their own.
class EmbeddedWorker::Runner final : public WorkerRunner {
 public:
  Runner(EmbeddedWorker& w, WorkerRole& role)
      : w_(w),
        role_(role),
        // BSP: the next clock waits for the mean, which then overwrites the gradients in place.
        store_(role.job().model, *role.job().placement, role.process().rank(),
               role.process().layout().num_workers,
               role.job().protocol.consistency == core::Consistency::kBsp) {
    store_.SetGradientWire(role.job().protocol.gradient_wire);
  }

  core::WorkerStore* store() override { return &store_; }
  bool reports_loss() const override { return false; }
  void Stop() override { rebuild_.Stop(); }

  // Loop thread.
  void Start(const core::ComputeTask& t, core::TimeNs begin) override {
    if (t.kind == core::TaskKind::kSfbRebuild) {
      rebuild_.Of(t).Post([this, t, begin] {
        store_.SfbRebuild(t.layer, t.clock, static_cast<int>(t.peer));
        asio::post(role_.process().io(), [this, t, begin] { role_.TaskEnded(t, begin, std::nullopt); });
      });
      return;
    }
    POSEIDON_CHECK(t.kind == core::TaskKind::kForward || t.kind == core::TaskKind::kBackward)
        << "an embedded worker runs no " << core::TaskKindName(t.kind) << " task";
    std::lock_guard<std::mutex> lock(w_.mu_);
    if (t.kind == core::TaskKind::kForward && t.layer == 0 && t.clock > w_.gate_) {
      w_.gate_ = t.clock;
      w_.cv_.notify_all();
    }
    Pending& p = t.kind == core::TaskKind::kForward ? fwd_ : bwd_;
    p = {true, t, begin};
    MaybeEnd();
  }

  void AfterActorCall() override {
    int64_t v = core::ProtocolConfig::kUnbounded;
    for (int l : role_.job().model.param_layers()) v = std::min(v, role_.worker().version(l));
    std::lock_guard<std::mutex> lock(w_.mu_);
    if (v > w_.complete_) {
      w_.complete_ = v;
      w_.cv_.notify_all();
    }
  }

  // w_.mu_ held: ends the pending tasks the program's reports cover.
  void MaybeEnd() {
    if (fwd_.set) {
      const core::ComputeTask& t = fwd_.task;
      const int index = w_.table_of_layer_[static_cast<size_t>(t.layer)];
      if (w_.fwd_clock_ == t.clock &&
          (w_.fwd_ended_ || w_.fwd_done_[static_cast<size_t>(index)] == t.clock)) {
        End(fwd_);
      }
    }
    if (bwd_.set) {
      const core::ComputeTask& t = bwd_.task;
      LayerReport& r = w_.ready_[static_cast<size_t>(w_.table_of_layer_[static_cast<size_t>(t.layer)])];
      if (r.clock == t.clock) {
        // The store reads these when the core takes the task's end, on the loop thread.
        store_.SetGradients(t.layer, r.grads);
        if (role_.job().protocol.SchemeOf(t.layer) == core::Scheme::kSfb) {
          // No rows (the module's forward did not run): the gradient goes as it is, exactly.
          store_.SetFactors(t.layer, std::move(r.factors), r.rows);
        }
        End(bwd_);
      }
    }
  }

  ExternalWorkerStore& external_store() { return store_; }

 private:
  struct Pending {
    bool set = false;
    core::ComputeTask task;
    core::TimeNs begin = 0;
  };

  void End(Pending& p) {
    p.set = false;
    const core::ComputeTask t = p.task;
    const core::TimeNs begin = p.begin;
    asio::post(role_.process().io(), [this, t, begin] {
      role_.TaskEnded(t, begin, std::nullopt);
      if (t.kind == core::TaskKind::kBackward && t.layer == 0) {
        std::lock_guard<std::mutex> lock(w_.mu_);
        w_.consumed_ = std::max(w_.consumed_, t.clock + 1);
        w_.cv_.notify_all();
      }
    });
  }

  EmbeddedWorker& w_;
  WorkerRole& role_;
  ExternalWorkerStore store_;
  Streams rebuild_;
  Pending fwd_, bwd_;
};

namespace {

std::shared_ptr<spdlog::logger> WorkerLogger(int rank) {
  const std::string name = fmt::format("rank-{}", rank);
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = spdlog::stderr_logger_mt(name);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  return logger;
}

}  // namespace

EmbeddedWorker::EmbeddedWorker(const NodeOptions& o) : rank_(o.rank) {
  const core::JobLayout layout = config::BuildLayout(o.scenario);
  if (!o.scenario.model_from_workers) {
    throw ConfigError(fmt::format("error: {}: an embedded worker (poseidon.torch) needs a "
                                  "scenario whose workers bring the model ('model: torch')",
                                  o.scenario.file));
  }
  if (!layout.IsWorker(o.rank)) {
    throw ConfigError(fmt::format("error: rank {} of {} is not a worker (workers are ranks 1..{})",
                                  o.rank, o.scenario.file, layout.num_workers));
  }
  workers_ = layout.num_workers;
  spdlog::set_default_logger(WorkerLogger(o.rank));
  process_ = std::make_unique<NodeProcess>(o);
  process_->SetControlHandler([this](int peer, uint8_t type, const std::vector<uint8_t>& body) {
    return OnControl(peer, type, body);
  });
  loop_ = std::thread([this] {
    int code = kExitOk;
    std::string why;
    try {
      code = process_->Run();
      why = process_->failure();
    } catch (const std::exception& e) {
      code = kExitConfig;
      why = e.what();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    exit_code_ = code;
    failure_ = why;
    cv_.notify_all();
  });
}

EmbeddedWorker::~EmbeddedWorker() {
  bool running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running = !ended_;
  }
  if (running) process_->Stop(kExitPeerLost, "the program embedding this worker ended");
  if (loop_.joinable()) loop_.join();
}

const config::ScenarioSpec& EmbeddedWorker::scenario() const {
  return process_->options().scenario;
}

void EmbeddedWorker::ThrowIfEnded() const {
  if (!ended_) return;
  throw JobFailed(exit_code_ == kExitOk ? kExitPeerLost : exit_code_,
                  failure_.empty() ? "the job ended" : failure_);
}

void EmbeddedWorker::Wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                          const Poll& poll) {
  while (!done()) {
    ThrowIfEnded();
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (done()) return;
    if (poll) {
      // Without the lock: the program's poll may take its own (Python's GIL), which a thread
      // calling into this worker holds.
      lock.unlock();
      const bool stop = poll();
      lock.lock();
      if (stop) throw Interrupted();
    }
  }
}

// --- loop thread ---

bool EmbeddedWorker::OnControl(int peer, uint8_t type, const std::vector<uint8_t>& body) {
  switch (type) {
    case kCtlTableAgreed: {
      if (peer != 0 || !body.empty()) return false;
      std::lock_guard<std::mutex> lock(mu_);
      table_agreed_ = true;
      cv_.notify_all();
      return true;
    }
    case kCtlJobSpec: {
      std::string text;
      if (peer != 0 || role_ || !DecodeJobText(body, &text)) return false;
      try {
        BuildRole(config::DecodeWorkerJob(text, "worker 1"), text);
      } catch (const ConfigError& e) {
        process_->Fail(kExitConfig, e.what());
      }
      return true;
    }
    case kCtlValues: {
      ValuesPart part;
      if (peer != 1 || first() || !DecodeValuesPart(body, &part)) return false;
      std::lock_guard<std::mutex> lock(mu_);
      auto& parts = value_parts_[part.tag];
      parts[part.part] = std::move(part.bytes);
      if (parts.size() < part.parts) return true;
      std::vector<uint8_t>& all = values_[part.tag];
      for (auto& [i, bytes] : parts) all.insert(all.end(), bytes.begin(), bytes.end());
      value_parts_.erase(part.tag);
      cv_.notify_all();
      return true;
    }
    default:
      return false;
  }
}

void EmbeddedWorker::BuildRole(const config::WorkerJob& job, const std::string& text) {
  (void)text;
  NodeOptions o = process_->options();
  config::ApplyWorkerJob(job, "worker 1", &o.scenario);
  LiveJob live = BuildLiveJob(o);
  // The job's layers (worker 1's forward order) against this worker's table.
  std::vector<int> table_of_layer(live.model.layers().size(), -1);
  std::vector<int> layer_of_table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    layer_of_table.assign(table_names_.size(), -1);
    for (size_t t = 0; t < table_names_.size(); ++t) {
      const core::Layer* l = live.model.FindLayer(table_names_[t]);
      if (!l || l->blobs.empty()) {
        throw ConfigError(fmt::format("error: worker 1's job has no module '{}', which this "
                                      "worker's table has",
                                      table_names_[t]));
      }
      layer_of_table[t] = l->id;
      table_of_layer[static_cast<size_t>(l->id)] = static_cast<int>(t);
    }
  }
  for (const core::Layer& l : live.model.layers()) {
    if (table_of_layer[static_cast<size_t>(l.id)] < 0) {
      throw ConfigError(fmt::format("error: worker 1's job has module '{}', which this worker's "
                                    "table has not",
                                    l.name));
    }
  }
  Runner* runner = nullptr;
  auto role = std::make_unique<WorkerRole>(
      *process_, std::move(live), [&runner, this](WorkerRole& r) -> std::unique_ptr<WorkerRunner> {
        auto made = std::make_unique<Runner>(*this, r);
        runner = made.get();
        return made;
      });
  {
    std::lock_guard<std::mutex> lock(mu_);
    role_ = role.get();
    runner_ = runner;
    store_ = &runner->external_store();
    table_of_layer_ = std::move(table_of_layer);
    layer_of_table_ = std::move(layer_of_table);
    job_ = job;
    cv_.notify_all();
  }
  process_->SetRole(std::move(role));
}

void EmbeddedWorker::SendValues(uint64_t tag, std::shared_ptr<std::vector<uint8_t>> bytes) {
  const size_t n = bytes->size();
  const uint32_t parts = static_cast<uint32_t>(std::max<size_t>(1, (n + kMaxValuesPart - 1) / kMaxValuesPart));
  for (int w = 1; w < workers_; ++w) {
    for (uint32_t i = 0; i < parts; ++i) {
      ValuesPart p;
      p.tag = tag;
      p.part = i;
      p.parts = parts;
      const size_t from = static_cast<size_t>(i) * kMaxValuesPart;
      const size_t to = std::min(n, from + kMaxValuesPart);
      p.bytes.assign(bytes->begin() + static_cast<long>(from), bytes->begin() + static_cast<long>(to));
      auto frame = std::make_shared<std::vector<uint8_t>>(EncodeValuesPart(p));
      const int peer = 1 + w;
      // A full queue (backpressure) is retried until the frame goes.
      auto attempt = std::make_shared<std::function<void()>>();
      *attempt = [this, peer, frame, attempt] {
        if (process_->failed() || process_->shutting_down()) return;
        if (process_->transport().SendControl(peer, kCtlValues, *frame)) return;
        if (!process_->transport().is_up(peer)) {
          return process_->Fail(kExitPeerLost, fmt::format("cannot send values to {}: not "
                                                           "connected", process_->Who(peer)));
        }
        auto timer = std::make_shared<asio::steady_timer>(process_->io(),
                                                          std::chrono::milliseconds(2));
        timer->async_wait([attempt, timer](const std::error_code& ec) {
          if (!ec) (*attempt)();
        });
      };
      (*attempt)();
    }
  }
}

// --- the program's thread ---

void EmbeddedWorker::AgreeTable(const std::string& table_yaml, const Poll& poll) {
  const core::ModelSpec spec = config::LoadModelText(table_yaml, "this worker's layer table");
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_names_.clear();
    for (const core::LayerSpec& l : spec.layers) table_names_.push_back(l.name);
    fwd_done_.assign(table_names_.size(), -1);
    ready_.assign(table_names_.size(), {});
  }
  auto body = std::make_shared<std::vector<uint8_t>>(EncodeJobText(table_yaml));
  asio::post(process_->io(), [this, body] {
    process_->WhenConnected(
        [this, body] { process_->transport().SendControl(0, kCtlModelTable, *body); });
  });
  std::unique_lock<std::mutex> lock(mu_);
  Wait(lock, [this] { return table_agreed_; }, poll);
}

std::vector<uint8_t> EmbeddedWorker::ShareValues(uint64_t tag, std::vector<uint8_t> mine,
                                                 const Poll& poll) {
  if (first()) {
    auto bytes = std::make_shared<std::vector<uint8_t>>(mine);
    asio::post(process_->io(), [this, tag, bytes] {
      process_->WhenConnected([this, tag, bytes] { SendValues(tag, bytes); });
    });
    return mine;
  }
  std::unique_lock<std::mutex> lock(mu_);
  Wait(lock, [this, tag] { return values_.count(tag) > 0; }, poll);
  std::vector<uint8_t> got = std::move(values_[tag]);
  values_.erase(tag);
  if (got.size() != mine.size()) {
    throw JobFailed(kExitConfig,
                    fmt::format("worker 1 sent {} bytes of values, this worker holds {}: the "
                                "workers' models differ in their buffers or dtypes",
                                got.size(), mine.size()));
  }
  return got;
}

void EmbeddedWorker::StartJob(const JobRequest& request, const Poll& poll) {
  POSEIDON_CHECK(first()) << "only worker 1 plans the job";
  (void)poll;
  config::ScenarioSpec s = process_->options().scenario;
  config::WorkerJob job;
  job.model_yaml = request.model_yaml;
  job.consistency = request.consistency;
  job.staleness = request.staleness;
  job.batch = request.batch;
  job.gradient_wire = request.gradient_wire;
  config::ApplyWorkerJob(job, "this worker", &s);
  s.scheme = request.scheme;
  s.layer_schemes = request.layer_schemes;
  const core::Model model = config::BuildScenarioModel(s);
  const size_t n = model.layers().size();
  if (request.fwd_s.size() != n || request.bwd_s.size() != n) {
    throw ConfigError(fmt::format("error: {} forward and {} backward times for {} modules",
                                  request.fwd_s.size(), request.bwd_s.size(), n));
  }
  // An SFB rebuild is one GEMM of the forward pass's size (N x K by K x M against K x M by M x N).
  std::vector<double> rebuild(n, 0.0);
  for (const core::Layer& l : model.layers()) {
    if (core::HasSufficientFactors(l)) rebuild[static_cast<size_t>(l.id)] = request.fwd_s[static_cast<size_t>(l.id)];
  }
  const core::SacpTiming timing =
      cost::SacpTimingMeasured(s, model, request.fwd_s, request.bwd_s, rebuild);
  const core::ProtocolConfig plan = config::BuildProtocol(s, model, false, &timing);
  for (int l : model.param_layers()) {
    job.schemes[model.layers()[static_cast<size_t>(l)].name] = core::SchemeName(plan.SchemeOf(l));
  }
  std::string chosen;
  for (const auto& [layer, scheme] : job.schemes) chosen += fmt::format(" {}:{}", layer, scheme);
  spdlog::info("worker 0: the job's plan (scheme {}, {} modules):{}", request.scheme,
               job.schemes.size(), chosen);
  const std::string text = config::EncodeWorkerJob(job);
  auto body = std::make_shared<std::vector<uint8_t>>(EncodeJobText(text));
  asio::post(process_->io(), [this, job, text, body] {
    process_->WhenConnected([this, job, text, body] {
      process_->transport().SendControl(0, kCtlJobSpec, *body);
      try {
        BuildRole(job, text);
      } catch (const ConfigError& e) {
        process_->Fail(kExitConfig, e.what());
      }
    });
  });
}

config::WorkerJob EmbeddedWorker::Job(const Poll& poll) {
  std::unique_lock<std::mutex> lock(mu_);
  Wait(lock, [this] { return job_.has_value(); }, poll);
  return *job_;
}

void EmbeddedWorker::BeginClock(int64_t clock, const Poll& poll) {
  std::unique_lock<std::mutex> lock(mu_);
  if (clock > 0) Wait(lock, [this, clock] { return gate_ >= clock; }, poll);
  fwd_clock_ = clock;
  fwd_ended_ = false;
  if (runner_) runner_->MaybeEnd();
}

void EmbeddedWorker::ForwardDone(int index) {
  std::lock_guard<std::mutex> lock(mu_);
  POSEIDON_CHECK(index >= 0 && static_cast<size_t>(index) < fwd_done_.size()) << index;
  fwd_done_[static_cast<size_t>(index)] = fwd_clock_;
  if (runner_) runner_->MaybeEnd();
}

void EmbeddedWorker::ForwardEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  fwd_ended_ = true;
  if (runner_) runner_->MaybeEnd();
}

void EmbeddedWorker::LayerReady(int index, int64_t clock, std::vector<const float*> grads,
                                std::vector<float> factors, int64_t rows) {
  std::lock_guard<std::mutex> lock(mu_);
  POSEIDON_CHECK(index >= 0 && static_cast<size_t>(index) < ready_.size()) << index;
  ready_[static_cast<size_t>(index)] = {clock, std::move(grads), std::move(factors), rows};
  if (runner_) runner_->MaybeEnd();
}

void EmbeddedWorker::BackwardDone(int64_t clock, const Poll& poll) {
  std::unique_lock<std::mutex> lock(mu_);
  Wait(lock, [this, clock] { return consumed_ > clock; }, poll);
}

int64_t EmbeddedWorker::complete() const {
  std::lock_guard<std::mutex> lock(mu_);
  return complete_;
}

void EmbeddedWorker::WaitComplete(int64_t clock, const Poll& poll) {
  std::unique_lock<std::mutex> lock(mu_);
  Wait(lock, [this, clock] { return complete_ > clock; }, poll);
}

EmbeddedWorker::Mean EmbeddedWorker::ReleaseMean(int64_t clock) {
  Mean mean;
  {
    std::lock_guard<std::mutex> lock(mu_);
    POSEIDON_CHECK(role_) << "ReleaseMean before the job started";
    const core::Model& model = role_->job().model;
    if (!model.layers().empty()) mean.value_words = model.layers()[0].value_words;
    for (size_t t = 0; t < table_names_.size(); ++t) {
      const core::Layer& l = model.layers()[static_cast<size_t>(layer_of_table_[t])];
      for (size_t b = 0; b < l.blobs.size(); ++b) {
        mean.parts.emplace_back(store_->BlobOffset(l.id, static_cast<int>(b)),
                                static_cast<size_t>(l.blobs[b].count));
      }
    }
  }
  mean.words = store_->ReleaseMean(clock);
  return mean;
}

int EmbeddedWorker::Finish(int64_t clocks, const Poll& poll) {
  asio::post(process_->io(), [this, clocks] {
    if (!role_) {
      return process_->Fail(kExitPeerLost,
                            "the program ended before its first training iteration");
    }
    role_->worker().EndAt(process_->Now(), clocks);
    process_->AfterActorCall();
  });
  std::unique_lock<std::mutex> lock(mu_);
  while (!ended_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (ended_ || !poll) continue;
    lock.unlock();
    const bool stop = poll();
    lock.lock();
    if (stop) throw Interrupted();
  }
  lock.unlock();
  if (loop_.joinable()) loop_.join();
  return exit_code_;
}

void EmbeddedWorker::Abort(int code, const std::string& why) { process_->Stop(code, why); }

}  // namespace poseidon::rt
