// real_runtime/node.cc: running one process of a live job (node.h): the process (node_process.h)
// with the role its rank has (coordinator_role.h, worker_role.h, shard_role.h).
#include "real_runtime/node.h"

#include <cstdlib>
#include <memory>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "config/job_config.h"
#include "config/worker_job.h"
#include "config/yaml_reader.h"
#include "real_runtime/compute_threads.h"
#include "real_runtime/control.h"
#include "real_runtime/coordinator_role.h"
#include "real_runtime/live_job.h"
#include "real_runtime/node_process.h"
#include "real_runtime/shard_role.h"
#include "real_runtime/worker_role.h"
#include "real_runtime/worker_runners.h"
#include "cost/compute_model.h"
#include "cost/sacp_timing.h"

namespace poseidon::rt {

using config::ConfigError;

namespace {

// The role rank `o.rank` has in the scenario's layout.
std::unique_ptr<NodeRole> MakeRole(NodeProcess& p) {
  const NodeOptions& o = p.options();
  if (o.rank == 0) return std::make_unique<CoordinatorRole>(p);
  LiveJob job = BuildLiveJob(o);
  p.FollowBaseline(job.protocol.baseline);
  if (p.layout().IsServer(o.rank)) return std::make_unique<ShardRole>(p, std::move(job));
  const bool replay = job.replayed.has_value();
  return std::make_unique<WorkerRole>(
      p, std::move(job), [replay](WorkerRole& role) -> std::unique_ptr<WorkerRunner> {
        if (replay) return std::make_unique<ReplayRunner>(role);
        return std::make_unique<KernelRunner>(role);
      });
}

}  // namespace

int RunNode(const NodeOptions& options) {
  // Logs go to stderr (stdout carries the coordinator's progress), tagged with the rank.
  auto logger = spdlog::stderr_logger_mt(fmt::format("rank-{}", options.rank));
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  spdlog::set_default_logger(logger);
  // The kernels' share of this machine's cores (compute_threads.h), said once; a worker with
  // several devices divides it among them.
  const ThreadChoice threads = ChooseComputeThreads(std::getenv, UsableCores());
  const config::ScenarioSpec& s = options.scenario;
  const int devices = options.rank >= 1 && options.rank <= config::ProtocolWorkers(s)
                          ? config::DevicesPerWorker(s)
                          : 1;
  const int team = SetComputeThreads(threads.threads, devices);
  ApplyComputeThreadsHere();
  if (devices > 1) {
    spdlog::info("kernels use {} OpenMP thread{} per device ({} devices): {}", team,
                 team == 1 ? "" : "s", devices, threads.why);
  } else {
    spdlog::info("kernels use {}: {}",
                 team > 0 ? fmt::format("{} OpenMP thread{}", team, team == 1 ? "" : "s")
                          : std::string("OpenMP's team size"),
                 threads.why);
  }
  NodeProcess process(options);
  // Every rank checks the scenario, so that a bad one fails once everywhere with exit code 2.
  CheckLiveScenario(s);
  if (s.model_from_workers && options.rank != 0) {
    if (!process.layout().IsServer(options.rank)) {
      throw ConfigError(fmt::format(
          "error: rank {} of {} is a worker, and the workers of a 'model: torch' job are the "
          "training script's processes (poseidon.torch): give `poseidon node` the script after "
          "'--' (docs/torch.md), or start it with `poseidon launch --torch`",
          options.rank, s.file));
    }
    // A shard of a job whose workers bring the model: built once worker 1's job arrives.
    process.SetControlHandler([&process](int peer, uint8_t type, const std::vector<uint8_t>& body) {
      std::string text;
      if (type != kCtlJobSpec || peer != 0 || process.has_role() || !DecodeJobText(body, &text)) {
        return false;
      }
      NodeOptions o = process.options();
      try {
        config::ApplyWorkerJob(config::DecodeWorkerJob(text, "worker 1"), "worker 1", &o.scenario);
        spdlog::info("{}: the job's model arrived ({} modules)", process.Who(o.rank),
                     o.scenario.model.layers.size());
        process.SetRole(std::make_unique<ShardRole>(process, BuildLiveJob(o)));
      } catch (const ConfigError& e) {
        process.Fail(kExitConfig, e.what());
      }
      return true;
    });
  } else {
    process.SetRole(MakeRole(process));
  }
  return process.Run();
}

void CheckLiveScenario(const config::ScenarioSpec& s) {
  // The workers bring the model: what can be checked is checked when it arrives.
  if (s.model_from_workers) return;
  // A machine's client with several devices cannot restart yet: a restarted machine would have
  // to restore every device's place in the data stream (the worker's checkpoint holds one), and
  // nothing has tested its rejoin live. One process per device restarts as any worker does.
  if (config::DevicesPerWorker(s) > 1 && s.fault.enabled) {
    throw ConfigError(fmt::format(
        "error: {}: protocol.fault_tolerance with {} devices per machine (client: machine) does "
        "not run live: a worker machine with several devices cannot be restarted or rejoin yet; "
        "drop protocol.fault_tolerance, or run one process per device (cluster.client: device), "
        "whose workers restart as one-device workers do",
        s.file, s.devices_per_machine));
  }
  // Horovod's negotiation is timed by its cycles, so its decisions are not the simulator's to
  // compare, and nothing has run it live: the simulator alone hosts it.
  if (s.baseline == "horovod") {
    throw ConfigError(fmt::format(
        "error: {}: protocol.baseline horovod runs in the simulator only (poseidon simulate); "
        "live, run baseline ddp or Horovod itself",
        s.file));
  }
  // Every scheme runs live (ps, sfb, allreduce); what is left to check is that the model and the
  // protocol plan build, so that a bad scenario fails once here, not in every process.
  const core::Model model = config::BuildScenarioModel(s);
  (void)cost::BuildTimedProtocol(s, model, false, cost::BuildComputeModel(s, model));
}

bool RankFromEnvironment(int* rank, int* size, std::string* source) {
  static const char* const kVars[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                         {"PMI_RANK", "PMI_SIZE"},
                                         {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& v : kVars) {
    const char* r = std::getenv(v[0]);
    const char* s = std::getenv(v[1]);
    if (!r || !s) continue;
    char* end = nullptr;
    const long rv = std::strtol(r, &end, 10);
    if (*r == '\0' || *end != '\0') continue;
    const long sv = std::strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || rv < 0 || sv <= rv) continue;
    *rank = static_cast<int>(rv);
    *size = static_cast<int>(sv);
    *source = std::string(v[0]) + "/" + v[1];
    return true;
  }
  return false;
}

}  // namespace poseidon::rt
