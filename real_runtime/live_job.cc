#include "real_runtime/live_job.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "core/message_rules.h"
#include "sim/intra_machine.h"
#include "sim/sacp_timing.h"

namespace poseidon::rt {

using config::ConfigError;

LiveJob BuildLiveJob(const NodeOptions& o) {
  const config::ScenarioSpec& s = o.scenario;
  const core::JobLayout layout = config::BuildLayout(s);
  LiveJob job;
  job.model = config::BuildScenarioModel(s);
  if (o.compute != "real" && o.compute != "replay") {
    throw ConfigError(fmt::format("error: --compute must be real or replay, got '{}'", o.compute));
  }
  const bool replay = o.compute == "replay";
  // The simulator's compute model: what SACP's auto plans with (the same plan in every process
  // and in the simulator), and, replayed, what tasks take.
  const sim::ComputeModel planned = sim::BuildComputeModel(s, job.model);
  bool device_copies = false;
  const int protocol_devices = config::DevicesPerWorker(s);
  if (replay) {
    // With the straggler slowdowns the scenario gives.
    sim::ComputeModel cm = planned;
    device_copies = cm.pcie_bandwidth_Bps() > 0;
    if (layout.IsWorker(o.rank)) {
      for (const auto& st : s.stragglers) {
        if (st.worker == layout.WorkerIndex(o.rank)) cm = cm.ScaledBy(st.slowdown);
      }
    }
    std::optional<sim::IntraMachine> intra;
    if (protocol_devices > 1) {
      intra.emplace(s.interconnect, protocol_devices, 1, s.network.host_bandwidth_Bps);
    }
    job.replayed.emplace(std::move(cm), job.model, s.batch_per_worker * protocol_devices,
                         protocol_devices, std::move(intra));
  }
  job.protocol = sim::BuildTimedProtocol(s, job.model, device_copies, planned);
  job.protocol.real_payloads = true;  // real floats, or replayed zeros of the real sizes
  const bool ft = job.protocol.fault.enabled();
  if (job.protocol.fault.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    throw ConfigError(
        fmt::format("error: {}: protocol.fault_tolerance.checkpoint_every needs "
                    "--checkpoint-dir DIR (poseidon launch passes one)",
                    s.file));
  }
  if (o.resume && (!ft || job.protocol.fault.checkpoint_every <= 0)) {
    throw ConfigError(fmt::format(
        "error: --resume continues from the shards' checkpoints: {} needs a "
        "protocol.fault_tolerance section with checkpoint_every > 0 (the run being resumed "
        "must have had it too)",
        s.file));
  }
  if ((o.rejoin || o.resume) && layout.IsWorker(o.rank)) {
    if (const int l = core::FirstLayerOffPs(job.model, job.protocol); l >= 0) {
      throw ConfigError(fmt::format(
          "error: a {} worker cannot rejoin: {}; rejoining needs every layer on the "
          "parameter server (protocol.scheme: ps)",
          o.resume ? "resumed" : "restarted", core::OffPsReason(job.model, job.protocol, l)));
    }
  }
  job.sgd = o.training.sgd;
  if (job.sgd.max_iter <= 1) job.sgd.max_iter = s.iterations;
  if (job.sgd.stepsize <= 1) job.sgd.stepsize = std::max<int64_t>(1, s.iterations / 3);
  job.placement = core::Placement::Build(job.model, s.servers, job.protocol.chunk_bytes,
                                         job.protocol.scheme_of_layer,
                                         job.protocol.placement_policy);
  return job;
}

}  // namespace poseidon::rt
