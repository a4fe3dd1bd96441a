#include "apps/poseidon/plan_command.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (moved here in fmt 11)

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "core/model.h"
#include "core/sacp.h"
#include "core/sacp_time.h"
#include "sim/compute_model.h"
#include "sim/sacp_timing.h"

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

}  // namespace

int RunPlan(const config::ScenarioSpec& s, std::ostream& out) {
  core::BuildOptions options;
  options.without_groups = s.model_without;
  const core::Model model = core::Model::Build(s.model, options);

  core::SacpInput in;
  in.workers = s.workers;
  in.servers = s.servers;
  in.colocated = s.placement == config::ServerPlacement::kColocated;
  in.batch = s.batch_per_worker;
  in.default_request = Request(s.scheme, s.file, "protocol.scheme");
  in.allreduce_allowed = s.consistency == "bsp";
  in.ps_only = s.fault.enabled && config::EvictsDeadWorkers(s);
  for (const auto& [layer, scheme] : s.layer_schemes) {
    in.per_layer[layer] = Request(scheme, s.file, "protocol.layer_schemes." + layer);
  }
  // `auto` weighs plans in time with the scenario's compute and network, as the simulator does.
  const sim::ComputeModel compute = sim::BuildComputeModel(s, model);
  in.timing = sim::SacpTimingFor(s, model, compute);
  core::Plan plan;
  try {
    plan = core::PlanSchemes(model, in);
  } catch (const std::invalid_argument& e) {
    // A scheme the model does not allow is a mistake in the scenario file.
    throw config::ConfigError(fmt::format("{}: error: protocol: {}", s.file, e.what()));
  }

  std::vector<std::string> thresholds;
  for (int id : model.param_layers()) {
    const core::Layer& l = model.layers()[id];
    if (l.kind == core::LayerKind::kFc) {
      thresholds.push_back(fmt::format("{} {:.2f}", l.name, core::SfbThreshold(l, in.batch)));
    }
  }
  out << fmt::format(
      "plan {} (model {}): P1={} workers, P2={} servers, {}, K={} per worker, scheme {}{}; sfb "
      "threshold 2MN/(K(M+N)): {}\n",
      s.name, model.name(), in.workers, in.servers, in.colocated ? "colocated" : "dedicated",
      in.batch, s.scheme, s.layer_schemes.empty() ? "" : " (+ per-layer overrides)",
      thresholds.empty() ? "no fc layers" : fmt::format("{}", fmt::join(thresholds, ", ")));
  out << "MB per iteration (1e6 bytes, sent + received) through the busiest machine's NIC\n";

  size_t nw = 4, sw = 5;
  for (const auto& lp : plan.layers) {
    const core::Layer& l = model.layers()[lp.layer];
    nw = std::max(nw, l.name.size());
    sw = std::max(sw, ParamShape(l).size());
  }
  const std::string row = "{:<{}}  {:<9}  {:<{}}  {:>12}  {:>10}  {:>10}  {:>12}  {:<9}  {}\n";
  out << fmt::format(fmt::runtime(row), "name", nw, "type", "shape", sw, "params", "ps MB",
                     "sfb MB", "allreduce MB", "choice", "reason");
  for (const auto& lp : plan.layers) {
    const core::Layer& l = model.layers()[lp.layer];
    out << fmt::format(fmt::runtime(row), l.name, nw, core::LayerKindName(l.kind), ParamShape(l),
                       sw, Thousands(l.params), Mb(lp.cost.ps), Mb(lp.cost.sfb),
                       Mb(lp.cost.allreduce), core::SchemeName(lp.scheme), lp.reason);
  }

  std::vector<std::string> counts;
  for (core::Scheme sc : {core::Scheme::kPs, core::Scheme::kSfb, core::Scheme::kAllreduce}) {
    const int n = plan.layers_by_scheme[static_cast<int>(sc)];
    if (n > 0) counts.push_back(fmt::format("{} {}", core::SchemeName(sc), n));
  }
  const double ratio = plan.all_ps_bytes > 0 ? static_cast<double>(plan.total_bytes) /
                                                   static_cast<double>(plan.all_ps_bytes)
                                             : 1.0;
  out << fmt::format(
      "total per iteration through the busiest NIC: plan {} MB vs all-ps {} MB ({:.3f}x); layers: "
      "{}\n",
      Mb(plan.total_bytes), Mb(plan.all_ps_bytes), ratio, fmt::join(counts, ", "));
  // What the time model (core/sacp_time.h) expects of this plan and of one scheme everywhere.
  std::vector<std::string> estimates = {
      fmt::format("plan {:.3f}", core::EstimateIteration(model, in, plan.scheme_of_layer) * 1e3)};
  for (core::Scheme sc : {core::Scheme::kPs, core::Scheme::kSfb, core::Scheme::kAllreduce}) {
    if (sc == core::Scheme::kAllreduce && !in.allreduce_allowed) continue;
    const std::vector<core::Scheme> all = core::UniformPlan(model, sc);
    estimates.push_back(fmt::format("all {} {:.3f}", core::SchemeName(sc),
                                    core::EstimateIteration(model, in, all) * 1e3));
  }
  out << fmt::format("estimated iteration (SACP time model, {}): {} ms\n",
                     compute.source(), fmt::join(estimates, ", "));
  return 0;
}

}  // namespace poseidon::app
