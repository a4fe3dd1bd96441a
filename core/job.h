// core/job.h: who is in a job and how it syncs (plain data shared by every actor).
//
// Every actor of a job is built from the same JobLayout and ProtocolConfig, so that decisions
// derived from them (chunk placement, who to send to) agree without extra messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

struct ProtocolConfig {
  // Distributed wait-free backpropagation: a layer's sync starts when its backward pass ends.
  // Off: every sync starts after the whole backward pass.
  bool dwbp = true;
  // Parameter blobs are cut into chunks of at most this many bytes (the 2016 prototype: 512 KiB).
  int64_t chunk_bytes = 512 * 1024;
  // Iterations (clocks) each worker runs.
  int64_t iterations = 10;
  // Workers keep parameters on a device: copy gradients to the host before pushing and fresh
  // parameters back after pulling (the host charges PCIe time; zero-cost on CPU workers).
  bool device_copies = false;
};

}  // namespace poseidon::core
