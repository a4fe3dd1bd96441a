// real_runtime/node_compute.cc: where a live process runs the core's compute tasks (node_host.h):
// on one Executor per core stream (core::StreamSlot: a worker with several devices has a compute
// and a copy stream per device, and the machine's reduce and broadcast streams), with real
// kernels (WorkerCompute) or replayed times (ReplayedCompute); and what a finished worker does
// (saves its parameters, measures accuracy).
#include "real_runtime/node_host.h"

#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/trace.h"
#include "real_runtime/atomic_file.h"
#include "real_runtime/control.h"

namespace poseidon::rt {

void NodeHost::StartCompute(const core::ComputeTask& task) {
  if (!o_.decisions_file.empty()) decisions_.Compute(o_.rank, task);
  std::unique_ptr<Executor>& ex = streams_[core::StreamSlot(task)];
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
    if (worker_compute_) loss = worker_compute_->Run(task);
    // (A shard's update runs in its store's Apply, when the core takes the result.)
  } catch (const StorageError& e) {
    // The worker's checkpoint, written between two tasks: a disk error, not the kernel's.
    compute_failed_ = true;
    const int code = e.permanent() ? kExitStorage : kExitCompute;
    const std::string why = e.what();
    asio::post(io_, [this, code, why] { Fail(code, why); });
    return;
  } catch (const std::exception& e) {
    compute_failed_ = true;
    const std::string why =
        fmt::format("{} of layer {} at clock {} failed: {}", core::TaskKindName(task.kind),
                    task.layer, task.clock, e.what());
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
  } else if (replay_ && task.kind == core::TaskKind::kBackward && task.layer == 0 &&
             task.device == 0) {
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

// --save-params (raw float32) and --save (a checkpoint folder, kernels/checkpoint.h).
void NodeHost::SaveParams() {
  auto with_rank = [&](std::string path) {
    const size_t at = path.find("{rank}");
    if (at != std::string::npos) path.replace(at, 6, std::to_string(o_.rank));
    return path;
  };
  const std::string& dir = o_.training.save_dir;
  try {
    // No layer computes any more: the worker finished.
    if (!o_.training.save_params.empty()) {
      const std::string path = with_rank(o_.training.save_params);
      worker_compute_->SaveParams(path);
      spdlog::info("{}: final parameters written to {}", Who(o_.rank), path);
    }
    // One folder for the whole job is worker 1's (the one whose test accuracy the job prints).
    if (!dir.empty() && (dir.find("{rank}") != std::string::npos || o_.rank == 1)) {
      worker_compute_->SaveCheckpoint(with_rank(dir));
      spdlog::info("{}: final parameters written as a checkpoint to {}", Who(o_.rank),
                   with_rank(dir));
    }
  } catch (const std::runtime_error& e) {
    Fail(kExitConfig, e.what());
    return;
  }
}

// A finished worker saves its parameters and worker 1 measures test accuracy (on device 0's
// compute stream, after everything queued there).
void NodeHost::Evaluate() {
  evaluated_ = true;
  if ((!o_.training.save_params.empty() || !o_.training.save_dir.empty()) && worker_compute_) {
    SaveParams();
  }
  if (!worker_compute_ || !worker_compute_->tests()) return;
  core::ComputeTask device0;  // device 0's compute stream
  std::unique_ptr<Executor>& ex = streams_[core::StreamSlot(device0)];
  if (!ex) ex = std::make_unique<Executor>();
  ex->Post([this] {
    double acc = NAN;
    std::string error;
    try {
      acc = worker_compute_->TestAccuracy();
    } catch (const std::exception& e) {
      error = e.what();
    }
    asio::post(io_, [this, acc, error] {
      if (!error.empty()) return Fail(kExitCompute, "test accuracy: " + error);
      transport_->SendControl(0, kCtlAccuracy, EncodeF64(acc));
    });
  });
}

}  // namespace poseidon::rt
