#include "cost/sacp_timing.h"

#include "cost/intra_machine.h"

namespace poseidon::cost {

namespace {

// What a plan's timing takes from the scenario rather than from the compute: the NIC, message
// latency, chunking, placement and the protocol's gating.
void NetworkAndProtocol(const config::ScenarioSpec& s, core::SacpTiming* t) {
  t->nic_Bps = s.network.host_bandwidth_Bps * s.network.efficiency;
  t->message_s =
      static_cast<double>(s.network.latency_ns + s.network.per_message_overhead_ns) * 1e-9;
  t->chunk_bytes = s.chunk_bytes;
  core::PlacementPolicyFromName(s.placement_policy, &t->placement_policy);
  t->dwbp = s.dwbp;
  t->per_layer_gate = s.gate == "per_layer";
  t->waits_for_fresh = s.consistency == "bsp" || s.staleness == 0;
}

}  // namespace

core::SacpTiming SacpTimingMeasured(const config::ScenarioSpec& s, const core::Model& model,
                                    std::vector<double> fwd_s, std::vector<double> bwd_s,
                                    std::vector<double> sfb_rebuild_s) {
  const size_t n = model.layers().size();
  POSEIDON_CHECK(fwd_s.size() == n && bwd_s.size() == n && sfb_rebuild_s.size() == n)
      << "times for " << fwd_s.size() << " layers of " << n;
  core::SacpTiming t;
  NetworkAndProtocol(s, &t);
  t.fwd_s = std::move(fwd_s);
  t.bwd_s = std::move(bwd_s);
  t.sfb_rebuild_s = std::move(sfb_rebuild_s);
  t.update_s_per_byte = 1.0 / s.server_update_Bps;
  return t;
}

core::SacpTiming SacpTimingFor(const config::ScenarioSpec& s, const core::Model& model,
                               const ComputeModel& compute) {
  core::SacpTiming t;
  NetworkAndProtocol(s, &t);
  const size_t n = model.layers().size();
  t.fwd_s.resize(n);
  t.bwd_s.resize(n);
  t.sfb_rebuild_s.assign(n, 0.0);
  for (size_t l = 0; l < n; ++l) {
    const int id = static_cast<int>(l);
    t.fwd_s[l] = static_cast<double>(compute.fwd_ns(id)) * 1e-9;
    t.bwd_s[l] = static_cast<double>(compute.bwd_ns(id)) * 1e-9;
    if (core::HasSufficientFactors(model.layers()[l])) {
      // One peer's factors: K = batch x tokens rows for a linear layer (batch for fc), of every
      // device of the peer's machine.
      const int64_t k = core::SfbFactorRows(model.layers()[l],
                                            s.batch_per_worker * config::DevicesPerWorker(s));
      t.sfb_rebuild_s[l] = static_cast<double>(compute.SfbRebuildNs(id, k)) * 1e-9;
    }
  }
  if (config::DevicesPerWorker(s) > 1) {
    const IntraMachine intra(s.interconnect, s.devices_per_machine, 1, s.network.host_bandwidth_Bps);
    t.local_reduce_s.assign(n, 0.0);
    t.local_broadcast_s.assign(n, 0.0);
    for (int id : model.param_layers()) {
      const int64_t bytes = model.layers()[static_cast<size_t>(id)].params * 4;
      t.local_reduce_s[static_cast<size_t>(id)] =
          static_cast<double>(intra.AloneNs(IntraOp::kReduce, bytes)) * 1e-9;
      t.local_broadcast_s[static_cast<size_t>(id)] =
          static_cast<double>(intra.AloneNs(IntraOp::kBroadcast, bytes)) * 1e-9;
    }
  }
  constexpr int64_t kMiB = 1 << 20;
  t.update_s_per_byte = static_cast<double>(compute.UpdateNs(kMiB)) * 1e-9 / kMiB;
  return t;
}

core::ProtocolConfig BuildTimedProtocol(const config::ScenarioSpec& s, const core::Model& model,
                                        bool device_copies, const ComputeModel& compute) {
  const core::SacpTiming t = SacpTimingFor(s, model, compute);
  return config::BuildProtocol(s, model, device_copies, &t);
}

}  // namespace poseidon::cost
