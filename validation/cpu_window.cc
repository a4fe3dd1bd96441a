#include "validation/cpu_window.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace poseidon::validation {
namespace {

using Counter = std::pair<core::TimeNs, int64_t>;  // (ts, CPU so far)

// `counters` sorted by time, not empty.
double CpuAt(const std::vector<Counter>& counters, core::TimeNs t) {
  if (t <= counters.front().first) return static_cast<double>(counters.front().second);
  if (t >= counters.back().first) return static_cast<double>(counters.back().second);
  const auto after = std::upper_bound(counters.begin(), counters.end(), t,
                                      [](core::TimeNs v, const Counter& c) { return v < c.first; });
  const Counter& a = *(after - 1);
  const Counter& b = *after;
  if (b.first == a.first) return static_cast<double>(b.second);
  const double f = static_cast<double>(t - a.first) / static_cast<double>(b.first - a.first);
  return static_cast<double>(a.second) + f * static_cast<double>(b.second - a.second);
}

}  // namespace

std::optional<WindowCpu> ProcessCpuOver(const std::vector<TraceRecord>& events, core::TimeNs begin,
                                        core::TimeNs end) {
  if (end < begin) return std::nullopt;
  std::map<core::ActorId, std::vector<Counter>> by_process;
  for (const TraceRecord& e : events) {
    if (e.kind == TraceRecordKind::kProcessCpu)
      by_process[e.thread.actor].emplace_back(e.ts, e.cpu_ns);
  }
  if (by_process.empty()) return std::nullopt;
  WindowCpu w;
  for (auto& [actor, counters] : by_process) {
    std::stable_sort(counters.begin(), counters.end(),
                     [](const Counter& a, const Counter& b) { return a.first < b.first; });
    w.ns += CpuAt(counters, end) - CpuAt(counters, begin);
    ++w.processes;
  }
  return w;
}

double CpuMsPerIteration(const std::vector<TraceRecord>& events, const Pace& pace,
                         int64_t measured_iterations) {
  if (!pace.ok || measured_iterations <= 0) return NAN;
  const std::optional<WindowCpu> w = ProcessCpuOver(events, pace.begin_ns, pace.end_ns);
  return w ? w->ns / 1e6 / static_cast<double>(measured_iterations) : NAN;
}

}  // namespace poseidon::validation
