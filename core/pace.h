// core/pace.h: a job's iteration time, defined once. The simulator (sim/simulation.cc, from the
// moments its workers reached each clock) and `poseidon validate` (validation/, from the same
// moments read back from a simulated or a live trace) both measure a run with these functions.
//
//   // reached[w][v], v = 0..iterations: when worker w reached clock v (v = 0: the begin of its
//   // first iteration); std::nullopt where the run does not say.
//   core::IterationPace p = core::JobIterationPace(reached, warmup, iterations);
//   if (p.ok) use(p.mean_ns);
//
// The job's iteration time is the pace of its slowest member over the measured clocks:
//   mean = (max_w T(w, iterations) - max_w T(w, warmup)) / (iterations - warmup).
// Its spread (std, min, max) is over the per-worker samples T(w, c + 1) - T(w, c), c in
// [warmup, iterations) (a sample one of whose ends is unknown is left out). Which moment T(w, v)
// is depends on the consistency model (PacedByIterationEnds):
//   - BSP: when worker w first held every update of clocks 0..v-1 in every layer (its sync
//     point). With per-layer gating the next iteration starts before the sync ends, and counting
//     that head start would overstate the time per iteration;
//   - SSP and ASP, or a model without parameters: when w ended iteration v-1 (core/worker.cc: at
//     the first forward task of iteration v, or, for the last, once it holds every layer's final
//     values). Workers run at their own pace there, which is the job's throughput; the moment
//     every update of a clock is held is when the slowest push happens to land.
//
// Pure arithmetic on integer nanoseconds: no clock, no I/O; the result is the same bits for the
// same input, whichever host produced it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/types.h"

namespace poseidon::core {

// Whether T(w, v) is worker w's iteration end (true) or its sync point (false): `bsp` is the
// consistency model, `has_sync_points` whether the run records sync points (a model with
// parameters does; one without has nothing to sync).
inline bool PacedByIterationEnds(bool bsp, bool has_sync_points) { return !bsp || !has_sync_points; }

struct IterationPace {
  bool ok = false;
  // When !ok: the index (into `reached`) of a worker that lacks T(w, warmup) or
  // T(w, iterations); -1 when there is no worker at all.
  int missing_worker = -1;
  double mean_ns = 0;  // the job's iteration time
  double std_ns = 0, min_ns = 0, max_ns = 0;  // over the per-worker samples
  int64_t samples = 0;
  // The span mean_ns divides: max_w T(w, warmup) to max_w T(w, iterations).
  TimeNs span_begin_ns = 0, span_end_ns = 0;
};

// reached[w] holds T(w, 0..iterations) (a shorter vector: the rest unknown). Requires
// 0 <= warmup < iterations.
inline IterationPace JobIterationPace(const std::vector<std::vector<std::optional<TimeNs>>>& reached,
                                      int64_t warmup, int64_t iterations) {
  IterationPace p;
  auto at = [&](size_t w, int64_t v) -> std::optional<TimeNs> {
    const auto& t = reached[w];
    return v >= 0 && static_cast<size_t>(v) < t.size() ? t[static_cast<size_t>(v)] : std::nullopt;
  };
  std::vector<double> samples;
  std::optional<TimeNs> span_begin, span_end;
  for (size_t w = 0; w < reached.size(); ++w) {
    const std::optional<TimeNs> first = at(w, warmup), last = at(w, iterations);
    if (!first || !last) {
      p.missing_worker = static_cast<int>(w);
      return p;
    }
    for (int64_t c = warmup; c < iterations; ++c) {
      const std::optional<TimeNs> a = at(w, c), z = at(w, c + 1);
      if (a && z) samples.push_back(static_cast<double>(*z - *a));
    }
    span_begin = span_begin ? std::max(*span_begin, *first) : *first;
    span_end = span_end ? std::max(*span_end, *last) : *last;
  }
  if (!span_begin) return p;  // no worker
  const double n = static_cast<double>(samples.size());
  double sample_mean = 0;
  for (double v : samples) sample_mean += v;
  sample_mean /= n;
  double var = 0;
  for (double v : samples) var += (v - sample_mean) * (v - sample_mean);
  p.mean_ns = static_cast<double>(*span_end - *span_begin) / static_cast<double>(iterations - warmup);
  p.std_ns = std::sqrt(var / n);
  if (!samples.empty()) {
    p.min_ns = *std::min_element(samples.begin(), samples.end());
    p.max_ns = *std::max_element(samples.begin(), samples.end());
  }
  p.samples = static_cast<int64_t>(samples.size());
  p.span_begin_ns = *span_begin;
  p.span_end_ns = *span_end;
  p.ok = true;
  return p;
}

}  // namespace poseidon::core
