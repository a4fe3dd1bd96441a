// real_runtime/embedded_worker.h: a worker of a live job hosted inside another program, whose own
// code computes the passes (poseidon.torch: the user's PyTorch model under autograd).
//
// The process is a NodeProcess (node_process.h) with a WorkerRole, the same transport, handshake,
// rendezvous, control frames and watchdog as `poseidon node`; its loop runs on a thread of its own.
// The program drives it from its thread (every call below; none may be made from two threads at
// once) and the core decides everything, as for any worker:
//
//   EmbeddedWorker w(node_options);                 // the scenario says `model: torch`
//   w.AgreeTable(table_yaml, poll);                 // every worker built the same model, or throws
//   bytes = w.ShareValues(0, my_state, poll);       // worker 1's initial values, on every worker
//   for clock c:
//     w.BeginClock(c, poll);                        // the core's gate: parameters fresh enough
//     ... forward, reporting w.ForwardDone(module) ... backward, reporting w.LayerReady(...)
//     if (c == 0 && w.first()) w.StartJob(request, poll);   // worker 1 plans and starts the job
//     w.BackwardDone(c, poll);                      // the core has taken the clock's gradients
//     w.WaitComplete(c, poll); w.ReleaseMean(c);    // the workers' mean (BSP: in place)
//   w.Finish(clocks, poll);                         // the job ends after that many clocks
//
// Modules are named by their index in the layer table (the registration order the program agreed
// on); the core's layers are the job's order (the first forward pass of worker 1). Iteration 0
// runs before the job exists (the plan needs its measurements): what the program reports then is
// kept and given to the core once it asks. Every blocking call polls `poll` every 100 ms (a true
// answer throws Interrupted: the program's Ctrl-C) and throws JobFailed when the process has
// failed (a refused job names the module where the models differ; a lost peer; the watchdog).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "config/worker_job.h"
#include "real_runtime/node.h"

namespace poseidon::rt {

class NodeProcess;
class WorkerRole;
class ExternalWorkerStore;

// The job cannot go on: what(), and the process's exit code (NodeExit).
class JobFailed : public std::runtime_error {
 public:
  JobFailed(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};
// The program's poll asked to stop waiting.
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

// What worker 1 plans the job from (after its first backward pass).
struct JobRequest {
  std::string model_yaml;  // the layer table in the first forward pass's order, with rows
  std::string scheme = "auto";                       // ps | sfb | allreduce | auto | paper
  std::map<std::string, std::string> layer_schemes;  // module -> scheme (overrides)
  std::string consistency = "bsp";                   // bsp | ssp | asp
  int64_t staleness = 0;
  std::string gradient_wire = "fp32";                // fp32 | fp16 | bf16 (protocol.gradient_wire)
  int64_t batch = 1;                            // examples per worker per iteration
  std::vector<double> fwd_s, bwd_s;             // measured, per layer of model_yaml
};

class EmbeddedWorker {
 public:
  using Poll = std::function<bool()>;

  // Starts the loop thread: the rendezvous with every process of the job. Throws
  // config::ConfigError for options the job cannot run with (a rank that is no worker).
  explicit EmbeddedWorker(const NodeOptions& o);
  ~EmbeddedWorker();  // stops the loop if it still runs, and joins it
  EmbeddedWorker(const EmbeddedWorker&) = delete;
  EmbeddedWorker& operator=(const EmbeddedWorker&) = delete;

  int rank() const { return rank_; }
  int workers() const { return workers_; }
  int worker_index() const { return rank_ - 1; }
  bool first() const { return rank_ == 1; }
  // The job's scenario as this process loaded it (before the workers' model is applied).
  const config::ScenarioSpec& scenario() const;

  // Sends this worker's layer table (a model file's text in registration order: one `module`
  // layer per module with parameters) and waits until the coordinator has every worker's and
  // agreed. Throws JobFailed with the coordinator's refusal when they differ.
  void AgreeTable(const std::string& table_yaml, const Poll& poll);
  // Worker 1 sends `mine` to every other worker; the others return what worker 1 sent under
  // `tag` (0: the initial parameters and buffers; c + 1: the buffers before clock c's forward).
  std::vector<uint8_t> ShareValues(uint64_t tag, std::vector<uint8_t> mine, const Poll& poll);

  // Worker 1: plans the schemes from `request` (SACP's auto with its measured times) and starts
  // the job: every other process builds its part from it. Throws config::ConfigError for a
  // request the job cannot take (a scheme that does not fit a layer).
  void StartJob(const JobRequest& request, const Poll& poll);
  // The job as planned (worker 1's), once it is known; waits for it.
  config::WorkerJob Job(const Poll& poll);

  // Clock `clock` may begin: its parameters are fresh enough (BSP: every mean gradient of the
  // clocks before is in; SSP(s): those of clocks < clock - s). Clock 0 begins at once.
  void BeginClock(int64_t clock, const Poll& poll);
  // Module `index`'s forward pass of the current clock ran (the trace's forward tasks).
  void ForwardDone(int index);
  // The forward pass of the current clock ended (modules that did not run count as done).
  void ForwardEnded();
  // Module `index`'s gradients of `clock` are complete: one buffer of words per parameter (the
  // program keeps them valid until BackwardDone returns); for a module synced by sufficient
  // factors, its rows (rows x N output gradients, then rows x M inputs, in words).
  void LayerReady(int index, int64_t clock, std::vector<const float*> grads,
                  std::vector<float> factors, int64_t rows);
  // Every module's LayerReady of `clock` was called: waits until the core has taken them.
  void BackwardDone(int64_t clock, const Poll& poll);
  // Clocks whose mean gradient is complete (0..complete-1).
  int64_t complete() const;
  void WaitComplete(int64_t clock, const Poll& poll);
  // `clock`'s complete mean gradient (not in place: SSP, ASP), handed over without a copy: one
  // buffer, and where each parameter's words lie in it (table order, each module's parameters
  // together). The worker forgets it; the caller frees it.
  struct Mean {
    std::unique_ptr<float[]> words;
    std::vector<std::pair<size_t, size_t>> parts;  // (first word, words) per parameter
    int value_words = 1;                           // 2: float64 values
  };
  Mean ReleaseMean(int64_t clock);

  // The program's loop ended after `clocks` clocks: the worker finishes once every layer holds
  // them, the job ends, and the loop thread with it. Returns the process's exit code.
  int Finish(int64_t clocks, const Poll& poll);
  // Gives up (the program is failing): the loop ends with exit code `code`.
  void Abort(int code, const std::string& why);

 private:
  class Runner;
  struct LayerReport {
    int64_t clock = -1;
    std::vector<const float*> grads;
    std::vector<float> factors;
    int64_t rows = 0;
  };

  // Waits (mu_ held by `lock`) until `done()` or the process ended; polls `poll`.
  void Wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
            const Poll& poll);
  void ThrowIfEnded() const;  // mu_ held
  // Loop thread.
  bool OnControl(int peer, uint8_t type, const std::vector<uint8_t>& body);
  void BuildRole(const config::WorkerJob& job, const std::string& text);
  void SendValues(uint64_t tag, std::shared_ptr<std::vector<uint8_t>> bytes);

  int rank_ = 0, workers_ = 0;
  std::unique_ptr<NodeProcess> process_;
  std::thread loop_;
  WorkerRole* role_ = nullptr;          // loop thread, once built
  Runner* runner_ = nullptr;            // the role's
  ExternalWorkerStore* store_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool ended_ = false;
  int exit_code_ = 0;
  std::string failure_;
  bool table_agreed_ = false;
  std::vector<std::string> table_names_;  // module names by table index
  std::vector<int> table_of_layer_;       // the job's layer -> table index
  std::vector<int> layer_of_table_;       // table index -> the job's layer
  std::optional<config::WorkerJob> job_;
  std::map<uint64_t, std::vector<uint8_t>> values_;                         // complete, by tag
  std::map<uint64_t, std::map<uint32_t, std::vector<uint8_t>>> value_parts_;  // arriving
  // The program's progress (table indices) and the core's requests.
  int64_t gate_ = 0;           // the core asked for clock gate_'s first forward pass
  int64_t fwd_clock_ = 0;      // the clock the program's forward pass is in
  bool fwd_ended_ = false;
  std::vector<int64_t> fwd_done_;          // by table index: the clock its forward ran in
  std::vector<LayerReport> ready_;         // by table index
  int64_t consumed_ = 0;       // clocks whose gradients the core took
  int64_t complete_ = 0;       // clocks whose mean gradient is complete
};

}  // namespace poseidon::rt
