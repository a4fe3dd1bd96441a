// sim/simulation.h: run a scenario in the simulator and summarise it.
//
//   config::ScenarioSpec s = config::LoadScenarioFile("scenarios/demo.yaml");
//   sim::ScenarioResult r = sim::SimulateScenario(s, {});
//   std::cout << sim::FormatResult(r, sim::OutputFormat::kTable);
//
// Statistics skip the scenario's warm-up iterations. A worker is *synced to clock v* when every
// layer holds every update of clocks 0..v-1. The iteration time is the job's: from the moment the
// last worker is synced to the first measured clock until the last worker is synced past the last
// clock, over the measured clocks (under BSP with the all-layers gate, simply the mean iteration).
// Its spread (std, min, max) is over the per-worker samples (synced to c -> synced to c+1).
// Throughput and speedup follow the job's iteration time; every device of every machine runs a
// batch, and the speedup is over one device.
// The breakdown is per iteration, averaged over workers and measured clocks:
//   compute       time the worker's compute stream was busy (forward + backward);
//   communication time the worker machine's NIC was sending or receiving (may overlap compute);
//   wait          iteration time - compute: the compute stream idled, waiting for parameters.
// Speedup is throughput over one node of single-machine training: the sum of the layers'
// forward and backward times at the same batch, with no synchronisation (the papers' baseline).
// A straggler is not applied to the baseline.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/job_config.h"
#include "config/scenario.h"
#include "core/model.h"
#include "sim/cluster.h"

namespace poseidon::sim {

struct SimOptions {
  bool record_trace = false;
  bool record_decisions = false;  // ScenarioResult::decisions (core/decision_log.h)
  bool record_windows = false;    // ScenarioResult::windows (sim/window_report.h)
  // With record_trace: the CPU emulated hosts book per process, as counters in the trace
  // (SimJobConfig::record_host_cpu).
  bool record_host_cpu = false;
  bool baseline = true;  // also report the speedup over one node
  // Called now and then during the main run (see SimJobConfig::progress); never changes results.
  std::function<void(double fraction)> progress;
};

// Per-layer figures (layers with parameters), means over workers and measured clocks.
struct LayerResult {
  std::string name;
  std::string scheme;  // ps | sfb | allreduce
  double fwd_ms = 0, bwd_ms = 0;
  double sync_ms = 0;  // backward end -> parameters fresh for the next clock
};

struct ScenarioResult {
  std::string name;
  std::string model;
  int workers = 0;              // worker machines
  int devices_per_machine = 1;  // formats say it only when > 1 (old outputs stay as they were)
  bool client_per_device = false;
  int servers = 0;
  int64_t batch_per_worker = 0;
  int64_t measured_iterations = 0;
  double iteration_ms = 0;       // mean over workers and measured clocks
  double iteration_std_ms = 0;   // standard deviation of the same samples
  double iteration_min_ms = 0;
  double iteration_max_ms = 0;
  double throughput = 0;         // images/s of the whole job
  double single_node_iteration_ms = 0;
  double speedup = 0;
  double compute_ms = 0;
  double communication_ms = 0;
  double wait_ms = 0;
  uint64_t events = 0;
  uint64_t network_messages = 0;
  double network_gb_per_iteration = 0;  // payload bytes over the network per iteration, 1e9
  std::vector<LinkStats> links;
  std::vector<LayerResult> layers;
  std::string compute_source;
  std::vector<std::string> warnings;
  bool deadlocked = false;
  std::string deadlock_report;
  // Only with SimOptions::record_decisions: every actor's protocol decisions (DecisionLog::Text).
  std::string decisions;
  // Only with SimOptions::record_trace: Chrome-trace JSON of the run.
  std::string chrome_trace;
  // Only with SimOptions::record_windows: the network model's congestion windows over the run
  // (sim/window_report.h).
  std::string windows;
};

// The model, protocol and layout come from config/job_config.h (shared with the live runtime).
using config::BuildProtocol;
using config::BuildScenarioModel;

ScenarioResult SimulateScenario(const config::ScenarioSpec& s, const SimOptions& options);

// The scenario's network (its model, connections and sender queues, as SimulateScenario uses
// them) carrying recorded messages at their recorded send times (SimJob::ReplayMessages): when
// each would have been delivered. Actor ids are the scenario's (config::BuildLayout).
std::vector<TimeNs> ReplayNetwork(const config::ScenarioSpec& s,
                                  const std::vector<SimJob::ReplayMessage>& messages);

enum class OutputFormat { kTable, kCsv, kJson };
std::string FormatResult(const ScenarioResult& r, OutputFormat format);
// CSV columns shared by `simulate --format csv` and `sweep` (which prepends its axes).
std::string CsvHeader();
std::string CsvRow(const ScenarioResult& r);

}  // namespace poseidon::sim
