#include "core/job.h"

#include <algorithm>

namespace poseidon::core {

JobLayout JobLayout::Colocated(int workers, int servers) {
  POSEIDON_CHECK(workers >= 1 && servers >= 1) << workers << " workers, " << servers << " servers";
  JobLayout l;
  l.num_workers = workers;
  l.num_servers = servers;
  l.num_machines = std::max(workers, servers);
  l.machine_of.resize(l.num_actors());
  l.machine_of[0] = 0;
  for (int i = 0; i < workers; ++i) l.machine_of[l.worker(i)] = i;
  for (int j = 0; j < servers; ++j) l.machine_of[l.server(j)] = j % l.num_machines;
  return l;
}

JobLayout JobLayout::Dedicated(int workers, int servers) {
  POSEIDON_CHECK(workers >= 1 && servers >= 1) << workers << " workers, " << servers << " servers";
  JobLayout l;
  l.num_workers = workers;
  l.num_servers = servers;
  l.num_machines = workers + servers;
  l.machine_of.resize(l.num_actors());
  l.machine_of[0] = 0;
  for (int i = 0; i < workers; ++i) l.machine_of[l.worker(i)] = i;
  for (int j = 0; j < servers; ++j) l.machine_of[l.server(j)] = workers + j;
  return l;
}

JobLayout JobLayout::Build(int machines, int workers_per_machine, int servers, bool colocated) {
  POSEIDON_CHECK(machines >= 1 && workers_per_machine >= 1 && servers >= 1)
      << machines << " machines, " << workers_per_machine << " workers each, " << servers
      << " servers";
  JobLayout l;
  l.num_workers = machines * workers_per_machine;
  l.num_servers = servers;
  l.num_machines = colocated ? machines : machines + servers;
  l.machine_of.resize(l.num_actors());
  l.machine_of[0] = 0;
  for (int i = 0; i < l.num_workers; ++i) l.machine_of[l.worker(i)] = i / workers_per_machine;
  for (int j = 0; j < servers; ++j) {
    l.machine_of[l.server(j)] = colocated ? j % machines : machines + j;
  }
  return l;
}

const char* ConsistencyName(Consistency c) {
  switch (c) {
    case Consistency::kBsp: return "bsp";
    case Consistency::kSsp: return "ssp";
    case Consistency::kAsp: return "asp";
  }
  return "unknown";
}

int64_t ProtocolConfig::Slack() const {
  switch (consistency) {
    case Consistency::kBsp: return 0;
    case Consistency::kSsp: return staleness;
    case Consistency::kAsp: return kUnbounded;
  }
  return 0;
}

std::string JobLayout::ActorName(ActorId a) const {
  if (a == coordinator()) return "coordinator";
  if (IsWorker(a)) return "worker " + std::to_string(WorkerIndex(a));
  if (IsServer(a)) return "shard " + std::to_string(ServerIndex(a));
  return "actor " + std::to_string(a);
}

}  // namespace poseidon::core
