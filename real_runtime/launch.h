// real_runtime/launch.h: start a whole live job on this machine, one process per actor.
//
//   poseidon launch --workers 4 --servers 2 scenarios/live/fmnist_mlp.yaml
//   poseidon launch --machines 2 --devices-per-machine 2 scenarios/live/fmnist_mlp.yaml
//
// Processes: 1 coordinator, one per worker machine (its client drives every device of the
// machine: worker_compute.h) or, with cluster.client: device, one per device, and one per shard.
//
// The launcher writes a fresh random secret (mode 0600) into the log folder, starts the
// coordinator (`poseidon node ... --rank 0 --ready-fd N`), learns the port the OS gave it, then
// starts every worker and shard pointing at it. The coordinator's progress goes to the
// launcher's stdout; every process's log goes to LOG_DIR/rank-R-ROLE.log. The launcher waits for
// all; when one fails it stops the others (SIGTERM) and exits with the failed process's code;
// Ctrl-C (SIGINT) or SIGTERM stops them all and exits with 130. Children die with the launcher
// (PR_SET_PDEATHSIG).
//
// Emulated cluster (--emulate): every machine of the layout (core::JobLayout::machine_of: a worker
// machine with its co-located shards, and with client: device the processes of all its devices)
// runs in its own network namespace behind one bridge, each namespace's link shaped with tc tbf
// to the scenario's bandwidth, through scripts/netns-run; the namespaces are removed when the
// job ends, whatever the outcome.
#pragma once

#include <string>
#include <vector>

namespace poseidon::rt {

struct LaunchOptions {
  std::string scenario_file;
  std::vector<std::string> overrides;  // --set KEY=VALUE, passed to every process
  int workers = 0;                     // > 0: overrides cluster.workers (the worker machines)
  int machines = 0;                    // > 0: the same (--machines); give one of the two
  int devices_per_machine = 0;         // > 0: overrides cluster.devices_per_machine
  int servers = 0;                     // > 0: overrides cluster.servers
  std::string log_dir = "out/launch";
  std::string job_id;                  // empty: launch-PID-TIME
  std::vector<std::string> node_args;  // flags every node gets (training options, trace, ...)
  std::string self_exe;                // the poseidon binary (default /proc/self/exe)
  bool emulate = false;                // each process in a shaped network namespace
  std::string netns_script;            // scripts/netns-run (emulate)
  double emulate_gbps = 0;             // link rate; 0 = the scenario's bandwidth
  // Fault tolerance (protocol.fault_tolerance): a worker or shard that dies is started again
  // (`node --incarnation K`, which rejoins the running job), up to this many restarts in all.
  // Shards checkpoint into LOG_DIR/checkpoints. A failed coordinator still ends the job.
  int restart_on_failure = 0;
  // Continue the job that stopped with this log_dir from LOG_DIR/checkpoints (`node --resume`),
  // instead of wiping them and starting from the initial values.
  bool resume = false;
  // Tests only: a fault spec (fault_injection.h) for the first incarnation of its rank.
  std::string inject_fault;
};

// Runs the job; returns the exit code (see NodeExit in node.h; 130 after a signal). Throws
// config::ConfigError when the scenario cannot be read or the log folder cannot be made.
int RunLaunch(const LaunchOptions& options);

}  // namespace poseidon::rt
