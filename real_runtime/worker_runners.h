// real_runtime/worker_runners.h: the runners a `poseidon node` worker runs its compute tasks on
// (worker_role.h), one thread per core stream (compute_streams.h).
//
//   KernelRunner  the worker's kernels::Net per device on its share of Fashion-MNIST
//                 (worker_compute.h): a task runs one layer's pass; the last layer's forward pass
//                 of an iteration yields the loss; at the end the worker saves its parameters
//                 (--save, --save-params) and worker 1 measures test accuracy.
//   ReplayRunner  every task sleeps the time the scenario's compute model gives it
//                 (ReplayedCompute) and messages carry zeros of the real sizes: a node
//                 emulating a device, with no data and no learning.
#pragma once

#include <atomic>
#include <memory>

#include "real_runtime/compute_streams.h"
#include "real_runtime/live_stores.h"
#include "real_runtime/worker_compute.h"
#include "real_runtime/worker_role.h"

namespace poseidon::rt {

class KernelRunner final : public WorkerRunner {
 public:
  // Loads the data and builds the nets (WorkerCompute); throws config::ConfigError.
  explicit KernelRunner(WorkerRole& role);

  core::WorkerStore* store() override { return compute_->store(); }
  void Start(const core::ComputeTask& task, core::TimeNs begin) override;
  bool reports_loss() const override { return true; }
  void Finished() override;
  void Stop() override { streams_.Stop(); }

 private:
  void Run(const core::ComputeTask& task, core::TimeNs begin);  // a stream's thread
  void SaveParams();

  WorkerRole& role_;
  NodeProcess& p_;
  std::unique_ptr<WorkerCompute> compute_;
  Streams streams_;
  std::atomic<bool> failed_{false};  // a task failed: later ones do not run
};

class ReplayRunner final : public WorkerRunner {
 public:
  explicit ReplayRunner(WorkerRole& role);

  core::WorkerStore* store() override { return &store_; }
  void Start(const core::ComputeTask& task, core::TimeNs begin) override;
  bool reports_loss() const override { return false; }
  void Stop() override { streams_.Stop(); }

 private:
  WorkerRole& role_;
  ReplayedCompute& replayed_;
  ReplayWorkerStore store_;
  Streams streams_;
};

}  // namespace poseidon::rt
