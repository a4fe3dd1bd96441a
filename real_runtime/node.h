// real_runtime/node.h: one process of a live job, hosting one of the core's actors.
//
// A live job is 1 + P + S processes, one per actor of the scenario's JobLayout: rank 0 the
// coordinator, ranks 1..P the workers, ranks P+1..P+S the server shards. Each process runs the
// core's state machine unchanged on an asio event loop (RunNode):
//
//   1. rendezvous: the coordinator listens at a known address; every other process listens on a
//      port of its own, dials the coordinator, authenticates (transport.h) and says where it
//      listens; once all have, the coordinator sends the address table and every process dials
//      the peers of lower rank, so that every pair shares one connection;
//   2. when all of its connections are up, a process starts its actor (OnStart), which registers
//      with the core coordinator; the core's kStart then begins training;
//   3. compute runs on one thread per compute stream (core::Stream): a worker's forward and
//      backward passes and SFB rebuilds run its kernels::Net layer by layer while the loop
//      thread sends the gradients of the layers already done (DWBP overlaps for real);
//   4. workers report their loss of every iteration to the coordinator, which prints progress
//      and writes the learning curve (the CSV `poseidon train` writes); at the end worker 1
//      measures test accuracy; then the coordinator tells every process to exit.
//
// Nothing here decides anything about the protocol: what to send, when and to whom is the
// core's. Every incoming message goes to the core, which checks it against its state and the
// job's shapes (core/message_rules.h) and returns a ProtocolError for one that does not fit;
// the host then closes that peer's connection and reports it (a lost peer), and never aborts.
//
// The implementation is split by role: node_process.h (what every process shares: connections,
// messages, control frames, timers, the job's end) hosts a NodeRole (node_role.h):
// coordinator_role.h, shard_role.h or worker_role.h (whose compute runs on a WorkerRunner:
// worker_runners.h, or a program's own, poseidon.torch's); rendezvous.h (rendezvous and clock
// sync), progress_watchdog.h, live_job.h (what a worker or shard knows of its job).
#pragma once

#include <cstdint>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "kernels/sgd.h"
#include "real_runtime/fault_injection.h"
#include "real_runtime/transport.h"

namespace poseidon::rt {

// How live workers train (the scenario says what the job is; these say how to learn).
struct LiveTraining {
  std::string backend = "cpu";       // reference | cpu | cuda
  std::string data_dir;              // Fashion-MNIST IDX files; empty = Debian's location
  kernels::SgdOptions sgd;           // max_iter and stepsize defaults come from the scenario
  int64_t print_interval = 100;      // coordinator: a progress line every this many iterations
  std::string csv;                   // coordinator: the learning curve, as `poseidon train`
  bool test = true;                  // worker 1 measures test accuracy at the end
  std::string save_params;           // workers: write the final parameters here (raw
                                     // little-endian float32, blob after blob in model order);
                                     // "{rank}" in the path is replaced by the rank
  std::string save_dir;              // workers: the final parameters as a checkpoint folder
                                     // (kernels/checkpoint.h, for `poseidon evaluate`);
                                     // "{rank}" = the rank, else worker 1 (rank 1) alone writes
};

struct NodeOptions {
  config::ScenarioSpec scenario;
  int rank = 0;                       // the actor id this process hosts
  std::string coordinator_host = "127.0.0.1";
  uint16_t coordinator_port = 0;      // rank 0 listens here (0 = the OS picks; see ready_fd)
  std::string listen_host = "127.0.0.1";
  std::string advertise_host;         // where peers reach this process; empty = listen_host
  TransportOptions transport;         // job id and secret filled in by the caller
  // Rank 0 writes "PORT\n" here once it listens, then "dead RANK EPOCH\n" whenever the
  // coordinator declares an incarnation dead (the launcher kills it if it still runs: a stopped
  // process, so that it can be restarted); closed when the process ends.
  int ready_fd = -1;
  // The rendezvous (every process connected to every other, and registered) must be done within
  // this long, or the process fails with exit code 3 naming who is missing; 0 = wait forever.
  // A restarted process (incarnation > 0) has the same bound to rejoin.
  std::chrono::seconds rendezvous_timeout{120};
  // The coordinator ends a job in which no worker finished an iteration for this long, with what
  // every process waits for (exit code 6); 0 = never.
  std::chrono::seconds progress_timeout{600};
  LiveTraining training;
  std::string trace_file;             // Chrome-trace JSON of this process's events
  // "real": workers run the kernels on Fashion-MNIST. "replay": every compute task sleeps the
  // time the scenario's profile (or device roofline) gives it, as the simulator charges it,
  // and messages carry zeros of the real sizes (a node emulating a GPU; no data, no learning).
  std::string compute = "real";
  std::string decisions_file;         // this process's protocol decisions (core/decision_log.h)
  // Fault tolerance (the scenario's protocol.fault_tolerance; docs/reliability.md).
  std::string checkpoint_dir;         // shards write shard-J.ckpt here (checkpoint_every > 0)
  bool rejoin = false;                // a restarted process: rejoin the running job
                                      // (transport.epoch is its incarnation, > 0)
  // A new job that continues an earlier one (`node --resume`, `launch --resume`): every shard
  // starts from its checkpoint in checkpoint_dir and every worker from the shards' values at
  // that clock (as a rejoining one does), reading its data stream from there; the transport is
  // a fresh job's. Bit-identical to the run that was not stopped under BSP when every shard's
  // checkpoint holds the same clocks (docs/checkpoints.md).
  bool resume = false;
  // Tests only (fault_injection.h, `node --inject-fault`): the fault this process injects into
  // itself, if the spec names its rank and it is a first incarnation.
  std::optional<FaultSpec> inject;
};

// Exit codes of a node process (and of `poseidon launch`, which passes the worst one on).
enum NodeExit : int {
  kExitOk = 0,
  kExitConfig = 2,      // bad options or scenario (a ConfigError)
  kExitPeerLost = 3,    // a peer's connection closed before the job ended
  kExitCompute = 4,     // a kernel failed or the loss diverged
  kExitStorage = 5,     // a file could not be written for good (no space, read-only, permission):
                        // restarting would fail the same way, so launch does not
  kExitNoProgress = 6,  // the coordinator's watchdog: no iteration finished for progress_timeout
  kExitStateLost = 7,   // a restarted shard lacks clocks no checkpoint holds (its newest
                        // checkpoint was missing or older): no restart can cure it either
};

// Runs the process until the job ends; returns a NodeExit. Throws config::ConfigError for
// options the job cannot run with (rank out of range, a model that does not fit the data, a
// checkpoint that cannot be read).
//
// With fault tolerance on, a peer's lost connection is not fatal: the coordinator's core
// declares it dead when its heartbeats stop, and every process then refuses that incarnation
// (its epoch) and drops what it had queued for it; a restarted process (rejoin) dials everyone
// alive and the core brings it back. Only losing the coordinator stops a process.
int RunNode(const NodeOptions& options);

// Checks, before anything starts, that the scenario can run live: its model and protocol plan
// build (every scheme runs live: ps, sfb and ring all-reduce); throws config::ConfigError
// naming the problem otherwise.
void CheckLiveScenario(const config::ScenarioSpec& s);

// rank and size from an existing launcher's environment: OMPI_COMM_WORLD_RANK/SIZE (Open MPI),
// PMI_RANK/SIZE (MPICH, Intel MPI), SLURM_PROCID/NTASKS (Slurm). False when none is set.
bool RankFromEnvironment(int* rank, int* size, std::string* source);

}  // namespace poseidon::rt
