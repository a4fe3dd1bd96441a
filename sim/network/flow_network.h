// sim/network/flow_network.h: the flow-level network model (max-min fair sharing).
//
// Every message is a flow along its route in a Topology. At any instant the rates of the active
// flows are the max-min fair allocation over the links they cross (progressive filling without
// weights, as SimGrid's lmm solver); the allocation is re-solved whenever a flow starts or ends.
// A flow carries payload/efficiency wire bytes; it is delivered at the end of its transmission plus
// the route latency plus the per-message overhead. Times are int64 ns; a transmission end rounds UP
// to the next ns, so a lone transfer takes exactly L + ceil(S / B) (see network_model.h).
//
//   auto net = std::make_unique<FlowNetwork>(Topology::Star(4, 1e9, 1000), spec);
//   net->StartFlow(0, 0, 1, 1'000'000, /*tag=*/7);
//   std::vector<FlowDone> done;
//   net->AdvanceTo(net->NextEventTime(), &done);   // done = {{7, 1'001'000}}
//
// Incremental solver. A start or an end only perturbs the links of that flow. Rather than re-solving
// the whole connected component, each solve grows a region R of links from those seeds:
//   - a flow is FREE if its recorded bottleneck link lies in R (or it is new), otherwise FIXED at its
//     current rate (its capacity use is subtracted from the R-links it crosses);
//   - progressive filling runs over R's free flows only (links outside R do not constrain them);
//   - R grows and the round repeats when (a) a free flow's rate changed and it crosses a link outside
//     R (that link's load changed), or (b) a fixed flow's rate exceeds the new level of an R-link it
//     crosses (it would now be bottlenecked there: its old bottleneck joins R).
// When neither happens, every flow has a saturated link on which its rate is the largest, i.e. the
// allocation is the max-min fair one for the whole network, yet only the links and flows whose
// rates actually moved were visited. Rates within a relative 1e-12 of the old one count as
// unchanged and are left alone (no heap update). Starts at the same instant and ends at the same
// instant are batched into one solve.
//
// Memory: flows live in a slot vector with a free list, links in flat arrays; the per-solve scratch
// vectors are reused, so the hot path allocates nothing once warm. Completion order is an indexed
// binary heap keyed by (finish ns, start sequence): a rate change moves the flow's entry in place
// (no stale entries to skip or compact).
//
// Thread-safety: none; one simulation drives one model. NextEventTime() and Links() may run a
// pending solve (logically const).
#pragma once

#include <cstdint>
#include <vector>

#include "config/specs.h"
#include "sim/network/network_model.h"
#include "sim/network/topology.h"

namespace poseidon::sim {

// Rounds a duration in (fractional) ns up to whole ns, forgiving the last few ulps of rounding
// noise (so 1e6 bytes at 1.25e9 B/s is 800000 ns, not 800001). Exposed for the alpha-beta model.
TimeNs RoundUpNs(double ns);

class FlowNetwork final : public NetworkModel {
 public:
  // Uses spec.efficiency and spec.per_message_overhead_ns; the topology describes everything else.
  // Throws std::invalid_argument for efficiency outside (0, 1] or a negative overhead.
  FlowNetwork(Topology topology, const config::NetworkSpec& spec);

  int num_hosts() const override { return topo_.num_hosts(); }
  void StartFlow(TimeNs now, int src, int dst, int64_t payload_bytes, uint64_t tag) override;
  TimeNs NextEventTime() const override;
  void AdvanceTo(TimeNs now, std::vector<FlowDone>* done) override;
  int active_flows() const override { return active_count_; }
  std::vector<LinkStats> Links(TimeNs now) const override;

  const Topology& topology() const { return topo_; }

  // Introspection for tests and tools: the active flows in start order with their current rate.
  struct FlowInfo {
    uint64_t tag = 0;
    int src = 0;
    int dst = 0;
    Route route;
    double rate_Bps = 0;
    double remaining_bytes = 0;  // wire bytes left at the last rate change
    TimeNs finish = 0;           // transmission end at the current rates
  };
  std::vector<FlowInfo> ActiveFlows() const;

  // Work counters of the solver (for benchmarks and for tests that the solver stays local).
  struct SolverStats {
    uint64_t solves = 0;        // batched re-solves
    uint64_t rounds = 0;        // region growth rounds over all solves
    uint64_t link_visits = 0;   // region links scanned, summed over rounds
    uint64_t flow_visits = 0;   // flow-on-link entries scanned, summed over rounds
    uint64_t rate_changes = 0;  // flows whose rate was updated
  };
  const SolverStats& solver_stats() const { return stats_; }

 private:
  struct Flow {
    // Transmission state.
    double remaining = 0;   // wire bytes left at last_t
    double rate = 0;        // bytes/s since last_t (0: not solved yet)
    double wire = 0;        // wire bytes in total
    TimeNs last_t = 0;
    TimeNs finish = 0;      // end of transmission (heap key with seq)
    TimeNs extra = 0;       // route latency + per-message overhead
    uint64_t seq = 0;       // start order
    uint64_t tag = 0;
    int32_t src = 0, dst = 0;
    int32_t bottleneck = -1;  // a saturated link where this flow's rate is the largest; -1: none yet
    int32_t heap_pos = -1;
    int32_t nlinks = 0;
    int32_t link[kMaxRouteLinks] = {};
    int32_t pos[kMaxRouteLinks] = {};  // index of this flow in link_flows_[link[i]]
    // Solver scratch, valid while round_stamp == the current round.
    uint32_t round_stamp = 0;
    bool is_free = false;
    bool frozen = false;
    bool live = false;
    double new_rate = 0;
    int32_t new_bottleneck = -1;
  };
  struct LinkScratch {
    uint32_t region_stamp = 0;  // == region_epoch_: link is in R
    int32_t cnt = 0;            // unfrozen free flows
    double rem = 0;             // capacity left for them
    double level = 0;           // water level at which the link saturated (inf: never)
    double max_fixed = 0;       // largest fixed-flow rate on the link
  };
  struct Done {
    TimeNs finish;
    uint64_t seq;
    uint64_t tag;
    TimeNs delivered;
  };

  void Flush() const;  // runs the pending solve, if any
  void Solve(TimeNs now);
  void AddToRegion(int32_t link);
  bool InRegion(int32_t link) const {
    return link_scratch_[static_cast<size_t>(link)].region_stamp == region_epoch_;
  }
  // Moves every flow whose transmission ends before `t` (or at `t` when inclusive) to done_.
  void ProcessUntil(TimeNs t, bool inclusive);
  void Complete(int32_t f, TimeNs t);
  int32_t AllocFlow();
  void AttachToLinks(int32_t f, TimeNs now);
  void DetachFromLinks(int32_t f, TimeNs now);
  // Indexed min-heap on (finish, seq).
  bool HeapLess(int32_t a, int32_t b) const;
  void HeapPush(int32_t f);
  void HeapFix(int32_t f);
  int32_t HeapPop();
  void SiftUp(size_t i);
  void SiftDown(size_t i);

  Topology topo_;
  double efficiency_ = 1;
  TimeNs overhead_ns_ = 0;
  TimeNs now_ = 0;
  uint64_t next_seq_ = 0;
  int active_count_ = 0;

  std::vector<Flow> flows_;
  std::vector<int32_t> free_slots_;
  std::vector<int32_t> heap_;

  // Per link.
  std::vector<double> capacity_;
  std::vector<std::vector<int32_t>> link_flows_;
  std::vector<double> link_bytes_;      // wire bytes of flows that finished
  std::vector<TimeNs> link_busy_ns_;    // closed busy periods
  std::vector<TimeNs> link_busy_since_;
  std::vector<LinkScratch> link_scratch_;

  // Pending perturbation: links touched by starts/ends not solved yet, all at pending_t_.
  std::vector<int32_t> seeds_;
  TimeNs pending_t_ = 0;

  // Solver scratch, reused.
  uint32_t region_epoch_ = 0;
  uint32_t round_epoch_ = 0;
  std::vector<int32_t> region_;
  std::vector<int32_t> free_flows_;
  std::vector<int32_t> grow_;
  std::vector<std::pair<double, int32_t>> fill_heap_;

  std::vector<Done> done_;  // finished, not yet reported by AdvanceTo
  SolverStats stats_;
};

}  // namespace poseidon::sim
