// apps/poseidon/plan_command.h: `poseidon plan SCENARIO.yaml` -- the SACP cost model's per-layer
// choice (core/sacp.h) for a scenario's model, cluster and protocol.scheme / layer_schemes.
//
//   config::ScenarioSpec s = config::LoadScenarioFile("scenarios/demo.yaml");
//   RunPlan(s, std::cout);
//
// Prints a header line (P1, P2, placement, K, the SFB threshold 2MN/(K(M+N)) of each FC layer), one
// row per layer with parameters (name, type, shape, parameters, MB per iteration through the
// busiest NIC by ps / sfb / allreduce, the choice and why), and the totals of the chosen plan
// against all-PS. The bytes are the simulator's (core::LayerCost): with protocol.gradient_wire fp16
// or bf16, pushes, factors and ring steps at 2 bytes a value and pulls at 4, and the header names
// the wire (an fp32 job's output does not mention it). Returns the process exit status (0). Throws
// core::ModelError for a bad model and config::ConfigError for a scheme request the model does not
// allow (sfb on a conv layer, an unknown layer name). A scenario with protocol.baseline plans every
// layer as allreduce (as the job runs it) and adds the baseline's collectives: DDP's buckets with
// NCCL's price of the ring and the tree for each and the algorithm each runs
// (protocol.allreduce_algorithm; auto: NCCL's choice, core/nccl_tuning.h).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "config/scenario.h"
#include "core/nccl_tuning.h"

namespace poseidon::app {

int RunPlan(const config::ScenarioSpec& s, std::ostream& out);

// What RunPlan prints, as data (the Python module's poseidon.plan() returns it; RunPlan formats
// it). Bytes are per iteration through the busiest machine's NIC, sent + received; -1 where a
// scheme does not apply to the layer.
struct PlanLayerRow {
  std::string name;
  std::string type;
  std::string shape;  // FC "MxN", conv "out x in/g x kh x kw", else the first blob's dims or "-"
  int64_t params = 0;
  int64_t ps_bytes = -1, sfb_bytes = -1, allreduce_bytes = -1;
  std::string choice;  // ps | sfb | allreduce
  std::string reason;
};

// One collective of a baseline's iteration (from iteration 1 on: DDP's rebuilt buckets), with
// NCCL's price of each algorithm (core/nccl_tuning.h) and the algorithm it runs.
struct PlanCollectiveRow {
  std::string first_layer, last_layer;  // in forward order: the layers its tensors belong to
  int tensors = 0;
  int64_t bytes = 0;
  std::string algorithm;  // ring | tree
  double nccl_ring_us = 0, nccl_tree_us = 0;  // NCCL's model (tree 0 on one machine)
};

struct PlanReport {
  std::string scenario;  // the scenario's name
  std::string model;
  int workers = 0, servers = 0;   // workers: the protocol's (machines, or devices with client: device)
  int devices_per_worker = 1;     // a worker machine's devices (its K counts them all)
  bool colocated = true;
  int64_t batch_per_worker = 0;
  // The most rows per image of a layer with sufficient factors (tokens for a linear layer, 1 for
  // fc): a worker's K is batch x rows.
  int64_t sfb_rows_per_image = 1;
  std::string scheme;            // protocol.scheme as requested
  bool layer_overrides = false;  // protocol.layer_schemes was given
  // protocol.gradient_wire: the wire the bytes were priced at (fp32 | fp16 | bf16).
  std::string gradient_wire = "fp32";
  std::vector<std::pair<std::string, double>> sfb_thresholds;  // per FC layer: 2MN/(K(M+N))
  std::vector<PlanLayerRow> layers;
  int64_t total_bytes = 0, all_ps_bytes = 0;
  double ratio_to_all_ps = 1;
  // The schemes the plan uses and how many layers each, in the order ps, sfb, allreduce.
  std::vector<std::pair<std::string, int>> layers_by_scheme;
  std::string compute_source;
  // The SACP time model's iteration estimate: ("plan", ms), ("all ps", ms), ("all sfb", ms), ...
  std::vector<std::pair<std::string, double>> estimated_iteration_ms;
  // protocol.baseline ("" for Poseidon's own protocol; then nothing below is filled).
  std::string baseline;
  std::string allreduce_algorithm;  // ring | tree | auto
  // NCCL's model's inputs (config::BuildNcclTopology) and where it turns to the ring for good
  // (core::NcclRingFromBytes: 0 one machine, -1 never up to 2^40 bytes).
  core::NcclTopology nccl;
  int64_t nccl_ring_from_bytes = 0;
  // DDP's collectives of an iteration after the first; empty for Horovod, whose fused
  // collectives depend on what is ready at each cycle.
  std::vector<PlanCollectiveRow> collectives;
};

// Throws as RunPlan does.
PlanReport MakePlanReport(const config::ScenarioSpec& s);

}  // namespace poseidon::app
