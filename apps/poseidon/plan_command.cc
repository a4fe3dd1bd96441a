#include "apps/poseidon/plan_command.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (moved here in fmt 11)

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "core/collectives.h"
#include "core/messages.h"
#include "core/nccl_tuning.h"
#include "core/tree.h"
#include "core/model.h"
#include "core/sacp.h"
#include "core/sacp_time.h"
#include "cost/compute_model.h"
#include "cost/sacp_timing.h"

#include "apps/poseidon/format.h"

namespace poseidon::app {
namespace {

// Bytes as decimal megabytes (1e6), 3 decimals; "-" for a scheme that does not apply (< 0).
std::string Mb(int64_t bytes) {
  if (bytes < 0) return "-";
  return fmt::format("{:.3f}", static_cast<double>(bytes) / 1e6);
}

// FC: "M x N" (inputs x outputs); conv: "out x in/g x kh x kw"; others: the first blob's dims.
std::string ParamShape(const core::Layer& l) {
  if (l.kind == core::LayerKind::kFc) return fmt::format("{}x{}", l.fc_in, l.fc_out);
  if (l.blobs.empty()) return "-";
  return fmt::format("{}", fmt::join(l.blobs.front().dims, "x"));
}

core::SchemeRequest Request(const std::string& name, const std::string& file,
                            const std::string& where) {
  core::SchemeRequest r = core::SchemeRequest::kPs;
  if (!core::SchemeRequestFromName(name, &r)) {
    throw config::ConfigError(fmt::format("{}: error: {}: unknown scheme '{}'; known: {}", file,
                                          where, name, core::KnownSchemeRequests()));
  }
  return r;
}

// The baseline's collectives, as the core plans them (config::BuildProtocol's BaselineConfig).
void AddBaseline(const config::ScenarioSpec& s, const core::Model& model, PlanReport* r) {
  const core::ProtocolConfig p = config::BuildProtocol(s, model, false);
  r->baseline = s.baseline;
  r->allreduce_algorithm = s.allreduce_algorithm;
  r->nccl = p.baseline.nccl;
  r->nccl_ring_from_bytes = core::NcclRingFromBytes(p.baseline.nccl);
  if (p.baseline.kind != core::Baseline::kDdp) return;
  const core::JobLayout layout = config::BuildLayout(s);
  const core::CollectivePlan plan(
      model, p.baseline, p.chunk_bytes,
      core::CollectivePlan::MayRunTree(p.baseline) ? core::TreeDepth(layout) : 0);
  const bool machines = p.baseline.nccl.nodes > 1;
  for (const core::Collective& c : plan.Ddp(1)) {
    PlanCollectiveRow row;
    // The ready order runs backward: its last tensor is the earliest layer's.
    row.first_layer = model.layers()[static_cast<size_t>(c.first_layer)].name;
    row.last_layer =
        model.layers()[static_cast<size_t>(plan.tensors()[static_cast<size_t>(c.first)].layer)]
            .name;
    row.tensors = c.end - c.first;
    row.bytes = c.bytes;
    row.algorithm = core::AllreduceAlgorithmName(c.algorithm);
    row.nccl_ring_us = core::NcclAllreduceTimeUs(core::AllreduceAlgorithm::kRing, c.bytes,
                                                 p.baseline.nccl);
    row.nccl_tree_us = machines ? core::NcclAllreduceTimeUs(core::AllreduceAlgorithm::kTree,
                                                            c.bytes, p.baseline.nccl)
                                : 0;
    r->collectives.push_back(row);
  }
}

const char* GenerationName(core::NcclGeneration g) {
  switch (g) {
    case core::NcclGeneration::kVolta:
      return "Volta";
    case core::NcclGeneration::kAmpere:
      return "Ampere";
    case core::NcclGeneration::kHopper:
      return "Hopper";
    case core::NcclGeneration::kBlackwell:
      return "Blackwell";
  }
  return "?";
}

std::string SizeText(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:g} MiB", bytes / 1048576.0);
  if (bytes >= 1024) return fmt::format("{:g} KiB", bytes / 1024.0);
  return fmt::format("{} B", bytes);
}

void PrintBaseline(const PlanReport& r, std::ostream& out) {
  const core::NcclTopology& t = r.nccl;
  const std::string where =
      r.nccl_ring_from_bytes == 0 ? "the ring at every size (one machine)"
      : r.nccl_ring_from_bytes < 0
          ? "the tree at 1 TiB still"
          : fmt::format("the ring at every power of two from {} to 1 TiB, the tree at {}",
                        SizeText(r.nccl_ring_from_bytes), SizeText(r.nccl_ring_from_bytes / 2));
  const std::string inside =
      t.ranks > t.nodes ? fmt::format(", {} {:g} GB/s inside a machine",
                                      t.intra_nvlink ? "NVLink" : "PCIe", t.intra_GBps)
                        : "";
  out << fmt::format(
      "baseline {}, allreduce_algorithm {}; NCCL's model (core/nccl_tuning.h) for {} processes "
      "on {} machines, NIC {:g} GB/s{}, {} tables: {}\n",
      r.baseline, r.allreduce_algorithm, t.ranks, t.nodes, t.net_GBps, inside,
      GenerationName(t.generation), where);
  if (r.collectives.empty()) {
    out << fmt::format("its collectives: fused from what is ready at each cycle (Horovod), {}\n",
                       r.allreduce_algorithm == "auto"
                           ? "each by NCCL's choice above for its size"
                           : "each by the " + r.allreduce_algorithm);
    return;
  }
  size_t fw = 6, lw = 4;
  for (const PlanCollectiveRow& c : r.collectives) {
    fw = std::max(fw, c.first_layer.size());
    lw = std::max(lw, c.last_layer.size());
  }
  const std::string row = "{:>6}  {:<{}}  {:<{}}  {:>7}  {:>10}  {:>12}  {:>12}  {}\n";
  out << "DDP's buckets from iteration 1 on, in launch order (NCCL's price of each algorithm, us):\n";
  out << fmt::format(fmt::runtime(row), "bucket", "layers", fw, "to", lw, "tensors", "MB",
                     "nccl ring us", "nccl tree us", "runs");
  int i = 0;
  for (const PlanCollectiveRow& c : r.collectives) {
    out << fmt::format(fmt::runtime(row), i++, c.first_layer, fw, c.last_layer, lw, c.tensors,
                       Mb(c.bytes), fmt::format("{:.1f}", c.nccl_ring_us),
                       c.nccl_tree_us > 0 ? fmt::format("{:.1f}", c.nccl_tree_us) : "-",
                       c.algorithm);
  }
}

}  // namespace

PlanReport MakePlanReport(const config::ScenarioSpec& s) {
  core::BuildOptions options;
  options.without_groups = s.model_without;
  const core::Model model = core::Model::Build(s.model, options);

  core::SacpInput in;
  // As config::BuildProtocol: workers are the machines' clients, whose factors have the rows of
  // all their devices.
  in.workers = config::ProtocolWorkers(s);
  in.servers = s.servers;
  in.colocated = s.placement == config::ServerPlacement::kColocated;
  in.batch = s.batch_per_worker * config::DevicesPerWorker(s);
  in.default_request = Request(s.scheme, s.file, "protocol.scheme");
  // A baseline all-reduces every layer (config::BuildProtocol).
  if (!s.baseline.empty()) in.default_request = core::SchemeRequest::kAllreduce;
  in.allreduce_allowed = s.consistency == "bsp";
  in.ps_only = s.fault.enabled && config::EvictsDeadWorkers(s);
  // Gradients as the job sends them: the costs and `auto`'s times count the wire's bytes.
  in.gradient_wire = config::BuildGradientWire(s, model);
  for (const auto& [layer, scheme] : s.layer_schemes) {
    in.per_layer[layer] = Request(scheme, s.file, "protocol.layer_schemes." + layer);
  }
  // `auto` weighs plans in time with the scenario's compute and network, as the simulator does.
  const cost::ComputeModel compute = cost::BuildComputeModel(s, model);
  in.timing = cost::SacpTimingFor(s, model, compute);
  core::Plan plan;
  try {
    plan = core::PlanSchemes(model, in);
  } catch (const std::invalid_argument& e) {
    // A scheme the model does not allow is a mistake in the scenario file.
    throw config::ConfigError(fmt::format("{}: error: protocol: {}", s.file, e.what()));
  }

  PlanReport r;
  r.scenario = s.name;
  r.model = model.name();
  r.workers = in.workers;
  r.devices_per_worker = config::DevicesPerWorker(s);
  r.servers = in.servers;
  r.colocated = in.colocated;
  r.batch_per_worker = in.batch;
  r.scheme = s.baseline.empty() ? s.scheme : "allreduce (baseline " + s.baseline + ")";
  r.layer_overrides = !s.layer_schemes.empty();
  r.gradient_wire = core::WireFormatName(in.gradient_wire);
  for (int id : model.param_layers()) {
    const core::Layer& l = model.layers()[id];
    if (core::HasSufficientFactors(l)) {
      r.sfb_thresholds.emplace_back(l.name, core::SfbThreshold(l, in.batch));
      r.sfb_rows_per_image = std::max(r.sfb_rows_per_image, l.fc_rows);
    }
  }
  for (const auto& lp : plan.layers) {
    const core::Layer& l = model.layers()[lp.layer];
    r.layers.push_back({l.name, std::string(core::LayerKindName(l.kind)), ParamShape(l), l.params,
                        lp.cost.ps, lp.cost.sfb, lp.cost.allreduce,
                        std::string(core::SchemeName(lp.scheme)), lp.reason});
  }
  for (core::Scheme sc : {core::Scheme::kPs, core::Scheme::kSfb, core::Scheme::kAllreduce}) {
    const int n = plan.layers_by_scheme[static_cast<int>(sc)];
    if (n > 0) r.layers_by_scheme.emplace_back(std::string(core::SchemeName(sc)), n);
  }
  r.total_bytes = plan.total_bytes;
  r.all_ps_bytes = plan.all_ps_bytes;
  r.ratio_to_all_ps = plan.all_ps_bytes > 0 ? static_cast<double>(plan.total_bytes) /
                                                  static_cast<double>(plan.all_ps_bytes)
                                            : 1.0;
  r.compute_source = compute.source();
  // What the time model (core/sacp_time.h) expects of this plan and of one scheme everywhere.
  r.estimated_iteration_ms.emplace_back(
      "plan", core::EstimateIteration(model, in, plan.scheme_of_layer) * 1e3);
  for (core::Scheme sc : {core::Scheme::kPs, core::Scheme::kSfb, core::Scheme::kAllreduce}) {
    if (sc == core::Scheme::kAllreduce && !in.allreduce_allowed) continue;
    const std::vector<core::Scheme> all = core::UniformPlan(model, sc);
    r.estimated_iteration_ms.emplace_back(fmt::format("all {}", core::SchemeName(sc)),
                                          core::EstimateIteration(model, in, all) * 1e3);
  }
  if (!s.baseline.empty()) AddBaseline(s, model, &r);
  return r;
}

int RunPlan(const config::ScenarioSpec& s, std::ostream& out) {
  const PlanReport r = MakePlanReport(s);
  std::vector<std::string> thresholds;
  for (const auto& [name, threshold] : r.sfb_thresholds) {
    thresholds.push_back(fmt::format("{} {:.2f}", name, threshold));
  }
  out << fmt::format(
      "plan {} (model {}): P1={} workers{}, P2={} servers, {}, K={} per worker, scheme {}{}; "
      "sfb threshold 2MN/(K(M+N)): {}\n",
      r.scenario, r.model, r.workers,
      r.devices_per_worker > 1
          ? fmt::format(" (machines of {} devices; K counts them all)", r.devices_per_worker)
          : "",
      r.servers, r.colocated ? "colocated" : "dedicated",
      // A linear layer's K is batch x tokens (old models: the batch, as the line always said).
      r.sfb_rows_per_image == 1
          ? fmt::format("{}", r.batch_per_worker)
          : fmt::format("{} images x up to {} tokens", r.batch_per_worker, r.sfb_rows_per_image),
      r.scheme, r.layer_overrides ? " (+ per-layer overrides)" : "",
      thresholds.empty() ? "no fc layers" : fmt::format("{}", fmt::join(thresholds, ", ")));
  out << "MB per iteration (1e6 bytes, sent + received) through the busiest machine's NIC";
  if (r.gradient_wire != "fp32") {
    // fp32 is the default and the old output: only another wire is named.
    out << fmt::format(
        "; gradients on the wire as {} (protocol.gradient_wire): pushes, factors and ring steps 2 "
        "bytes a value, pulls 4",
        r.gradient_wire);
  }
  out << "\n";

  size_t nw = 4, sw = 5;
  for (const PlanLayerRow& l : r.layers) {
    nw = std::max(nw, l.name.size());
    sw = std::max(sw, l.shape.size());
  }
  const std::string row = "{:<{}}  {:<9}  {:<{}}  {:>12}  {:>10}  {:>10}  {:>12}  {:<9}  {}\n";
  out << fmt::format(fmt::runtime(row), "name", nw, "type", "shape", sw, "params", "ps MB",
                     "sfb MB", "allreduce MB", "choice", "reason");
  for (const PlanLayerRow& l : r.layers) {
    out << fmt::format(fmt::runtime(row), l.name, nw, l.type, l.shape, sw, Thousands(l.params),
                       Mb(l.ps_bytes), Mb(l.sfb_bytes), Mb(l.allreduce_bytes), l.choice, l.reason);
  }

  std::vector<std::string> counts;
  for (const auto& [scheme, n] : r.layers_by_scheme) {
    counts.push_back(fmt::format("{} {}", scheme, n));
  }
  out << fmt::format(
      "total per iteration through the busiest NIC: plan {} MB vs all-ps {} MB ({:.3f}x); layers: "
      "{}\n",
      Mb(r.total_bytes), Mb(r.all_ps_bytes), r.ratio_to_all_ps, fmt::join(counts, ", "));
  std::vector<std::string> estimates;
  for (const auto& [what, ms] : r.estimated_iteration_ms) {
    estimates.push_back(fmt::format("{} {:.3f}", what, ms));
  }
  out << fmt::format("estimated iteration (SACP time model, {}): {} ms\n", r.compute_source,
                     fmt::join(estimates, ", "));
  if (!r.baseline.empty()) PrintBaseline(r, out);
  return 0;
}

}  // namespace poseidon::app
