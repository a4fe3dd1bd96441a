#include "cost/intra_machine.h"

#include <algorithm>
#include <limits>

#include <cmath>

#include "core/types.h"

namespace poseidon::cost {
namespace {

// A duration in (fractional) ns rounded up to whole ns, forgiving the last ulps of rounding noise,
// as the network models round (sim/network/flow_network.h RoundUpNs; this library, shared with
// the live runtime's replayed compute, does not link the network models).
TimeNs CeilNs(double ns) {
  if (!(ns > 0)) return 0;
  if (ns >= 9e18) return kNever;
  const double r = std::ceil(ns - std::max(1e-6, ns * 1e-12));
  return r > 0 ? static_cast<TimeNs>(r) : 0;
}

}  // namespace

IntraMachine::IntraMachine(const config::InterconnectSpec& spec, int devices, int machines,
                           double nic_Bps)
    : spec_(spec), devices_(devices), nic_Bps_(nic_Bps), machines_(static_cast<size_t>(machines)) {
  POSEIDON_CHECK(devices >= 2) << devices << " devices";
  POSEIDON_CHECK(spec.host_memory_Bps > 0) << "host memory bandwidth " << spec.host_memory_Bps;
  capacity_[kHostMemory] = spec.host_memory_Bps;
  if (spec.kind != config::InterconnectKind::kHost) {
    POSEIDON_CHECK(spec.pcie_Bps > 0) << "pcie bandwidth " << spec.pcie_Bps;
    capacity_[kUp] = capacity_[kDown] = spec.pcie_Bps;
  }
  if (spec.kind == config::InterconnectKind::kNvlink) {
    POSEIDON_CHECK(spec.link_Bps > 0) << "link bandwidth " << spec.link_Bps;
    capacity_[kNvlink] = spec.link_Bps;
  }
}

std::vector<IntraMachine::Stage> IntraMachine::StagesOf(IntraOp op, int64_t bytes) const {
  const double s = static_cast<double>(bytes);
  const double d = devices_;
  const double ring = (d - 1) / d * s;  // what each device sends (and receives) in a ring pass
  const TimeNs lambda = spec_.link_latency_ns;
  const bool reduce = op == IntraOp::kReduce;
  std::vector<Stage> stages;
  if (op == IntraOp::kPeerCopy || op == IntraOp::kToHost || op == IntraOp::kFromHost) {
    stages.push_back(CopyStage(op, s));
    return stages;
  }
  if (spec_.kind == config::InterconnectKind::kHost) {
    Stage st;
    st.bytes[kHostMemory] = reduce ? (d + 1) * s : 2 * (d - 1) * s;
    stages.push_back(st);
    return stages;
  }
  auto ring_stage = [&]() {
    Stage st;
    st.latency = (devices_ - 1) * lambda;
    if (spec_.kind == config::InterconnectKind::kNvlink) {
      st.bytes[kNvlink] = ring;
    } else {
      st.bytes[kUp] = st.bytes[kDown] = ring;
    }
    return st;
  };
  if (spec_.reduce_on == config::ReduceOn::kDevice) {
    Stage host;  // 1/D of the layer per device, between the devices and host memory
    host.latency = lambda;
    host.bytes[reduce ? kUp : kDown] = s / d;
    host.bytes[kHostMemory] = s;
    if (reduce) {
      stages.push_back(ring_stage());
      stages.push_back(host);
    } else {
      stages.push_back(host);
      stages.push_back(ring_stage());
    }
    return stages;
  }
  Stage copies;  // the whole layer between every device and host memory
  copies.latency = lambda;
  copies.bytes[reduce ? kUp : kDown] = s;
  copies.bytes[kHostMemory] = d * s;
  stages.push_back(copies);
  if (reduce) {
    Stage sum;  // the CPU reads the D gradients and writes their mean
    sum.bytes[kHostMemory] = (d + 1) * s;
    stages.push_back(sum);
  }
  return stages;
}

IntraMachine::Stage IntraMachine::CopyStage(IntraOp op, double s) const {
  const double d = devices_;
  Stage st;
  if (spec_.kind == config::InterconnectKind::kHost) {
    // CPU devices: the copy reads and writes host memory, which is one resource already.
    st.bytes[kHostMemory] = 2 * s;
    return st;
  }
  st.latency = spec_.link_latency_ns;
  double link = 0;  // one device's link the copy is limited by
  if (op == IntraOp::kPeerCopy && spec_.kind == config::InterconnectKind::kNvlink) {
    st.bytes[kNvlink] = s / d;
    link = capacity_[kNvlink];
  } else {
    if (op != IntraOp::kFromHost) st.bytes[kUp] = s / d;
    if (op != IntraOp::kToHost) st.bytes[kDown] = s / d;
    if (op != IntraOp::kPeerCopy) st.bytes[kHostMemory] = s;  // host memory is one resource
    link = capacity_[kUp];
  }
  if (s > 0) st.alone_limit = link / s;
  return st;
}

TimeNs IntraMachine::AloneNs(IntraOp op, int64_t bytes) const {
  TimeNs total = 0;
  for (const Stage& st : StagesOf(op, bytes)) {
    double s = 0;
    for (int r = 0; r < kNumResources; ++r) {
      if (st.bytes[r] > 0) s = std::max(s, st.bytes[r] / capacity_[r]);
    }
    if (st.alone_limit < std::numeric_limits<double>::infinity()) s = std::max(s, 1 / st.alone_limit);
    total += st.latency + CeilNs(s * 1e9);
  }
  return total;
}

TimeNs IntraMachine::Start(TimeNs now, int machine, IntraOp op, int64_t bytes, uint64_t tag) {
  Machine& m = machines_[static_cast<size_t>(machine)];
  Progress(m, now);
  Op o;
  o.tag = tag;
  o.stages = StagesOf(op, bytes);
  o.event = now + o.stages.front().latency;
  o.moving = o.stages.front().latency == 0;  // no latency to wait: the bytes move from now
  m.ops.push_back(std::move(o));
  Solve(m, now);
  return NextEvent(m);
}

TimeNs IntraMachine::SetNic(TimeNs now, int machine, int directions) {
  Machine& m = machines_[static_cast<size_t>(machine)];
  Progress(m, now);
  m.nic_directions = directions;
  Solve(m, now);
  return NextEvent(m);
}

TimeNs IntraMachine::Advance(TimeNs now, int machine, std::vector<uint64_t>* done) {
  Machine& m = machines_[static_cast<size_t>(machine)];
  Progress(m, now);
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t i = 0; i < m.ops.size();) {
      Op& o = m.ops[i];
      if (o.event > now) {
        ++i;
        continue;
      }
      changed = true;
      if (!o.moving) {  // the latency is over: the bytes start moving
        o.moving = true;
        o.remaining = 1;
        ++i;
        continue;
      }
      if (++o.stage < o.stages.size()) {
        o.event = now + o.stages[o.stage].latency;
        o.moving = o.stages[o.stage].latency == 0;
        o.remaining = 1;
        ++i;
        continue;
      }
      done->push_back(o.tag);
      m.ops.erase(m.ops.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (changed) Solve(m, now);
  }
  return NextEvent(m);
}

void IntraMachine::Progress(Machine& m, TimeNs now) {
  const double dt = static_cast<double>(now - m.last) * 1e-9;
  for (Op& o : m.ops) {
    if (o.moving) o.remaining = std::max(0.0, o.remaining - o.rate * dt);
  }
  m.last = now;
}

// Progressive filling of the common slowdown u (see the header) over the moving ops and the NIC.
void IntraMachine::Solve(Machine& m, TimeNs now) {
  struct Consumer {
    Op* op = nullptr;  // null: the NIC
    double alone = 0;  // fraction of the stage per second when alone (ops)
    double load[kNumResources] = {0, 0, 0, 0};  // bytes/s on each resource at u = 1
    double u = -1;     // < 0 while not frozen
  };
  std::vector<Consumer> cs;
  for (Op& o : m.ops) {
    if (!o.moving) continue;
    const Stage& st = o.stages[o.stage];
    Consumer c;
    c.op = &o;
    c.alone = std::numeric_limits<double>::infinity();
    for (int r = 0; r < kNumResources; ++r) {
      if (st.bytes[r] > 0) c.alone = std::min(c.alone, Capacity(r) / st.bytes[r]);
    }
    if (c.alone < std::numeric_limits<double>::infinity()) c.alone = std::min(c.alone, st.alone_limit);
    if (c.alone == std::numeric_limits<double>::infinity()) {  // nothing to move
      o.rate = 0;
      o.event = now;
      continue;
    }
    for (int r = 0; r < kNumResources; ++r) c.load[r] = c.alone * st.bytes[r];
    cs.push_back(c);
  }
  if (cs.empty()) return;
  if (m.nic_directions > 0) {
    Consumer nic;
    nic.load[kHostMemory] = m.nic_directions * nic_Bps_;
    cs.push_back(nic);
  }
  double used[kNumResources] = {0, 0, 0, 0};
  size_t frozen = 0;
  while (frozen < cs.size()) {
    double level = 1;
    int tight = -1;
    for (int r = 0; r < kNumResources; ++r) {
      double demand = 0;
      for (const Consumer& c : cs) {
        if (c.u < 0) demand += c.load[r];
      }
      if (demand <= 0) continue;
      const double u = std::max(0.0, Capacity(r) - used[r]) / demand;
      if (u < level) {
        level = u;
        tight = r;
      }
    }
    for (Consumer& c : cs) {
      if (c.u >= 0 || (tight >= 0 && c.load[tight] <= 0)) continue;
      c.u = level;
      ++frozen;
      for (int r = 0; r < kNumResources; ++r) used[r] += level * c.load[r];
    }
  }
  for (const Consumer& c : cs) {
    if (!c.op) continue;
    c.op->rate = c.u * c.alone;
    c.op->event = c.op->rate > 0 ? now + CeilNs(c.op->remaining / c.op->rate * 1e9) : kNever;
  }
}

TimeNs IntraMachine::NextEvent(const Machine& m) const {
  TimeNs next = kNever;
  for (const Op& o : m.ops) next = std::min(next, o.event);
  return next;
}

}  // namespace poseidon::cost
