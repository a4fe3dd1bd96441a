#include "real_runtime/worker_role.h"

#include <cmath>

#include <fmt/format.h>

#include "real_runtime/atomic_file.h"
#include "real_runtime/control.h"
#include "real_runtime/live_stores.h"

namespace poseidon::rt {

WorkerRole::WorkerRole(NodeProcess& process, LiveJob job, const RunnerFactory& make_runner)
    : p_(process), job_(std::move(job)) {
  runner_ = make_runner(*this);
  const NodeOptions& o = p_.options();
  worker_ = std::make_unique<core::Worker>(o.rank, job_.model, *job_.placement, p_.layout(),
                                           job_.protocol, &p_, runner_->store());
  if (o.rejoin || o.resume) worker_->Rejoin();
}

void WorkerRole::StartCompute(const core::ComputeTask& task) { runner_->Start(task, p_.Now()); }

void WorkerRole::TaskEnded(const core::ComputeTask& task, core::TimeNs start,
                           std::optional<double> loss) {
  if (p_.failed()) return;
  if (loss) {
    if (!std::isfinite(*loss)) {
      p_.Fail(kExitCompute, fmt::format("the loss diverged ({}) at iteration {}; lower --lr",
                                        *loss, task.clock + 1));
      return;
    }
    p_.transport().SendControl(0, kCtlLoss, EncodeLoss(task.clock, *loss));
  } else if (!runner_->reports_loss() && task.kind == core::TaskKind::kBackward &&
             task.layer == 0 && task.device == 0) {
    // An iteration's end, for the coordinator's progress watchdog.
    p_.transport().SendControl(0, kCtlProgress, EncodeI64(task.clock));
  }
  p_.TaskDone(task, start);
}

// A finished worker saves its parameters and worker 1 measures test accuracy (the runner's).
void WorkerRole::AfterActorCall() {
  runner_->AfterActorCall();
  if (finished_ || !worker_->finished()) return;
  finished_ = true;
  runner_->Finished();
}

}  // namespace poseidon::rt
