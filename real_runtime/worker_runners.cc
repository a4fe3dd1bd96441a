#include "real_runtime/worker_runners.h"

#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "real_runtime/atomic_file.h"
#include "real_runtime/control.h"

namespace poseidon::rt {

using config::ConfigError;

KernelRunner::KernelRunner(WorkerRole& role) : role_(role), p_(role.process()) {
  const NodeOptions& o = p_.options();
  const config::ScenarioSpec& s = o.scenario;
  const core::JobLayout& layout = p_.layout();
  const LiveJob& job = role.job();
  kernels::Backend backend;
  if (!kernels::BackendFromName(o.training.backend, &backend)) {
    throw ConfigError(
        fmt::format("error: --backend: unknown backend '{}'; known: reference, cpu, cuda",
                    o.training.backend));
  }
  WorkerComputeOptions w;
  w.data_dir = o.training.data_dir;
  w.backend = backend;
  w.sgd = job.sgd;
  w.batch = s.batch_per_worker;
  w.workers = layout.num_workers;
  w.worker_index = layout.WorkerIndex(o.rank);
  w.devices = job.protocol.devices_per_machine;
  for (size_t l = 0; l < job.model.layers().size(); ++l) {
    w.sfb_layers.push_back(job.protocol.SchemeOf(static_cast<int>(l)) == core::Scheme::kSfb);
  }
  // client: device puts D one-device workers on a machine: worker i uses GPU i mod D.
  w.first_gpu = s.client_per_device ? w.worker_index % s.devices_per_machine : 0;
  if (backend == kernels::Backend::kCuda && (w.devices > 1 || w.first_gpu > 0)) {
    std::string why;
    const int visible = kernels::VisibleGpus(&why);
    if (std::string e = GpuShortfall(w.devices, w.first_gpu, visible, why); !e.empty()) {
      throw ConfigError(e);
    }
  }
  w.seed = s.seed;
  w.test = o.training.test && w.worker_index == 0;
  w.checkpoint_file = fmt::format("{}/worker-{}.ckpt", o.checkpoint_dir, w.worker_index);
  w.checkpoint_every = job.protocol.fault.checkpoint_every;
  w.rejoin = o.rejoin || o.resume;
  w.who = p_.Who(o.rank);
  compute_ = std::make_unique<WorkerCompute>(job.model, *job.placement, o.rank, w);
  compute_->store()->SetGradientWire(job.protocol.gradient_wire);
}

void KernelRunner::Start(const core::ComputeTask& task, core::TimeNs begin) {
  streams_.Of(task).Post([this, task, begin] { Run(task, begin); });
}

// On a stream's thread.
void KernelRunner::Run(const core::ComputeTask& task, core::TimeNs begin) {
  if (failed_) return;
  // The last layer's forward pass sets it; it may be NaN (a diverged loss, which TaskEnded
  // reports), so NaN cannot also mean "no loss".
  std::optional<double> loss;
  try {
    loss = compute_->Run(task);
  } catch (const StorageError& e) {
    // The worker's checkpoint, written between two tasks: a disk error, not the kernel's.
    failed_ = true;
    const int code = e.permanent() ? kExitStorage : kExitCompute;
    const std::string why = e.what();
    asio::post(p_.io(), [this, code, why] { p_.Fail(code, why); });
    return;
  } catch (const std::exception& e) {
    failed_ = true;
    const std::string why =
        fmt::format("{} of layer {} at clock {} failed: {}", core::TaskKindName(task.kind),
                    task.layer, task.clock, e.what());
    asio::post(p_.io(), [this, why] { p_.Fail(kExitCompute, why); });
    return;
  }
  asio::post(p_.io(), [this, task, begin, loss] { role_.TaskEnded(task, begin, loss); });
}

// --save-params (raw float32) and --save (a checkpoint folder, kernels/checkpoint.h).
void KernelRunner::SaveParams() {
  const NodeOptions& o = p_.options();
  auto with_rank = [&](std::string path) {
    const size_t at = path.find("{rank}");
    if (at != std::string::npos) path.replace(at, 6, std::to_string(o.rank));
    return path;
  };
  const std::string& dir = o.training.save_dir;
  try {
    // No layer computes any more: the worker finished.
    if (!o.training.save_params.empty()) {
      const std::string path = with_rank(o.training.save_params);
      compute_->SaveParams(path);
      spdlog::info("{}: final parameters written to {}", p_.Who(o.rank), path);
    }
    // One folder for the whole job is worker 1's (the one whose test accuracy the job prints).
    if (!dir.empty() && (dir.find("{rank}") != std::string::npos || o.rank == 1)) {
      compute_->SaveCheckpoint(with_rank(dir));
      spdlog::info("{}: final parameters written as a checkpoint to {}", p_.Who(o.rank),
                   with_rank(dir));
    }
  } catch (const std::runtime_error& e) {
    p_.Fail(kExitConfig, e.what());
  }
}

// A finished worker saves its parameters and worker 1 measures test accuracy (on device 0's
// compute stream, after everything queued there).
void KernelRunner::Finished() {
  const NodeOptions& o = p_.options();
  if (!o.training.save_params.empty() || !o.training.save_dir.empty()) SaveParams();
  if (!compute_->tests()) return;
  streams_.Of(core::ComputeTask{}).Post([this] {  // device 0's compute stream
    double acc = NAN;
    std::string error;
    try {
      acc = compute_->TestAccuracy();
    } catch (const std::exception& e) {
      error = e.what();
    }
    asio::post(p_.io(), [this, acc, error] {
      if (!error.empty()) return p_.Fail(kExitCompute, "test accuracy: " + error);
      p_.transport().SendControl(0, kCtlAccuracy, EncodeF64(acc));
    });
  });
}

ReplayRunner::ReplayRunner(WorkerRole& role)
    : role_(role),
      replayed_(*role.job().replayed),
      store_(role.job().model, role.job().protocol.batch) {}

void ReplayRunner::Start(const core::ComputeTask& task, core::TimeNs begin) {
  streams_.Of(task).Post([this, task, begin] {
    NodeProcess& p = role_.process();
    const core::TimeNs start = replayed_.Run(task, begin, [&p] { return p.Now(); });
    asio::post(p.io(), [this, task, start] { role_.TaskEnded(task, start, std::nullopt); });
  });
}

}  // namespace poseidon::rt
