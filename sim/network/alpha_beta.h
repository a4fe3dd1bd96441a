// sim/network/alpha_beta.h: the alpha-beta network model (latency + size / bandwidth, no sharing).
//
// Every message is delivered at start + L + overhead + ceil(S / efficiency / B) ns, where L is the
// route latency and B the smallest link capacity on the route (the host NIC rate on a star), as if
// it were alone on the network. It is the fast model for sweeps where contention does not matter
// and the reference the flow model must agree with when flows do not overlap.
//
//   AlphaBetaNetwork net(Topology::Star(4, 1e9, 1000), spec);
//   net.StartFlow(0, 0, 1, 1'000'000, /*tag=*/7);   // transmission ends at 1'000'000 ns
//   std::vector<FlowDone> done;
//   net.AdvanceTo(net.NextEventTime(), &done);       // {{7, 1'001'000}}
//
// Link statistics count each message's wire bytes on every link of its route, spread evenly over
// its transmission time. Thread-safety: none.
#pragma once

#include <cstdint>
#include <vector>

#include "config/specs.h"
#include "sim/network/network_model.h"
#include "sim/network/topology.h"

namespace poseidon::sim {

class AlphaBetaNetwork final : public NetworkModel {
 public:
  // Throws std::invalid_argument for efficiency outside (0, 1] or a negative overhead.
  AlphaBetaNetwork(Topology topology, const config::NetworkSpec& spec);

  int num_hosts() const override { return topo_.num_hosts(); }
  void StartFlow(TimeNs now, int src, int dst, int64_t payload_bytes, uint64_t tag) override;
  TimeNs NextEventTime() const override;
  void AdvanceTo(TimeNs now, std::vector<FlowDone>* done) override;
  int active_flows() const override { return static_cast<int>(heap_.size()); }
  std::vector<LinkStats> Links(TimeNs now) const override;

  const Topology& topology() const { return topo_; }

 private:
  struct Msg {
    TimeNs start;
    TimeNs finish;  // end of transmission
    uint64_t seq;
    uint64_t tag;
    TimeNs delivered;  // finish + latency + overhead
    double wire;
    Route route;
  };
  struct Later {  // min-heap on (finish, seq)
    bool operator()(const Msg& a, const Msg& b) const {
      return a.finish != b.finish ? a.finish > b.finish : a.seq > b.seq;
    }
  };
  // Retires every message whose transmission ends before `t` (or at `t` when inclusive).
  void ProcessUntil(TimeNs t, bool inclusive);

  Topology topo_;
  double efficiency_ = 1;
  TimeNs overhead_ns_ = 0;
  TimeNs now_ = 0;
  uint64_t next_seq_ = 0;
  std::vector<Msg> heap_;
  std::vector<Msg> done_;  // retired, not yet reported
  // Per link: bytes of retired messages, number in transmission, closed busy time, busy since.
  std::vector<double> link_bytes_;
  std::vector<int32_t> link_active_;
  std::vector<TimeNs> link_busy_ns_;
  std::vector<TimeNs> link_busy_since_;
};

}  // namespace poseidon::sim
