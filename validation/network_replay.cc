#include "validation/network_replay.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "config/job_config.h"
#include "sim/simulation.h"

namespace poseidon::validation {

std::vector<LiveMessage> LiveMessagesFromTrace(const std::vector<TraceRecord>& events,
                                               const core::JobLayout& layout) {
  std::vector<LiveMessage> out;
  for (const TraceRecord& e : events) {
    if (e.kind != TraceRecordKind::kMessage || e.phase != 'X' || e.peer_index < 0) continue;
    const core::ActorId from = e.thread.actor;
    if (from >= layout.num_actors() || e.thread.device != 0) continue;
    const int index = e.peer_index;
    const core::ActorId to =
        e.peer_role == "coordinator" ? core::JobLayout::coordinator()
        : e.peer_role == "worker"    ? (index < layout.num_workers ? layout.worker(index) : -1)
                                     : (index < layout.num_servers ? layout.server(index) : -1);
    if (to < 0 || layout.SameMachine(from, to)) continue;
    LiveMessage m;
    m.sent.sent = e.ts;
    m.delivered = e.ts + e.dur;
    m.sent.from = from;
    m.sent.to = to;
    m.sent.payload_bytes = e.bytes;
    m.clock = e.clock;
    out.push_back(m);
  }
  std::stable_sort(out.begin(), out.end(), [](const LiveMessage& a, const LiveMessage& b) {
    return a.sent.sent != b.sent.sent ? a.sent.sent < b.sent.sent : a.delivered < b.delivered;
  });
  const core::TimeNs t0 = out.empty() ? 0 : out.front().sent.sent;
  for (LiveMessage& m : out) {
    m.sent.sent -= t0;
    m.delivered -= t0;
  }
  return out;
}

double NetworkReplayError(const config::ScenarioSpec& sim_scenario,
                          const std::vector<TraceRecord>& live_events, const std::string& dir) {
  const core::JobLayout layout = config::BuildLayout(sim_scenario);
  const std::vector<LiveMessage> live = LiveMessagesFromTrace(live_events, layout);
  std::vector<sim::SimJob::ReplayMessage> sent;
  for (const LiveMessage& m : live) sent.push_back(m.sent);
  const std::vector<core::TimeNs> model = sim::ReplayNetwork(sim_scenario, sent);
  std::string csv = "sent_us,from,to,bytes,clock,live_us,model_us\n";
  double live_sum = 0, model_sum = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    const LiveMessage& m = live[i];
    if (model[i] < 0) continue;  // not delivered (cannot happen without drop_message)
    const double l = static_cast<double>(m.delivered - m.sent.sent) / 1e3;
    const double p = static_cast<double>(model[i] - m.sent.sent) / 1e3;
    csv += fmt::format("{:.3f},{},{},{},{},{:.3f},{:.3f}\n", static_cast<double>(m.sent.sent) / 1e3,
                       layout.ActorName(m.sent.from), layout.ActorName(m.sent.to),
                       m.sent.payload_bytes, m.clock, l, p);
    if (m.clock >= sim_scenario.warmup_iterations) {
      live_sum += l;
      model_sum += p;
    }
  }
  std::ofstream(dir + "/net-replay.csv", std::ios::binary) << csv;
  return live_sum > 0 ? 100.0 * (model_sum - live_sum) / live_sum : NAN;
}

}  // namespace poseidon::validation
