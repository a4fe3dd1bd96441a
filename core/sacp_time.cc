#include "core/sacp_time.h"

#include <algorithm>
#include <cstdint>

#include "core/placement.h"

namespace poseidon::core {
namespace {

// The machines of a job and who sits where: worker w on machine w; shard j on machine j mod P1
// (co-located) or on machine P1 + j (dedicated).
struct Machines {
  int p1 = 1, p2 = 1;
  bool colocated = true;
  int count() const { return colocated ? p1 : p1 + p2; }
  int of_shard(int j) const { return colocated ? j % p1 : p1 + j; }
};

// Bytes one layer moves, per machine and direction.
struct Traffic {
  std::vector<double> out, in;
  explicit Traffic(int machines) : out(static_cast<size_t>(machines), 0.0), in(out) {}
  bool empty() const {
    for (size_t m = 0; m < out.size(); ++m) {
      if (out[m] > 0 || in[m] > 0) return false;
    }
    return true;
  }
};

// Every NIC, each direction, sends in the order the layers ask; a phase of traffic ends when its
// last byte has crossed its busiest NIC.
struct Nics {
  std::vector<double> out_free, in_free, out_total, in_total;
  explicit Nics(int machines)
      : out_free(static_cast<size_t>(machines), 0.0), in_free(out_free), out_total(out_free),
        in_total(out_free) {}
  double Run(const Traffic& tr, double start, double bytes_per_s) {
    double end = start;
    for (size_t m = 0; m < out_free.size(); ++m) {
      if (tr.out[m] > 0) {
        out_free[m] = std::max(out_free[m], start) + tr.out[m] / bytes_per_s;
        out_total[m] += tr.out[m] / bytes_per_s;
        end = std::max(end, out_free[m]);
      }
      if (tr.in[m] > 0) {
        in_free[m] = std::max(in_free[m], start) + tr.in[m] / bytes_per_s;
        in_total[m] += tr.in[m] / bytes_per_s;
        end = std::max(end, in_free[m]);
      }
    }
    return end;
  }
  double BusiestTotal() const {
    double b = 0;
    for (size_t m = 0; m < out_total.size(); ++m) b = std::max({b, out_total[m], in_total[m]});
    return b;
  }
};

}  // namespace

double EstimateIteration(const Model& model, const SacpInput& in,
                         const std::vector<Scheme>& scheme_of_layer) {
  const SacpTiming& t = *in.timing;
  const Machines mach{in.workers, in.servers, in.colocated};
  const int nm = mach.count();
  const auto& layers = model.layers();
  const size_t nl = layers.size();
  const Placement placement =
      Placement::Build(model, in.servers, t.chunk_bytes, scheme_of_layer, t.placement_policy);
  const double p1 = in.workers;
  // Bytes of one gradient value on the wire (pushes, factors, ring steps); parameters are fp32.
  const double gv = static_cast<double>(WirePayloadBytes(in.gradient_wire, 4, 1));
  auto time_of = [&](const std::vector<double>& v, size_t l) { return l < v.size() ? v[l] : 0.0; };

  // Per layer: what it puts on every NIC (PS pushes; then, once a shard has them all and has
  // updated, PS pulls; SFB factors and ring steps, which need no shard), what it adds after the
  // NIC (latency) and the rebuild work it puts on the compute stream.
  std::vector<Traffic> push(nl, Traffic(nm)), pull(nl, Traffic(nm)), traffic(nl, Traffic(nm));
  std::vector<double> after(nl, 0.0), rebuild(nl, 0.0);
  // Per layer and shard: the update the shard runs on its server stream, one layer after another.
  std::vector<std::vector<double>> update(nl);
  for (int id : model.param_layers()) {
    const size_t l = static_cast<size_t>(id);
    const Layer& layer = layers[l];
    const Scheme s = scheme_of_layer[l];
    Traffic& tr = traffic[l];
    // PS chunks (every blob of a ps layer, the bias of an sfb one): each worker pushes the chunk
    // to its shard's machine and pulls it back, unless they share the machine.
    std::vector<double> shard_bytes(static_cast<size_t>(in.servers), 0.0);
    for (int32_t cid : placement.chunks_of_layer(id)) {
      const Chunk& c = placement.chunks()[static_cast<size_t>(cid)];
      const double b = static_cast<double>(c.bytes());
      const double g = b * gv / 4;  // the push (gradient_wire)
      const int h = mach.of_shard(c.shard);
      shard_bytes[static_cast<size_t>(c.shard)] += b;
      for (int w = 0; w < in.workers; ++w) {
        if (w == h) continue;
        push[l].out[static_cast<size_t>(w)] += g;
        push[l].in[static_cast<size_t>(h)] += g;
        pull[l].out[static_cast<size_t>(h)] += b;
        pull[l].in[static_cast<size_t>(w)] += b;
      }
    }
    if (!placement.chunks_of_layer(id).empty()) {
      update[l].resize(shard_bytes.size());
      for (size_t j = 0; j < shard_bytes.size(); ++j) {
        update[l][j] = shard_bytes[j] * t.update_s_per_byte;
      }
    }
    if (in.workers < 2) continue;
    if (s == Scheme::kSfb) {
      const double f = gv * static_cast<double>(SfbFactorFloats(layer, in.batch)) * (p1 - 1);
      for (int w = 0; w < in.workers; ++w) {
        tr.out[static_cast<size_t>(w)] += f;
        tr.in[static_cast<size_t>(w)] += f;
      }
      after[l] = t.message_s;
      rebuild[l] = (p1 - 1) * time_of(t.sfb_rebuild_s, l);
    } else if (s == Scheme::kAllreduce) {
      const double b = gv * static_cast<double>(layer.params) * 2.0 * (p1 - 1) / p1;
      for (int w = 0; w < in.workers; ++w) {
        tr.out[static_cast<size_t>(w)] += b;
        tr.in[static_cast<size_t>(w)] += b;
      }
      after[l] = 2 * (p1 - 1) * t.message_s;
    }
  }

  // The backward pass, last layer first, makes each layer's gradients ready (DWBP), or all of
  // them at its end; each NIC sends in that order.
  double backward = 0;
  std::vector<double> ready(nl, 0.0);
  for (size_t l = nl; l-- > 0;) {
    backward += time_of(t.bwd_s, l);
    ready[l] = backward;
  }
  Nics nics(nm);
  std::vector<double> server_free(static_cast<size_t>(in.servers), 0.0);
  std::vector<double> done(nl, 0.0);
  double compute = backward;  // the compute stream: the backward pass, then the rebuilds
  double rebuild_total = 0;
  const bool local = !t.local_reduce_s.empty();  // several devices per machine
  double reduce_free = 0, broadcast_free = 0;
  for (size_t l = nl; l-- > 0;) {
    if (layers[l].params == 0) continue;
    double start = t.dwbp ? ready[l] : backward;
    if (local) {
      reduce_free = std::max(reduce_free, start) + time_of(t.local_reduce_s, l);
      start = reduce_free;
    }
    // SFB factors and ring steps.
    double end = traffic[l].empty() ? start : nics.Run(traffic[l], start, t.nic_Bps) + after[l];
    if (!update[l].empty()) {
      // PS: the pushes arrive (one message later), each shard updates its part of the layer
      // after the layers before, and only then do the pulls leave (one message more).
      const double pushed = nics.Run(push[l], start, t.nic_Bps) + t.message_s;
      double updated = pushed;
      for (size_t j = 0; j < update[l].size(); ++j) {
        if (update[l][j] <= 0) continue;
        server_free[j] = std::max(server_free[j], pushed) + update[l][j];
        updated = std::max(updated, server_free[j]);
      }
      end = std::max(end, nics.Run(pull[l], updated, t.nic_Bps) + t.message_s);
    }
    done[l] = end;
    if (rebuild[l] > 0) {
      // The factors' rebuilds run on the compute stream once they arrived.
      compute = std::max(compute, done[l]) + rebuild[l];
      rebuild_total += rebuild[l];
      done[l] = compute;
    }
    if (local) {
      broadcast_free = std::max(broadcast_free, done[l]) + time_of(t.local_broadcast_s, l);
      done[l] = broadcast_free;
    }
  }
  double forward = 0;
  for (size_t l = 0; l < nl; ++l) forward += time_of(t.fwd_s, l);
  if (!t.waits_for_fresh) {
    // Stale values are good enough: the slower of the compute and the busiest NIC sets the pace.
    return std::max(forward + backward + rebuild_total, nics.BusiestTotal());
  }
  if (!t.per_layer_gate) {
    double all = compute;
    for (size_t l = 0; l < nl; ++l) all = std::max(all, done[l]);
    return all + forward;
  }
  double clock = compute;
  for (size_t l = 0; l < nl; ++l) {
    if (layers[l].params > 0) clock = std::max(clock, done[l]);
    clock += time_of(t.fwd_s, l);
  }
  return clock;
}

std::vector<Scheme> UniformPlan(const Model& model, Scheme scheme) {
  std::vector<Scheme> plan(model.layers().size(), Scheme::kPs);
  for (int id : model.param_layers()) {
    const bool fc = HasSufficientFactors(model.layers()[static_cast<size_t>(id)]);
    plan[static_cast<size_t>(id)] = scheme == Scheme::kSfb && !fc ? Scheme::kPs : scheme;
  }
  return plan;
}

std::vector<Scheme> SearchPlan(const Model& model, const SacpInput& in,
                               const std::vector<Scheme>& start, const std::vector<bool>& free,
                               const std::vector<Scheme>& allowed) {
  const auto& layers = model.layers();
  auto fits = [&](size_t l, Scheme s) { return s != Scheme::kSfb || HasSufficientFactors(layers[l]); };
  // Candidates: the start (the paper's plan) and one allowed scheme for every free layer. The
  // estimate is a model, not a measurement: another plan replaces the paper's only when it is
  // clearly faster (kCandidateGain), and a one-layer move only when it gains kMoveGain, so that
  // near-ties keep the plan that moves the fewest bytes (and the fewest messages: a ring over
  // 1,024 workers is 2,046 steps per piece).
  constexpr double kCandidateGain = 0.01, kMoveGain = 0.002;
  std::vector<Scheme> best = start;
  double best_t = EstimateIteration(model, in, best);
  for (Scheme s : allowed) {
    const std::vector<Scheme> uniform = UniformPlan(model, s);
    std::vector<Scheme> plan = start;
    for (size_t l = 0; l < layers.size(); ++l) {
      if (free[l]) plan[l] = uniform[l];
    }
    const double e = EstimateIteration(model, in, plan);
    if (e < best_t * (1 - kCandidateGain)) {
      best_t = e;
      best = std::move(plan);
    }
  }
  // Then one layer at a time, while that gains (a few rounds at most).
  for (int round = 0; round < 4; ++round) {
    bool changed = false;
    for (size_t l = 0; l < layers.size(); ++l) {
      if (!free[l] || layers[l].params == 0) continue;
      for (Scheme s : allowed) {
        if (s == best[l] || !fits(l, s)) continue;
        std::vector<Scheme> plan = best;
        plan[l] = s;
        const double e = EstimateIteration(model, in, plan);
        if (e < best_t * (1 - kMoveGain)) {
          best_t = e;
          best = std::move(plan);
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  return best;
}

}  // namespace poseidon::core
