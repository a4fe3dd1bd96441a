#include "validation/predict.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "config/job_config.h"
#include "sim/simulation.h"
#include "validation/cpu_window.h"
#include "validation/summary.h"

namespace poseidon::validation {

std::string TaskKey(const TraceRecord& e) {
  return fmt::format("{}/{}/{}/{}", e.thread.actor, e.thread.device, e.clock, e.name);
}

size_t MedianIndex(const std::vector<double>& values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Ties keep seed order, so the same values always pick the same run.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a] < values[b]; });
  return order[(order.size() - 1) / 2];
}

Prediction Predict(const config::ScenarioSpec& sim, const config::ScenarioSpec& measured_as,
                   int seeds, const std::string& dir) {
  sim::SimOptions so;
  so.baseline = false;
  so.record_trace = true;
  so.record_windows = true;  // sim-windows.txt, beside analysis/tcp_trace.py's live windows
  so.record_host_cpu = true;  // the bookings a live run's own CPU is read against
  struct Run {
    Pace pace;
    std::string trace;
    std::string windows;
    std::vector<TraceRecord> events;
  };
  std::vector<Run> runs;
  Prediction out;
  try {
    for (int k = 0; k < seeds; ++k) {
      config::ScenarioSpec s = sim;
      s.seed = sim.seed + static_cast<uint64_t>(k);
      sim::ScenarioResult r = sim::SimulateScenario(s, so);
      Run run;
      run.events = ReadTrace(r.chrome_trace, dir + "/sim.json");
      run.pace =
          IterationPaceFromTraces({run.events}, measured_as.workers, measured_as.warmup_iterations,
                                  measured_as.iterations, measured_as.consistency == "bsp");
      run.trace = std::move(r.chrome_trace);
      run.windows = std::move(r.windows);
      if (!run.pace.ok) {
        out.pace = run.pace;
        return out;
      }
      out.seed_means_ms.push_back(run.pace.mean_ms);
      runs.push_back(std::move(run));
    }
  } catch (const config::ConfigError& e) {
    out.pace = Pace{false, e.what()};
    return out;
  }
  const size_t taken = MedianIndex(out.seed_means_ms);
  out.seed = sim.seed + static_cast<uint64_t>(taken);
  out.pace = runs[taken].pace;
  for (const TraceRecord& e : runs[taken].events) {
    if (e.kind == TraceRecordKind::kTask) out.tasks.emplace(TaskKey(e), e.dur);
  }
  out.booked_cpu_ms = CpuMsPerIteration(runs[taken].events, out.pace,
                                        measured_as.iterations - measured_as.warmup_iterations);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream(dir + "/sim.json", std::ios::binary) << runs[taken].trace;
  std::ofstream(dir + "/sim-windows.txt", std::ios::binary) << runs[taken].windows;
  return out;
}

TaskLateness LiveTaskLateness(const TaskDurations& simulated, const std::vector<TraceRecord>& live,
                              const core::JobLayout& layout) {
  std::vector<double> all;
  std::map<core::ActorId, std::vector<double>> by_host;  // ordered: a tie names the first
  for (const TraceRecord& e : live) {
    if (e.kind != TraceRecordKind::kTask) continue;
    const auto it = simulated.find(TaskKey(e));
    if (it == simulated.end()) continue;
    const double late_us = static_cast<double>(e.dur - it->second) / 1e3;
    all.push_back(late_us);
    by_host[e.thread.actor].push_back(late_us);
  }
  TaskLateness out;
  out.median_us = Median(std::move(all));
  for (auto& [actor, us] : by_host) {
    const double m = Median(std::move(us));
    if (out.latest_host.empty() || m > out.latest_host_us) {
      out.latest_host_us = m;
      out.latest_host = layout.ActorName(actor);
    }
  }
  return out;
}

}  // namespace poseidon::validation
