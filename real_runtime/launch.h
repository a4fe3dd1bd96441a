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
  // A job whose workers bring the model (`model: torch`, --torch): every worker is this command
  // (the training script: `python train.py ARGS`), run with the job in its environment
  // (POSEIDON_SCENARIO, POSEIDON_RANK, POSEIDON_COORDINATOR, POSEIDON_SECRET_FILE,
  // POSEIDON_JOB_ID, ..., and torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
  // MASTER_ADDR, MASTER_PORT: python/poseidon/torch/_env.py). Worker 1's standard output is the
  // launcher's; every worker's standard error and the others' output go to their logs.
  std::vector<std::string> worker_command;
  // --torch --no-workers: the coordinator and shards only; the workers are started elsewhere
  // (torchrun), with what the launcher prints to export.
  bool no_workers = false;
  // What the workers of a --torch job get as POSEIDON_TRACE_DIR, POSEIDON_DECISIONS_DIR and
  // POSEIDON_TLS_DIR (node_args carries the same for the other processes).
  std::string trace_dir, decisions_dir, tls_dir;
};

// Runs the job; returns the exit code (see NodeExit in node.h; 130 after a signal). Throws
// config::ConfigError when the scenario cannot be read or the log folder cannot be made.
int RunLaunch(const LaunchOptions& options);

// Runs argv to completion (its stderr is this process's) and returns its stdout, trimmed; throws
// config::ConfigError "error: WHAT failed (see the message above)" when it cannot run or exits
// non-zero.
std::string Capture(const std::vector<std::string>& argv, const std::string& what);

}  // namespace poseidon::rt
