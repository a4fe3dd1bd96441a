#include "core/sacp.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/sacp_time.h"

namespace poseidon::core {
namespace {

// "664.123": milliseconds with three decimals.
std::string Ms(double seconds) {
  const long long us = std::llround(seconds * 1e6);
  const long long frac = us % 1000;
  return std::to_string(us / 1000) + "." + (frac < 100 ? "0" : "") + (frac < 10 ? "0" : "") +
         std::to_string(frac);
}

// Costs are kept exact as integers in units of 1/L byte, L = lcm(P1, P2), so that shares S/P2
// and S/P1 need no rounding and `auto` compares exact values (ties at the SFB threshold are real
// ties). Overflow (only for absurd clusters) is reported, never wrapped.
int64_t Mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw std::invalid_argument("SACP cost model: byte count overflows 64 bits (cluster too large)");
  }
  return r;
}
int64_t Mul(int64_t a, int64_t b, int64_t c) { return Mul(Mul(a, b), c); }
int64_t Add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw std::invalid_argument("SACP cost model: byte count overflows 64 bits (cluster too large)");
  }
  return r;
}

int64_t Gcd(int64_t a, int64_t b) {
  while (b != 0) {
    const int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

struct Ctx {
  int64_t p1 = 1, p2 = 1, k = 1;
  bool colocated = true;
  int64_t unit = 1;  // L = lcm(P1, P2): every cost below is in 1/L byte

  explicit Ctx(const SacpInput& in) : p1(in.workers), p2(in.servers), k(in.batch) {
    colocated = in.colocated;
    if (in.workers < 1 || in.servers < 1 || in.batch < 1) {
      throw std::invalid_argument("SACP cost model: workers, servers and batch must be >= 1 (got " +
                                  std::to_string(in.workers) + ", " + std::to_string(in.servers) +
                                  ", " + std::to_string(in.batch) + ")");
    }
    unit = Mul(p1 / Gcd(p1, p2), p2);
  }
  int64_t Round(int64_t v) const { return (v + unit / 2) / unit; }
};

// Traffic of one machine of each kind: a worker machine (with its co-located shards) and, for
// dedicated shards, a shard machine. Units: 1/L byte.
struct Load {
  int64_t worker = 0;
  int64_t shard = 0;
  int64_t Max() const { return worker > shard ? worker : shard; }
  Load& operator+=(const Load& o) {
    worker = Add(worker, o.worker);
    shard = Add(shard, o.shard);
    return *this;
  }
};

// PS for blobs whose push and pull together take `x` bytes (2S in fp32: the S of sacp.h's
// derivation, each way; a 16-bit gradient wire pushes S/2 and pulls S).
Load PsLoad(const Ctx& c, int64_t x) {
  Load l;
  if (c.colocated) {
    const int64_t h = (c.p2 + c.p1 - 1) / c.p1;  // shards on the busiest machine
    l.worker = Add(Mul(x, c.unit), Mul(Mul(h, x), c.p1 - 2, c.unit / c.p2));
  } else {
    l.worker = Mul(x, c.unit);
    l.shard = Mul(Mul(c.p1, x), c.unit / c.p2);
  }
  return l;
}

// Ring all-reduce of `s` bytes (the gradient as the wire carries it) over the P1 workers.
Load AllreduceLoad(const Ctx& c, int64_t s) {
  Load l;
  l.worker = Mul(Mul(4, s, c.p1 - 1), c.unit / c.p1);
  return l;
}

// Sufficient factors of an M x N FC weight: K(M+N) values of `value_bytes` each to and from each
// of P1-1 peers.
Load SfbWeightLoad(const Ctx& c, const Layer& layer, int64_t value_bytes) {
  Load l;
  l.worker = Mul(Mul(2 * value_bytes, Mul(c.k, layer.fc_rows), c.p1 - 1),
                 layer.fc_in + layer.fc_out, c.unit);
  return l;
}

struct LayerLoads {
  Load ps, sfb, allreduce;
  bool has_sfb = false;
  const Load& of(Scheme s) const {
    return s == Scheme::kPs ? ps : s == Scheme::kSfb ? sfb : allreduce;
  }
};

// Gradients as `wire` carries them (WirePayloadBytes: what the simulator prices), parameters in
// fp32.
LayerLoads ComputeLoads(const Ctx& c, const Layer& layer, WireFormat wire) {
  const int64_t g = WirePayloadBytes(wire, 4, 1);  // bytes of one gradient value on the wire
  LayerLoads out;
  out.ps = PsLoad(c, Mul(layer.params, g + 4));
  out.allreduce = AllreduceLoad(c, Mul(layer.params, g));
  if (HasSufficientFactors(layer)) {
    out.has_sfb = true;
    out.sfb = SfbWeightLoad(c, layer, g);
    // The bias (and anything but the weight) by PS.
    out.sfb += PsLoad(c, Mul(layer.params - Mul(layer.fc_in, layer.fc_out), g + 4));
  }
  return out;
}

SchemeCost ToCost(const Ctx& c, const LayerLoads& l) {
  SchemeCost cost;
  cost.ps = c.Round(l.ps.Max());
  cost.sfb = l.has_sfb ? c.Round(l.sfb.Max()) : -1;
  cost.allreduce = c.Round(l.allreduce.Max());
  return cost;
}

std::string LayerLabel(const Layer& layer) {
  return "layer '" + layer.name + "' (" + LayerKindName(layer.kind) + ")";
}

std::string ParamLayerNames(const Model& model) {
  std::string names;
  for (int id : model.param_layers()) {
    if (!names.empty()) names += ", ";
    names += model.layers()[id].name;
  }
  return names.empty() ? "(none)" : names;
}

// auto: the fewest exact bytes of `l`, fp32 loads (the paper's rule, whatever the wire); ties go
// to the earlier scheme in the preference order. Only the schemes the job allows compete
// (SacpInput::allreduce_allowed, ps_only).
Scheme ChooseAuto(const Ctx& c, const SacpInput& in, const LayerLoads& l, std::string* reason) {
  std::vector<Scheme> order;
  const bool sfb = l.has_sfb && !in.ps_only;
  const bool ar = in.allreduce_allowed && !in.ps_only;
  if (c.p1 >= 2) {
    if (sfb) order.push_back(Scheme::kSfb);
    order.push_back(Scheme::kPs);
    if (ar) order.push_back(Scheme::kAllreduce);
  } else {
    order.push_back(Scheme::kPs);
    if (ar) order.push_back(Scheme::kAllreduce);
    if (sfb) order.push_back(Scheme::kSfb);
  }
  // Cheapest first; std::stable_sort keeps the preference order among equal costs.
  std::stable_sort(order.begin(), order.end(),
                   [&l](Scheme a, Scheme b) { return l.of(a).Max() < l.of(b).Max(); });
  // "auto: sfb 190898176 B < ps 528539648 B = allreduce 528539648 B": every candidate, cheapest
  // first, so the phrase shows the comparison made and any tie.
  std::string text = "auto:";
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t v = l.of(order[i]).Max();
    if (i > 0) text += v == l.of(order[i - 1]).Max() ? " =" : " <";
    text += std::string(" ") + SchemeName(order[i]) + " " + std::to_string(c.Round(v)) + " B";
  }
  // The costs beside the phrase are the wire's; say that these are not.
  if (in.gradient_wire != WireFormat::kFp32) text += " (in fp32, the paper's rule)";
  *reason = std::move(text);
  return order.front();
}

// `auto` with timing: the layers that asked for it get the plan SearchPlan finds fastest, from
// the paper's plan; each says what the estimate was and what its alternatives would give.
void ChooseInTime(const Model& model, const SacpInput& in, Plan* plan) {
  std::vector<bool> free(model.layers().size(), false);
  bool any = false;
  for (const LayerPlan& lp : plan->layers) {
    if (lp.timed) free[static_cast<size_t>(lp.layer)] = any = true;
  }
  if (!any) return;
  std::vector<Scheme> allowed = {Scheme::kPs};
  if (!in.ps_only) {
    allowed.push_back(Scheme::kSfb);
    if (in.allreduce_allowed) allowed.push_back(Scheme::kAllreduce);
  }
  std::vector<Scheme> start = plan->scheme_of_layer;
  for (LayerPlan& lp : plan->layers) {
    Scheme& s = start[static_cast<size_t>(lp.layer)];
    if (lp.timed && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) s = Scheme::kPs;
  }
  plan->scheme_of_layer = SearchPlan(model, in, start, free, allowed);
  const double best = EstimateIteration(model, in, plan->scheme_of_layer);
  for (LayerPlan& lp : plan->layers) {
    if (!lp.timed) continue;
    lp.scheme = plan->scheme_of_layer[static_cast<size_t>(lp.layer)];
    std::string text = "auto: iteration " + Ms(best) + " ms with " + SchemeName(lp.scheme);
    for (Scheme other : allowed) {
      if (other == lp.scheme || (other == Scheme::kSfb && !HasSufficientFactors(model.layers()[lp.layer]))) {
        continue;
      }
      std::vector<Scheme> alt = plan->scheme_of_layer;
      alt[static_cast<size_t>(lp.layer)] = other;
      text += std::string(", ") + SchemeName(other) + " " + Ms(EstimateIteration(model, in, alt));
    }
    lp.reason = std::move(text);
  }
}

}  // namespace

const char* SchemeName(Scheme scheme) {
  switch (scheme) {
    case Scheme::kPs:
      return "ps";
    case Scheme::kSfb:
      return "sfb";
    case Scheme::kAllreduce:
      return "allreduce";
  }
  return "?";
}

bool SchemeFromName(const std::string& name, Scheme* scheme) {
  for (Scheme s : {Scheme::kPs, Scheme::kSfb, Scheme::kAllreduce}) {
    if (name == SchemeName(s)) {
      *scheme = s;
      return true;
    }
  }
  return false;
}

const char* SchemeRequestName(SchemeRequest request) {
  switch (request) {
    case SchemeRequest::kPs:
      return "ps";
    case SchemeRequest::kSfb:
      return "sfb";
    case SchemeRequest::kAllreduce:
      return "allreduce";
    case SchemeRequest::kAuto:
      return "auto";
    case SchemeRequest::kPaper:
      return "paper";
  }
  return "?";
}

bool SchemeRequestFromName(const std::string& name, SchemeRequest* request) {
  for (SchemeRequest r : {SchemeRequest::kPs, SchemeRequest::kSfb, SchemeRequest::kAllreduce,
                          SchemeRequest::kAuto, SchemeRequest::kPaper}) {
    if (name == SchemeRequestName(r)) {
      *request = r;
      return true;
    }
  }
  return false;
}

std::string KnownSchemeRequests() { return "ps, sfb, allreduce, auto, paper"; }

double SfbThreshold(const Layer& layer, int64_t batch) {
  if (!HasSufficientFactors(layer) || batch < 1) return 0.0;
  const double m = static_cast<double>(layer.fc_in);
  const double n = static_cast<double>(layer.fc_out);
  return 2.0 * m * n / (static_cast<double>(SfbFactorRows(layer, batch)) * (m + n));
}

SchemeCost LayerCost(const Layer& layer, const SacpInput& in) {
  const Ctx c(in);
  return ToCost(c, ComputeLoads(c, layer, in.gradient_wire));
}

Plan PlanSchemes(const Model& model, const SacpInput& in) {
  const Ctx c(in);
  const auto& layers = model.layers();

  // Every per-layer key must name a layer that has parameters (a typo would otherwise silently
  // fall back to the default).
  for (const auto& [name, request] : in.per_layer) {
    const Layer* layer = model.FindLayer(name);
    if (layer == nullptr) {
      throw std::invalid_argument("per-layer scheme for '" + name + "': no layer of that name in " +
                                  "model '" + model.name() +
                                  "'; layers with parameters: " + ParamLayerNames(model));
    }
    if (layer->params == 0) {
      throw std::invalid_argument("per-layer scheme for " + LayerLabel(*layer) +
                                  ": the layer has no parameters; layers with parameters: " +
                                  ParamLayerNames(model));
    }
    if (request == SchemeRequest::kSfb && !HasSufficientFactors(*layer)) {
      throw std::invalid_argument("per-layer scheme for " + LayerLabel(*layer) +
                                  ": sfb needs a fully connected (fc) or linear layer with its own weight; use ps, allreduce " +
                                  "or auto");
    }
  }

  Plan plan;
  plan.scheme_of_layer.assign(layers.size(), Scheme::kPs);
  Load total, all_ps;
  for (int id : model.param_layers()) {
    const Layer& layer = layers[id];
    const LayerLoads loads = ComputeLoads(c, layer, in.gradient_wire);
    LayerPlan lp;
    lp.layer = id;
    lp.cost = ToCost(c, loads);

    SchemeRequest request = in.default_request;
    const auto it = in.per_layer.find(layer.name);
    const bool per_layer = it != in.per_layer.end();
    if (per_layer) request = it->second;
    const char* source = per_layer ? " (per layer)" : " (default)";
    switch (request) {
      case SchemeRequest::kPs:
        lp.scheme = Scheme::kPs;
        lp.reason = std::string("requested") + source;
        break;
      case SchemeRequest::kAllreduce:
        lp.scheme = Scheme::kAllreduce;
        lp.reason = std::string("requested") + source;
        break;
      case SchemeRequest::kSfb:
        // A per-layer sfb on a non-FC layer was rejected above; the model-wide switch means "SFB
        // for the FC weights", as in the 2015 code.
        if (loads.has_sfb) {
          lp.scheme = Scheme::kSfb;
          lp.reason = std::string("requested") + source;
        } else {
          lp.scheme = Scheme::kPs;
          lp.reason = "not fc: ps (sfb applies to fc layers)";
        }
        break;
      case SchemeRequest::kAuto:
      case SchemeRequest::kPaper:
        // The paper's rule; with timing, `auto` layers are chosen again below (SearchPlan).
        lp.requested_auto = true;
        lp.scheme = ChooseAuto(c, in, ComputeLoads(c, layer, WireFormat::kFp32), &lp.reason);
        break;
    }

    lp.timed = request == SchemeRequest::kAuto && in.timing.has_value();
    plan.scheme_of_layer[id] = lp.scheme;
    plan.layers.push_back(std::move(lp));
  }
  if (in.timing) ChooseInTime(model, in, &plan);
  for (const LayerPlan& lp : plan.layers) {
    const LayerLoads loads = ComputeLoads(c, layers[lp.layer], in.gradient_wire);
    total += loads.of(lp.scheme);
    all_ps += loads.ps;
    const int s = static_cast<int>(lp.scheme);
    plan.layers_by_scheme[s] += 1;
    plan.bytes_by_scheme[s] += lp.cost.of(lp.scheme);
  }
  plan.total_bytes = c.Round(total.Max());
  plan.all_ps_bytes = c.Round(all_ps.Max());
  return plan;
}

}  // namespace poseidon::core
