// core/sacp_time.h: SACP's `auto` in time rather than bytes.
//
// The paper's rule (sacp.h, `scheme: paper`) picks per layer the scheme that moves the fewest
// bytes through the busiest NIC. At 10-40 GbE that rule picks SFB where its rebuild GEMMs cost
// the device more than the bytes saved cost the network (AlexNet on 8 nodes at 40 GbE: 6.85x
// with it, 7.99x with ps for every layer), and it cannot see that chunks of 512 KiB land whole on
// a few shards of a small model. `auto` with timing weighs each plan in time instead:
//
//   - the chunks as Placement::Build puts them, and per machine and direction the bytes every
//     layer moves (pushes and pulls per chunk, each worker's factors to its P1-1 peers, the
//     ring's 2 (P1-1)/P1 of the layer per worker), at the NIC's payload rate;
//   - the machines' NICs as queues in the order the backward pass makes gradients ready (DWBP;
//     without it everything waits for the whole backward pass);
//   - latencies: a push and a pull per PS layer, one hop for SFB, 2 (P1-1) ring steps;
//   - a shard's update of the layer's bytes it holds;
//   - the SFB rebuild GEMMs (P1-1 per FC layer) on the compute stream, which delay the next
//     forward pass;
//   - the next forward pass: each layer waits for its parameters (per-layer gate) or for all of
//     them; under SSP/ASP with staleness, for none, and the NICs' busiest total bounds it instead;
//   - on machines with several devices, the local reduction before a layer's sync and the
//     broadcast after it, each a FIFO stream of the machine (SacpTiming::local_reduce_s).
// Workers are machines there: P1 machines whose factors have the machine's rows (batch x devices).
//
// EstimateIteration returns that period; SearchPlan starts from the paper's plan and from one
// scheme for every free layer, keeps the fastest, then moves one layer at a time while the
// estimate improves. Pure and deterministic: every actor of a job computes the same plan.
#pragma once

#include <vector>

#include "core/model.h"
#include "core/sacp.h"

namespace poseidon::core {

// The estimate of one plan, in seconds.
double EstimateIteration(const Model& model, const SacpInput& in,
                         const std::vector<Scheme>& scheme_of_layer);

// `scheme` for every layer with parameters (sfb: the FC layers; the others ps), as the model-wide
// `protocol.scheme` gives it.
std::vector<Scheme> UniformPlan(const Model& model, Scheme scheme);

// The schemes of the layers marked free (indexed by layer id), the others kept as in `start`.
// `allowed` lists the schemes a free layer may take (SFB only ever goes to FC layers).
std::vector<Scheme> SearchPlan(const Model& model, const SacpInput& in,
                               const std::vector<Scheme>& start, const std::vector<bool>& free,
                               const std::vector<Scheme>& allowed);

}  // namespace poseidon::core
