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
// Incremental solver. A start or an end only perturbs the links of that flow. Rather than
// re-solving the whole connected component (in dense traffic, the whole network), each solve grows
// a region R of links from those seeds and water-fills only R:
//   - a flow is FREE if its recorded bottleneck link lies in R (or it is new), otherwise FIXED at
//     its current rate, which is subtracted from the capacity of the R-links it crosses;
//   - progressive filling runs over R's free flows (links outside R do not constrain them), and
//     while it runs R grows: (a) when a free flow freezes at a rate different from its old one, a
//     link it crosses outside R joins if it was saturated (it may be some flow's bottleneck, and
//     its load moved) or the round's moves bring it within kSaturatedTol of its capacity; a link
//     that stays below capacity constrains no one and is left out (each link keeps the sum of its
//     flows' rates: in an incast, the senders' uplinks, lightly loaded, are not visited); (b) when
//     a link saturates below the rate of a fixed flow crossing it, that flow's bottleneck joins
//     (the flow turns free). A joining link brings its flows: those bottlenecked there turn free,
//     the rest stay fixed;
//   - if a joining link (or a link whose fixed flow just turned free) would have saturated below
//     the current water level, or had already saturated, the filling starts over with the larger R
//     (rare: ~0.1-0.6 restarts per solve in the benchmarks).
// At the end every flow has a saturated link on which its rate is the largest, i.e. the result is
// the max-min fair allocation of the whole network, while only the flows and links near the ones
// whose rate actually moved were visited. A rate within a relative kRelTol (1e-12) of the old one
// counts as unchanged and is left alone (no new finish time). Starts at the same ns, and ends at
// the same ns, are batched into one solve.
//
// Memory: flows live in slot vectors with a free list (the solver's 56-byte working set apart from
// the rest), links in flat arrays; the per-solve scratch vectors are reused, so the hot path
// allocates nothing once warm (but a completion group that empties frees its heap).
//
// Completion order: every flow's finish ns is its own (computed from its own remaining bytes and
// rate, rounded up), and flows end in (finish ns, start sequence) order. The entries are kept in
// two levels of indexed binary min-heaps on that key: one heap per completion GROUP, the flows
// whose finish was last set while they were bottlenecked at one busy link (kMinGroupFlows flows
// or more on it), and group 0 for all the others (no bottleneck: zero-byte flows, alpha-fair
// rates; or a lightly shared one, where groups would mostly hold one flow each and only add a
// level); over them a heap of the non-empty groups keyed by their heads. Under max-min the flows
// of a bottleneck change rate together (an incast end moves all n), so a solve rewrites whole
// groups: a group where the solve froze many flows has its new keys set in place and is rebuilt
// bottom-up (O(size)), and the top heap is fixed once per group, instead of sifting n entries
// through one heap of all flows; the flows of one ns leave a group at once (O(size) when they
// are many). A flow whose bottleneck changes moves to the new link's group with its next finish
// time. The groups only partition the entries: the keys, hence the pops, are exactly those of
// one heap, and the ends of one ns are detached in start order as they were from one heap (sums
// over a link follow its list order).
//
// Three options of NetworkSpec change the sharing (all off by default, and the solver above is
// then all there is):
//   - fairness_alpha > 0: alpha-fair rates instead of max-min. Flow i gets (sum of its links'
//     prices)^(-1/alpha); the prices are found by coordinate descent on the dual (per link,
//     Newton on the monotone link equation), starting from the last solve's prices: every active
//     link is updated once, then again while a link it shares a flow with moves its price by
//     more than 1e-9 relative (solver_stats().link_visits counts the updates). Not incremental
//     like max-min, and slow where many flows share hubs (a 32-worker PS job: docs/performance.md):
//     meant for the emulated and small clusters that validation compares, not the scale runs;
//   - ack_path_weight k > 0 (alpha-fair only): a flow also pays k times the prices of the links
//     its acknowledgements cross (its reverse route), at most k times its forward price
//     (FlowPrice): a full queue there lengthens its round trip, which costs a window-limited TCP
//     flow its share, while a flow alone on its forward links still fills them;
//   - burst_bytes > 0: every link has a token bucket of that size, refilled at its rate while no
//     flow crosses it; a flow that starts on idle links passes the smallest bucket's bytes at once
//     (tc tbf's burst on the emulated cluster).
// Thread-safety: none; one simulation drives one model. NextEventTime() and Links() may run a
// pending solve (logically const).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
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
  void StartConnectionFlow(TimeNs now, int src, int dst, int64_t payload_bytes, uint64_t tag,
                           uint64_t connection) override;
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
  // The tags of the flows on link l in the solver's list order. Sums over a link follow it, so a
  // result is byte-identical only if ends detach in the same order: (finish ns, start order).
  std::vector<uint64_t> LinkFlowTags(int l) const;

  // Work counters of the solver (for benchmarks and for tests that the solver stays local).
  struct SolverStats {
    uint64_t solves = 0;        // batched re-solves
    uint64_t rounds = 0;        // filling passes (1 per solve + restarts)
    uint64_t link_visits = 0;   // links set up in R, summed over passes
    uint64_t flow_visits = 0;   // flow-on-link entries scanned, summed over passes
    uint64_t rate_changes = 0;  // flows whose rate was updated
    uint64_t heap_rebuilds = 0; // completion groups rebuilt bottom-up (many of their rates moved)
    uint64_t group_moves = 0;   // flows whose entry moved to another completion group
  };
  const SolverStats& solver_stats() const { return stats_; }

 private:
  // Hot solver state of a flow, packed (56 bytes) so that a re-solve touching thousands of flows
  // stays in cache; the rest of a flow lives in Flow.
  // A flow's links: its route's, and its connection's when connection_gbps caps it.
  static constexpr int kMaxFlowLinks = kMaxRouteLinks + 1;
  struct Hot {
    double rate = 0;          // bytes/s since Flow::last_t; 0: new, not solved yet
    double new_rate = 0;      // scratch: result of the current solve
    // A saturated link where this flow's rate is the largest; -1: none. A free flow's is set when
    // the solve freezes it (rounds that start over classify it free again either way: its old and
    // its new bottleneck both lie in R, which only grows).
    int32_t bottleneck = -1;
    int32_t free_pos = 0;  // max-min: its index in free_flows_ (valid while kFree this round)
    uint32_t stamp = 0;  // round in which kFree/kFrozen are valid
    uint8_t flags = 0;
    uint8_t nlinks = 0;
    int32_t link[kMaxFlowLinks] = {};  // the route's links, then its connection's (if capped)
  };
  static constexpr uint8_t kFree = 1, kFrozen = 2;
  struct Flow {
    // What a rate change and the completion heap touch come first (one cache line).
    double remaining = 0;  // wire bytes left at last_t
    TimeNs last_t = 0;
    TimeNs finish = 0;  // end of transmission at the current rate
    uint64_t seq = 0;   // start order
    bool live = false;
    double wire = 0;   // wire bytes in total
    TimeNs extra = 0;  // route latency + per-message overhead
    uint64_t tag = 0;
    int32_t src = 0, dst = 0;
    int32_t pos[kMaxFlowLinks] = {};  // index of this flow in link_flows_[link[i]]
  };
  // Key of the completion order; unique (start sequences are), so pops never depend on how the
  // heaps are laid out. id: the flow slot in a group's heap, the group in tops_.
  struct HeapEntry {
    TimeNs finish;
    uint64_t seq;
    int32_t id;
    bool operator<(const HeapEntry& o) const {
      return finish != o.finish ? finish < o.finish : seq < o.seq;
    }
  };
  // Completion group (file comment): group l + 1 holds the flows whose finish was last set while
  // link l, busy, was their bottleneck; group 0 the others.
  struct Group {
    std::vector<HeapEntry> heap;  // min-heap; heap_pos_[flow] is each entry's index
    int32_t top_pos = -1;         // index of this group's head in tops_; -1 when empty
    uint32_t stamp = 0;           // == commit_epoch_: in touched_, the fields below valid
    uint32_t frozen = 0;          // flows the solve froze with this group as theirs
    bool rebuild = false;         // the commit sets keys unsorted and rebuilds it
    bool dirty = false;           // it did: the heap is out of order until rebuilt
  };
  struct LinkScratch {
    uint32_t region_stamp = 0;  // == region_epoch_: link is in R
    uint32_t popped_stamp = 0;  // == round_epoch_: link saturated (froze flows) in this round
    int32_t cnt = 0;            // unfrozen free flows
    double rem = 0;             // capacity left for them
    double max_fixed = 0;       // >= the rate of every fixed flow on it
    int32_t frozen = 0;         // free flows frozen here (the solve's last round)
    uint32_t pend_stamp = 0;    // == round_epoch_: pend is this round's
    double pend = 0;            // outside R: rate moved onto it by flows frozen this round
  };
  struct Done {
    TimeNs finish;
    uint64_t seq;
    uint64_t tag;
    TimeNs delivered;
    int32_t flow;  // its slot, until Complete frees it
  };

  void Flush() const;  // runs the pending solve, if any
  void Solve(TimeNs now);
  // fairness_alpha > 0: new_rate of every active flow (into free_flows_), see the file comment.
  void SolveAlphaFair();
  // Flow f's forward route's summed link prices, and its reverse route's (0 without ack_weight_).
  double ForwardPrice(int32_t f) const;
  double BackPrice(int32_t f) const;
  // What a flow pays: forward + ack_weight_ x min(back, forward). The reverse path counts at most
  // as much as the forward one, so a flow whose forward links are all unpriced still fills one of
  // them (a window grows until its own path's queue is full), whatever its acknowledgements cross.
  double FlowPrice(double forward, double back) const {
    return forward + ack_weight_ * std::min(back, forward);
  }
  // burst_bytes > 0: wire bytes a flow starting now on `route` passes at once.
  double BurstCredit(TimeNs now, const Route& route) const;
  // burst_bytes > 0: what idle link l's bucket holds now.
  double Tokens(TimeNs now, size_t l) const;
  // Water-fills R once; returns false when R had to grow below the current water level (the
  // round must start over with the larger R).
  bool FillRound();
  void AddToRegion(int32_t link);
  // Brings a link into R in the middle of a round and accounts for its flows.
  void ActivateLink(int32_t link);
  void PushShare(int32_t link);
  bool InRegion(int32_t link) const {
    return link_scratch_[static_cast<size_t>(link)].region_stamp == region_epoch_;
  }
  // A flow frozen this round moved the load of link m, outside R, by delta: whether m must join
  // R (file comment, (a): it was saturated, or this round's moves bring it near capacity).
  bool MustJoin(int32_t m, double delta);
  bool RateChanged(const Hot& h) const {
    return h.rate == 0 || std::abs(h.new_rate - h.rate) > kRelTol * h.rate;
  }
  // Moves every flow whose transmission ends before `t` (or at `t` when inclusive) to done_.
  void ProcessUntil(TimeNs t, bool inclusive);
  void Complete(int32_t f, TimeNs t);
  int32_t AllocFlow();
  void AttachToLinks(int32_t f, TimeNs now);
  void DetachFromLinks(int32_t f, TimeNs now);
  // Completion heaps (file comment). Before a solve's new finish times are set: which groups
  // take so many keys that they are rebuilt (O(size)) rather than sifted, counted from the flows
  // the solve froze on each link (a bound of the keys set into its group).
  void PlanCommit();
  bool Rebuilding(int32_t g) const {
    const Group& gr = groups_[static_cast<size_t>(g)];
    return gr.stamp == commit_epoch_ && gr.rebuild;
  }
  // Adds group g to touched_ (rebuild false) unless it is there.
  void Touch(int32_t g);
  // The rest of changed_ (keys that were not set in place) into the heaps; rebuilds and fixes
  // the heads of the touched groups.
  void CommitFinishTimes();
  struct Changed;
  // Puts c's flow's new key into its group (moving its entry there from c.from); a heap whose
  // sift is false is left unordered for the caller to rebuild.
  void SetEntry(const Changed& c, bool sift_from, bool sift_to);
  // The group for an entry set while `bottleneck` (-1: none) was the flow's bottleneck.
  int32_t GroupFor(int32_t bottleneck) const {
    return bottleneck >= 0 &&
                   link_flows_[static_cast<size_t>(bottleneck)].size() >= kMinGroupFlows
               ? bottleneck + 1
               : 0;
  }
  // Adds a flow that has no entry (its finish set) to group g and fixes g's head in tops_.
  void HeapPush(int32_t f, int32_t g);
  // Removes the entries of every flow that ends at `finish` (the smallest finish of all) and
  // appends the flows to done_, in start order.
  void TakeEnding(TimeNs finish);
  void GroupSiftUp(Group& g, size_t i);
  void GroupSiftDown(Group& g, size_t i);
  // Removes g.heap[i]; sift false leaves the heap unordered (the caller rebuilds it).
  void GroupErase(Group& g, size_t i, bool sift);
  // Puts group g's head (or its absence) into tops_.
  void FixTop(int32_t g);

  // Relative tolerance: a rate within it of the old one is unchanged; a fixed flow may exceed a
  // link's level by it. Far above a re-solve's rounding noise (~1e-15), far below anything visible.
  static constexpr double kRelTol = 1e-12;
  // Flows a bottleneck carries for its flows to get a completion group of their own. Not tuned:
  // the flow benchmark's sparse cases lost up to half their speed with a group per link.
  static constexpr size_t kMinGroupFlows = 16;
  // A link whose load is within this of its capacity counts as saturated (may be a flow's
  // bottleneck) when a rate on it moves. Far above the drift of link_load_'s running sums
  // (~1e-16 per update, and each sum is recomputed whenever its link enters R).
  static constexpr double kSaturatedTol = 1e-6;

  Topology topo_;
  double efficiency_ = 1;
  TimeNs overhead_ns_ = 0;
  TimeNs now_ = 0;
  uint64_t next_seq_ = 0;
  int active_count_ = 0;

  std::vector<Hot> hot_;
  std::vector<Flow> flows_;
  std::vector<int32_t> free_slots_;
  bool prefetch_ = false;  // the slot arrays outgrew the caches (flow_network.cc, Prefetch)
  // Completion heaps. heap_pos_ and flow_group_ are dense arrays apart from Flow: every sift level
  // writes a position, so they should share cache lines.
  std::vector<Group> groups_;        // num_links + 1
  std::vector<HeapEntry> tops_;      // min-heap of the non-empty groups' heads (id: the group)
  std::vector<int32_t> heap_pos_;    // per flow slot: index in its group's heap
  std::vector<int32_t> flow_group_;  // per flow slot: the group holding its entry, -1: none
  std::vector<int32_t> touched_;     // groups the current commit touches
  std::vector<size_t> dfs_;          // TakeEnding's scratch
  uint32_t commit_epoch_ = 0;

  // Per link.
  std::vector<double> capacity_;
  std::vector<std::vector<int32_t>> link_flows_;
  std::vector<double> link_load_;     // max-min: sum of the rates of the flows on it
  std::vector<double> link_bytes_;    // wire bytes of flows that finished
  std::vector<TimeNs> link_busy_ns_;  // closed busy periods
  std::vector<TimeNs> link_busy_since_;
  std::vector<TimeNs> link_idle_since_;  // burst_bytes: when the link last became idle
  std::vector<double> link_tokens_;      // and what its bucket held then
  double alpha_ = 0;                     // NetworkSpec::fairness_alpha
  double ack_weight_ = 0;                // NetworkSpec::ack_path_weight (alpha-fair only)
  std::vector<Route> ack_route_;         // ack_weight_ > 0: per flow slot, its reverse route
  std::vector<std::vector<int32_t>> af_ack_flows_;  // per link: solve's flows with it on their reverse route
  std::vector<int32_t> af_ack_links_;    // links whose af_ack_flows_ this solve filled
  double burst_bytes_ = 0;               // NetworkSpec::burst_bytes
  std::vector<int32_t> af_links_;        // alpha-fair scratch: links with flows,
  std::vector<double> af_price_;         // their prices (per link),
  std::vector<double> af_others_;        // per flow on the link being solved, the rest,
  std::vector<double> af_path_;          // per flow slot, its path's price
  std::vector<double> af_back_;          // ack_weight_ > 0: per flow slot, its reverse route's price
  std::vector<double> af_backs_;         // per flow on the link being solved, af_back_
  std::vector<int32_t> af_work_;         // links to update (FIFO)
  std::vector<uint8_t> af_queued_;       // per link: in af_work_
  // connection_gbps: one more link per connection that has carried a flow, with the cap as its
  // capacity (after the topology's links, which alone are reported by Links()); SimJob sends a
  // connection's messages one at a time, so its only flow is the message on the network.
  double connection_Bps_ = 0;
  std::unordered_map<uint64_t, int32_t> connection_links_;
  int32_t ConnectionLink(uint64_t connection);
  // Grows every per-link array by one link (and groups_, which keeps one more); returns its id.
  int32_t AppendLink(double capacity_Bps, double tokens);
  double af_unit_ = 1;                   // prices are in units of the fastest link's capacity
  std::vector<LinkScratch> link_scratch_;

  // Pending perturbation: links touched by starts/ends not solved yet, all at pending_t_.
  std::vector<int32_t> seeds_;
  TimeNs pending_t_ = 0;

  // Solver scratch, reused.
  uint32_t region_epoch_ = 0;
  uint32_t round_epoch_ = 0;
  double water_ = 0;  // current water level of the round
  bool restart_ = false;
  std::vector<int32_t> region_;
  std::vector<int32_t> free_flows_;
  // Max-min: bit i set when free_flows_[i] froze at a rate that moved (RateChanged) in this round.
  // The commit visits only those, in free_flows_ order (the order link_load_'s sums take them):
  // in dense traffic most free flows come out at their old rate.
  std::vector<uint64_t> moved_bits_;
  std::vector<int32_t> moved_;  // the commit's flows whose rate moved, in free_flows_ order
  void AddFree(int32_t f, Hot& h) {
    h.free_pos = static_cast<int32_t>(free_flows_.size());
    free_flows_.push_back(f);
  }
  void MarkMoved(const Hot& h) {
    const size_t w = static_cast<size_t>(h.free_pos) >> 6;
    if (w >= moved_bits_.size()) moved_bits_.resize(w + 1, 0);
    moved_bits_[w] |= uint64_t{1} << (h.free_pos & 63);
  }
  // The commit's flows (moved_): max-min, those MarkMoved marked; alpha-fair, every flow whose
  // rate moved.
  void CollectMoved();
  // Flows whose finish time moved in this solve, with the group their entry goes to and the one
  // it is in (-1: none).
  struct Changed {
    int32_t flow;
    int32_t group;
    int32_t from;
  };
  std::vector<Changed> changed_;
  std::vector<std::pair<double, int32_t>> fill_heap_;

  std::vector<Done> done_;  // finished, not yet reported by AdvanceTo
  SolverStats stats_;
};

}  // namespace poseidon::sim
