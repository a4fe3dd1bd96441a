#include "sim/network/alpha_beta.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "sim/network/flow_network.h"  // RoundUpNs

namespace poseidon::sim {

AlphaBetaNetwork::AlphaBetaNetwork(Topology topology, const config::NetworkSpec& spec)
    : topo_(std::move(topology)),
      efficiency_(spec.efficiency),
      overhead_ns_(spec.per_message_overhead_ns) {
  CheckNetworkSpec(spec);
  const size_t n = static_cast<size_t>(topo_.num_links());
  link_bytes_.assign(n, 0.0);
  link_active_.assign(n, 0);
  link_busy_ns_.assign(n, 0);
  link_busy_since_.assign(n, 0);
}

void AlphaBetaNetwork::StartFlow(TimeNs now, int src, int dst, int64_t payload_bytes,
                                 uint64_t tag) {
  CheckStartFlow(now, now_, payload_bytes);
  const Route route = topo_.RouteBetween(src, dst);
  ProcessUntil(now, /*inclusive=*/false);
  now_ = now;
  Msg m;
  m.start = now;
  m.wire = static_cast<double>(payload_bytes) / efficiency_;
  m.finish = now + RoundUpNs(m.wire / topo_.RouteBottleneck(route) * 1e9);
  m.seq = next_seq_++;
  m.tag = tag;
  m.delivered = m.finish + topo_.RouteLatency(route) + overhead_ns_;
  m.route = payload_bytes > 0 ? route : Route{};
  for (int32_t l : m.route) {
    if (link_active_[static_cast<size_t>(l)]++ == 0) link_busy_since_[static_cast<size_t>(l)] = now;
  }
  heap_.push_back(m);
  std::push_heap(heap_.begin(), heap_.end(), Later());
}

TimeNs AlphaBetaNetwork::NextEventTime() const {
  // Retired by a later StartFlow but not reported yet: due now (they ended earlier).
  if (!done_.empty()) return std::max(done_.front().finish, now_);
  return heap_.empty() ? kNever : heap_.front().finish;
}

void AlphaBetaNetwork::ProcessUntil(TimeNs t, bool inclusive) {
  while (!heap_.empty()) {
    const TimeNs finish = heap_.front().finish;
    if (finish > t || (!inclusive && finish == t)) break;
    std::pop_heap(heap_.begin(), heap_.end(), Later());
    Msg m = heap_.back();
    heap_.pop_back();
    for (int32_t l : m.route) {
      const auto i = static_cast<size_t>(l);
      link_bytes_[i] += m.wire;
      if (--link_active_[i] == 0) link_busy_ns_[i] += finish - link_busy_since_[i];
    }
    done_.push_back(m);
  }
}

void AlphaBetaNetwork::AdvanceTo(TimeNs now, std::vector<FlowDone>* done) {
  CheckAdvanceTo(now, now_);
  ProcessUntil(now, /*inclusive=*/true);
  now_ = now;
  for (const Msg& m : done_) done->push_back(FlowDone{m.tag, m.delivered});
  done_.clear();
}

std::vector<LinkStats> AlphaBetaNetwork::Links(TimeNs now) const {
  std::vector<LinkStats> out(static_cast<size_t>(topo_.num_links()));
  std::vector<double> bytes = link_bytes_;
  for (const Msg& m : heap_) {
    if (m.finish <= m.start) continue;
    const double frac = std::clamp(
        static_cast<double>(now - m.start) / static_cast<double>(m.finish - m.start), 0.0, 1.0);
    for (int32_t l : m.route) bytes[static_cast<size_t>(l)] += m.wire * frac;
  }
  const double secs = static_cast<double>(now) * 1e-9;
  for (size_t l = 0; l < out.size(); ++l) {
    LinkStats& s = out[l];
    s.name = topo_.LinkName(static_cast<int>(l));
    s.capacity_Bps = topo_.link(static_cast<int>(l)).capacity_Bps;
    TimeNs busy = link_busy_ns_[l];
    if (link_active_[l] > 0) busy += std::max<TimeNs>(0, now - link_busy_since_[l]);
    s.bytes = bytes[l];
    s.busy_fraction = now > 0 ? static_cast<double>(busy) / static_cast<double>(now) : 0.0;
    s.utilisation = secs > 0 ? bytes[l] / (s.capacity_Bps * secs) : 0.0;
  }
  return out;
}

}  // namespace poseidon::sim
