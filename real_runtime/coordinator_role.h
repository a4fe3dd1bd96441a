// real_runtime/coordinator_role.h: rank 0 of a live job (node_role.h): the core's Coordinator
// (registration, start, membership), the job's report (progress lines, the learning curve, the
// test accuracy: job_report.h), the progress watchdog (progress_watchdog.h), and the job's end:
// once every worker finished and reported, every process is told to exit.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/coordinator.h"
#include "core/model.h"
#include "real_runtime/job_report.h"
#include "real_runtime/node_process.h"
#include "real_runtime/node_role.h"
#include "real_runtime/progress_watchdog.h"
#include "real_runtime/table_agreement.h"

namespace poseidon::rt {

class CoordinatorRole final : public NodeRole {
 public:
  // Throws config::ConfigError when the learning-curve CSV cannot be created.
  explicit CoordinatorRole(NodeProcess& process);

  core::Actor& actor() override { return coordinator_; }
  const core::Model& model() const override { return model_; }
  void OnProcessStart() override;
  void StartCompute(const core::ComputeTask& task) override;
  bool OnControl(int peer, uint8_t type, const std::vector<uint8_t>& body) override;
  void AfterActorCall() override;
  void OnPeerUp(int peer) override;
  void OnTaken(const core::Message& msg) override;

 private:
  bool Counts(int worker) const;  // the worker still counts (not evicted)
  void OnStuck(const std::map<int, std::string>& answers);
  void MaybeFinishJob();
  // A job whose workers bring the model: a worker's layer table, worker 1's job.
  bool OnModelTable(int peer, const std::vector<uint8_t>& body);
  bool OnJobSpec(int peer, const std::vector<uint8_t>& body);
  void Refuse(const std::string& why);
  // A job whose workers' loops decide its length: one that stopped and one that went further can
  // never meet (the shards wait for the first's pushes): refuse the job, naming both.
  void CheckSameLength();

  NodeProcess& p_;
  const core::JobLayout& layout_;
  core::Model model_;  // the scenario's, for the trace's layer names
  const core::FaultConfig fault_;
  const int64_t iterations_;
  // Replayed compute, or a job whose workers bring the model (their own loop reports progress
  // only): no losses, no accuracy.
  const bool losses_;
  std::optional<TableAgreement> tables_;  // model_from_workers
  bool job_relayed_ = false;
  int64_t clocks_done_ = 0;  // the most iterations a worker reported (progress)
  std::map<int, int64_t> progress_;  // worker rank -> iterations it finished
  std::map<int, int64_t> ended_;     // worker rank -> iterations it ended the job after
  core::Coordinator coordinator_;
  std::optional<JobReport> report_;
  std::unique_ptr<ProgressWatchdog> watchdog_;
  bool job_finished_ = false;
};

}  // namespace poseidon::rt
