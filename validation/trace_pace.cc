#include "validation/trace_pace.h"

#include <map>
#include <optional>

#include <fmt/format.h>

#include "core/pace.h"

namespace poseidon::validation {

Pace IterationPaceFromTraces(const std::vector<std::vector<TraceRecord>>& traces, int num_workers,
                             int64_t warmup, int64_t iterations, bool bsp) {
  Pace p;
  // begin[w]: worker w's first iteration begin; ended[w][c]: when it ended iteration c;
  // synced[w][layer][c]: when that layer of w first held clock c. Keyed by actor.
  std::map<core::ActorId, core::TimeNs> begin;
  std::map<core::ActorId, std::map<int64_t, core::TimeNs>> ended;
  std::map<core::ActorId, std::map<std::string, std::map<int64_t, core::TimeNs>>> synced;
  for (const std::vector<TraceRecord>& t : traces) {
    for (const TraceRecord& e : t) {
      if (e.category != "protocol" || e.phase == 'M') continue;
      const core::ActorId actor = e.thread.actor;
      switch (e.kind) {
        case TraceRecordKind::kIterationBegin:
          if (e.iteration == 0) begin.emplace(actor, e.ts);
          break;
        case TraceRecordKind::kIterationEnd: ended[actor].emplace(e.iteration, e.ts); break;
        case TraceRecordKind::kLayerSynced: synced[actor][e.name].emplace(e.clock, e.ts); break;
        default: break;
      }
    }
  }
  if (static_cast<int>(begin.size()) != num_workers) {
    p.why = fmt::format("traces hold the first iteration of {} of {} workers", begin.size(),
                        num_workers);
    return p;
  }
  std::vector<core::ActorId> actors;
  std::vector<std::vector<std::optional<core::TimeNs>>> reached;
  for (const auto& [w, b] : begin) {
    actors.push_back(w);
    std::vector<std::optional<core::TimeNs>>& t = reached.emplace_back();
    t.push_back(b);
    const bool own_pace = core::PacedByIterationEnds(bsp, !synced[w].empty());
    for (int64_t v = 1; v <= iterations; ++v) {
      std::optional<core::TimeNs> at;
      if (own_pace) {
        const auto it = ended[w].find(v - 1);
        if (it != ended[w].end()) at = it->second;
      } else {
        for (const auto& [layer, clocks] : synced[w]) {
          const auto it = clocks.lower_bound(v - 1);
          if (it == clocks.end()) {
            at.reset();
            break;
          }
          at = at ? std::max(*at, it->second) : it->second;
        }
      }
      t.push_back(at);
    }
  }
  const core::IterationPace pace = core::JobIterationPace(reached, warmup, iterations);
  if (!pace.ok) {
    p.why = fmt::format("worker actor {} has no {} of iteration {}",
                        actors[static_cast<size_t>(pace.missing_worker)], bsp ? "sync" : "end",
                        iterations - 1);
    return p;
  }
  p.mean_ms = pace.mean_ns / 1e6;
  p.std_ms = pace.std_ns / 1e6;
  p.begin_ns = pace.span_begin_ns;
  p.end_ns = pace.span_end_ns;
  p.ok = true;
  return p;
}

}  // namespace poseidon::validation
