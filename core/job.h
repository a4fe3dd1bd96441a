// core/job.h: who is in a job and how it syncs (plain data shared by every actor).
//
// Every actor of a job is built from the same JobLayout and ProtocolConfig, so that decisions
// derived from them (chunk placement, who to send to) agree without extra messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/collectives.h"
#include "core/messages.h"
#include "core/placement_policy.h"
#include "core/sacp.h"
#include "core/types.h"

namespace poseidon::core {

struct JobLayout {
  int num_workers = 1;
  int num_servers = 1;
  int num_machines = 1;
  // machine_of[actor] for every ActorId (coordinator, workers, servers).
  std::vector<int> machine_of;

  // Worker i on machine i, shard j on machine j % num_workers (the paper's setup: a shard on
  // every worker machine), coordinator on machine 0.
  static JobLayout Colocated(int workers, int servers);
  // Workers on machines 0..P-1, shards on their own machines P..P+S-1, coordinator on machine 0.
  static JobLayout Dedicated(int workers, int servers);
  // `machines` worker machines holding `workers_per_machine` workers each (one process per
  // device: worker i on machine i / workers_per_machine), shards co-located (shard j on machine
  // j mod machines, any number of them) or on machines of their own; coordinator on machine 0.
  // With one worker per machine and servers <= machines it is Colocated or Dedicated.
  static JobLayout Build(int machines, int workers_per_machine, int servers, bool colocated);

  static constexpr ActorId coordinator() { return 0; }
  ActorId worker(int i) const { return 1 + i; }
  ActorId server(int j) const { return 1 + num_workers + j; }
  int num_actors() const { return 1 + num_workers + num_servers; }
  bool IsWorker(ActorId a) const { return a >= 1 && a <= num_workers; }
  bool IsServer(ActorId a) const { return a > num_workers && a < num_actors(); }
  int WorkerIndex(ActorId a) const { return a - 1; }
  int ServerIndex(ActorId a) const { return a - 1 - num_workers; }
  bool SameMachine(ActorId a, ActorId b) const { return machine_of[a] == machine_of[b]; }
  std::string ActorName(ActorId a) const;
};

enum class Consistency : uint8_t {
  kBsp,  // every worker at clock c computes with all updates of clocks <= c-1
  kSsp,  // ... with all updates of clocks <= c-s-1 (staleness s); s = 0 is BSP
  kAsp,  // no bound: workers never wait for each other
};
const char* ConsistencyName(Consistency c);

// When may layer l's forward pass of clock c start?
enum class Gate : uint8_t {
  kAllLayers,  // the original Poseidon: once every layer's parameters are fresh enough
  kPerLayer,   // as soon as layer l's own parameters are fresh enough
};

// Failure detection and recovery (docs/reliability.md). Everything is off by default, so a job
// without faults sends exactly the messages it always did (and the simulator's output is
// unchanged).
struct FaultConfig {
  // Workers and shards send a kHeartbeat to the coordinator this often; the coordinator declares
  // an actor dead when it has heard nothing from it for failure_timeout_ns (a killed process and
  // a stopped one look the same), bumps the membership epoch and tells everyone. 0 = off.
  TimeNs heartbeat_ns = 0;
  TimeNs failure_timeout_ns = 0;
  // A dead worker is evicted: shards stop waiting for its pushes, so the others are no longer
  // bounded by its clock (the default for SSP and ASP). Off: everyone waits until it rejoins
  // (the default for BSP, which keeps BSP's result exact).
  bool evict_dead_workers = false;
  // Shards checkpoint their chunks every this many clocks (0 = never); workers keep the pushes a
  // shard's last checkpoint does not cover and send them again when the shard comes back.
  int64_t checkpoint_every = 0;
  bool enabled() const { return heartbeat_ns > 0; }
};

// Timer ids of the core's actors (Host::SetTimer).
inline constexpr uint64_t kHeartbeatTimer = 1;     // workers and shards: send a heartbeat
inline constexpr uint64_t kFailureCheckTimer = 2;  // coordinator: look for silent actors
inline constexpr uint64_t kCycleTimer = 3;         // workers under protocol.baseline horovod: a
                                                   // negotiation cycle (HOROVOD_CYCLE_TIME)

struct ProtocolConfig {
  static constexpr int64_t kUnbounded = int64_t{1} << 60;
  Consistency consistency = Consistency::kBsp;
  int64_t staleness = 0;  // s, for kSsp
  Gate gate = Gate::kAllLayers;
  // How each layer's parameters are synchronised, indexed by layer id (from PlanSchemes; empty
  // means every layer goes through the parameter server).
  std::vector<Scheme> scheme_of_layer;
  // The sufficient factors' batch K of one worker: the rows of activations and output gradients
  // a worker's factors of an FC layer carry. On a machine with several devices it is the
  // per-device batch x devices_per_machine (the machine sends the factors of all its devices).
  int64_t batch = 1;
  // Devices (GPUs, or CPU worker threads) each worker machine holds: Poseidon's three-level
  // hybrid. Every device runs the model on its own batch; the worker actor is the machine's
  // client, which runs the devices' passes on their own streams, reduces a layer's gradients
  // once its backward pass has ended on every device (kLocalReduce: the mean, so one push per
  // chunk per machine), synchronises it as one worker does, and sends fresh parameters out to
  // the devices (kLocalBroadcast). The devices of a machine begin an iteration together. 1: the
  // worker is a device, as before (no local tasks at all).
  int devices_per_machine = 1;
  // Send order by layer depth (layers the next forward pass needs first go first), with at most
  // this many payload bytes in flight per destination; 0 = off (send in the order produced).
  int64_t priority_window_bytes = 0;

  // Bound on how far clocks may drift: s for SSP, 0 for BSP, unbounded for ASP.
  int64_t Slack() const;
  Scheme SchemeOf(int layer) const {
    return scheme_of_layer.empty() ? Scheme::kPs : scheme_of_layer[static_cast<size_t>(layer)];
  }
  // Distributed wait-free backpropagation: a layer's sync starts when its backward pass ends.
  // Off: every sync starts after the whole backward pass.
  bool dwbp = true;
  // Parameter blobs are cut into chunks of at most this many bytes (the 2016 prototype: 512 KiB).
  int64_t chunk_bytes = 512 * 1024;
  // How chunks go to shards (placement.h); the tensor policies ignore chunk_bytes.
  PlacementPolicy placement_policy = PlacementPolicy::kBalancedChunks;
  // Iterations (clocks) each worker runs.
  int64_t iterations = 10;
  // Workers keep parameters on a device: copy gradients to the host before pushing and fresh
  // parameters back after pulling (the host charges PCIe time; zero-cost on CPU workers). With
  // several devices per machine the local reduction and broadcast include those copies.
  bool device_copies = false;
  // The job's messages carry their values (the live runtime; replayed compute sends zeros of the
  // real sizes). A push, parameters, factors or ring step without them is then refused
  // (message_rules.h) before any actor counts it. False: size-only (phantom) payloads, the
  // simulator's.
  bool real_payloads = false;
  // How gradients travel (protocol.gradient_wire; messages.h WireFormat): pushes, sufficient
  // factors and ring steps carry 2 bytes per value in kFp16 / kBf16, so the network carries (and
  // the simulator prices) half their bytes; a shard's parameters travel as the job holds them.
  // Chunks and ring pieces are cut as in kFp32 (chunk_bytes counts the job's values), so a 16-bit
  // job makes the same messages, each half the size. Needs fp32 values (value_words 1).
  WireFormat gradient_wire = WireFormat::kFp32;
  // The system users run instead (protocol.baseline; core/collectives.h): every layer's gradient
  // goes by fused ring all-reduces (DDP's buckets or Horovod's tensor fusion), one collective at a
  // time per worker. kNone: Poseidon's own per-layer schemes (scheme_of_layer). A baseline needs
  // BSP and every layer planned kAllreduce (config/job_config.cc does both).
  BaselineConfig baseline;
  FaultConfig fault;
};

}  // namespace poseidon::core
