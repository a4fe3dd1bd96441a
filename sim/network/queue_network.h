// sim/network/queue_network.h: the queue network model (sending NICs shared, receiving links FIFO).
//
// The flow model assumes every flow's rate is set by the links it crosses together (max-min or
// alpha-fair). On the emulated cluster at 1 Gbit/s the live runtime's TCP connections are not
// held back that way: they never leave slow start (no loss below tbf's 100 ms queue), their
// windows (3 to 6 MB, `ss -tin` during a validation run: docs/validation.md) exceed what a job has
// in flight, so each sender pushes its bytes as fast as its own NIC gives them, and they wait in
// the receiver's link queue (round trips of 17 to 50 ms in that run). (A sender gives less of its
// link to a socket whose receiver is congested, at 100 Mbit/s and 1 Gbit/s alike:
// congested_flow_weight below; docs/validation.md, "A sender's split".) This model is that, as a
// fluid:
//
//   - a host's sending link is shared equally by the flows it is sending (processor sharing:
//     TCP small queues keep a few packets per socket in the sender's qdisc, which interleaves
//     them); a flow's transmission ends when its last byte has left the sender. With
//     congested_flow_weight c < 1 it is shared in proportion to weights instead: c for a flow
//     whose receiving link is congested (a queue stands on it; or its senders, at an equal split,
//     would bring more than its rate; or its queue is full), 1 for the others, as live TCP gives
//     such a socket less of its sender's link (docs/validation.md, "A sender's split");
//   - every receiving link is one FIFO queue served at its rate. Its backlog B grows at the sum
//     of the rates of the flows sending to it minus its rate and never drops below zero; a flow
//     whose last byte left the sender at t is delivered at t + B(t) / rate + latency + overhead.
//
// So a flow alone on its sender's NIC arrives at the receiver at the full rate and takes a share
// of the receiving link in proportion to that, while the flows of a busy sender each bring their
// smaller share. With queue_limit_bytes > 0 a receiving queue holds at most that many bytes (tc
// tbf's `limit`): once full it takes no more than its rate, shared max-min by the flows sending to
// it (TCP backs off from a full queue), and their senders give the rest of their NICs to their
// other flows; rates are then the max-min allocation over the sending links and the full queues.
// With burst_bytes > 0 a flow that starts while its two links are idle passes the smaller of their
// refilled token buckets at once (tc tbf's burst), as in the flow model.
// With initial_window_bytes > 0 a connection also has TCP's congestion window: a flow may have
// at most its window in flight, so its rate is at most window / round trip, where the round trip
// is twice its route latency and overhead plus the backlogs its bytes wait behind (its
// receiver's queue) and its acknowledgements wait behind (its sender's own receiving queue, as
// it stands when they reach it: a forward trip later, grown or drained at the present rates);
// rates are re-solved when growing queues bring a flow's round trip to window / rate (and when
// such a queue empties), so a window holds its flow back as the queues grow, not only at the next
// event; a flow held to its window grows it by what it sent in each round trip (slow start), and
// a connection keeps it from one message to the next. With segment_bytes > 0 as well, a full
// queue loses packets as TCP Reno sees them: when a receiving queue is full and its senders,
// unconstrained by it, would bring more than its rate, every connection sending into it halves
// its window (its slow-start threshold becomes half the window, at least two segments), at most
// once per round trip; a window at or above its threshold grows by one segment per round trip.
// With loss_packet_bytes as well, the connections hit are drawn as drop-tail drops packets of
// that size: the windows' growth over a round trip, but no more than the senders bring over the
// queue's rate in it, in packets, each from a connection drawn in proportion to its rate (slow
// start's overshoot hits them all; congestion avoidance's, one). TCP delivers in order: a
// connection that lost delivers nothing sent after the loss until the retransmission is in, which
// its sender sends once it hears of the loss from what it sent after the lost packets (the lost
// bytes at its rate, then a round trip) and which then waits through the receiving queue.
// Without losses a full queue holds its senders to its rate, max-min. With send_buffer_bytes a
// connection has at most that much in flight whatever its window, and a window held back so does
// not grow (Linux grows only a window that limits). Without windows nothing
// else pushes back on a sender: the model is for deep queues and large windows, as the emulated
// hosts have once their connections have warmed up; the flow model stays the default. Star
// topologies only (one sending and one receiving link per host).
//
//   QueueNetwork net(Topology::Star(4, 1e9, 1000), spec);
//   net.StartFlow(0, 0, 1, 1'000'000, /*tag=*/7);
//   std::vector<FlowDone> done;
//   net.AdvanceTo(net.NextEventTime(), &done);   // done = {{7, 1'001'000}}
//
// Times are int64 ns; a transmission end rounds up to the next ns, so a lone transfer takes
// exactly L + overhead + ceil(S / efficiency / B) as in the other models (network_model.h). Flows
// ending at the same ns are reported in start order. Every event costs O(hosts x (flows + hosts))
// (progressive filling; with windows O((hosts + flows) x flows), and a scan of the connections
// for the next round trip's end): for the small clusters validation emulates, not for the scale
// runs.
// Thread-safety: none.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "config/specs.h"
#include "sim/network/network_model.h"
#include "sim/network/topology.h"

namespace poseidon::sim {

class QueueNetwork final : public NetworkModel {
 public:
  // Throws std::invalid_argument for a topology other than a star, efficiency outside (0, 1] or
  // a negative overhead.
  // `seed`: the generator of loss_packet_bytes' draws (MakeNetworkModel).
  QueueNetwork(Topology topology, const config::NetworkSpec& spec, uint64_t seed = 1);

  int num_hosts() const override { return topo_.num_hosts(); }
  void StartFlow(TimeNs now, int src, int dst, int64_t payload_bytes, uint64_t tag) override;
  // A flow of connection `connection` (initial_window_bytes: its window is the connection's; a
  // connection carries one message at a time, as SimJob sends them, and two flows of one
  // connection at once would each be held to the whole window).
  void StartConnectionFlow(TimeNs now, int src, int dst, int64_t payload_bytes, uint64_t tag,
                           uint64_t connection) override;
  TimeNs NextEventTime() const override;
  void AdvanceTo(TimeNs now, std::vector<FlowDone>* done) override;
  int active_flows() const override { return static_cast<int>(flows_.size()); }
  std::vector<LinkStats> Links(TimeNs now) const override;

  // Wire bytes waiting in host `h`'s receiving link queue at the model's current time.
  double backlog_bytes(int h) const { return hosts_[static_cast<size_t>(h)].backlog; }
  bool queue_overflowed() const override { return overflowed_; }
  // The round trip, seconds, of a byte host `src` sends to host `dst` now: the route both ways,
  // the wait behind `dst`'s receiving queue as it stands, and its acknowledgement's wait behind
  // `src`'s own receiving queue as it will stand when the acknowledgement joins it (grown or
  // drained meanwhile at the present rates, within the queue's limit). What a window is divided
  // by (initial_window_bytes > 0).
  double round_trip_s(int src, int dst) const;
  // initial_window_bytes > 0: connection `connection`'s congestion window and slow-start threshold
  // (wire bytes; the threshold is infinite before its first loss); 0 for a connection not seen.
  double window_bytes(uint64_t connection) const;
  double threshold_bytes(uint64_t connection) const;
  // segment_bytes > 0: until when connection `connection`'s receiver waits for the retransmission
  // of what it lost last (nothing it sent is delivered before); 0 if it never lost.
  TimeNs hole_until(uint64_t connection) const;
  void RecordWindowLosses(std::vector<WindowLoss>* log) override { loss_log_ = log; }
  std::vector<ConnectionWindow> Windows() const override;

 private:
  // initial_window_bytes > 0: a connection's congestion window (wire bytes) and, while one of
  // its flows is held to it, the round trip under way: when it ends and what was sent in it.
  // segment_bytes > 0: its slow-start threshold, until when a loss episode lasts (no second
  // halving within one round trip), and until when its receiver waits for the lost packet's
  // retransmission (TCP delivers in order: nothing sent after the hole reaches the receiving
  // process before it is filled).
  struct Window {
    double cwnd = 0;
    TimeNs round_end = kNever;
    double round_bytes = 0;
    double ssthresh = std::numeric_limits<double>::infinity();
    TimeNs recovering_until = kLongAgo;
    TimeNs hole_until = kLongAgo;
  };
  struct Flow {
    uint64_t tag = 0;
    int32_t src = 0, dst = 0;
    double remaining = 0;  // wire bytes not yet sent, at now_
    double rate = 0;       // bytes/s leaving the sender
    TimeNs extra = 0;      // route latency + per-message overhead
    Window* window = nullptr;  // its connection's (initial_window_bytes > 0), else none
    uint64_t connection = 0;   // its connection's key
    double cap = 0;            // window / round trip at the last rebalance, bytes/s; 0: none
  };
  // A receiving queue of at least this many seconds of its link's rate stands: TCP's round trip
  // through it is at least 1 ms longer, as long as or longer than the emulated hosts' own (0.1 to
  // 1 ms). Below it a queue that has just begun to grow or has nearly drained does not count, so
  // that the weights cannot flip back and forth at every nanosecond between two receivers whose
  // queues each other's weights fill and drain.
  static constexpr double kStandingQueueS = 1e-3;
  static constexpr TimeNs kLongAgo = std::numeric_limits<TimeNs>::min() / 2;  // buckets start full
  struct Host {
    int32_t sending = 0;  // flows on the sending link
    double up_Bps = 0;    // sending link capacity
    double down_Bps = 0;  // receiving link capacity
    double in_Bps = 0;    // sum of the rates of the flows sending to this host
    double out_Bps = 0;   // sum of the rates of the flows this host sends
    double backlog = 0;   // wire bytes queued on the receiving link
    bool full = false;    // backlog at the limit: the receiving link constrains its senders
    // congested_flow_weight < 1: at the last rebalance the backlog was a standing queue (at least
    // kStandingQueueS of the link's rate); its flows count as congested until it drains.
    bool standing = false;
    // burst_bytes: since when each way has been idle (token buckets refill meanwhile), and what
    // its bucket held then (a busy link's bucket neither gains nor loses).
    TimeNs up_idle_since = kLongAgo, down_idle_since = kLongAgo;
    double up_tokens = 0, down_tokens = 0;
    // Statistics: wire bytes carried and time busy, each way.
    double up_bytes = 0, down_bytes = 0;
    double up_busy_ns = 0, down_busy_ns = 0;
  };
  // Star links (topology.h): host h sends on link 2h and receives on link 2h + 1.
  static int32_t UpLink(int h) { return 2 * h; }
  static int32_t DownLink(int h) { return 2 * h + 1; }
  // Transmission end of flow f at the current rates.
  TimeNs FinishOf(const Flow& f) const;
  // Index of the flow that ends first (ties: start order), or -1.
  int Next() const;
  // When the first receiving queue that is filling reaches the limit (kNever if none); *host: it.
  TimeNs NextFull(int* host) const;
  // congested_flow_weight < 1 only: when the first standing receiving queue (Host::standing)
  // that drains empties (kNever if none, or with weight 1); *host: it.
  TimeNs NextEmpty(int* host) const;
  // initial_window_bytes > 0 only: when the first round trip under way ends (kNever if none);
  // *connection: its connection's key.
  TimeNs NextRound(uint64_t* connection) const;
  // initial_window_bytes > 0 only: the first moment a flow below its window's cap would reach it
  // as the queues on its round trip grow, or such a queue empties (kNever if none).
  TimeNs NextWindowCheck() const;
  // segment_bytes > 0 only: when the first loss episode of a connection sending into a full queue
  // ends (a second halving may follow then; kNever if none).
  TimeNs NextRecoveryEnd() const;
  static constexpr double kNeverS = 1e18;  // seconds: no such moment
  // Whether flow f runs at its window's cap (f.cap > 0), to within rounding.
  static bool HeldByWindow(const Flow& f) { return f.rate >= f.cap * (1 - 1e-9); }
  // What a connection may have in flight: its window, or less with send_buffer_bytes.
  double InFlight(const Window& w) const {
    return send_buffer_ > 0 ? std::min(w.cwnd, send_buffer_) : w.cwnd;
  }
  // Flow f's round trip now, seconds (round_trip_s; the class comment).
  double RoundTripS(const Flow& f) const;
  // The same for a route whose latency and overhead, one way, is `extra` ns.
  double RoundTripS(int src, int dst, TimeNs extra) const;
  // send_buffer_bytes > 0: window w is held back by its send buffer, not by itself, and does not
  // grow (Linux grows only a window that limits).
  bool HeldBack(const Window& w) const { return send_buffer_ > 0 && w.cwnd >= send_buffer_; }
  // A round trip of window w ended: it grows by what its connection sent in it (slow start), or,
  // at or above its threshold (segment_bytes), by a segment per window sent.
  void EndRound(Window* w);
  // segment_bytes > 0: every full receiving queue that its senders, unconstrained by it, would
  // bring more than its rate drops packets: the windows of the connections sending into it halve
  // (those not already recovering; with loss_packet_bytes, those the drawn dropped packets hit),
  // and their caps follow. Uses FillRates (its scratch).
  void Losses();
  // Receiving host d's queue is full and its senders would bring more than its rate (loss_in_).
  bool Overloaded(size_t d) const {
    return hosts_[d].full && loss_in_[d] > hosts_[d].down_Bps * (1 + 1e-9);
  }
  // The window flow f's sender has when it hears of a loss at receiving host d's full queue, a
  // round trip from now: grown meanwhile as EndRound grows it, by what it has acknowledged in that
  // round trip in slow start (its share, by what it brings (loss_in_), of d's link over it), by a
  // segment at or above its threshold, by nothing while its send buffer holds it back.
  double WindowWhenHeard(const Flow& f, size_t d) const;
  // Flow f's connection loses: its threshold becomes half `heard_window`, the window its sender has
  // when it hears of the loss (RFC 5681's FlightSize then; Linux's tcp_reno_ssthresh), at least two
  // segments, and its window drops to it; one loss episode lasts a round trip, and its cap
  // follows. The hole is filled when the retransmission, sent as the sender hears of the loss a
  // round trip later, has waited through the receiving queue in its turn: until then the
  // connection delivers nothing. `lost_bytes`: what it lost (wire bytes).
  void Halve(Flow* f, double lost_bytes, double heard_window);
  // loss_packet_bytes > 0: which of the flows in loss_pick_ a dropped packet belongs to, each in
  // proportion to its rate (an index into loss_pick_).
  size_t DrawVictim();
  // loss_packet_bytes > 0: the most packets drawn in one loss episode of one queue (slow start's
  // overshoot can be thousands; past this many every connection is hit almost surely).
  static constexpr int kMaxDrops = 4096;
  // Moves the fluid from now_ to t (>= now_): remaining bytes, backlogs, statistics.
  void Drain(TimeNs t);
  // Advances the hosts' backlogs and statistics from t0 by dt_ns at their current rates.
  static void DrainHosts(std::vector<Host>* hosts, TimeNs t0, TimeNs dt_ns, double limit);
  // burst_bytes > 0: wire bytes a flow from src to dst starting now passes at once (the smaller
  // refilled bucket of the two links; none if either is busy), as FlowNetwork::BurstCredit.
  double BurstCredit(int src, int dst) const;
  // burst_bytes > 0: what a bucket holds now that held `tokens` when its link became idle at
  // `since`.
  double Tokens(double tokens, TimeNs since, double rate_Bps) const;
  // The sending link of src and the receiving link of dst are idle (their buckets refill).
  bool UpIdle(int src) const { return hosts_[static_cast<size_t>(src)].sending == 0; }
  bool DownIdle(int dst) const {
    const Host& d = hosts_[static_cast<size_t>(dst)];
    return d.in_Bps <= 0 && d.backlog <= 0;
  }
  // Recomputes the rates (max-min over the sending links and the full receiving queues, weighted
  // by congested_flow_weight for flows into congested receivers) and every receiving link's
  // input rate.
  void Rebalance();
  // Weighted progressive filling at the weights in weight_: sets every flow's rate. Without
  // full_queues_constrain the full receiving queues are no constraint (Losses asks what the
  // senders would bring).
  void FillRates(bool full_queues_constrain = true);
  // Retires every flow whose transmission ends before `t` (or at `t` when inclusive).
  void ProcessUntil(TimeNs t, bool inclusive);

  Topology topo_;
  double efficiency_ = 1;
  TimeNs overhead_ns_ = 0;
  double limit_ = 0;  // queue_limit_bytes; 0: none
  double burst_ = 0;  // burst_bytes; 0: none
  double congested_weight_ = 1;  // congested_flow_weight; 1: an equal split
  double window0_ = 0;           // initial_window_bytes in wire bytes; 0: no windows
  double segment_ = 0;           // segment_bytes in wire bytes; 0: no losses
  double send_buffer_ = 0;       // send_buffer_bytes in wire bytes; 0: no such limit
  double loss_packet_ = 0;       // loss_packet_bytes (wire bytes); 0: every sender halves
  std::mt19937_64 rng_;          // loss_packet_bytes' draws
  std::map<uint64_t, Window> windows_;  // per connection key (node addresses are stable)
  std::vector<WindowLoss>* loss_log_ = nullptr;  // RecordWindowLosses
  bool overflowed_ = false;  // a receiving queue has been full
  TimeNs now_ = 0;
  std::vector<Flow> flows_;  // in start order
  std::vector<Host> hosts_;
  std::vector<FlowDone> done_;  // retired, not yet reported
  // Rebalance scratch: per constraint (sending link h, receiving link num_hosts + h) capacity
  // left, flows not yet frozen and their weights' sum; per flow its weight and whether frozen.
  std::vector<double> cap_left_;
  std::vector<int32_t> unfrozen_;
  // Losses' scratch: per host, what its senders would bring.
  std::vector<double> loss_in_;
  std::vector<size_t> loss_pick_;  // loss_packet_bytes: the flows into the host, by index
  std::vector<int> loss_count_;    // loss_packet_bytes: packets drawn per flow of loss_pick_
  std::vector<double> unfrozen_weight_;
  std::vector<double> weight_;
  std::vector<uint8_t> frozen_;
};

}  // namespace poseidon::sim
