#include "sim/network/flow_network.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "sim/network/alpha_beta.h"

namespace poseidon::sim {
namespace {

// Relative tolerance of the solver: a rate within kRelTol of its old value is "unchanged", and a
// fixed flow may exceed a link's level by kRelTol before it counts as bottlenecked there. Far
// above the rounding noise of a re-solve (~1e-15), far below anything a timing result can see.
constexpr double kRelTol = 1e-12;
constexpr double kInf = std::numeric_limits<double>::infinity();
// Longest transmission we represent (~127 years); keeps finish times far from overflow.
constexpr double kMaxDurationNs = 4e18;

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
      overhead_ns_(spec.per_message_overhead_ns) {
  if (!(efficiency_ > 0 && efficiency_ <= 1)) {
    throw std::invalid_argument(fmt::format(
        "{}: network efficiency must be in (0, 1], got {}", spec.loc.ToString(), efficiency_));
  }
  if (overhead_ns_ < 0) {
    throw std::invalid_argument(fmt::format("{}: per-message overhead must be >= 0 ns, got {}",
                                            spec.loc.ToString(), overhead_ns_));
  }
  const size_t n = static_cast<size_t>(topo_.num_links());
  capacity_.resize(n);
  for (size_t l = 0; l < n; ++l) capacity_[l] = topo_.link(static_cast<int>(l)).capacity_Bps;
  link_flows_.resize(n);
  link_bytes_.assign(n, 0.0);
  link_busy_ns_.assign(n, 0);
  link_busy_since_.assign(n, 0);
  link_scratch_.resize(n);
}

// ---- public interface ------------------------------------------------------------------------

void FlowNetwork::StartFlow(TimeNs now, int src, int dst, int64_t payload_bytes, uint64_t tag) {
  if (now < now_) {
    throw std::invalid_argument(
        fmt::format("StartFlow: time went backwards ({} ns after {} ns)", now, now_));
  }
  if (payload_bytes < 0) {
    throw std::invalid_argument(fmt::format("StartFlow: negative size {}", payload_bytes));
  }
  const Route route = topo_.RouteBetween(src, dst);  // validates src, dst
  if (!seeds_.empty() && pending_t_ != now) Flush();
  // Flows that ended before `now` leave the links first; they are reported by the next AdvanceTo.
  ProcessUntil(now, /*inclusive=*/false);
  now_ = now;

  const int32_t f = AllocFlow();
  Flow& fl = flows_[static_cast<size_t>(f)];
  fl.seq = next_seq_++;
  fl.tag = tag;
  fl.src = src;
  fl.dst = dst;
  fl.extra = topo_.RouteLatency(route) + overhead_ns_;
  fl.wire = static_cast<double>(payload_bytes) / efficiency_;
  fl.remaining = fl.wire;
  fl.rate = 0;
  fl.last_t = now;
  fl.bottleneck = -1;
  fl.nlinks = route.size;
  for (int i = 0; i < route.size; ++i) fl.link[i] = route.links[static_cast<size_t>(i)];
  ++active_count_;
  if (payload_bytes == 0) {
    // Nothing to transmit: never enters the solver, ends now.
    fl.nlinks = 0;
    fl.finish = now;
    HeapPush(f);
    return;
  }
  fl.finish = kNever;
  AttachToLinks(f, now);
  pending_t_ = now;
}

TimeNs FlowNetwork::NextEventTime() const {
  Flush();
  // Retired by a later StartFlow but not reported yet: due now (they ended earlier).
  if (!done_.empty()) return std::max(done_.front().finish, now_);
  if (heap_.empty()) return kNever;
  return flows_[static_cast<size_t>(heap_[0])].finish;
}

void FlowNetwork::AdvanceTo(TimeNs now, std::vector<FlowDone>* done) {
  if (now < now_) {
    throw std::invalid_argument(
        fmt::format("AdvanceTo: time went backwards ({} ns after {} ns)", now, now_));
  }
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
      const double left =
          fl.remaining - fl.rate * static_cast<double>(std::max<TimeNs>(0, now - fl.last_t)) * 1e-9;
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
  std::vector<const Flow*> live;
  for (const Flow& fl : flows_) {
    if (fl.live) live.push_back(&fl);
  }
  std::sort(live.begin(), live.end(), [](const Flow* a, const Flow* b) { return a->seq < b->seq; });
  std::vector<FlowInfo> out;
  out.reserve(live.size());
  for (const Flow* fl : live) {
    FlowInfo info;
    info.tag = fl->tag;
    info.src = fl->src;
    info.dst = fl->dst;
    info.route = topo_.RouteBetween(fl->src, fl->dst);
    info.rate_Bps = fl->rate;
    info.remaining_bytes = fl->remaining;
    info.finish = fl->finish;
    out.push_back(info);
  }
  return out;
}

// ---- flows and links -------------------------------------------------------------------------

int32_t FlowNetwork::AllocFlow() {
  int32_t f;
  if (!free_slots_.empty()) {
    f = free_slots_.back();
    free_slots_.pop_back();
  } else {
    f = static_cast<int32_t>(flows_.size());
    flows_.emplace_back();
  }
  Flow& fl = flows_[static_cast<size_t>(f)];
  fl = Flow{};  // round_stamp 0: never equal to a live round epoch (they start at 1)
  fl.live = true;
  return f;
}

void FlowNetwork::AttachToLinks(int32_t f, TimeNs now) {
  Flow& fl = flows_[static_cast<size_t>(f)];
  for (int i = 0; i < fl.nlinks; ++i) {
    const int32_t l = fl.link[i];
    std::vector<int32_t>& on = link_flows_[static_cast<size_t>(l)];
    if (on.empty()) link_busy_since_[static_cast<size_t>(l)] = now;
    fl.pos[i] = static_cast<int32_t>(on.size());
    on.push_back(f);
    seeds_.push_back(l);
  }
}

void FlowNetwork::DetachFromLinks(int32_t f, TimeNs now) {
  Flow& fl = flows_[static_cast<size_t>(f)];
  for (int i = 0; i < fl.nlinks; ++i) {
    const int32_t l = fl.link[i];
    std::vector<int32_t>& on = link_flows_[static_cast<size_t>(l)];
    const int32_t idx = fl.pos[i];
    const int32_t moved = on.back();
    on[static_cast<size_t>(idx)] = moved;
    on.pop_back();
    if (moved != f) {
      Flow& m = flows_[static_cast<size_t>(moved)];
      for (int j = 0; j < m.nlinks; ++j) {
        if (m.link[j] == l) {
          m.pos[j] = idx;
          break;
        }
      }
    }
    link_bytes_[static_cast<size_t>(l)] += fl.wire;
    if (on.empty()) link_busy_ns_[static_cast<size_t>(l)] += now - link_busy_since_[static_cast<size_t>(l)];
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
  while (!heap_.empty()) {
    const TimeNs finish = flows_[static_cast<size_t>(heap_[0])].finish;
    if (finish > t || (!inclusive && finish == t)) break;
    // Every flow ending at this ns leaves together; one solve for all of them.
    while (!heap_.empty() && flows_[static_cast<size_t>(heap_[0])].finish == finish) {
      const int32_t f = HeapPop();
      const Flow& fl = flows_[static_cast<size_t>(f)];
      done_.push_back(Done{finish, fl.seq, fl.tag, finish + fl.extra});
      Complete(f, finish);
    }
    pending_t_ = finish;
    Solve(finish);
  }
  // A re-solve may end another flow at the same ns (a rounding hair from done); keep start order.
  auto by_time_seq = [](const Done& a, const Done& b) {
    return a.finish != b.finish ? a.finish < b.finish : a.seq < b.seq;
  };
  if (!std::is_sorted(done_.begin() + static_cast<std::ptrdiff_t>(first), done_.end(), by_time_seq)) {
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

void FlowNetwork::Solve(TimeNs now) {
  if (seeds_.empty()) return;
  ++stats_.solves;
  if (++region_epoch_ == 0) {  // wrapped: forget all stamps
    for (LinkScratch& s : link_scratch_) s.region_stamp = 0;
    region_epoch_ = 1;
  }
  region_.clear();
  for (int32_t l : seeds_) AddToRegion(l);
  seeds_.clear();

  for (;;) {
    ++stats_.rounds;
    if (++round_epoch_ == 0) {
      for (Flow& fl : flows_) fl.round_stamp = 0;
      round_epoch_ = 1;
    }
    free_flows_.clear();
    fill_heap_.clear();
    // 1. Classify the flows on R: free (bottleneck in R, or new) or fixed (subtract their rate).
    for (int32_t l : region_) {
      LinkScratch& s = link_scratch_[static_cast<size_t>(l)];
      s.cnt = 0;
      s.rem = capacity_[static_cast<size_t>(l)];
      s.level = kInf;
      s.max_fixed = 0;
      const std::vector<int32_t>& on = link_flows_[static_cast<size_t>(l)];
      for (int32_t f : on) {
        Flow& fl = flows_[static_cast<size_t>(f)];
        if (fl.round_stamp != round_epoch_) {
          fl.round_stamp = round_epoch_;
          fl.is_free = fl.bottleneck < 0 || InRegion(fl.bottleneck);
          fl.frozen = false;
          if (fl.is_free) free_flows_.push_back(f);
        }
        if (fl.is_free) {
          ++s.cnt;
        } else {
          s.rem -= fl.rate;
          s.max_fixed = std::max(s.max_fixed, fl.rate);
        }
      }
      stats_.flow_visits += on.size();
      if (s.cnt > 0) fill_heap_.emplace_back(s.rem / s.cnt, l);
    }
    stats_.link_visits += region_.size();

    // 2. Progressive filling over the free flows: saturate the link with the smallest fair share,
    // freeze its flows at that level, repeat. Shares only grow as flows freeze elsewhere, so a
    // popped entry whose key is stale is pushed back with the current share.
    std::make_heap(fill_heap_.begin(), fill_heap_.end(), std::greater<>());
    while (!fill_heap_.empty()) {
      std::pop_heap(fill_heap_.begin(), fill_heap_.end(), std::greater<>());
      const auto [key, l] = fill_heap_.back();
      fill_heap_.pop_back();
      LinkScratch& s = link_scratch_[static_cast<size_t>(l)];
      if (s.cnt == 0) continue;
      const double share = s.rem / s.cnt;
      if (share != key) {
        fill_heap_.emplace_back(share, l);
        std::push_heap(fill_heap_.begin(), fill_heap_.end(), std::greater<>());
        continue;
      }
      s.level = share;
      for (int32_t f : link_flows_[static_cast<size_t>(l)]) {
        Flow& fl = flows_[static_cast<size_t>(f)];
        if (!fl.is_free || fl.frozen) continue;
        fl.frozen = true;
        fl.new_rate = share;
        fl.new_bottleneck = l;
        for (int i = 0; i < fl.nlinks; ++i) {
          const int32_t m = fl.link[i];
          if (!InRegion(m)) continue;
          LinkScratch& t = link_scratch_[static_cast<size_t>(m)];
          t.rem -= share;
          --t.cnt;
        }
      }
    }

    // 3. Grow R where the result is not yet consistent with the rest of the network.
    grow_.clear();
    for (int32_t l : region_) {
      const LinkScratch& s = link_scratch_[static_cast<size_t>(l)];
      const double limit = s.level * (1 + kRelTol);
      if (!(s.max_fixed > limit)) continue;
      // (b) A fixed flow would now be bottlenecked here: free it by adding its bottleneck.
      for (int32_t f : link_flows_[static_cast<size_t>(l)]) {
        const Flow& fl = flows_[static_cast<size_t>(f)];
        if (!fl.is_free && fl.rate > limit) grow_.push_back(fl.bottleneck);
      }
    }
    for (int32_t f : free_flows_) {
      const Flow& fl = flows_[static_cast<size_t>(f)];
      if (fl.rate > 0 && std::abs(fl.new_rate - fl.rate) <= kRelTol * fl.rate) continue;
      // (a) Its rate moved: the load of every link it crosses moved.
      for (int i = 0; i < fl.nlinks; ++i) {
        if (!InRegion(fl.link[i])) grow_.push_back(fl.link[i]);
      }
    }
    if (grow_.empty()) break;
    for (int32_t l : grow_) AddToRegion(l);
  }

  // 4. Commit: only flows whose rate moved get a new finish time.
  for (int32_t f : free_flows_) {
    Flow& fl = flows_[static_cast<size_t>(f)];
    fl.bottleneck = fl.new_bottleneck;
    if (fl.rate > 0 && std::abs(fl.new_rate - fl.rate) <= kRelTol * fl.rate) continue;
    if (fl.rate > 0) {
      fl.remaining -= fl.rate * static_cast<double>(now - fl.last_t) * 1e-9;
      if (fl.remaining < 0) fl.remaining = 0;
    }
    fl.last_t = now;
    fl.rate = fl.new_rate;
    fl.finish = now + RoundUpNs(fl.remaining / fl.rate * 1e9);
    if (fl.heap_pos < 0) {
      HeapPush(f);
    } else {
      HeapFix(f);
    }
    ++stats_.rate_changes;
  }
}

// ---- completion heap -------------------------------------------------------------------------

bool FlowNetwork::HeapLess(int32_t a, int32_t b) const {
  const Flow& x = flows_[static_cast<size_t>(a)];
  const Flow& y = flows_[static_cast<size_t>(b)];
  return x.finish != y.finish ? x.finish < y.finish : x.seq < y.seq;
}

void FlowNetwork::SiftUp(size_t i) {
  const int32_t f = heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!HeapLess(f, heap_[parent])) break;
    heap_[i] = heap_[parent];
    flows_[static_cast<size_t>(heap_[i])].heap_pos = static_cast<int32_t>(i);
    i = parent;
  }
  heap_[i] = f;
  flows_[static_cast<size_t>(f)].heap_pos = static_cast<int32_t>(i);
}

void FlowNetwork::SiftDown(size_t i) {
  const int32_t f = heap_[i];
  const size_t n = heap_.size();
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && HeapLess(heap_[child + 1], heap_[child])) ++child;
    if (!HeapLess(heap_[child], f)) break;
    heap_[i] = heap_[child];
    flows_[static_cast<size_t>(heap_[i])].heap_pos = static_cast<int32_t>(i);
    i = child;
  }
  heap_[i] = f;
  flows_[static_cast<size_t>(f)].heap_pos = static_cast<int32_t>(i);
}

void FlowNetwork::HeapPush(int32_t f) {
  heap_.push_back(f);
  SiftUp(heap_.size() - 1);
}

void FlowNetwork::HeapFix(int32_t f) {
  const size_t i = static_cast<size_t>(flows_[static_cast<size_t>(f)].heap_pos);
  SiftUp(i);
  SiftDown(static_cast<size_t>(flows_[static_cast<size_t>(f)].heap_pos));
}

int32_t FlowNetwork::HeapPop() {
  const int32_t top = heap_[0];
  const int32_t last = heap_.back();
  heap_.pop_back();
  if (!heap_.empty()) {
    heap_[0] = last;
    SiftDown(0);
  }
  flows_[static_cast<size_t>(top)].heap_pos = -1;
  return top;
}

// ---- factory ---------------------------------------------------------------------------------

std::unique_ptr<NetworkModel> MakeNetworkModel(const config::NetworkSpec& spec, int num_hosts) {
  Topology topo = Topology::FromSpec(spec, num_hosts);
  switch (spec.model) {
    case config::NetworkModelKind::kFlow:
      return std::make_unique<FlowNetwork>(std::move(topo), spec);
    case config::NetworkModelKind::kAlphaBeta:
      return std::make_unique<AlphaBetaNetwork>(std::move(topo), spec);
  }
  throw std::invalid_argument(
      fmt::format("{}: unknown network model (known: flow, alpha_beta)", spec.loc.ToString()));
}

}  // namespace poseidon::sim
