#include "real_runtime/compute_streams.h"

#include "real_runtime/compute_threads.h"

#include <algorithm>
#include <chrono>

namespace poseidon::rt {

Executor::Executor() : thread_([this] { Loop(); }) {}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Executor::Post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void Executor::Loop() {
  ApplyComputeThreadsHere();  // this thread's OpenMP team, as the node chose (compute_threads.h)
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

ReplayedCompute::ReplayedCompute(sim::ComputeModel model, int64_t batch, int devices,
                                 std::optional<sim::IntraMachine> intra)
    : model_(std::move(model)),
      batch_(batch),
      intra_(std::move(intra)),
      stream_end_(static_cast<size_t>(core::StreamSlots(devices)), 0) {}

core::TimeNs ReplayedCompute::Run(const core::ComputeTask& task, core::TimeNs begin,
                                  const std::function<core::TimeNs()>& now) {
  int64_t ns = 0;
  switch (task.kind) {
    case core::TaskKind::kForward: ns = model_.fwd_ns(task.layer); break;
    case core::TaskKind::kBackward: ns = model_.bwd_ns(task.layer); break;
    case core::TaskKind::kCopyToHost:
    case core::TaskKind::kCopyToDevice: ns = model_.CopyNs(task.bytes); break;
    case core::TaskKind::kServerUpdate: ns = model_.UpdateNs(task.bytes); break;
    case core::TaskKind::kSfbRebuild: ns = model_.SfbRebuildNs(task.layer, batch_); break;
    case core::TaskKind::kLocalReduce:
    case core::TaskKind::kLocalBroadcast:
      ns = intra_ ? intra_->AloneNs(task.kind == core::TaskKind::kLocalReduce
                                        ? sim::IntraOp::kReduce
                                        : sim::IntraOp::kBroadcast,
                                    task.bytes)
                  : 0;
      break;
  }
  core::TimeNs& last_end = stream_end_.at(static_cast<size_t>(core::StreamSlot(task)));
  const core::TimeNs start = sim::ReplayedTaskStart(begin, last_end);
  last_end = start + ns;
  std::this_thread::sleep_for(std::chrono::nanoseconds(std::max<core::TimeNs>(0, last_end - now())));
  return start;
}

}  // namespace poseidon::rt
