#include "real_runtime/coordinator_role.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/job_config.h"
#include "config/worker_job.h"
#include "config/yaml_reader.h"
#include "real_runtime/control.h"

namespace poseidon::rt {

using config::ConfigError;

CoordinatorRole::CoordinatorRole(NodeProcess& process)
    : p_(process),
      layout_(process.layout()),
      fault_(config::BuildFault(process.options().scenario)),
      iterations_(process.options().scenario.iterations),
      losses_(process.options().compute != "replay" && !process.options().scenario.model_from_workers),
      coordinator_(layout_, &process, fault_) {
  const NodeOptions& o = p_.options();
  const config::ScenarioSpec& s = o.scenario;
  if (s.model_from_workers) {
    tables_.emplace(layout_.num_workers, [this](int rank) { return p_.Who(rank); });
  } else {
    model_ = config::BuildScenarioModel(s);
  }
  try {
    // A worker's images per iteration: its devices' (ProtocolConfig::batch).
    report_.emplace(layout_.num_workers, iterations_,
                    s.batch_per_worker * config::DevicesPerWorker(s), o.training.print_interval,
                    o.training.csv, p_.start());
    if (o.resume) report_->ResumeAtFirstLoss();
  } catch (const std::runtime_error& e) {
    throw ConfigError(e.what());
  }
  ProgressWatchdog::Callbacks w;
  w.ask = [this] {
    if (p_.failed() || p_.shutting_down() || coordinator_.finished()) return false;
    for (int r = 1; r < layout_.num_actors(); ++r) {
      if (p_.transport().is_up(r)) p_.transport().SendControl(r, kCtlStatusAsk, {});
    }
    return true;
  };
  w.stuck = [this](const std::map<int, std::string>& answers) { OnStuck(answers); };
  watchdog_ = std::make_unique<ProgressWatchdog>(p_.io(), o.progress_timeout,
                                                 layout_.num_actors() - 1, std::move(w));
}

void CoordinatorRole::OnProcessStart() {
  p_.StartActor();
  watchdog_->Progress();  // the watchdog starts with the job
  if (layout_.num_actors() == 1) MaybeFinishJob();
}

void CoordinatorRole::StartCompute(const core::ComputeTask& task) {
  POSEIDON_CHECK(false) << "the coordinator runs no compute task ("
                        << core::TaskKindName(task.kind) << ")";
}

void CoordinatorRole::OnPeerUp(int peer) {
  if (coordinator_.started() && fault_.enabled()) {
    spdlog::info("{}: {} connected in epoch {}", p_.Who(0), p_.Who(peer),
                 p_.transport().peer_epoch(peer));
  }
}

void CoordinatorRole::OnTaken(const core::Message& msg) {
  if (!tables_ || msg.type != core::MsgType::kDone || !layout_.IsWorker(msg.from)) return;
  ended_[msg.from] = msg.clock;
  CheckSameLength();
}

void CoordinatorRole::CheckSameLength() {
  for (const auto& [stopped, clocks] : ended_) {
    for (const auto& [rank, done] : progress_) {
      if (done <= clocks) continue;
      return Refuse(fmt::format(
          "{} ended the job after {} iterations, but {} has run {}: every worker's loop must run "
          "the same number of iterations (a DistributedSampler with drop_last=True, the same "
          "epochs and limits), or the workers that go on wait for the one that stopped",
          p_.Who(stopped), clocks, p_.Who(rank), done));
    }
  }
}

bool CoordinatorRole::Counts(int worker) const {
  return !fault_.evict_dead_workers || coordinator_.alive(worker);
}

bool CoordinatorRole::OnControl(int peer, uint8_t type, const std::vector<uint8_t>& body) {
  switch (type) {
    case kCtlLoss: {
      int64_t clock = 0;
      double loss = 0;
      if (!layout_.IsWorker(peer) || !DecodeLoss(body, &clock, &loss) || clock < 0 ||
          clock >= iterations_) {
        return false;
      }
      watchdog_->Progress();
      report_->OnLoss(peer, clock, loss, [this](int w) { return Counts(w); });
      MaybeFinishJob();
      return true;
    }
    case kCtlProgress: {
      int64_t clock = 0;
      if (!layout_.IsWorker(peer) || !DecodeI64(body, &clock) || clock < 0) return false;
      watchdog_->Progress();
      clocks_done_ = std::max(clocks_done_, clock + 1);
      progress_[peer] = std::max(progress_[peer], clock + 1);
      CheckSameLength();
      return true;
    }
    case kCtlStatus: {
      std::string text;
      if (!watchdog_->asking() || !DecodeStatus(body, &text)) return false;
      watchdog_->Answer(peer, std::move(text));
      return true;
    }
    case kCtlAccuracy: {
      double acc = 0;
      if (!DecodeF64(body, &acc)) return false;
      report_->SetAccuracy(acc);
      MaybeFinishJob();
      return true;
    }
    case kCtlModelTable:
      return OnModelTable(peer, body);
    case kCtlJobSpec:
      return OnJobSpec(peer, body);
    default:
      return false;
  }
}

bool CoordinatorRole::OnModelTable(int peer, const std::vector<uint8_t>& body) {
  std::string table;
  if (!tables_ || !layout_.IsWorker(peer) || !DecodeJobText(body, &table)) return false;
  const std::optional<std::string> verdict = tables_->Add(peer, table);
  if (!verdict) return true;
  if (!verdict->empty()) {
    Refuse(*verdict);
    return true;
  }
  spdlog::info("{}: every worker built the same model ({} workers)", p_.Who(0),
               layout_.num_workers);
  for (int w = 0; w < layout_.num_workers; ++w) {
    p_.transport().SendControl(layout_.worker(w), kCtlTableAgreed, {});
  }
  return true;
}

// Worker 1's job goes to every other process (shards and workers), which build their parts of it.
bool CoordinatorRole::OnJobSpec(int peer, const std::vector<uint8_t>& body) {
  std::string text;
  if (!tables_ || peer != layout_.worker(0) || job_relayed_ || !DecodeJobText(body, &text)) {
    return false;
  }
  job_relayed_ = true;
  try {
    (void)config::DecodeWorkerJob(text, p_.Who(peer));
  } catch (const ConfigError& e) {
    Refuse(e.what());
    return true;
  }
  for (int r = 2; r < layout_.num_actors(); ++r) {
    p_.transport().SendControl(r, kCtlJobSpec, body);
  }
  return true;
}

// Every process hears why (and exits with code 2), so that the user reads it from the worker
// whose model differs, not only from this log.
void CoordinatorRole::Refuse(const std::string& why) { p_.EndJob(kExitConfig, why); }

// The watchdog found no progress: end the job with what every process waits for.
void CoordinatorRole::OnStuck(const std::map<int, std::string>& answers) {
  std::string lines = "\n  " + coordinator_.WaitingFor();
  for (int r = 1; r < layout_.num_actors(); ++r) {
    auto it = answers.find(r);
    lines += "\n  " + (it != answers.end()
                           ? it->second
                           : fmt::format("{}: no answer ({})", p_.Who(r),
                                         p_.transport().is_up(r) ? "connected" : "not connected"));
  }
  p_.Fail(kExitNoProgress,
          fmt::format("no worker finished an iteration for {} s; the job is stuck. What each "
                      "process waits for:{}\n(--progress-timeout SECONDS changes the bound, 0 "
                      "turns it off)",
                      p_.options().progress_timeout.count(), lines));
}

void CoordinatorRole::AfterActorCall() {
  // The first progress window counts from the job's start, not the process's: start-up
  // (processes, data, rendezvous) is not training throughput.
  if (coordinator_.started()) report_->OnJobStarted();
  // An eviction may complete rows.
  report_->Flush([this](int w) { return Counts(w); });
  MaybeFinishJob();
}

void CoordinatorRole::MaybeFinishJob() {
  if (job_finished_ || !coordinator_.finished()) return;
  const bool all_losses = !losses_ || report_->all_losses();
  const bool want_accuracy = p_.options().training.test && losses_ &&
                             layout_.num_workers > 0 && Counts(layout_.worker(0));
  if (!all_losses || (want_accuracy && !report_->accuracy())) return;
  job_finished_ = true;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - p_.start()).count();
  if (tables_) {
    // The workers' loop decided how long it ran.
    fmt::print("job done: {} workers, {} shards, {} iterations in {:.2f} s\n",
               layout_.num_workers, layout_.num_servers, clocks_done_, seconds);
    std::fflush(stdout);
    p_.EndJob();
    return;
  }
  if (!report_->Finish(layout_.num_servers, seconds)) {
    p_.Fail(kExitConfig, p_.options().training.csv + ": error: writing the CSV failed");
    return;
  }
  p_.EndJob();
}

}  // namespace poseidon::rt
