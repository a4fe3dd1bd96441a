#include "real_runtime/compute_threads.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace poseidon::rt {
namespace {

std::atomic<int> compute_threads{0};

// A whole positive decimal number, or 0.
long PositiveNumber(const char* s) {
  if (s == nullptr || *s == '\0') return 0;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  return *end == '\0' && v > 0 ? v : 0;
}

// Slurm's compressed tasks-per-node list ("4(x2),3": nodes 0 and 1 run 4 tasks, node 2 runs 3):
// the count of node `node`, or 0 when the list does not parse or is too short.
long TasksOnNode(std::string_view list, long node) {
  long seen = 0;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    long repeat = 1;
    const size_t paren = item.find("(x");
    if (paren != std::string_view::npos) {
      if (item.back() != ')') return 0;
      const std::string r(item.substr(paren + 2, item.size() - paren - 3));
      repeat = PositiveNumber(r.c_str());
      item = item.substr(0, paren);
    }
    const long tasks = PositiveNumber(std::string(item).c_str());
    if (tasks == 0 || repeat == 0) return 0;
    if (node < seen + repeat) return tasks;
    seen += repeat;
  }
  return 0;
}

}  // namespace

ThreadChoice ChooseComputeThreads(const std::function<const char*(const char*)>& env, int cores) {
  if (cores < 1) cores = 1;
  if (const char* omp = env("OMP_NUM_THREADS"); omp != nullptr && *omp != '\0') {
    return {0, fmt::format("OMP_NUM_THREADS={}, as set", omp)};
  }
  if (const long c = PositiveNumber(env("SLURM_CPUS_PER_TASK")); c > 0) {
    return {static_cast<int>(c), fmt::format("SLURM_CPUS_PER_TASK={}", c)};
  }
  long local = 0;
  std::string source;
  if ((local = PositiveNumber(env("OMPI_COMM_WORLD_LOCAL_SIZE"))) > 0) {
    source = "OMPI_COMM_WORLD_LOCAL_SIZE";
  } else if ((local = PositiveNumber(env("MPI_LOCALNRANKS"))) > 0) {
    source = "MPI_LOCALNRANKS";
  } else {
    for (const char* var : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
      const char* list = env(var);
      if (list == nullptr) continue;
      const char* node = env("SLURM_NODEID");
      const long n = node != nullptr ? std::strtol(node, nullptr, 10) : 0;
      if ((local = TasksOnNode(list, n < 0 ? 0 : n)) > 0) {
        source = var;
        break;
      }
    }
  }
  if (local > 0) {
    const int t = static_cast<int>(std::max<long>(1, cores / local));
    return {t, fmt::format("{} core{} / {} rank{} on this machine ({})", cores, cores == 1 ? "" : "s",
                           local, local == 1 ? "" : "s", source)};
  }
  return {0, fmt::format("OpenMP's default: no launcher's environment and no OMP_NUM_THREADS "
                         "({} cores here; set OMP_NUM_THREADS to choose)",
                         cores)};
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned h = std::thread::hardware_concurrency();
  return h > 0 ? static_cast<int>(h) : 1;
}

int DeviceThreads(int process_threads, int devices) {
  return std::max(1, process_threads / std::max(1, devices));
}

int SetComputeThreads(int threads, int devices) {
  if (devices > 1) {
    int total = threads;
#ifdef _OPENMP
    if (total <= 0) total = omp_get_max_threads();  // OMP_NUM_THREADS, else every core
#endif
    threads = DeviceThreads(total, devices);
  }
  threads = threads > 0 ? threads : 0;
  compute_threads.store(threads);
  return threads;
}

void ApplyComputeThreadsHere() {
#ifdef _OPENMP
  const int t = compute_threads.load();
  if (t > 0) omp_set_num_threads(t);
#endif
}

}  // namespace poseidon::rt
