#include "config/job_config.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "core/collectives.h"
#include "core/message_rules.h"
#include "core/sacp.h"

namespace poseidon::config {

core::Model BuildScenarioModel(const ScenarioSpec& s) {
  core::BuildOptions opts;
  opts.without_groups = s.model_without;
  return core::Model::Build(s.model, opts);
}

bool EvictsDeadWorkers(const ScenarioSpec& s) {
  const std::string& policy = s.fault.on_worker_failure;
  return s.fault.enabled && (policy.empty() ? s.consistency != "bsp" : policy == "evict");
}

core::FaultConfig BuildFault(const ScenarioSpec& s) {
  core::FaultConfig f;
  if (!s.fault.enabled) return f;
  f.heartbeat_ns = std::llround(s.fault.heartbeat_ms * 1e6);
  f.failure_timeout_ns = std::llround(s.fault.timeout_ms * 1e6);
  f.evict_dead_workers = EvictsDeadWorkers(s);
  f.checkpoint_every = s.fault.checkpoint_every;
  return f;
}

namespace {

// The row of NCCL's tables a device's generation reads (compCapIndex: below sm_80 is Volta's;
// Ada, sm_89, is Ampere's); a CPU device or an unnamed generation reads Volta's, the first.
core::NcclGeneration NcclGenerationOf(const ScenarioSpec& s) {
  if (!s.device) return core::NcclGeneration::kVolta;
  switch (s.device->architecture) {
    case GpuArchitecture::kAmpere:
    case GpuArchitecture::kAda:
      return core::NcclGeneration::kAmpere;
    case GpuArchitecture::kHopper:
      return core::NcclGeneration::kHopper;
    case GpuArchitecture::kBlackwell:
      return core::NcclGeneration::kBlackwell;
    default:
      return core::NcclGeneration::kVolta;
  }
}

}  // namespace

core::NcclTopology BuildNcclTopology(const ScenarioSpec& s) {
  core::NcclTopology t;
  t.ranks = ProtocolWorkers(s);
  t.nodes = s.workers;
  t.net_GBps = s.network.host_bandwidth_Bps / 1e9;
  t.intra_nvlink = s.interconnect.kind == InterconnectKind::kNvlink;
  double intra_Bps = s.network.host_bandwidth_Bps;
  if (t.ranks > t.nodes) {
    if (t.intra_nvlink) {
      intra_Bps = s.interconnect.link_Bps;
    } else if (s.interconnect.pcie_Bps > 0) {
      intra_Bps = s.interconnect.pcie_Bps;
    } else if (s.device && s.device->pcie_bandwidth_Bps > 0) {
      intra_Bps = s.device->pcie_bandwidth_Bps;
    }
  }
  t.intra_GBps = intra_Bps / 1e9;
  t.generation = NcclGenerationOf(s);
  // getNetOverhead (src/graph/tuning.cc): 2 us on AMD x86, 1 us on Intel and others.
  t.net_overhead_us = s.interconnect.cpu_vendor == CpuVendor::kAmd ? 2.0 : 1.0;
  return t;
}

namespace {

int64_t MibBytes(double mib) { return std::llround(mib * 1024 * 1024); }

// protocol.baseline into the core's BaselineConfig; the sizes are whole bytes (at least one) and
// Horovod's fusion threshold at least the model's smallest gradient tensor.
void ReadBaselineInto(const ScenarioSpec& s, const core::Model& model, core::ProtocolConfig* p) {
  core::BaselineConfig& b = p->baseline;
  if (!core::BaselineFromName(s.baseline, &b.kind)) {
    FailAt(s.protocol_loc, fmt::format("unknown baseline '{}'; known: {}", s.baseline,
                                       core::KnownBaselines()));
  }
  b.bucket_cap_bytes = std::max<int64_t>(1, MibBytes(s.ddp_bucket_cap_mib));
  b.first_bucket_bytes = std::max<int64_t>(1, MibBytes(s.ddp_first_bucket_mib));
  b.fusion_threshold_bytes = MibBytes(s.horovod_fusion_threshold_mib);
  b.cycle_ns = std::max<core::TimeNs>(1, std::llround(s.horovod_cycle_ms * 1e6));
  if (!core::AllreduceAlgorithmFromName(s.allreduce_algorithm, &b.algorithm)) {
    FailAt(s.protocol_loc, fmt::format("unknown allreduce_algorithm '{}'; known: ring, tree, auto",
                                       s.allreduce_algorithm));
  }
  b.nccl = BuildNcclTopology(s);
  if (b.kind != core::Baseline::kHorovod) return;
  const std::vector<core::GradTensor> tensors = core::GradientReadyOrder(model);
  if (tensors.empty()) return;
  const auto smallest = std::min_element(
      tensors.begin(), tensors.end(),
      [](const core::GradTensor& a, const core::GradTensor& c) { return a.count < c.count; });
  if (b.fusion_threshold_bytes < smallest->bytes()) {
    const core::Layer& L = model.layers()[static_cast<size_t>(smallest->layer)];
    FailAt(s.fusion_threshold_loc,
           fmt::format("protocol.horovod.fusion_threshold_mib {} ({} bytes) is below the smallest "
                       "gradient tensor of model '{}' ({}, {} bytes); give at least {:.6f} MiB "
                       "(that size fuses nothing: Horovod without tensor fusion)",
                       s.horovod_fusion_threshold_mib, b.fusion_threshold_bytes, model.name(),
                       L.blobs[static_cast<size_t>(smallest->blob)].name, smallest->bytes(),
                       std::ceil(static_cast<double>(smallest->bytes()) / (1024 * 1024) * 1e6) /
                           1e6));
  }
}

}  // namespace

core::WireFormat BuildGradientWire(const ScenarioSpec& s, const core::Model& model) {
  core::WireFormat wire = core::WireFormat::kFp32;
  if (!core::WireFormatFromName(s.gradient_wire, &wire)) {
    FailAt(s.protocol_loc, fmt::format("unknown gradient_wire '{}'; known: fp32, fp16, bf16",
                                       s.gradient_wire));
  }
  if (wire != core::WireFormat::kFp32 && !model.layers().empty() &&
      model.layers()[0].value_words != 1) {
    // The workers' own model (model: torch) is known only now.
    FailAt(s.protocol_loc,
           fmt::format("protocol.gradient_wire {} sends gradients as 16-bit values, which needs "
                       "fp32 values, but model '{}' holds fp64 values; use gradient_wire: fp32",
                       s.gradient_wire, model.name()));
  }
  return wire;
}

core::ProtocolConfig BuildProtocol(const ScenarioSpec& s, const core::Model& model,
                                   bool device_copies, const core::SacpTiming* timing) {
  const int workers = ProtocolWorkers(s);
  const int servers = s.servers;
  core::ProtocolConfig p;
  p.dwbp = s.dwbp;
  p.chunk_bytes = s.chunk_bytes;
  core::PlacementPolicyFromName(s.placement_policy, &p.placement_policy);
  p.iterations = s.iterations;
  p.device_copies = device_copies;
  p.devices_per_machine = DevicesPerWorker(s);
  p.batch = s.batch_per_worker * p.devices_per_machine;
  p.consistency = s.consistency == "ssp"   ? core::Consistency::kSsp
                  : s.consistency == "asp" ? core::Consistency::kAsp
                                           : core::Consistency::kBsp;
  p.staleness = s.staleness;
  p.gate = s.gate == "per_layer" ? core::Gate::kPerLayer : core::Gate::kAllLayers;
  p.priority_window_bytes = s.priority_window_bytes;
  p.gradient_wire = BuildGradientWire(s, model);
  if (!s.baseline.empty()) ReadBaselineInto(s, model, &p);
  core::SacpInput in;
  in.workers = workers;
  in.servers = servers;
  in.colocated = s.placement == ServerPlacement::kColocated;
  in.batch = p.batch;
  core::SchemeRequestFromName(s.scheme, &in.default_request);
  in.allreduce_allowed = s.consistency == "bsp";
  in.ps_only = s.fault.enabled && EvictsDeadWorkers(s);
  in.gradient_wire = p.gradient_wire;
  if (timing) in.timing = *timing;
  // A baseline all-reduces every layer (its collectives fuse them; core/collectives.h).
  if (p.baseline.enabled()) in.default_request = core::SchemeRequest::kAllreduce;
  for (const auto& [layer, scheme] : s.layer_schemes) {
    core::SchemeRequest r;
    core::SchemeRequestFromName(scheme, &r);
    in.per_layer[layer] = r;
  }
  try {
    p.scheme_of_layer = core::PlanSchemes(model, in).scheme_of_layer;
  } catch (const std::invalid_argument& e) {
    FailAt(s.protocol_loc, std::string(e.what()) + "; fix protocol.scheme or layer_schemes");
  }
  p.fault = BuildFault(s);
  if (s.fault.enabled) {
    if (p.fault.evict_dead_workers) {
      if (const int l = core::FirstLayerOffPs(model, p); l >= 0) {
        FailAt(s.protocol_loc,
               fmt::format("fault_tolerance: evicting a dead worker needs every layer on the "
                           "parameter server, but {}; set protocol.scheme to ps or "
                           "on_worker_failure to wait",
                           core::OffPsReason(model, p, l)));
      }
    }
  }
  return p;
}

core::JobLayout BuildLayout(const ScenarioSpec& s) {
  return core::JobLayout::Build(s.workers, s.client_per_device ? s.devices_per_machine : 1,
                                s.servers, s.placement == ServerPlacement::kColocated);
}

}  // namespace poseidon::config
