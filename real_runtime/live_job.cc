#include "real_runtime/live_job.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "core/message_rules.h"
#include "cost/intra_machine.h"
#include "cost/sacp_timing.h"

namespace poseidon::rt {

using config::ConfigError;

namespace {

// A job whose workers brought the model (config/worker_job.h applied to the scenario): its first
// worker planned every layer's scheme, so the plan needs no compute model here; no replay, no
// fault tolerance (a restarted Python worker would have to rebuild its optimizer's state).
LiveJob BuildWorkerDescribedJob(const NodeOptions& o, LiveJob job) {
  const config::ScenarioSpec& s = o.scenario;
  if (o.compute != "real") {
    throw ConfigError(fmt::format("error: {}: a job whose workers bring the model ('model: "
                                  "torch') runs their compute; --compute replay does not apply",
                                  s.file));
  }
  if (s.fault.enabled || o.rejoin || o.resume) {
    throw ConfigError(fmt::format(
        "error: {}: protocol.fault_tolerance, --rejoin and --resume do not apply to a job whose "
        "workers bring the model ('model: torch'): save with torch.save and start a new job from "
        "the saved state (docs/torch.md)",
        s.file));
  }
  const int words = job.model.layers().empty() ? 1 : job.model.layers()[0].value_words;
  if (s.chunk_bytes % (4 * words) != 0) {
    throw ConfigError(fmt::format("error: {}: protocol.chunk_kib must cut whole {}-byte values",
                                  s.file, 4 * words));
  }
  job.protocol = config::BuildProtocol(s, job.model, /*device_copies=*/false);
  job.protocol.real_payloads = true;
  job.sgd = o.training.sgd;  // unused: the workers' own optimizers step
  job.placement = core::Placement::Build(job.model, s.servers, job.protocol.chunk_bytes,
                                         job.protocol.scheme_of_layer,
                                         job.protocol.placement_policy);
  return job;
}

}  // namespace

LiveJob BuildLiveJob(const NodeOptions& o) {
  const config::ScenarioSpec& s = o.scenario;
  const core::JobLayout layout = config::BuildLayout(s);
  LiveJob job;
  job.model = config::BuildScenarioModel(s);
  if (o.compute != "real" && o.compute != "replay") {
    throw ConfigError(fmt::format("error: --compute must be real or replay, got '{}'", o.compute));
  }
  const bool replay = o.compute == "replay";
  if (s.model_from_workers) return BuildWorkerDescribedJob(o, std::move(job));
  // The simulator's compute model: what SACP's auto plans with (the same plan in every process
  // and in the simulator), and, replayed, what tasks take.
  const cost::ComputeModel planned = cost::BuildComputeModel(s, job.model);
  bool device_copies = false;
  const int protocol_devices = config::DevicesPerWorker(s);
  if (replay) {
    // With the straggler slowdowns the scenario gives.
    cost::ComputeModel cm = planned;
    device_copies = cm.pcie_bandwidth_Bps() > 0;
    if (layout.IsWorker(o.rank)) {
      for (const auto& st : s.stragglers) {
        if (st.worker == layout.WorkerIndex(o.rank)) cm = cm.ScaledBy(st.slowdown);
      }
    }
    std::optional<cost::IntraMachine> intra;
    if (protocol_devices > 1) {
      intra.emplace(s.interconnect, protocol_devices, 1, s.network.host_bandwidth_Bps);
    }
    job.replayed.emplace(std::move(cm), job.model, s.batch_per_worker * protocol_devices,
                         protocol_devices, std::move(intra));
    // And a worker's share of the scenario's per-task jitter, drawn as the simulator draws it.
    const auto kind = cost::ComputeJitter::KindOf(s.jitter);
    if (layout.IsWorker(o.rank) && cost::ComputeJitter::Varies(kind, s.jitter_cv)) {
      job.replayed->set_jitter(
          cost::ComputeJitter(kind, s.jitter_cv, s.seed, layout.WorkerIndex(o.rank)));
    }
  }
  job.protocol = cost::BuildTimedProtocol(s, job.model, device_copies, planned);
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
