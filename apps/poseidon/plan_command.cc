#include "apps/poseidon/plan_command.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (moved here in fmt 11)

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "core/messages.h"
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
  r.scheme = s.scheme;
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
  return 0;
}

}  // namespace poseidon::app
