// core/sacp.h: the SACP cost model -- per layer, parameter server (PS), sufficient-factor
// broadcasting (SFB) or ring all-reduce, chosen by the bytes each scheme moves.
//
//   SacpInput in;
//   in.workers = 8; in.servers = 8; in.colocated = true; in.batch = 256;
//   in.default_request = SchemeRequest::kAuto;
//   in.per_layer["conv1"] = SchemeRequest::kAllreduce;   // overrides the default
//   Plan plan = PlanSchemes(model, in);                  // std::invalid_argument on bad input
//   plan.scheme_of_layer[model.FindLayer("fc6")->id];    // Scheme::kSfb (8 <= 22.15)
//
// ## What is counted
//
// One figure per layer and scheme: the bytes per iteration that cross the NIC of the busiest
// machine (sent + received, fp32 values unless the gradient wire says otherwise, below) to
// synchronise that layer's parameters (weights and bias). Every shard holds an equal share of
// every blob (S/P2 bytes of an S-byte blob); traffic
// between a worker and a shard on the same machine does not cross the NIC. Latency, headers and
// contention are not modelled: the simulator does that. Notation: P1 workers, one per machine,
// P2 server shards, S = 4 * (values of the blobs concerned) bytes, and for an FC layer y = W x
// with an N x M weight, M = inputs, N = outputs, K = per-worker batch.
//
// PS (push the gradient to the shards, pull the fresh parameters back), all blobs:
//   Dedicated (shards on machines of their own, one shard each):
//     worker machine: sends S, receives S                      -> 2S
//     shard machine:  receives S/P2 from each of P1 workers, sends as much back -> 2 P1 S / P2
//     PS = max(2S, 2 P1 S / P2)
//   Co-located (worker i on machine i, shard j on machine j mod P1, so a machine holds h shards,
//   h = floor or ceil of P2/P1; for P2 <= P1: one shard on machines 0..P2-1, none elsewhere):
//     the worker exchanges S - h S/P2 each way with remote shards  -> 2S - 2hS/P2
//     its h shards each exchange S/P2 each way with P1-1 remote workers -> 2h(P1-1)S/P2
//     machine total 2S + 2hS(P1-2)/P2, largest at h = ceil(P2/P1) when P1 >= 2;
//     PS = 2S + 2 ceil(P2/P1) S (P1-2) / P2.
//   P1 = P2 = P gives PS = 4S(P-1)/P (the paper's 4MN(P-1)/P in floats); P1 = 1 gives 0.
//
// SFB (FC layers only; the bias still goes through PS): each worker sends its K(M+N) sufficient
// factors to each of the P1-1 other workers and receives theirs:
//   SFB(weight) = 2 K (P1-1) (M+N) * 4 bytes on every worker machine.
//   Co-located: SFB = SFB(weight) + PS(bias) (the same machine is the busiest for both).
//   Dedicated:  SFB = max(SFB(weight) + 2 S_bias, 2 P1 S_bias / P2) (worker vs shard machine).
//
// All-reduce (chunked ring over the P1 workers, no shards involved): reduce-scatter and
// all-gather each send and receive (P1-1)/P1 * S per worker:
//   AR = 4 S (P1-1) / P1 on every worker machine (0 for P1 = 1).
//
// A 16-bit gradient wire (SacpInput::gradient_wire fp16 or bf16) sends each gradient value in 2
// bytes, as the simulator prices the messages (core::WirePayloadBytes): a PS push takes S/2 and
// its pull still S (every PS figure above times 3/4: 2S becomes S/2 + S), sufficient factors
// K(M+N) * 2 bytes (half), each ring step half (AR = 2 S (P1-1) / P1).
//
// ## How `auto` chooses
//
// The fewest bytes, compared exactly (as fractions; SchemeCost rounds each to the nearest byte
// for display). Ties, for P1 >= 2: sfb, then ps, then allreduce -- SFB wins a tie against PS as
// in the paper's BestScheme. Co-located with P1 = P2 = P >= 2 this gives, for an FC layer,
//   SFB <= PS  <=>  8K(P-1)(M+N) <= 16MN(P-1)/P  <=>  P <= 2MN / (K(M+N)),
// (the bias terms are the same on both sides), so auto chooses SFB for an FC layer exactly when
// P <= 2MN/(K(M+N)), including equality (AlexNet fc6 at K=256: P <= 22; VGG19 fc6 at K=32:
// P <= 220). There AR = PS, and PS wins that tie, so the paper's setting never picks all-reduce;
// it wins where PS is lopsided (co-located P2 < P1). With one worker (P1 = 1) the derivation
// (a division by P-1) does not apply and nothing is exchanged between workers: ties go to ps,
// then allreduce, then sfb, so co-located auto keeps ps (every cost is 0), and dedicated auto
// picks allreduce (0 bytes: the lone worker keeps its parameters) over ps (2S).
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/messages.h"
#include "core/model.h"
#include "core/placement_policy.h"

namespace poseidon::core {

enum class Scheme : uint8_t { kPs, kSfb, kAllreduce };
inline constexpr int kNumSchemes = 3;

// "ps", "sfb", "allreduce".
const char* SchemeName(Scheme scheme);
// Returns false for an unknown name ("auto" is not a Scheme; see SchemeRequestFromName).
bool SchemeFromName(const std::string& name, Scheme* scheme);

// What the user asked for: a fixed scheme, or a cost model's choice: kPaper is the paper's rule
// (the fewest bytes, below); kAuto weighs plans in time (sacp_time.h) when SacpInput::timing is
// given, and is the paper's rule otherwise.
enum class SchemeRequest : uint8_t { kPs, kSfb, kAllreduce, kAuto, kPaper };
// "ps", "sfb", "allreduce", "auto", "paper".
const char* SchemeRequestName(SchemeRequest request);
bool SchemeRequestFromName(const std::string& name, SchemeRequest* request);
// "ps, sfb, allreduce, auto, paper", for error messages that list the known names.
std::string KnownSchemeRequests();

// The times `auto` weighs plans with (sacp_time.h). Hosts fill it from the scenario's compute and
// network models (cost::SacpTimingFor), so that the simulator and a live job plan alike.
struct SacpTiming {
  double nic_Bps = 0;         // each NIC, each direction: payload bytes per second (> 0)
  double message_s = 0;       // one message's latency and per-message cost, one way
  std::vector<double> fwd_s;  // per layer id: forward pass of the worker's batch
  std::vector<double> bwd_s;  // per layer id: backward pass
  std::vector<double> sfb_rebuild_s;  // per layer id: one peer's rebuild GEMM (FC layers)
  // Machines with several devices (empty otherwise), per layer id: the local reduction of the
  // devices' gradients before the layer's sync, and the broadcast of its fresh values after;
  // each machine runs them one layer at a time (two FIFO streams), the same for every scheme.
  std::vector<double> local_reduce_s, local_broadcast_s;
  double update_s_per_byte = 0;       // a shard's SGD step per parameter byte
  int64_t chunk_bytes = 512 << 10;    // as ProtocolConfig::chunk_bytes
  PlacementPolicy placement_policy = PlacementPolicy::kBalancedChunks;
  bool dwbp = true;
  bool per_layer_gate = false;        // forward of a layer waits only for that layer's values
  bool waits_for_fresh = true;        // BSP or staleness 0; false: SSP/ASP run on stale values
};

struct SacpInput {
  int workers = 1;        // P1, one per machine (a machine's client, whatever its devices)
  int servers = 1;        // P2 shards
  bool colocated = true;  // shard j on worker machine j mod P1; false: each shard on its own machine
  int64_t batch = 1;      // K, per worker: the rows of its factors (per-device batch x devices)
  // Applies to every layer with parameters not named in per_layer. A model-wide kSfb means "SFB
  // for the FC layers" (the 2015 code's switch): other layers get ps.
  SchemeRequest default_request = SchemeRequest::kPs;
  // Layer name -> request; overrides the default. Must name layers with parameters, and kSfb only
  // FC layers.
  std::map<std::string, SchemeRequest> per_layer;
  // What the cost models may choose (auto and paper): ring all-reduce needs BSP; evicting dead
  // workers needs every layer on PS.
  bool allreduce_allowed = true;
  bool ps_only = false;
  // How gradients travel (protocol.gradient_wire): a 16-bit form puts 2 bytes a value on the wire
  // for pushes, sufficient factors and ring steps (core::WirePayloadBytes, as the simulator prices
  // the messages); pulls stay 4. The costs and `auto`'s times count it; `paper` keeps the
  // published rule and compares fp32 bytes, so its choices do not depend on the wire.
  WireFormat gradient_wire = WireFormat::kFp32;
  // What `auto` weighs plans in time with (sacp_time.h); without it `auto` is the paper's rule.
  std::optional<SacpTiming> timing;
};

// Bytes per iteration for ONE layer's parameters (weights + bias), through the busiest machine's
// NIC (sent + received), rounded to the nearest byte: gradients as SacpInput::gradient_wire says,
// parameters (PS pulls) fp32.
struct SchemeCost {
  int64_t ps = 0;         // PS for all blobs
  int64_t sfb = -1;       // SFB for the weight + PS for the bias; -1 when the layer is not FC
  int64_t allreduce = 0;  // chunked ring all-reduce of all blobs
  int64_t of(Scheme s) const {
    return s == Scheme::kPs ? ps : s == Scheme::kSfb ? sfb : allreduce;
  }
};

struct LayerPlan {
  int layer = 0;  // id in Model::layers()
  Scheme scheme = Scheme::kPs;
  SchemeCost cost;
  bool requested_auto = false;  // auto or paper
  bool timed = false;           // auto, chosen in time (sacp_time.h)
  // One short phrase: "requested (per layer)", or for auto every candidate cheapest first,
  // e.g. "auto: sfb 190898176 B < ps 528539648 B = allreduce 528539648 B".
  std::string reason;
};

struct Plan {
  std::vector<LayerPlan> layers;         // one per layer WITH parameters, forward order
  std::vector<Scheme> scheme_of_layer;   // indexed by layer id (kPs for layers without params)
  // Bytes per iteration through the busiest machine's NIC for all layers together: the chosen
  // plan, and every layer by PS. (Dedicated: the busier of a worker and a shard machine over the
  // whole model, which can be less than the sum of the per-layer maxima.)
  int64_t total_bytes = 0;
  int64_t all_ps_bytes = 0;
  // Per chosen scheme (indexed by static_cast<int>(Scheme)): how many layers, and the sum of
  // their per-layer costs.
  std::array<int, kNumSchemes> layers_by_scheme{};
  std::array<int64_t, kNumSchemes> bytes_by_scheme{};
};

// The SFB threshold 2MN/(K(M+N)) of an FC layer (co-located, P1 = P2 = P: auto picks SFB iff
// P <= threshold); 0 for other layers.
double SfbThreshold(const Layer& layer, int64_t batch);

// Throws std::invalid_argument naming the layer when SFB is requested for a non-FC layer, a
// per_layer key names no layer (or one without parameters), or workers/servers/batch < 1.
Plan PlanSchemes(const Model& model, const SacpInput& in);
// Costs of one layer (all zero for a layer without parameters). Throws std::invalid_argument for
// workers/servers/batch < 1.
SchemeCost LayerCost(const Layer& layer, const SacpInput& in);

}  // namespace poseidon::core
