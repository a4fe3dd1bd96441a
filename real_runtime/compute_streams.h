// real_runtime/compute_streams.h: where a live process runs the core's compute tasks.
//
// Each of an actor's core streams is an Executor: one thread running posted jobs in order, as a
// CUDA stream runs kernels. A worker with several devices has a compute and a copy stream per
// device and the machine's reduce and broadcast streams (core::StreamSlot numbers them). With replayed compute (`--compute
// replay`, a node emulating a GPU) a task does not run kernels but takes the time the scenario's
// compute model gives it: ReplayedCompute sleeps until the task's modelled end.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/host.h"
#include "core/model.h"
#include "cost/compute_model.h"
#include "cost/intra_machine.h"
#include "cost/jitter.h"

namespace poseidon::rt {

class Executor {
 public:
  Executor();
  ~Executor();  // runs what was posted, then joins
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  void Post(std::function<void()> job);

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

// An actor's streams: one Executor per core::StreamSlot, made on first use. Loop thread.
class Streams {
 public:
  Executor& Of(const core::ComputeTask& task);
  // Runs what was posted and joins every stream's thread.
  void Stop() { executors_.clear(); }

 private:
  std::map<int, std::unique_ptr<Executor>> executors_;
};

class ReplayedCompute {
 public:
  // `batch`: a worker's sufficient-factor batch (ProtocolConfig::batch); an SFB rebuild of layer
  // l is priced for core::SfbFactorRows(l, batch) factor rows (tokens x batch for a
  // transformer's linear layer), as the simulator prices it. `devices`: the worker's devices;
  // with several, `intra` prices their local reductions and broadcasts as the simulator does on
  // an idle machine (cost/intra_machine.h).
  ReplayedCompute(cost::ComputeModel model, const core::Model& net, int64_t batch, int devices = 1,
                  std::optional<cost::IntraMachine> intra = std::nullopt);

  // On the task's stream thread: sleeps until the task's modelled end and returns when it
  // started. A task started within 1 ms of the previous one's end on its stream (the loop's
  // hand-off latency) starts when that one ended, as in the simulator, where the next task
  // starts at the same instant; sleeping to an absolute deadline keeps overshoot from adding up.
  // `begin` is when the core started it, `now` reads the job's clock.
  core::TimeNs Run(const core::ComputeTask& task, core::TimeNs begin,
                   const std::function<core::TimeNs()>& now);

  // The task's modelled duration (what Run sleeps, queueing aside, before any jitter).
  int64_t TaskNs(const core::ComputeTask& task) const;

  // A worker's per-task variability (the scenario's `jitter`): Run then sleeps each forward,
  // backward and SFB rebuild task its modelled time times this stream's next factor, as the
  // simulator charges them (cost/jitter.h). Set before the streams run.
  void set_jitter(cost::ComputeJitter jitter) { jitter_.reset(new Jitter{std::move(jitter), {}}); }
  bool jittered() const { return jitter_ != nullptr; }

  const cost::ComputeModel& model() const { return model_; }

 private:
  cost::ComputeModel model_;
  std::vector<int64_t> sfb_rows_;  // per layer: its factor rows at the worker's batch
  std::optional<cost::IntraMachine> intra_;
  std::vector<core::TimeNs> stream_end_;  // per core::StreamSlot, each touched by its stream only
  struct Jitter {
    cost::ComputeJitter draws;
    std::mutex mu;  // the streams of a worker's devices draw from one stream of factors
  };
  std::unique_ptr<Jitter> jitter_;
};

}  // namespace poseidon::rt
