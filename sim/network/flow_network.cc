#include "sim/network/flow_network.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "sim/network/alpha_beta.h"
#include "sim/network/queue_network.h"

namespace poseidon::sim {
namespace {

// Longest transmission we represent (~127 years); keeps finish times far from overflow.
constexpr double kMaxDurationNs = 4e18;

// The solver visits flows in link-list order, a random order over slot arrays of 10^5 to 10^6
// flows: those loops wait on cache misses. They ask for the record kAhead iterations early (both
// ends: a 56-byte record may straddle two cache lines), once the slots outgrow the caches
// (prefetch_): below that the requests only cost (the flow benchmark's small cases lost 20-30%
// to them; the 1,024-worker AlexNet run gained about 6% of its time). An iteration that hits the
// cache takes a few ns and a miss ~100 ns, so the request goes 32 iterations ahead: against 8, the
// 2,048 x 8 H100 bf16 ResNet-50 run took 7.9-8.1 s of user time instead of 8.3-9.4 (three runs
// each, docs/performance.md), AlexNet 2,048 x 8 and K20 ResNet-50 1,024 x 8 alike or slightly less.
constexpr size_t kAhead = 32;
constexpr size_t kPrefetchSlots = size_t{1} << 15;  // 4.7 MB of slot records
// A loop over n flows prefetches while its index is below this.
inline size_t AheadEnd(bool prefetch, size_t n) { return prefetch && n > kAhead ? n - kAhead : 0; }
template <class T>
inline void Prefetch(const T& x) {
  __builtin_prefetch(&x);
  __builtin_prefetch(reinterpret_cast<const char*>(&x) + sizeof(T) - 1);
}

// Sifts of an indexed binary min-heap; place(i, e) stores e at h[i] and records the index.
template <class E, class Place>
void SiftUpIn(std::vector<E>& h, size_t i, Place&& place) {
  const E e = h[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!(e < h[parent])) break;
    place(i, h[parent]);
    i = parent;
  }
  place(i, e);
}

template <class E, class Place>
void SiftDownIn(std::vector<E>& h, size_t i, Place&& place) {
  const E e = h[i];
  const size_t n = h.size();
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && h[child + 1] < h[child]) ++child;
    if (!(h[child] < e)) break;
    place(i, h[child]);
    i = child;
  }
  place(i, e);
}

}  // namespace

TimeNs RoundUpNs(double ns) {
  if (!(ns > 0)) return 0;
  if (ns >= kMaxDurationNs) return static_cast<TimeNs>(kMaxDurationNs);
  // Forgive rounding noise: a value a few ulps above an integer is that integer.
  const double slack = std::max(1e-6, ns * 1e-12);
  const double r = std::ceil(ns - slack);
  return r > 0 ? static_cast<TimeNs>(r) : 0;
}

FlowNetwork::FlowNetwork(Topology topology, const config::NetworkSpec& spec)
    : topo_(std::move(topology)),
      efficiency_(spec.efficiency),
      overhead_ns_(spec.per_message_overhead_ns),
      alpha_(spec.fairness_alpha),
      ack_weight_(spec.fairness_alpha > 0 ? spec.ack_path_weight : 0),
      burst_bytes_(static_cast<double>(spec.burst_bytes)),
      connection_Bps_(spec.connection_Bps) {
  CheckNetworkSpec(spec);
  groups_.resize(1);  // group 0: flows without a busy bottleneck; AppendLink adds one per link
  // Buckets start full (a link is idle since long before time 0).
  for (int l = 0; l < topo_.num_links(); ++l) AppendLink(topo_.link(l).capacity_Bps, burst_bytes_);
  // Prices are rate^-alpha in units of the fastest link, far from overflow and underflow.
  for (double c : capacity_) af_unit_ = std::max(af_unit_, c);
  af_unit_ = std::max(af_unit_, connection_Bps_);
}

int32_t FlowNetwork::AppendLink(double capacity_Bps, double tokens) {
  capacity_.push_back(capacity_Bps);
  link_flows_.emplace_back();
  link_load_.push_back(0.0);
  link_bytes_.push_back(0.0);
  link_busy_ns_.push_back(0);
  link_busy_since_.push_back(0);
  link_idle_since_.push_back(std::numeric_limits<TimeNs>::min() / 2);
  link_tokens_.push_back(tokens);
  af_price_.push_back(0.0);
  if (ack_weight_ > 0) af_ack_flows_.emplace_back();
  link_scratch_.emplace_back();
  groups_.emplace_back();
  return static_cast<int32_t>(capacity_.size() - 1);
}

// ---- public interface ------------------------------------------------------------------------

void FlowNetwork::StartFlow(TimeNs now, int src, int dst, int64_t payload_bytes, uint64_t tag) {
  StartConnectionFlow(now, src, dst, payload_bytes, tag,
                      MachinePairConnection(src, dst, num_hosts()));
}

void FlowNetwork::StartConnectionFlow(TimeNs now, int src, int dst, int64_t payload_bytes,
                                      uint64_t tag, uint64_t connection) {
  CheckStartFlow(now, now_, payload_bytes);
  const Route route = topo_.RouteBetween(src, dst);  // validates src, dst
  if (!seeds_.empty() && pending_t_ != now) Flush();
  // Flows that ended before `now` leave the links first; they are reported by the next AdvanceTo.
  // With starts already pending at `now` that was done by the first of them: keep batching.
  if (seeds_.empty()) ProcessUntil(now, /*inclusive=*/false);
  now_ = now;

  const int32_t f = AllocFlow();
  Flow& fl = flows_[static_cast<size_t>(f)];
  Hot& h = hot_[static_cast<size_t>(f)];
  fl.seq = next_seq_++;
  fl.tag = tag;
  fl.src = src;
  fl.dst = dst;
  fl.extra = topo_.RouteLatency(route) + overhead_ns_;
  fl.wire = static_cast<double>(payload_bytes) / efficiency_;
  fl.remaining = fl.wire;
  fl.last_t = now;
  ++active_count_;
  if (payload_bytes == 0) {
    // Nothing to transmit: never enters the solver, ends now.
    fl.finish = now;
    HeapPush(f, 0);
    return;
  }
  h.nlinks = static_cast<uint8_t>(route.size);
  for (int i = 0; i < route.size; ++i) h.link[i] = route.links[static_cast<size_t>(i)];
  if (connection_Bps_ > 0) h.link[h.nlinks++] = ConnectionLink(connection);
  if (ack_weight_ > 0) {
    if (ack_route_.size() < flows_.size()) ack_route_.resize(flows_.size());
    ack_route_[static_cast<size_t>(f)] = topo_.RouteBetween(dst, src);
  }
  if (burst_bytes_ > 0) {
    // The last wire byte always goes at the link rate, so a flow never ends at its start.
    const double credit = std::min(BurstCredit(now, route), fl.wire - 1);
    fl.remaining -= credit;
    // Each idle link of the route keeps what is left in its bucket until it is idle again (a
    // busy link sends at its rate, which its bucket neither gains nor loses by).
    for (int i = 0; i < route.size; ++i) {
      const size_t l = static_cast<size_t>(route.links[static_cast<size_t>(i)]);
      if (link_flows_[l].empty()) link_tokens_[l] = std::max(0.0, Tokens(now, l) - credit);
    }
  }
  fl.finish = kNever;
  AttachToLinks(f, now);
  pending_t_ = now;
}

TimeNs FlowNetwork::NextEventTime() const {
  Flush();
  // Retired by a later StartFlow but not reported yet: due now (they ended earlier).
  if (!done_.empty()) return std::max(done_.front().finish, now_);
  return tops_.empty() ? kNever : tops_[0].finish;
}

void FlowNetwork::AdvanceTo(TimeNs now, std::vector<FlowDone>* done) {
  CheckAdvanceTo(now, now_);
  ProcessUntil(now, /*inclusive=*/true);
  now_ = now;
  for (const Done& d : done_) done->push_back(FlowDone{d.tag, d.delivered});
  done_.clear();
}

std::vector<LinkStats> FlowNetwork::Links(TimeNs now) const {
  Flush();
  std::vector<LinkStats> out(static_cast<size_t>(topo_.num_links()));
  const double secs = static_cast<double>(now) * 1e-9;
  for (size_t l = 0; l < out.size(); ++l) {
    LinkStats& s = out[l];
    s.name = topo_.LinkName(static_cast<int>(l));
    s.capacity_Bps = capacity_[l];
    double bytes = link_bytes_[l];
    for (int32_t f : link_flows_[l]) {
      const Flow& fl = flows_[static_cast<size_t>(f)];
      const double rate = hot_[static_cast<size_t>(f)].rate;
      const double left =
          fl.remaining - rate * static_cast<double>(std::max<TimeNs>(0, now - fl.last_t)) * 1e-9;
      bytes += std::clamp(fl.wire - left, 0.0, fl.wire);
    }
    TimeNs busy = link_busy_ns_[l];
    if (!link_flows_[l].empty()) busy += std::max<TimeNs>(0, now - link_busy_since_[l]);
    s.bytes = bytes;
    s.busy_fraction = now > 0 ? static_cast<double>(busy) / static_cast<double>(now) : 0.0;
    s.utilisation = secs > 0 ? bytes / (capacity_[l] * secs) : 0.0;
  }
  return out;
}

std::vector<FlowNetwork::FlowInfo> FlowNetwork::ActiveFlows() const {
  Flush();
  std::vector<size_t> live;
  for (size_t f = 0; f < flows_.size(); ++f) {
    if (flows_[f].live) live.push_back(f);
  }
  std::sort(live.begin(), live.end(),
            [this](size_t a, size_t b) { return flows_[a].seq < flows_[b].seq; });
  std::vector<FlowInfo> out;
  out.reserve(live.size());
  for (size_t f : live) {
    const Flow& fl = flows_[f];
    FlowInfo info;
    info.tag = fl.tag;
    info.src = fl.src;
    info.dst = fl.dst;
    info.route = topo_.RouteBetween(fl.src, fl.dst);
    info.rate_Bps = hot_[f].rate;
    info.remaining_bytes = fl.remaining;
    info.finish = fl.finish;
    out.push_back(info);
  }
  return out;
}

std::vector<uint64_t> FlowNetwork::LinkFlowTags(int l) const {
  Flush();
  std::vector<uint64_t> tags;
  for (int32_t f : link_flows_.at(static_cast<size_t>(l))) {
    tags.push_back(flows_[static_cast<size_t>(f)].tag);
  }
  return tags;
}

// ---- flows and links -------------------------------------------------------------------------

int32_t FlowNetwork::ConnectionLink(uint64_t connection) {
  const auto it = connection_links_.find(connection);
  if (it != connection_links_.end()) return it->second;
  // A link of its own, not a token bucket (it is never on a route BurstCredit reads).
  const int32_t link = AppendLink(connection_Bps_, 0.0);
  connection_links_.emplace(connection, link);
  return link;
}

int32_t FlowNetwork::AllocFlow() {
  int32_t f;
  if (!free_slots_.empty()) {
    f = free_slots_.back();
    free_slots_.pop_back();
  } else {
    f = static_cast<int32_t>(flows_.size());
    flows_.emplace_back();
    hot_.emplace_back();
    heap_pos_.push_back(-1);
    flow_group_.push_back(-1);
    prefetch_ = flows_.size() >= kPrefetchSlots;
  }
  heap_pos_[static_cast<size_t>(f)] = -1;
  flow_group_[static_cast<size_t>(f)] = -1;
  flows_[static_cast<size_t>(f)] = Flow{};
  flows_[static_cast<size_t>(f)].live = true;
  hot_[static_cast<size_t>(f)] = Hot{};  // stamp 0: never a live round epoch (they start at 1)
  return f;
}

void FlowNetwork::AttachToLinks(int32_t f, TimeNs now) {
  Flow& fl = flows_[static_cast<size_t>(f)];
  const Hot& h = hot_[static_cast<size_t>(f)];
  for (int i = 0; i < h.nlinks; ++i) {
    const int32_t l = h.link[i];
    std::vector<int32_t>& on = link_flows_[static_cast<size_t>(l)];
    if (on.empty()) link_busy_since_[static_cast<size_t>(l)] = now;
    fl.pos[i] = static_cast<int32_t>(on.size());
    on.push_back(f);
    seeds_.push_back(l);
  }
}

void FlowNetwork::DetachFromLinks(int32_t f, TimeNs now) {
  const Flow& fl = flows_[static_cast<size_t>(f)];
  const Hot& h = hot_[static_cast<size_t>(f)];
  for (int i = 0; i < h.nlinks; ++i) {
    const int32_t l = h.link[i];
    std::vector<int32_t>& on = link_flows_[static_cast<size_t>(l)];
    const int32_t idx = fl.pos[i];
    const int32_t moved = on.back();
    on[static_cast<size_t>(idx)] = moved;
    on.pop_back();
    if (moved != f) {
      const Hot& mh = hot_[static_cast<size_t>(moved)];
      for (int j = 0; j < mh.nlinks; ++j) {
        if (mh.link[j] == l) {
          flows_[static_cast<size_t>(moved)].pos[j] = idx;
          break;
        }
      }
    }
    link_bytes_[static_cast<size_t>(l)] += fl.wire;
    link_load_[static_cast<size_t>(l)] -= h.rate;
    if (on.empty()) {
      link_load_[static_cast<size_t>(l)] = 0;
      link_idle_since_[static_cast<size_t>(l)] = now;
      af_price_[static_cast<size_t>(l)] = 0;  // idle: the next solve starts it afresh
      link_busy_ns_[static_cast<size_t>(l)] += now - link_busy_since_[static_cast<size_t>(l)];
    }
    seeds_.push_back(l);
  }
}

void FlowNetwork::Complete(int32_t f, TimeNs t) {
  DetachFromLinks(f, t);
  Flow& fl = flows_[static_cast<size_t>(f)];
  fl.live = false;
  free_slots_.push_back(f);
  --active_count_;
}

void FlowNetwork::ProcessUntil(TimeNs t, bool inclusive) {
  Flush();
  const size_t first = done_.size();
  while (!tops_.empty()) {
    const TimeNs finish = tops_[0].finish;
    if (finish > t || (!inclusive && finish == t)) break;
    // Every flow ending at this ns leaves together, in start order (a flow's detach moves others
    // within the link lists, whose order the next solve's sums follow); one solve for all.
    const size_t batch = done_.size();
    TakeEnding(finish);
    const size_t batch_end = done_.size();  // Complete adds to none of these vectors
    const size_t ahead_end = batch + AheadEnd(prefetch_, batch_end - batch);
    for (size_t j = batch; j < batch_end; ++j) {
      if (j < ahead_end) {
        const size_t next = static_cast<size_t>(done_[j + kAhead].flow);
        Prefetch(flows_[next]);
        Prefetch(hot_[next]);
      }
      Done& d = done_[j];
      const Flow& fl = flows_[static_cast<size_t>(d.flow)];
      d.tag = fl.tag;
      d.delivered = finish + fl.extra;
      Complete(d.flow, finish);
    }
    pending_t_ = finish;
    Solve(finish);
  }
  // A re-solve may end another flow at the same ns (a rounding hair from done); keep start order.
  auto by_time_seq = [](const Done& a, const Done& b) {
    return a.finish != b.finish ? a.finish < b.finish : a.seq < b.seq;
  };
  if (!std::is_sorted(done_.begin() + static_cast<std::ptrdiff_t>(first), done_.end(),
                      by_time_seq)) {
    std::sort(done_.begin() + static_cast<std::ptrdiff_t>(first), done_.end(), by_time_seq);
  }
}

// ---- the incremental max-min solver ----------------------------------------------------------

void FlowNetwork::Flush() const {
  // Only a non-const object can have pending work (StartFlow/AdvanceTo are non-const), so the
  // cast never touches a const object. The solve does not change any observable result.
  if (!seeds_.empty()) {
    auto* self = const_cast<FlowNetwork*>(this);
    self->Solve(pending_t_);
  }
}

void FlowNetwork::AddToRegion(int32_t link) {
  LinkScratch& s = link_scratch_[static_cast<size_t>(link)];
  if (s.region_stamp == region_epoch_) return;
  s.region_stamp = region_epoch_;
  region_.push_back(link);
}

void FlowNetwork::PushShare(int32_t link) {
  const LinkScratch& s = link_scratch_[static_cast<size_t>(link)];
  fill_heap_.emplace_back(s.rem / s.cnt, link);
  std::push_heap(fill_heap_.begin(), fill_heap_.end(), std::greater<>());
}

void FlowNetwork::Solve(TimeNs now) {
  if (seeds_.empty()) return;
  ++stats_.solves;
  if (alpha_ > 0) {
    seeds_.clear();
    SolveAlphaFair();
  } else {
    if (++region_epoch_ == 0) {  // wrapped: forget all stamps
      for (LinkScratch& s : link_scratch_) s.region_stamp = 0;
      region_epoch_ = 1;
    }
    region_.clear();
    for (int32_t l : seeds_) AddToRegion(l);
    seeds_.clear();
    while (!FillRound()) {
    }
  }

  // Commit: only flows whose rate moved get a new finish time. In a group being rebuilt (the
  // usual case of an incast), a flow that stays there has its key set in place.
  PlanCommit();
  CollectMoved();
  const size_t nmoved = moved_.size();
  for (size_t k = 0, ahead_end = AheadEnd(prefetch_, nmoved); k < nmoved; ++k) {
    if (k < ahead_end) {
      const size_t next = static_cast<size_t>(moved_[k + kAhead]);
      Prefetch(hot_[next]);
      Prefetch(flows_[next]);
    }
    const int32_t f = moved_[k];
    Hot& h = hot_[static_cast<size_t>(f)];
    Flow& fl = flows_[static_cast<size_t>(f)];
    if (h.rate > 0) {
      fl.remaining -= h.rate * static_cast<double>(now - fl.last_t) * 1e-9;
      if (fl.remaining < 0) fl.remaining = 0;
    }
    fl.last_t = now;
    if (alpha_ == 0) {
      for (int i = 0; i < h.nlinks; ++i) {
        link_load_[static_cast<size_t>(h.link[i])] += h.new_rate - h.rate;
      }
    }
    h.rate = h.new_rate;
    fl.finish = now + RoundUpNs(fl.remaining / h.rate * 1e9);
    ++stats_.rate_changes;
    const int32_t to = GroupFor(h.bottleneck);
    const int32_t from = flow_group_[static_cast<size_t>(f)];
    if (from == to && Rebuilding(to)) {
      Group& g = groups_[static_cast<size_t>(to)];
      g.heap[static_cast<size_t>(heap_pos_[static_cast<size_t>(f)])].finish = fl.finish;
      g.dirty = true;
      continue;
    }
    changed_.push_back(Changed{f, to, from});
  }
  CommitFinishTimes();
}

void FlowNetwork::CollectMoved() {
  moved_.clear();
  if (alpha_ > 0) {
    for (int32_t f : free_flows_) {
      if (RateChanged(hot_[static_cast<size_t>(f)])) moved_.push_back(f);
    }
    return;
  }
  for (size_t w = 0; w < moved_bits_.size(); ++w) {
    for (uint64_t bits = moved_bits_[w]; bits != 0; bits &= bits - 1) {
      moved_.push_back(free_flows_[w * 64 + static_cast<size_t>(std::countr_zero(bits))]);
    }
  }
}

void FlowNetwork::Touch(int32_t gi) {
  Group& g = groups_[static_cast<size_t>(gi)];
  if (g.stamp == commit_epoch_) return;
  g.stamp = commit_epoch_;
  g.frozen = 0;
  g.rebuild = false;
  g.dirty = false;
  touched_.push_back(gi);
}

void FlowNetwork::PlanCommit() {
  if (++commit_epoch_ == 0) {  // wrapped: forget all stamps
    for (Group& g : groups_) g.stamp = 0;
    commit_epoch_ = 1;
  }
  touched_.clear();
  // Four keys or fewer never pass the rule below (sparse traffic): skip the count.
  if (free_flows_.size() <= 4) return;
  if (alpha_ > 0) {
    // No bottlenecks: every entry is in group 0.
    Touch(0);
    groups_[0].frozen = static_cast<uint32_t>(free_flows_.size());
  } else {
    for (int32_t l : region_) {
      const int32_t frozen = link_scratch_[static_cast<size_t>(l)].frozen;
      if (frozen == 0) continue;
      const int32_t gi = GroupFor(l);
      Touch(gi);
      groups_[static_cast<size_t>(gi)].frozen += static_cast<uint32_t>(frozen);
    }
  }
  // The rule of one heap of all flows before the groups (k keys into n entries: rebuild when
  // 16 k > n + 64), per group. Either way the pops are the same: the keys are unique.
  for (int32_t gi : touched_) {
    Group& g = groups_[static_cast<size_t>(gi)];
    g.rebuild = static_cast<size_t>(g.frozen) * 16 > g.heap.size() + 64;
  }
}

void FlowNetwork::CommitFinishTimes() {
  if (touched_.empty()) {
    // Sparse traffic (PlanCommit skipped the count): a sift per key.
    for (const Changed& c : changed_) {
      SetEntry(c, /*sift_from=*/true, /*sift_to=*/true);
      if (c.from >= 0 && c.from != c.group) FixTop(c.from);
      FixTop(c.group);
    }
    changed_.clear();
    return;
  }
  const size_t nchanged = changed_.size();
  for (size_t k = 0, ahead_end = AheadEnd(prefetch_, nchanged); k < nchanged; ++k) {
    if (k < ahead_end) {
      const size_t next = static_cast<size_t>(changed_[k + kAhead].flow);
      __builtin_prefetch(&heap_pos_[next]);
      Prefetch(flows_[next]);
    }
    const Changed& c = changed_[k];
    const bool sift_from = c.from >= 0 && !Rebuilding(c.from);
    const bool sift_to = !Rebuilding(c.group);
    SetEntry(c, sift_from, sift_to);
    Touch(c.group);
    if (!sift_to) groups_[static_cast<size_t>(c.group)].dirty = true;
    if (c.from >= 0 && c.from != c.group) {
      Touch(c.from);
      if (!sift_from) groups_[static_cast<size_t>(c.from)].dirty = true;
    }
  }
  changed_.clear();
  for (int32_t gi : touched_) {
    Group& g = groups_[static_cast<size_t>(gi)];
    if (g.dirty) {
      for (size_t i = g.heap.size() / 2; i-- > 0;) GroupSiftDown(g, i);
      ++stats_.heap_rebuilds;
    }
    FixTop(gi);
  }
}

void FlowNetwork::SetEntry(const Changed& c, bool sift_from, bool sift_to) {
  const size_t f = static_cast<size_t>(c.flow);
  const Flow& fl = flows_[f];
  Group& g = groups_[static_cast<size_t>(c.group)];
  if (c.from == c.group) {
    const size_t i = static_cast<size_t>(heap_pos_[f]);
    const TimeNs old = g.heap[i].finish;
    g.heap[i].finish = fl.finish;
    if (!sift_to) return;
    if (fl.finish < old) {
      GroupSiftUp(g, i);
    } else {
      GroupSiftDown(g, i);
    }
    return;
  }
  if (c.from >= 0) {
    // Its bottleneck changed: the entry follows it to the new link's group.
    GroupErase(groups_[static_cast<size_t>(c.from)], static_cast<size_t>(heap_pos_[f]), sift_from);
    ++stats_.group_moves;
  }
  flow_group_[f] = c.group;
  heap_pos_[f] = static_cast<int32_t>(g.heap.size());
  g.heap.push_back(HeapEntry{fl.finish, fl.seq, c.flow});
  if (sift_to) GroupSiftUp(g, g.heap.size() - 1);
}

double FlowNetwork::Tokens(TimeNs now, size_t l) const {
  const double refilled = static_cast<double>(now - link_idle_since_[l]) * 1e-9 * capacity_[l];
  return std::min(burst_bytes_, link_tokens_[l] + refilled);
}

double FlowNetwork::BurstCredit(TimeNs now, const Route& route) const {
  double credit = burst_bytes_;
  for (int i = 0; i < route.size; ++i) {
    const size_t l = static_cast<size_t>(route.links[static_cast<size_t>(i)]);
    if (!link_flows_[l].empty()) return 0;  // busy: its bucket is spent (the link is saturated)
    credit = std::min(credit, Tokens(now, l));
  }
  return std::max(credit, 0.0);
}

double FlowNetwork::ForwardPrice(int32_t f) const {
  const Hot& h = hot_[static_cast<size_t>(f)];
  double p = 0;
  for (int i = 0; i < h.nlinks; ++i) p += af_price_[static_cast<size_t>(h.link[i])];
  return p;
}

double FlowNetwork::BackPrice(int32_t f) const {
  double p = 0;
  if (ack_weight_ > 0) {
    for (int32_t k : ack_route_[static_cast<size_t>(f)]) p += af_price_[static_cast<size_t>(k)];
  }
  return p;
}

void FlowNetwork::SolveAlphaFair() {
  const double inv = 1.0 / alpha_;
  // x^(-1/alpha); alpha 1 (the usual choice) without pow.
  auto rate_of = [&](double price) { return alpha_ == 1 ? 1 / price : std::pow(price, -inv); };
  free_flows_.clear();
  af_links_.clear();
  if (af_path_.size() < flows_.size()) af_path_.resize(flows_.size());
  for (size_t l = 0; l < link_flows_.size(); ++l) {
    if (link_flows_[l].empty()) continue;
    af_links_.push_back(static_cast<int32_t>(l));
    // A link that was idle at the last solve starts from the price at which its flows alone
    // would fill it; the others keep their last price (one start or end moves prices little).
    if (af_price_[l] <= 0) {
      af_price_[l] = std::pow(
          capacity_[l] / af_unit_ / static_cast<double>(link_flows_[l].size()), -alpha_);
    }
    for (int32_t f : link_flows_[l]) {
      if (hot_[static_cast<size_t>(f)].link[0] == static_cast<int32_t>(l)) free_flows_.push_back(f);
    }
  }
  // ack_path_weight: which flows have each busy link on their reverse route.
  for (int32_t l : af_ack_links_) af_ack_flows_[static_cast<size_t>(l)].clear();
  af_ack_links_.clear();
  if (ack_weight_ > 0) {
    for (int32_t f : free_flows_) {
      for (int32_t k : ack_route_[static_cast<size_t>(f)]) {
        if (link_flows_[static_cast<size_t>(k)].empty()) continue;  // idle: no price
        std::vector<int32_t>& on = af_ack_flows_[static_cast<size_t>(k)];
        if (on.empty()) af_ack_links_.push_back(k);
        on.push_back(f);
      }
    }
  }
  // Each flow's forward and reverse prices, kept up to date as link prices move.
  if (ack_weight_ > 0 && af_back_.size() < flows_.size()) af_back_.resize(flows_.size());
  for (int32_t f : free_flows_) {
    af_path_[static_cast<size_t>(f)] = ForwardPrice(f);
    if (ack_weight_ > 0) af_back_[static_cast<size_t>(f)] = BackPrice(f);
  }
  // Per link l, with the other links' prices fixed, its price p solves
  //   sum over flows i on l of FlowPrice(others_i + p, back_i)^(-1/alpha) = capacity,
  // or is 0 if the flows fit at p = 0. The left side is convex and decreasing in p, so Newton
  // from a point below the root climbs to it without overshooting.
  // Links are updated from a FIFO worklist: every active link once, then again only while a link
  // it shares a flow with moves its price by more than kTolerance (relative). With the warm
  // start most links barely move, and the work stays near the flows that started or ended.
  // Rates within about 1e-9 relative of the fixed point: a 10 ms transfer ends within 10 ps.
  constexpr double kTolerance = 1e-9;
  constexpr size_t kMaxUpdatesPerLink = 10000;
  if (af_queued_.size() < link_flows_.size()) af_queued_.assign(link_flows_.size(), 0);
  af_work_.assign(af_links_.begin(), af_links_.end());
  for (int32_t l : af_links_) af_queued_[static_cast<size_t>(l)] = 1;
  const size_t max_updates = kMaxUpdatesPerLink * af_links_.size();
  size_t head = 0, updates = 0;
  while (head < af_work_.size() && updates < max_updates) {
    const int32_t l = af_work_[head++];
    if (head > 4096 && head * 2 > af_work_.size()) {  // drop the consumed front
      af_work_.erase(af_work_.begin(), af_work_.begin() + static_cast<std::ptrdiff_t>(head));
      head = 0;
    }
    ++updates;
    const size_t lu = static_cast<size_t>(l);
    af_queued_[lu] = 0;
    const double c = capacity_[lu] / af_unit_;
    const double old = af_price_[lu];
    af_others_.clear();
    af_backs_.clear();
    int unpriced = 0;  // flows with no other priced link: their rate is set by l alone
    for (int32_t f : link_flows_[lu]) {
      const double o = std::max(0.0, af_path_[static_cast<size_t>(f)] - old);
      af_others_.push_back(o);
      if (ack_weight_ > 0) af_backs_.push_back(af_back_[static_cast<size_t>(f)]);
      if (o == 0) ++unpriced;
    }
    // A flow's price at link price p: d = o + p forward, plus k min(back, d) (FlowPrice).
    auto excess = [&](double p, double* slope) {
      double sum = 0, d = 0;
      for (size_t i = 0; i < af_others_.size(); ++i) {
        const double fwd = af_others_[i] + p;
        const double back = ack_weight_ > 0 ? af_backs_[i] : 0;
        const double price = FlowPrice(fwd, back);
        const double dprice = back > fwd ? 1 + ack_weight_ : 1;  // d price / d p
        const double x = rate_of(price);
        sum += x;
        d -= inv * x / price * dprice;
      }
      *slope = d;
      return sum - c;
    };
    double p = 0, slope = 0;
    if (unpriced > 0 || excess(0, &slope) > 0) {
      // Below the root: the unpriced flows alone would fill the link at this price (each pays at
      // most (1 + k) p). Newton starts from the last price (usually next to the root); a step
      // from above the root lands below it, and from there it climbs without overshooting (the
      // left side stays convex: a convex decreasing function of a concave price).
      const double lo =
          unpriced == 0 ? 0
          : alpha_ == 1 ? static_cast<double>(unpriced) / c / (1 + ack_weight_)
                        : std::pow(static_cast<double>(unpriced) / c, alpha_) / (1 + ack_weight_);
      p = std::max(lo, old);
      for (int it = 0; it < 100; ++it) {
        const double e = excess(p, &slope);
        const double next = std::max(lo, p - e / slope);
        const bool done = std::abs(next - p) <= 1e-13 * next;
        p = next;
        if (done) break;
      }
    }
    if (p == old) continue;
    af_price_[lu] = p;
    for (int32_t f : link_flows_[lu]) af_path_[static_cast<size_t>(f)] += p - old;
    const std::vector<int32_t>* acks = ack_weight_ > 0 ? &af_ack_flows_[lu] : nullptr;
    if (acks) {
      for (int32_t f : *acks) af_back_[static_cast<size_t>(f)] += p - old;
    }
    if (std::abs(p - old) <= kTolerance * std::max(p, old)) continue;
    auto requeue = [&](int32_t f) {
      const Hot& h = hot_[static_cast<size_t>(f)];
      for (int i = 0; i < h.nlinks; ++i) {
        const size_t k = static_cast<size_t>(h.link[i]);
        if (k != lu && !af_queued_[k]) {
          af_queued_[k] = 1;
          af_work_.push_back(static_cast<int32_t>(k));
        }
      }
    };
    for (int32_t f : link_flows_[lu]) requeue(f);
    if (acks) {
      for (int32_t f : *acks) requeue(f);
    }
  }
  for (size_t i = head; i < af_work_.size(); ++i) af_queued_[static_cast<size_t>(af_work_[i])] = 0;
  ++stats_.rounds;
  stats_.link_visits += updates;
  // Rates, from path prices summed afresh (af_path_ was kept by increments); then, in case the
  // updates stopped short, scale down any flow on an overfull link so that no link carries more
  // than its capacity.
  for (int32_t f : free_flows_) {
    Hot& h = hot_[static_cast<size_t>(f)];
    h.new_rate = rate_of(FlowPrice(ForwardPrice(f), BackPrice(f))) * af_unit_;
  }
  for (int32_t l : af_links_) {
    double load = 0;
    for (int32_t f : link_flows_[static_cast<size_t>(l)]) load += hot_[static_cast<size_t>(f)].new_rate;
    const double over = load / capacity_[static_cast<size_t>(l)];
    if (over > 1 + 1e-9) {
      for (int32_t f : link_flows_[static_cast<size_t>(l)]) hot_[static_cast<size_t>(f)].new_rate /= over;
    }
  }
}

bool FlowNetwork::FillRound() {
  ++stats_.rounds;
  if (++round_epoch_ == 0) {
    for (Hot& h : hot_) h.stamp = 0;
    for (LinkScratch& t : link_scratch_) t.popped_stamp = 0;
    round_epoch_ = 1;
  }
  free_flows_.clear();
  moved_bits_.clear();
  fill_heap_.clear();
  restart_ = false;
  water_ = 0;
  // 1. Classify the flows on R: free (bottleneck in R, or new) or fixed at their current rate.
  for (int32_t l : region_) {
    LinkScratch& s = link_scratch_[static_cast<size_t>(l)];
    s.cnt = 0;
    s.rem = capacity_[static_cast<size_t>(l)];
    s.max_fixed = 0;
    s.frozen = 0;
    const std::vector<int32_t>& on = link_flows_[static_cast<size_t>(l)];
    double load = 0;  // the rates before this solve, summed afresh (ends the running sum's drift)
    for (size_t k = 0, n = on.size(), ahead_end = AheadEnd(prefetch_, n); k < n; ++k) {
      if (k < ahead_end) Prefetch(hot_[static_cast<size_t>(on[k + kAhead])]);
      const int32_t f = on[k];
      Hot& h = hot_[static_cast<size_t>(f)];
      if (h.stamp != round_epoch_) {
        h.stamp = round_epoch_;
        h.flags = (h.bottleneck < 0 || InRegion(h.bottleneck)) ? kFree : 0;
        if (h.flags & kFree) AddFree(f, h);
      }
      load += h.rate;
      if (h.flags & kFree) {
        ++s.cnt;
      } else {
        s.rem -= h.rate;
        s.max_fixed = std::max(s.max_fixed, h.rate);
      }
    }
    link_load_[static_cast<size_t>(l)] = load;
    stats_.flow_visits += on.size();
    if (s.cnt > 0) fill_heap_.emplace_back(s.rem / s.cnt, l);
  }
  stats_.link_visits += region_.size();
  std::make_heap(fill_heap_.begin(), fill_heap_.end(), std::greater<>());

  // 2. Progressive filling: saturate the link with the smallest fair share, freeze its free flows
  // at that level, repeat. A share grows when a flow freezes elsewhere (the stale, smaller entry
  // is pushed again when popped) and shrinks only when a flow turns free (a new entry is pushed
  // then; the stale, larger one finds the link empty or is pushed again).
  while (!fill_heap_.empty()) {
    std::pop_heap(fill_heap_.begin(), fill_heap_.end(), std::greater<>());
    const auto [key, l] = fill_heap_.back();
    fill_heap_.pop_back();
    LinkScratch& s = link_scratch_[static_cast<size_t>(l)];
    if (s.cnt == 0) continue;
    const double share = s.rem / s.cnt;
    if (share != key) {
      // Stale key. Re-push even when the share went down by a rounding hair (a flow frozen at a
      // level an ulp above this link's share): a skipped entry would strand the link's flows.
      PushShare(l);
      continue;
    }
    water_ = std::max(water_, share);
    const std::vector<int32_t>& on = link_flows_[static_cast<size_t>(l)];
    stats_.flow_visits += on.size();
    // (b) A fixed flow faster than this level would be bottlenecked here: bring its bottleneck
    // into R, which frees it (and raises this link's share above the level: look again later).
    // max_fixed bounds the rates of the link's fixed flows (a flow only turns from fixed to
    // free), so below it there is nothing to look for.
    bool grew = false;
    if (s.max_fixed > share * (1 + kRelTol)) {
      for (int32_t f : on) {
        const Hot& h = hot_[static_cast<size_t>(f)];
        if (!(h.flags & kFree) && h.rate > share * (1 + kRelTol)) {
          ActivateLink(h.bottleneck);
          grew = true;
        }
      }
    }
    if (restart_) return false;
    if (grew) {
      PushShare(l);
      continue;
    }
    s.popped_stamp = round_epoch_;
    for (size_t k = 0, n = on.size(), ahead_end = AheadEnd(prefetch_, n); k < n; ++k) {
      if (k < ahead_end) Prefetch(hot_[static_cast<size_t>(on[k + kAhead])]);
      const int32_t f = on[k];
      Hot& h = hot_[static_cast<size_t>(f)];
      if ((h.flags & (kFree | kFrozen)) != kFree) continue;
      h.flags |= kFrozen;
      h.new_rate = share;
      h.bottleneck = l;
      ++s.frozen;
      for (int i = 0; i < h.nlinks; ++i) {
        const int32_t m = h.link[i];
        if (!InRegion(m)) continue;
        LinkScratch& t = link_scratch_[static_cast<size_t>(m)];
        t.rem -= share;
        --t.cnt;
      }
      // (a) Its rate moved, so the load of every link it crosses moved: bring those that are or
      // become saturated into R.
      if (RateChanged(h)) {
        MarkMoved(h);
        for (int i = 0; i < h.nlinks; ++i) {
          const int32_t m = h.link[i];
          if (!InRegion(m) && MustJoin(m, share - h.rate)) ActivateLink(m);
        }
      }
    }
    if (restart_) return false;
  }
  return true;
}

bool FlowNetwork::MustJoin(int32_t m, double delta) {
  LinkScratch& t = link_scratch_[static_cast<size_t>(m)];
  if (t.pend_stamp != round_epoch_) {
    t.pend_stamp = round_epoch_;
    t.pend = 0;
  }
  t.pend += delta;
  const double level = capacity_[static_cast<size_t>(m)] * (1 - kSaturatedTol);
  const double load = link_load_[static_cast<size_t>(m)];
  return load >= level || load + t.pend > level;
}

void FlowNetwork::ActivateLink(int32_t link) {
  if (InRegion(link)) return;  // already accounted for in this round
  AddToRegion(link);
  LinkScratch& s = link_scratch_[static_cast<size_t>(link)];
  s.cnt = 0;
  s.rem = capacity_[static_cast<size_t>(link)];
  s.max_fixed = 0;
  s.frozen = 0;
  const double floor = water_ * (1 - kRelTol);
  const std::vector<int32_t>& on = link_flows_[static_cast<size_t>(link)];
  stats_.flow_visits += on.size();
  ++stats_.link_visits;
  double load = 0;
  for (size_t k = 0, n = on.size(), ahead_end = AheadEnd(prefetch_, n); k < n; ++k) {
    if (k < ahead_end) Prefetch(hot_[static_cast<size_t>(on[k + kAhead])]);
    const int32_t f = on[k];
    Hot& h = hot_[static_cast<size_t>(f)];
    load += h.rate;
    if (h.stamp != round_epoch_) {
      // First seen this round: none of its other links is in R.
      h.stamp = round_epoch_;
      h.flags = (h.bottleneck < 0 || InRegion(h.bottleneck)) ? kFree : 0;
      if (h.flags & kFree) AddFree(f, h);
    } else if (!(h.flags & kFree) && h.bottleneck == link) {
      // Fixed so far, but its bottleneck just joined R: it turns free on its other R-links.
      h.flags = kFree;
      AddFree(f, h);
      for (int i = 0; i < h.nlinks; ++i) {
        const int32_t m = h.link[i];
        if (m == link || !InRegion(m)) continue;
        LinkScratch& t = link_scratch_[static_cast<size_t>(m)];
        t.rem += h.rate;
        ++t.cnt;
        // m already froze flows at a level computed with this flow fixed, or its share fell below
        // the water level (m should have saturated earlier): either way, start over.
        if (t.popped_stamp == round_epoch_ || t.rem / t.cnt < floor) restart_ = true;
        PushShare(m);
      }
    }
    if (!(h.flags & kFree)) {
      s.rem -= h.rate;
      s.max_fixed = std::max(s.max_fixed, h.rate);
    } else if (h.flags & kFrozen) {
      s.rem -= h.new_rate;
    } else {
      ++s.cnt;
    }
  }
  link_load_[static_cast<size_t>(link)] = load;
  if (s.cnt > 0) {
    if (s.rem / s.cnt < floor) restart_ = true;
    PushShare(link);
  } else if (s.rem < -kRelTol * capacity_[static_cast<size_t>(link)]) {
    restart_ = true;  // over capacity: flows frozen earlier should have been limited here
  }
}

// ---- completion heap -------------------------------------------------------------------------

void FlowNetwork::GroupSiftUp(Group& g, size_t i) {
  SiftUpIn(g.heap, i, [&](size_t k, const HeapEntry& e) {
    g.heap[k] = e;
    heap_pos_[static_cast<size_t>(e.id)] = static_cast<int32_t>(k);
  });
}

void FlowNetwork::GroupSiftDown(Group& g, size_t i) {
  SiftDownIn(g.heap, i, [&](size_t k, const HeapEntry& e) {
    g.heap[k] = e;
    heap_pos_[static_cast<size_t>(e.id)] = static_cast<int32_t>(k);
  });
}

void FlowNetwork::GroupErase(Group& g, size_t i, bool sift) {
  const int32_t gone = g.heap[i].id;
  heap_pos_[static_cast<size_t>(gone)] = -1;
  flow_group_[static_cast<size_t>(gone)] = -1;
  const HeapEntry last = g.heap.back();
  g.heap.pop_back();
  if (i == g.heap.size()) return;
  g.heap[i] = last;
  heap_pos_[static_cast<size_t>(last.id)] = static_cast<int32_t>(i);
  if (!sift) return;
  if (i > 0 && last < g.heap[(i - 1) / 2]) {
    GroupSiftUp(g, i);
  } else {
    GroupSiftDown(g, i);
  }
}

void FlowNetwork::FixTop(int32_t gi) {
  Group& g = groups_[static_cast<size_t>(gi)];
  auto place = [this](size_t k, const HeapEntry& e) {
    tops_[k] = e;
    groups_[static_cast<size_t>(e.id)].top_pos = static_cast<int32_t>(k);
  };
  size_t i;
  if (g.heap.empty()) {
    // An empty group gives its memory back: flows change bottlenecks between waves (senders'
    // uplinks, then receivers' downlinks), and every group keeping its high-water capacity added
    // up to twice the entries ever live at once.
    if (g.heap.capacity() > 64) std::vector<HeapEntry>().swap(g.heap);
    if (g.top_pos < 0) return;
    i = static_cast<size_t>(g.top_pos);
    g.top_pos = -1;
    const HeapEntry last = tops_.back();
    tops_.pop_back();
    if (i == tops_.size()) return;
    place(i, last);
  } else if (g.top_pos < 0) {
    i = tops_.size();
    tops_.push_back(HeapEntry{g.heap[0].finish, g.heap[0].seq, gi});
    g.top_pos = static_cast<int32_t>(i);
  } else {
    i = static_cast<size_t>(g.top_pos);
    if (tops_[i].finish == g.heap[0].finish && tops_[i].seq == g.heap[0].seq) return;  // same head
    tops_[i].finish = g.heap[0].finish;
    tops_[i].seq = g.heap[0].seq;
  }
  if (i > 0 && tops_[i] < tops_[(i - 1) / 2]) {
    SiftUpIn(tops_, i, place);
  } else {
    SiftDownIn(tops_, i, place);
  }
}

void FlowNetwork::HeapPush(int32_t f, int32_t gi) {
  const Flow& fl = flows_[static_cast<size_t>(f)];
  Group& g = groups_[static_cast<size_t>(gi)];
  flow_group_[static_cast<size_t>(f)] = gi;
  heap_pos_[static_cast<size_t>(f)] = static_cast<int32_t>(g.heap.size());
  g.heap.push_back(HeapEntry{fl.finish, fl.seq, f});
  GroupSiftUp(g, g.heap.size() - 1);
  FixTop(gi);
}

void FlowNetwork::TakeEnding(TimeNs finish) {
  const size_t batch = done_.size();
  while (!tops_.empty() && tops_[0].finish == finish) {
    const int32_t gi = tops_[0].id;
    Group& g = groups_[static_cast<size_t>(gi)];
    // `finish` is the smallest key of all, so the group's entries at it are a subtree at the root.
    const size_t first = done_.size();
    auto ends_at = [&](size_t i) { return i < g.heap.size() && g.heap[i].finish == finish; };
    if (!ends_at(1) && !ends_at(2)) {  // the root alone (sparse traffic): a pop
      done_.push_back(Done{finish, g.heap[0].seq, 0, 0, g.heap[0].id});
      GroupErase(g, 0, /*sift=*/true);
      FixTop(gi);
      continue;
    }
    dfs_.clear();
    dfs_.push_back(0);
    while (!dfs_.empty()) {
      const size_t i = dfs_.back();
      dfs_.pop_back();
      if (!ends_at(i)) continue;
      done_.push_back(Done{finish, g.heap[i].seq, 0, 0, g.heap[i].id});  // ProcessUntil fills in
      dfs_.push_back(2 * i + 1);
      dfs_.push_back(2 * i + 2);
    }
    const size_t k = done_.size() - first;
    if (k * 8 < g.heap.size()) {
      // Few: k erases, O(log size) each.
      for (size_t j = first; j < done_.size(); ++j) {
        GroupErase(g, static_cast<size_t>(heap_pos_[static_cast<size_t>(done_[j].flow)]),
                   /*sift=*/true);
      }
    } else {
      // Many (often all: an incast's equal shares): keep the rest in place order and rebuild,
      // O(size).
      for (size_t j = first; j < done_.size(); ++j) {
        heap_pos_[static_cast<size_t>(done_[j].flow)] = -1;
        flow_group_[static_cast<size_t>(done_[j].flow)] = -1;
      }
      size_t n = 0;
      for (size_t i = 0; i < g.heap.size(); ++i) {
        if (g.heap[i].finish == finish) continue;
        g.heap[n] = g.heap[i];
        heap_pos_[static_cast<size_t>(g.heap[n].id)] = static_cast<int32_t>(n);
        ++n;
      }
      g.heap.resize(n);
      for (size_t i = n / 2; i-- > 0;) GroupSiftDown(g, i);
    }
    FixTop(gi);
  }
  // One ns's ends in start order; the groups' entries interleave.
  auto by_seq = [](const Done& a, const Done& b) { return a.seq < b.seq; };
  const auto from = done_.begin() + static_cast<std::ptrdiff_t>(batch);
  if (!std::is_sorted(from, done_.end(), by_seq)) std::sort(from, done_.end(), by_seq);
}

// ---- factory ---------------------------------------------------------------------------------

void CheckStartFlow(TimeNs now, TimeNs model_now, int64_t payload_bytes) {
  if (now < model_now) {
    throw std::invalid_argument(
        fmt::format("StartFlow: time went backwards ({} ns after {} ns)", now, model_now));
  }
  if (payload_bytes < 0) {
    throw std::invalid_argument(fmt::format("StartFlow: negative size {}", payload_bytes));
  }
}

void CheckAdvanceTo(TimeNs now, TimeNs model_now) {
  if (now < model_now) {
    throw std::invalid_argument(
        fmt::format("AdvanceTo: time went backwards ({} ns after {} ns)", now, model_now));
  }
}

void CheckNetworkSpec(const config::NetworkSpec& spec) {
  if (!(spec.efficiency > 0 && spec.efficiency <= 1)) {
    throw std::invalid_argument(fmt::format("{}: network efficiency must be in (0, 1], got {}",
                                            spec.loc.ToString(), spec.efficiency));
  }
  if (spec.per_message_overhead_ns < 0) {
    throw std::invalid_argument(fmt::format("{}: per-message overhead must be >= 0 ns, got {}",
                                            spec.loc.ToString(), spec.per_message_overhead_ns));
  }
  if (!(spec.fairness_alpha >= 0 && spec.fairness_alpha <= config::kMaxFairnessAlpha) ||
      spec.burst_bytes < 0 || spec.sender_queue_bytes < 0 || spec.queue_limit_bytes < 0) {
    throw std::invalid_argument(fmt::format(
        "{}: fairness_alpha must be in [0, 50], burst_bytes, sender_queue_bytes and "
        "queue_limit_bytes >= 0, got {}, {}, {}, {}",
        spec.loc.ToString(), spec.fairness_alpha, spec.burst_bytes, spec.sender_queue_bytes,
        spec.queue_limit_bytes));
  }
  if (!(spec.connection_Bps >= 0 && std::isfinite(spec.connection_Bps))) {
    throw std::invalid_argument(fmt::format("{}: connection_gbps must be >= 0 (0 = no cap), got {}",
                                            spec.loc.ToString(), spec.connection_Bps * 8 / 1e9));
  }
  if (!(spec.ack_path_weight >= 0 && spec.ack_path_weight <= config::kMaxAckPathWeight)) {
    throw std::invalid_argument(fmt::format("{}: ack_path_weight must be in [0, {}], got {}",
                                            spec.loc.ToString(), config::kMaxAckPathWeight,
                                            spec.ack_path_weight));
  }
  if (!(spec.congested_flow_weight > 0 && spec.congested_flow_weight <= 1)) {
    throw std::invalid_argument(fmt::format("{}: congested_flow_weight must be in (0, 1], got {}",
                                            spec.loc.ToString(), spec.congested_flow_weight));
  }
  if (spec.initial_window_bytes < 0) {
    throw std::invalid_argument(
        fmt::format("{}: initial_window_bytes must be >= 0 (0 = no windows), got {}",
                    spec.loc.ToString(), spec.initial_window_bytes));
  }
  if (spec.segment_bytes < 0 || (spec.segment_bytes > 0 && spec.initial_window_bytes <= 0)) {
    throw std::invalid_argument(fmt::format(
        "{}: segment_bytes must be >= 0 (0 = no losses) and needs initial_window_bytes > 0, got "
        "{} with initial_window_bytes {}",
        spec.loc.ToString(), spec.segment_bytes, spec.initial_window_bytes));
  }
  if (spec.send_buffer_bytes < 0 ||
      (spec.send_buffer_bytes > 0 && spec.initial_window_bytes <= 0)) {
    throw std::invalid_argument(fmt::format(
        "{}: send_buffer_bytes must be >= 0 (0 = no limit) and needs initial_window_bytes > 0, "
        "got {} with initial_window_bytes {}",
        spec.loc.ToString(), spec.send_buffer_bytes, spec.initial_window_bytes));
  }
  if (spec.loss_packet_bytes < 0 || (spec.loss_packet_bytes > 0 && spec.segment_bytes <= 0)) {
    throw std::invalid_argument(fmt::format(
        "{}: loss_packet_bytes must be >= 0 (0 = every sender halves) and needs segment_bytes > 0, "
        "got {} with segment_bytes {}",
        spec.loc.ToString(), spec.loss_packet_bytes, spec.segment_bytes));
  }
}

std::unique_ptr<NetworkModel> MakeNetworkModel(const config::NetworkSpec& spec, int num_hosts,
                                               uint64_t seed) {
  Topology topo = Topology::FromSpec(spec, num_hosts);
  switch (spec.model) {
    case config::NetworkModelKind::kFlow:
      return std::make_unique<FlowNetwork>(std::move(topo), spec);
    case config::NetworkModelKind::kAlphaBeta:
      return std::make_unique<AlphaBetaNetwork>(std::move(topo), spec);
    case config::NetworkModelKind::kQueue:
      return std::make_unique<QueueNetwork>(std::move(topo), spec, seed);
    case config::NetworkModelKind::kAuto:
      // The first pass of `auto` (sim/simulation.cc runs the flow model after it if a queue
      // filled). Without a limit no queue ever fills and auto would be the queue model.
      if (spec.queue_limit_bytes <= 0) {
        throw std::invalid_argument(fmt::format(
            "{}: model auto needs queue_limit_bytes > 0 (the receiving queues whose filling "
            "switches a job to the flow model); set it, or choose model queue or flow",
            spec.loc.ToString()));
      }
      return std::make_unique<QueueNetwork>(std::move(topo), spec, seed);
  }
  throw std::invalid_argument(
      fmt::format("{}: unknown network model (known: flow, alpha_beta, queue, auto)",
                  spec.loc.ToString()));
}

}  // namespace poseidon::sim
