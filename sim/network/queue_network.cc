#include "sim/network/queue_network.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "sim/network/flow_network.h"  // RoundUpNs

namespace poseidon::sim {

QueueNetwork::QueueNetwork(Topology topology, const config::NetworkSpec& spec, uint64_t seed)
    : topo_(std::move(topology)),
      efficiency_(spec.efficiency),
      overhead_ns_(spec.per_message_overhead_ns),
      limit_(static_cast<double>(spec.queue_limit_bytes)),
      burst_(static_cast<double>(spec.burst_bytes)),
      congested_weight_(spec.congested_flow_weight),
      loss_packet_(static_cast<double>(spec.loss_packet_bytes)) {
  // A stream of its own: the jitter's generators are seeded by (seed, worker, constant).
  std::seed_seq seq{seed, uint64_t{0x6c6f73736573}};  // "losses"
  rng_.seed(seq);
  CheckNetworkSpec(spec);
  window0_ = static_cast<double>(spec.initial_window_bytes) / efficiency_;
  segment_ = static_cast<double>(spec.segment_bytes) / efficiency_;
  send_buffer_ = static_cast<double>(spec.send_buffer_bytes) / efficiency_;
  if (topo_.kind() != config::TopologyKind::kStar) {
    throw std::invalid_argument(fmt::format(
        "{}: network model 'queue' needs a star topology (one sending and one receiving link per "
        "host); use model 'flow' for leaf-spine",
        spec.loc.ToString()));
  }
  hosts_.resize(static_cast<size_t>(topo_.num_hosts()));
  for (int h = 0; h < topo_.num_hosts(); ++h) {
    Host& x = hosts_[static_cast<size_t>(h)];
    x.up_Bps = topo_.link(UpLink(h)).capacity_Bps;
    x.down_Bps = topo_.link(DownLink(h)).capacity_Bps;
  }
}

void QueueNetwork::StartFlow(TimeNs now, int src, int dst, int64_t payload_bytes, uint64_t tag) {
  StartConnectionFlow(now, src, dst, payload_bytes, tag,
                      MachinePairConnection(src, dst, topo_.num_hosts()));
}

void QueueNetwork::StartConnectionFlow(TimeNs now, int src, int dst, int64_t payload_bytes,
                                       uint64_t tag, uint64_t connection) {
  CheckStartFlow(now, now_, payload_bytes);
  const Route route = topo_.RouteBetween(src, dst);  // validates src, dst
  // Flows that ended before `now` leave first; they are reported by the next AdvanceTo.
  ProcessUntil(now, /*inclusive=*/false);
  Drain(now);
  Flow f;
  f.tag = tag;
  f.src = src;
  f.dst = dst;
  f.remaining = static_cast<double>(payload_bytes) / efficiency_;
  // The last wire byte always goes at the link rate, so a flow never ends at its start.
  if (burst_ > 0 && f.remaining > 0) {
    const double credit = std::min(BurstCredit(src, dst), f.remaining - 1);
    f.remaining -= credit;
    // Each idle link keeps what is left in its bucket until it is idle again.
    Host& s = hosts_[static_cast<size_t>(src)];
    Host& d = hosts_[static_cast<size_t>(dst)];
    if (UpIdle(src)) s.up_tokens = std::max(0.0, Tokens(s.up_tokens, s.up_idle_since, s.up_Bps) - credit);
    if (DownIdle(dst)) {
      d.down_tokens = std::max(0.0, Tokens(d.down_tokens, d.down_idle_since, d.down_Bps) - credit);
    }
  }
  f.extra = topo_.RouteLatency(route) + overhead_ns_;
  f.connection = connection;
  if (window0_ > 0) f.window = &windows_.try_emplace(connection, Window{window0_}).first->second;
  flows_.push_back(f);
  ++hosts_[static_cast<size_t>(src)].sending;
  Rebalance();
}

TimeNs QueueNetwork::FinishOf(const Flow& f) const {
  if (f.remaining <= 0) return now_;
  if (!(f.rate > 0)) return kNever;  // held back entirely (cannot last: its queue drains)
  return now_ + RoundUpNs(f.remaining / f.rate * 1e9);
}

int QueueNetwork::Next() const {
  int best = -1;
  TimeNs best_t = kNever;
  for (size_t i = 0; i < flows_.size(); ++i) {
    const TimeNs t = FinishOf(flows_[i]);
    if (t < best_t) {  // strict: the earlier started wins a tie (flows_ is in start order)
      best_t = t;
      best = static_cast<int>(i);
    }
  }
  return best;
}

TimeNs QueueNetwork::NextFull(int* host) const {
  TimeNs best = kNever;
  if (limit_ <= 0) return best;
  for (size_t h = 0; h < hosts_.size(); ++h) {
    const Host& x = hosts_[h];
    if (x.full || !(x.in_Bps > x.down_Bps)) continue;
    const TimeNs t = now_ + RoundUpNs((limit_ - x.backlog) / (x.in_Bps - x.down_Bps) * 1e9);
    if (t < best) {
      best = t;
      *host = static_cast<int>(h);
    }
  }
  return best;
}

TimeNs QueueNetwork::NextEmpty(int* host) const {
  TimeNs best = kNever;
  if (!(congested_weight_ < 1)) return best;  // only the weights ask whether a queue stands
  for (size_t h = 0; h < hosts_.size(); ++h) {
    const Host& x = hosts_[h];
    if (!x.standing || !(x.backlog > 0) || !(x.in_Bps < x.down_Bps)) continue;
    const TimeNs t = now_ + RoundUpNs(x.backlog / (x.down_Bps - x.in_Bps) * 1e9);
    if (t < best) {
      best = t;
      *host = static_cast<int>(h);
    }
  }
  return best;
}

TimeNs QueueNetwork::NextRound(uint64_t* connection) const {
  TimeNs best = kNever;
  for (const auto& [key, w] : windows_) {  // key order: ties go to the lower key
    if (w.round_end < best) {
      best = w.round_end;
      *connection = key;
    }
  }
  return best;
}

TimeNs QueueNetwork::NextWindowCheck() const {
  // A flow below its window's cap reaches it when the queues on its round trip have grown by
  // enough: RTT(t) = RTT(now) + k t with k = gs + gd + gs gd, gs and gd the sender's and the
  // receiver's queues' growth over their rates (the acknowledgement's queue grows for as long as
  // the receiver's queue delays it: RoundTripS), and the cap window / RTT(t) falls to the flow's
  // rate at RTT = window / rate. A queue that drains bends k upwards when it empties, so that
  // moment is a check too.
  TimeNs best = kNever;
  if (!(window0_ > 0)) return best;
  auto growth = [](const Host& h) {
    return h.backlog > 0 || h.in_Bps > h.down_Bps ? (h.in_Bps - h.down_Bps) / h.down_Bps : 0.0;
  };
  for (const Flow& f : flows_) {
    if (!(f.rate > 0) || !(f.cap > 0) || HeldByWindow(f)) continue;
    const Host& src = hosts_[static_cast<size_t>(f.src)];
    const Host& dst = hosts_[static_cast<size_t>(f.dst)];
    double t = kNeverS;
    const double gs = growth(src), gd = growth(dst);
    const double k = gs + gd + gs * gd;
    if (k > 0) t = (InFlight(*f.window) / f.rate - RoundTripS(f)) / k;
    for (const Host* h : {&src, &dst}) {
      if (h->backlog > 0 && h->in_Bps < h->down_Bps) {
        t = std::min(t, h->backlog / (h->down_Bps - h->in_Bps));
      }
    }
    if (t < kNeverS)
      best = std::min(best, now_ + std::max<TimeNs>(1, RoundUpNs(std::max(0.0, t) * 1e9)));
  }
  return best;
}

TimeNs QueueNetwork::NextRecoveryEnd() const {
  TimeNs best = kNever;
  if (!(segment_ > 0)) return best;
  for (const Flow& f : flows_) {
    if (hosts_[static_cast<size_t>(f.dst)].full && f.window->recovering_until > now_) {
      best = std::min(best, f.window->recovering_until);
    }
  }
  return best;
}

double QueueNetwork::window_bytes(uint64_t connection) const {
  const auto it = windows_.find(connection);
  return it == windows_.end() ? 0.0 : it->second.cwnd;
}

double QueueNetwork::threshold_bytes(uint64_t connection) const {
  const auto it = windows_.find(connection);
  return it == windows_.end() ? 0.0 : it->second.ssthresh;
}

std::vector<ConnectionWindow> QueueNetwork::Windows() const {
  std::vector<ConnectionWindow> out;
  out.reserve(windows_.size());
  for (const auto& [key, w] : windows_) out.push_back({key, w.cwnd, w.ssthresh});
  return out;
}

TimeNs QueueNetwork::hole_until(uint64_t connection) const {
  const auto it = windows_.find(connection);
  return it == windows_.end() || it->second.hole_until == kLongAgo ? 0 : it->second.hole_until;
}

double QueueNetwork::RoundTripS(const Flow& f) const { return RoundTripS(f.src, f.dst, f.extra); }

double QueueNetwork::RoundTripS(int src_host, int dst_host, TimeNs extra) const {
  const Host& src = hosts_[static_cast<size_t>(src_host)];
  const Host& dst = hosts_[static_cast<size_t>(dst_host)];
  // A byte sent now waits behind its receiver's queue as it stands (FIFO) and crosses the route;
  // its acknowledgement then joins the sender's own receiving queue, which has grown or drained
  // meanwhile at the present rates, and waits behind what that queue holds then.
  const double forward_s = 1e-9 * static_cast<double>(extra) + dst.backlog / dst.down_Bps;
  double ack_queue = std::max(0.0, src.backlog + (src.in_Bps - src.down_Bps) * forward_s);
  if (limit_ > 0) ack_queue = std::min(ack_queue, limit_);
  return forward_s + 1e-9 * static_cast<double>(extra) + ack_queue / src.down_Bps;
}

double QueueNetwork::round_trip_s(int src, int dst) const {
  const Route route = topo_.RouteBetween(src, dst);  // validates src, dst
  return RoundTripS(src, dst, topo_.RouteLatency(route) + overhead_ns_);
}

void QueueNetwork::EndRound(Window* w) {
  if (HeldBack(*w)) {
    // Held by its send buffer, not its window: Linux grows only a window that limits.
  } else if (segment_ > 0 && w->cwnd >= w->ssthresh) {
    w->cwnd += segment_ * w->round_bytes / w->cwnd;  // congestion avoidance: a segment per window
  } else {
    // Slow start: a byte more of window for every byte acknowledged, up to the threshold (none
    // before a loss).
    w->cwnd = std::min(w->cwnd + w->round_bytes, w->ssthresh);
  }
  w->round_end = kNever;
  w->round_bytes = 0;
}

double QueueNetwork::WindowWhenHeard(const Flow& f, size_t d) const {
  const Window& w = *f.window;
  if (HeldBack(w)) return w.cwnd;
  if (w.cwnd >= w.ssthresh) return w.cwnd + segment_;             // congestion avoidance
  const double acked = hosts_[d].down_Bps * RoundTripS(f) * f.rate / loss_in_[d];
  const double grown = w.cwnd + acked;
  return send_buffer_ > 0 ? std::min(grown, std::max(w.cwnd, send_buffer_)) : grown;
}

void QueueNetwork::Halve(Flow* f, double lost_bytes, double heard_window) {
  Window* w = f->window;
  const double rtt = RoundTripS(*f);
  const double before = w->cwnd;
  w->ssthresh = std::max(heard_window / 2, 2 * segment_);
  w->cwnd = std::min(w->cwnd, w->ssthresh);
  if (loss_log_ != nullptr) {
    loss_log_->push_back(WindowLoss{now_, f->connection, f->src, f->dst, before, heard_window,
                                    w->ssthresh, w->cwnd, lost_bytes});
  }
  w->recovering_until = now_ + std::max<TimeNs>(1, RoundUpNs(rtt * 1e9));
  w->round_end = kNever;  // the round under way is over; the next starts from the new window
  w->round_bytes = 0;
  f->cap = rtt > 0 ? InFlight(*w) / rtt : 0;
  // The hole: the sender hears of it from what it sent after the lost packets (those take
  // lost / rate to send at the rate it brings, unconstrained by the full queue: Losses' FillRates)
  // a round trip later, and the retransmission waits through the receiving queue in its turn.
  const Host& dst = hosts_[static_cast<size_t>(f->dst)];
  const double resend_s = f->rate > 0 ? lost_bytes / f->rate : 0;
  w->hole_until = std::max(
      w->hole_until,
      w->recovering_until + RoundUpNs((resend_s + dst.backlog / dst.down_Bps) * 1e9) + f->extra);
}

size_t QueueNetwork::DrawVictim() {
  double total = 0;
  for (size_t i : loss_pick_) total += flows_[i].rate;
  // 53 random bits in [0, 1): the same draws on every platform.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double sum = 0;
  for (size_t k = 0; k < loss_pick_.size(); ++k) {
    sum += flows_[loss_pick_[k]].rate;
    if (u < sum) return k;
  }
  return loss_pick_.size() - 1;  // rounding: the last one
}

void QueueNetwork::Losses() {
  bool any = false;
  for (const Host& h : hosts_) any = any || h.full;
  if (!any) return;
  // What the senders would bring were the full queues no constraint: their windows and links.
  FillRates(/*full_queues_constrain=*/false);
  loss_in_.assign(hosts_.size(), 0.0);
  for (const Flow& f : flows_) loss_in_[static_cast<size_t>(f.dst)] += f.rate;
  if (loss_packet_ <= 0) {
    for (Flow& f : flows_) {
      if (!Overloaded(static_cast<size_t>(f.dst))) continue;
      if (now_ < f.window->recovering_until) continue;  // one halving per loss episode
      Halve(&f, segment_, WindowWhenHeard(f, static_cast<size_t>(f.dst)));
    }
    return;
  }
  // Drop-tail, as the emulated hosts' tbf queue does it: what arrives while the queue is full is
  // lost, a whole packet at a time. The senders hear of it a round trip later; meanwhile the
  // windows grow as each round (a segment in congestion avoidance, the window in slow start;
  // nothing while the send buffer holds one back), and that excess, but no more than the senders
  // bring over the queue's rate in the round trip, is what is dropped: that many packets (at
  // least one), each from a connection drawn in proportion to what it brings. A connection hit
  // halves unless it is already recovering: the window it has by the time it hears of the loss,
  // slow start's round of growth included (WindowWhenHeard), and waits for what it lost (Halve).
  for (size_t d = 0; d < hosts_.size(); ++d) {
    if (!Overloaded(d)) continue;
    loss_pick_.clear();
    double growth = 0;
    for (size_t i = 0; i < flows_.size(); ++i) {
      const Flow& f = flows_[i];
      if (static_cast<size_t>(f.dst) != d || !(f.rate > 0)) continue;
      loss_pick_.push_back(i);
      const Window& w = *f.window;
      if (HeldBack(w)) continue;
      growth += w.cwnd >= w.ssthresh ? segment_ : w.cwnd;
    }
    if (loss_pick_.empty()) continue;
    // A window that grows past what its sender's link carries sends no more for it.
    double brought = 0;
    for (size_t i : loss_pick_) brought += flows_[i].rate * RoundTripS(flows_[i]);
    growth = std::min(growth, brought * (1 - hosts_[d].down_Bps / loss_in_[d]));
    const int drops = static_cast<int>(
        std::clamp(std::round(growth / loss_packet_), 1.0, static_cast<double>(kMaxDrops)));
    loss_count_.assign(loss_pick_.size(), 0);
    for (int k = 0; k < drops; ++k) ++loss_count_[DrawVictim()];
    for (size_t j = 0; j < loss_pick_.size(); ++j) {
      Flow& f = flows_[loss_pick_[j]];
      if (loss_count_[j] > 0 && now_ >= f.window->recovering_until) {
        Halve(&f, loss_count_[j] * loss_packet_, WindowWhenHeard(f, d));
      }
    }
  }
}

TimeNs QueueNetwork::NextEventTime() const {
  if (!done_.empty()) return now_;  // retired by a later StartFlow, not reported yet
  const int i = Next();
  int host = -1;
  uint64_t connection = 0;
  const TimeNs queue_at = std::min({NextFull(&host), NextEmpty(&host), NextRound(&connection),
                                    NextWindowCheck(), NextRecoveryEnd()});
  return std::min(i < 0 ? kNever : FinishOf(flows_[static_cast<size_t>(i)]), queue_at);
}

double QueueNetwork::Tokens(double tokens, TimeNs since, double rate_Bps) const {
  return std::min(burst_, tokens + static_cast<double>(now_ - since) * 1e-9 * rate_Bps);
}

double QueueNetwork::BurstCredit(int src, int dst) const {
  if (!UpIdle(src) || !DownIdle(dst)) return 0;  // busy: its bucket is spent
  const Host& s = hosts_[static_cast<size_t>(src)];
  const Host& d = hosts_[static_cast<size_t>(dst)];
  const double up = Tokens(s.up_tokens, s.up_idle_since, s.up_Bps);
  const double down = Tokens(d.down_tokens, d.down_idle_since, d.down_Bps);
  return std::max(0.0, std::min(up, down));
}

void QueueNetwork::DrainHosts(std::vector<Host>* hosts, TimeNs t0, TimeNs dt_ns, double limit) {
  if (dt_ns <= 0) return;
  const double dt = static_cast<double>(dt_ns) * 1e-9;
  for (Host& h : *hosts) {
    if (h.sending > 0) {
      h.up_bytes += h.out_Bps * dt;
      h.up_busy_ns += static_cast<double>(dt_ns);
    }
    const double queued = h.backlog + h.in_Bps * dt;
    double after = std::max(0.0, queued - h.down_Bps * dt);
    // The limit is met by a queue-full event; what the ns rounding of that event adds is dropped.
    if (limit > 0) after = std::min(after, limit);
    h.down_bytes += h.backlog + h.in_Bps * dt - after;
    if (h.in_Bps > 0) {
      h.down_busy_ns += static_cast<double>(dt_ns);
    } else if (h.backlog > 0) {
      const double drain_ns = h.backlog / h.down_Bps * 1e9;
      h.down_busy_ns += std::min(static_cast<double>(dt_ns), drain_ns);
      if (drain_ns <= static_cast<double>(dt_ns)) h.down_idle_since = t0 + RoundUpNs(drain_ns);
    }
    h.backlog = after;
  }
}

void QueueNetwork::Drain(TimeNs t) {
  if (t <= now_) return;
  const double dt = static_cast<double>(t - now_) * 1e-9;
  for (Flow& f : flows_) {
    if (f.window != nullptr && f.window->round_end != kNever) {
      f.window->round_bytes += std::min(f.remaining, f.rate * dt);
    }
    f.remaining = std::max(0.0, f.remaining - f.rate * dt);
  }
  DrainHosts(&hosts_, now_, t - now_, limit_);
  now_ = t;
}

void QueueNetwork::Rebalance() {
  // A queue stays full while it is at the limit; one that drained below it no longer constrains.
  for (Host& h : hosts_) {
    h.full = limit_ > 0 && h.backlog >= limit_ * (1 - 1e-9);
    overflowed_ = overflowed_ || h.full;
    h.standing = congested_weight_ < 1 && h.backlog >= h.down_Bps * kStandingQueueS;
  }
  weight_.assign(flows_.size(), 1.0);
  if (window0_ > 0) {
    // At most a window in flight: the rate is at most window / round trip (through the queues as
    // they stand now, until the next event).
    for (Flow& f : flows_) {
      const double rtt = RoundTripS(f);
      f.cap = rtt > 0 ? InFlight(*f.window) / rtt : 0;
    }
  }
  if (segment_ > 0) Losses();
  FillRates();
  if (congested_weight_ < 1) {
    // A receiving link is congested when a queue stands on it (at least kStandingQueueS of its
    // rate: TCP's round trip through it is longer), when what its senders would bring at an equal
    // split exceeds its rate, or when its queue is full; flows into one get the lower weight at
    // their senders.
    std::vector<double>& in = unfrozen_weight_;  // FillRates' scratch, free until it runs again
    in.assign(hosts_.size(), 0.0);
    for (const Flow& f : flows_) in[static_cast<size_t>(f.dst)] += f.rate;
    bool any = false;
    for (size_t i = 0; i < flows_.size(); ++i) {
      const size_t d = static_cast<size_t>(flows_[i].dst);
      if (hosts_[d].full || hosts_[d].standing || in[d] > hosts_[d].down_Bps * (1 + 1e-9)) {
        weight_[i] = congested_weight_;
        any = true;
      }
    }
    if (any) FillRates();
  }
  for (Host& h : hosts_) {
    // A receiving link whose last sender just stopped, with nothing queued, is idle from now.
    if (h.in_Bps > 0 && h.backlog <= 0) h.down_idle_since = now_;
    h.in_Bps = h.out_Bps = 0;
  }
  for (const Flow& f : flows_) {
    hosts_[static_cast<size_t>(f.dst)].in_Bps += f.rate;
    hosts_[static_cast<size_t>(f.src)].out_Bps += f.rate;
  }
  if (window0_ > 0) {
    // A flow held to its window starts a round trip (at the rates just solved), at whose end the
    // window grows by what the connection sent in it.
    for (const Flow& f : flows_) {
      if (f.cap > 0 && HeldByWindow(f) && f.window->round_end == kNever) {
        f.window->round_end = now_ + std::max<TimeNs>(1, RoundUpNs(RoundTripS(f) * 1e9));
        f.window->round_bytes = 0;
      }
    }
  }
}

void QueueNetwork::FillRates(bool full_queues_constrain) {
  // Weighted progressive filling: constraint k < n is host k's sending link, k >= n the
  // receiving link of host k - n while full. Raise every unfrozen flow's rate together, each in
  // proportion to its weight; the constraint with the least room per unit of unfrozen weight
  // freezes its flows at that level (times their weights).
  const size_t n = hosts_.size();
  auto full = [&](size_t h) { return full_queues_constrain && hosts_[h].full; };
  cap_left_.assign(2 * n, 0.0);
  unfrozen_.assign(2 * n, 0);
  unfrozen_weight_.assign(2 * n, 0.0);
  frozen_.assign(flows_.size(), 0);
  for (size_t h = 0; h < n; ++h) {
    cap_left_[h] = hosts_[h].up_Bps;
    cap_left_[n + h] = full(h) ? hosts_[h].down_Bps : 0.0;
  }
  for (size_t i = 0; i < flows_.size(); ++i) {
    Flow& f = flows_[i];
    f.rate = 0;
    ++unfrozen_[static_cast<size_t>(f.src)];
    unfrozen_weight_[static_cast<size_t>(f.src)] += weight_[i];
    if (full(static_cast<size_t>(f.dst))) {
      ++unfrozen_[n + static_cast<size_t>(f.dst)];
      unfrozen_weight_[n + static_cast<size_t>(f.dst)] += weight_[i];
    }
  }
  size_t left = flows_.size();
  double level = 0;
  auto freeze = [&](size_t i, double rate) {
    const size_t src = static_cast<size_t>(flows_[i].src);
    const size_t dst = n + static_cast<size_t>(flows_[i].dst);
    frozen_[i] = 1;
    flows_[i].rate = rate;
    --unfrozen_[src];
    unfrozen_weight_[src] -= weight_[i];
    if (full(dst - n)) {
      --unfrozen_[dst];
      unfrozen_weight_[dst] -= weight_[i];
    }
    --left;
  };
  while (left > 0) {
    size_t best = 0;
    double best_share = -1;
    for (size_t k = 0; k < 2 * n; ++k) {
      if (unfrozen_[k] == 0) continue;
      const double share = cap_left_[k] / unfrozen_weight_[k];
      if (best_share < 0 || share < best_share) {
        best_share = share;
        best = k;
      }
    }
    if (window0_ > 0) {
      // initial_window_bytes: a flow whose window caps it below the level the tightest
      // constraint would reach freezes first, at its cap.
      int capped = -1;
      double capped_level = level + std::max(0.0, best_share);
      for (size_t i = 0; i < flows_.size(); ++i) {
        if (frozen_[i] || !(flows_[i].cap > 0)) continue;
        const double at = flows_[i].cap / weight_[i];
        if (at < capped_level) {
          capped_level = at;
          capped = static_cast<int>(i);
        }
      }
      if (capped >= 0) {
        const double rise = std::max(0.0, capped_level - level);
        level += rise;
        for (size_t k = 0; k < 2 * n; ++k) {
          if (unfrozen_[k] > 0) cap_left_[k] -= rise * unfrozen_weight_[k];
        }
        const auto i = static_cast<size_t>(capped);
        freeze(i, flows_[i].cap);
        continue;
      }
    }
    level += std::max(0.0, best_share);
    for (size_t k = 0; k < 2 * n; ++k) {
      if (unfrozen_[k] > 0) cap_left_[k] -= std::max(0.0, best_share) * unfrozen_weight_[k];
    }
    for (size_t i = 0; i < flows_.size(); ++i) {
      if (frozen_[i]) continue;
      const size_t src = static_cast<size_t>(flows_[i].src);
      const size_t dst = n + static_cast<size_t>(flows_[i].dst);
      const bool at_best = src == best || (full(dst - n) && dst == best);
      if (!at_best) continue;
      freeze(i, level * weight_[i]);  // x 1.0 is exact: an equal split as before
    }
  }
}

void QueueNetwork::ProcessUntil(TimeNs t, bool inclusive) {
  for (;;) {
    int host = -1;
    const TimeNs full_at = NextFull(&host);
    int empty_host = -1;
    const TimeNs empty_at = NextEmpty(&empty_host);
    uint64_t connection = 0;
    const TimeNs round_end = NextRound(&connection);
    const TimeNs round_at = std::min({round_end, NextWindowCheck(), NextRecoveryEnd()});
    const int i = Next();
    const TimeNs finish = i < 0 ? kNever : FinishOf(flows_[static_cast<size_t>(i)]);
    const TimeNs next = std::min({full_at, empty_at, round_at, finish});
    if (next == kNever || next > t || (!inclusive && next == t)) break;
    Drain(next);
    if (full_at < finish && full_at <= empty_at && full_at <= round_at) {
      // A queue reached its limit: its senders are held to its rate.
      hosts_[static_cast<size_t>(host)].backlog = limit_;
      Rebalance();
      continue;
    }
    if (empty_at < finish && empty_at <= round_at) {
      // A standing queue drained: its flows are no longer congested.
      hosts_[static_cast<size_t>(empty_host)].backlog = 0;
      Rebalance();
      continue;
    }
    if (round_at < finish) {
      // A window's round trip ended (it grows), a flow's queues have grown to where its window
      // holds it back, or a loss episode at a full queue ended (its senders may lose again).
      if (round_at == round_end) EndRound(&windows_.at(connection));
      Rebalance();
      continue;
    }
    const Flow f = flows_[static_cast<size_t>(i)];
    const Host& dst = hosts_[static_cast<size_t>(f.dst)];
    // FIFO: the last byte leaves the receiving link after everything queued before it.
    const TimeNs wait = RoundUpNs(dst.backlog / dst.down_Bps * 1e9);
    TimeNs delivered = finish + wait + f.extra;
    // In order: behind a lost packet nothing is delivered before its retransmission.
    if (f.window != nullptr) delivered = std::max(delivered, f.window->hole_until);
    done_.push_back(FlowDone{f.tag, delivered});
    flows_.erase(flows_.begin() + i);
    if (--hosts_[static_cast<size_t>(f.src)].sending == 0) {
      hosts_[static_cast<size_t>(f.src)].up_idle_since = now_;
    }
    Rebalance();
  }
}

void QueueNetwork::AdvanceTo(TimeNs now, std::vector<FlowDone>* done) {
  CheckAdvanceTo(now, now_);
  ProcessUntil(now, /*inclusive=*/true);
  Drain(now);
  done->insert(done->end(), done_.begin(), done_.end());
  done_.clear();
}

std::vector<LinkStats> QueueNetwork::Links(TimeNs now) const {
  std::vector<Host> hosts = hosts_;
  DrainHosts(&hosts, now_, now - now_, limit_);
  std::vector<LinkStats> out(static_cast<size_t>(topo_.num_links()));
  const double secs = static_cast<double>(now) * 1e-9;
  for (int h = 0; h < topo_.num_hosts(); ++h) {
    const Host& x = hosts[static_cast<size_t>(h)];
    const int32_t links[2] = {UpLink(h), DownLink(h)};
    const double bytes[2] = {x.up_bytes, x.down_bytes};
    const double busy[2] = {x.up_busy_ns, x.down_busy_ns};
    for (int k = 0; k < 2; ++k) {
      LinkStats& s = out[static_cast<size_t>(links[k])];
      s.name = topo_.LinkName(links[k]);
      s.capacity_Bps = topo_.link(links[k]).capacity_Bps;
      s.bytes = bytes[k];
      s.busy_fraction = now > 0 ? busy[k] / static_cast<double>(now) : 0.0;
      s.utilisation = secs > 0 ? bytes[k] / (s.capacity_Bps * secs) : 0.0;
    }
  }
  return out;
}

}  // namespace poseidon::sim
