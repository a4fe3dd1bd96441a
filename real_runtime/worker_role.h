// real_runtime/worker_role.h: a worker of a live job (node_role.h): the core's Worker, whose
// compute tasks run on a WorkerRunner, and what the worker reports to the coordinator (its loss of
// every iteration, or, when its runner has no loss to report, the end of every iteration for the
// progress watchdog).
//
// Runners (worker_runners.h):
//   KernelRunner   this process's kernels::Net on Fashion-MNIST (`--compute real`)
//   ReplayRunner   each task sleeps its modelled time, messages carry zeros (`--compute replay`)
// and, in a program that embeds a worker, the program's own compute (poseidon.torch: the tasks
// are the user's forward and backward passes under autograd).
#pragma once

#include <memory>
#include <optional>

#include "core/worker.h"
#include "real_runtime/live_job.h"
#include "real_runtime/node_process.h"
#include "real_runtime/node_role.h"

namespace poseidon::rt {

// Where a worker's compute tasks run. Start and Finished are called on the loop thread; a runner
// reports a task's end by calling WorkerRole::TaskEnded on the loop thread (asio::post to the
// process's io_context) and a failure by NodeProcess::Fail, also on the loop thread.
class WorkerRunner {
 public:
  virtual ~WorkerRunner() = default;
  // The store the core's Worker reads gradients from and writes values to.
  virtual core::WorkerStore* store() = 0;
  // Runs `task`, which the core started at `begin` (the job's time base).
  virtual void Start(const core::ComputeTask& task, core::TimeNs begin) = 0;
  // Whether tasks end with the worker's loss of an iteration (else the role reports each
  // iteration's end as progress).
  virtual bool reports_loss() const = 0;
  // Once, when the worker has finished its last iteration (save parameters, test accuracy).
  virtual void Finished() {}
  // After every call into the worker (its versions may have moved).
  virtual void AfterActorCall() {}
  // The loop ended: run what was posted and join the threads.
  virtual void Stop() {}
};

class WorkerRole final : public NodeRole {
 public:
  // `runner` is made once the role exists (it reports back to it).
  using RunnerFactory = std::function<std::unique_ptr<WorkerRunner>(WorkerRole& role)>;
  // Throws config::ConfigError for options the worker cannot run with.
  WorkerRole(NodeProcess& process, LiveJob job, const RunnerFactory& make_runner);

  core::Actor& actor() override { return *worker_; }
  const core::Model& model() const override { return job_.model; }
  void StartCompute(const core::ComputeTask& task) override;
  void AfterActorCall() override;
  void StopCompute() override { runner_->Stop(); }

  // Loop thread: `task` ran from `start` to now; `loss` is the worker's loss of an iteration (a
  // runner that reports_loss, at the task that completes it; NaN when it diverged).
  void TaskEnded(const core::ComputeTask& task, core::TimeNs start, std::optional<double> loss);

  LiveJob& job() { return job_; }
  NodeProcess& process() { return p_; }
  core::Worker& worker() { return *worker_; }

 private:
  NodeProcess& p_;
  LiveJob job_;
  std::unique_ptr<WorkerRunner> runner_;
  std::unique_ptr<core::Worker> worker_;
  bool finished_ = false;  // the runner heard the worker finished
};

}  // namespace poseidon::rt
