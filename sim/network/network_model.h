// sim/network/network_model.h: the simulator's view of the network.
//
// A NetworkModel moves messages ("flows") between hosts 0..num_hosts-1 in virtual time. It owns
// no clock and no event queue: the simulated cluster calls StartFlow when a message is sent, asks
// NextEventTime() for the earliest moment something finishes, and calls AdvanceTo(t) when the
// engine reaches t, which reports every flow whose last byte arrived by t.
//
// Timing contract (every model): a flow of S payload bytes on a route with latency L (the sum of
// the route's link latencies) and an uncontended bottleneck rate B (bytes/s of wire bytes) is
// delivered at start + L + overhead + ceil(S / efficiency / B in ns). Under contention the flow
// model shares each link max-min (or alpha-) fairly among the flows crossing it and re-solves the
// rates when a flow starts or ends; the queue model shares each sender's NIC and queues at each
// receiver's link (queue_network.h); the alpha-beta model ignores contention.
//
// Determinism: results depend only on the sequence of calls. Flows finishing at the same ns are
// reported in the order they were started.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "config/specs.h"

namespace poseidon::sim {

using TimeNs = int64_t;
inline constexpr TimeNs kNever = std::numeric_limits<TimeNs>::max();

struct FlowDone {
  uint64_t tag = 0;        // the caller's tag given to StartFlow
  TimeNs delivered_at = 0; // when the last byte reached the destination (>= the AdvanceTo time
                           // for latency > 0: delivery may lie in the future; schedule it)
};

// Utilisation of one directed link over [0, now].
struct LinkStats {
  std::string name;            // "h3->s0", "leaf1->spine0", ...
  double capacity_Bps = 0;
  double bytes = 0;            // wire bytes carried
  double busy_fraction = 0;    // time with at least one flow / now
  double utilisation = 0;      // bytes / (capacity * now)
};

// A connection's loss episode in a model with congestion windows (the queue model with
// segment_bytes): what a host's trace of TCP shows as a recovery (analysis/tcp_trace.py
// episodes), for comparing the model's windows with a live run's. Wire bytes.
struct WindowLoss {
  TimeNs at = 0;               // when the queue overflowed
  uint64_t connection = 0;     // the caller's key (StartConnectionFlow)
  int src = 0, dst = 0;        // hosts
  double window_bytes = 0;     // the window before
  double heard_bytes = 0;      // the window its sender has when it hears of the loss
  double threshold_bytes = 0;  // the slow-start threshold after
  double window_after_bytes = 0;
  double lost_bytes = 0;
};

// A connection's congestion window and slow-start threshold (infinite before its first loss),
// wire bytes, as the model holds them now.
struct ConnectionWindow {
  uint64_t connection = 0;
  double window_bytes = 0;
  double threshold_bytes = 0;
};

// The connection key of machine pair (src, dst) among `hosts` machines: what StartFlow uses, and
// what a caller passing its own keys uses for a connection per machine pair (SimJob), so that the
// two never name one pair twice or two pairs once. Dense: < hosts * hosts.
inline uint64_t MachinePairConnection(int src, int dst, int hosts) {
  return static_cast<uint64_t>(src) * static_cast<uint64_t>(hosts) + static_cast<uint64_t>(dst);
}

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  virtual int num_hosts() const = 0;
  // Starts sending `payload_bytes` (>= 0) from host `src` to host `dst` (src != dst) at `now`;
  // `now` never decreases between calls.
  virtual void StartFlow(TimeNs now, int src, int dst, int64_t payload_bytes, uint64_t tag) = 0;
  // StartFlow for a message of one connection, `connection` a key the caller keeps per
  // connection (network.connection_gbps caps each; the flow model prices it). StartFlow is a
  // flow of the connection of its machine pair (MachinePairConnection). The other models ignore
  // the key.
  virtual void StartConnectionFlow(TimeNs now, int src, int dst, int64_t payload_bytes,
                                   uint64_t tag, uint64_t /*connection*/) {
    StartFlow(now, src, dst, payload_bytes, tag);
  }
  // Earliest time at which AdvanceTo would report a flow, or kNever.
  virtual TimeNs NextEventTime() const = 0;
  // Advances the model to `now` (>= every earlier call) and appends the flows whose transmission
  // has finished by `now`, with their delivery time (finish + route latency + overhead).
  virtual void AdvanceTo(TimeNs now, std::vector<FlowDone>* done) = 0;
  virtual int active_flows() const = 0;
  virtual std::vector<LinkStats> Links(TimeNs now) const = 0;
  // Whether a receiving link's queue has reached its limit at some point so far (the queue
  // model with queue_limit_bytes; the others have no finite queues). `model: auto` asks it.
  virtual bool queue_overflowed() const { return false; }
  // Models with congestion windows append every loss episode to `log` from now on (nullptr:
  // stop). Only observes: results do not depend on it. The others record nothing.
  virtual void RecordWindowLosses(std::vector<WindowLoss>* /*log*/) {}
  // Every connection's window now, by key; empty for a model without windows.
  virtual std::vector<ConnectionWindow> Windows() const { return {}; }
};

// Throws std::invalid_argument (naming spec.loc) unless 0 < efficiency <= 1 and the
// per-message overhead is >= 0. Both network models call it.
void CheckNetworkSpec(const config::NetworkSpec& spec);

// The argument checks every model's StartFlow and AdvanceTo make against the model's current
// time: throw std::invalid_argument when time goes backwards or a size is negative.
void CheckStartFlow(TimeNs now, TimeNs model_now, int64_t payload_bytes);
void CheckAdvanceTo(TimeNs now, TimeNs model_now);

// Builds the model the spec asks for over `num_hosts` hosts; `seed` seeds what the model draws
// (the queue model's losses with loss_packet_bytes; nothing else draws). Throws
// std::invalid_argument for a spec that cannot be built (already validated by config/ for user
// files).
std::unique_ptr<NetworkModel> MakeNetworkModel(const config::NetworkSpec& spec, int num_hosts,
                                               uint64_t seed = 1);

}  // namespace poseidon::sim
