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

Executor& Streams::Of(const core::ComputeTask& task) {
  std::unique_ptr<Executor>& ex = executors_[core::StreamSlot(task)];
  if (!ex) ex = std::make_unique<Executor>();
  return *ex;
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

ReplayedCompute::ReplayedCompute(cost::ComputeModel model, const core::Model& net, int64_t batch,
                                 int devices, std::optional<cost::IntraMachine> intra)
    : model_(std::move(model)),
      intra_(std::move(intra)),
      stream_end_(static_cast<size_t>(core::StreamSlots(devices)), 0) {
  for (const core::Layer& l : net.layers()) sfb_rows_.push_back(core::SfbFactorRows(l, batch));
}

int64_t ReplayedCompute::TaskNs(const core::ComputeTask& task) const {
  switch (task.kind) {
    case core::TaskKind::kForward: return model_.fwd_ns(task.layer);
    case core::TaskKind::kBackward: return model_.bwd_ns(task.layer);
    case core::TaskKind::kCopyToHost:
    case core::TaskKind::kCopyToDevice: return model_.CopyNs(task.bytes);
    case core::TaskKind::kServerUpdate: return model_.UpdateNs(task.bytes);
    case core::TaskKind::kSfbRebuild:
      return model_.SfbRebuildNs(task.layer, sfb_rows_.at(static_cast<size_t>(task.layer)));
    case core::TaskKind::kLocalReduce:
    case core::TaskKind::kLocalBroadcast:
      return intra_ ? intra_->AloneNs(task.kind == core::TaskKind::kLocalReduce
                                          ? cost::IntraOp::kReduce
                                          : cost::IntraOp::kBroadcast,
                                      task.bytes)
                    : 0;
  }
  return 0;
}

core::TimeNs ReplayedCompute::Run(const core::ComputeTask& task, core::TimeNs begin,
                                  const std::function<core::TimeNs()>& now) {
  int64_t ns = TaskNs(task);
  if (jitter_ && (task.kind == core::TaskKind::kForward || task.kind == core::TaskKind::kBackward ||
                  task.kind == core::TaskKind::kSfbRebuild)) {
    std::lock_guard<std::mutex> lock(jitter_->mu);
    ns = jitter_->draws.Apply(ns);
  }
  core::TimeNs& last_end = stream_end_.at(static_cast<size_t>(core::StreamSlot(task)));
  const core::TimeNs start = cost::ReplayedTaskStart(begin, last_end);
  last_end = start + ns;
  std::this_thread::sleep_for(std::chrono::nanoseconds(std::max<core::TimeNs>(0, last_end - now())));
  return start;
}

}  // namespace poseidon::rt
