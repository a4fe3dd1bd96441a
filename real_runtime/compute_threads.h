// real_runtime/compute_threads.h: how many OpenMP threads a live process's kernels use.
//
// Several processes of a job often share one machine (mpirun or srun with many ranks per node,
// or `launch`). oneDNN's OpenMP team defaults to every core, so P processes on C cores each run
// C threads and the machine thrashes (about 6x slower training under srun or mpirun than under
// `launch`, which sets one thread each). A node therefore takes its share of the cores, in this
// order:
//   1. OMP_NUM_THREADS, if the user set it: left to OpenMP, never overridden;
//   2. SLURM_CPUS_PER_TASK (srun -c N, sbatch --cpus-per-task N);
//   3. the cores this process may run on (its affinity mask) divided by the ranks on this
//      machine: OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI), MPI_LOCALNRANKS (MPICH), or Slurm's
//      SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE) at SLURM_NODEID; at least 1;
//   4. otherwise OpenMP's default (a process started by hand).
//
//   ThreadChoice c = ChooseComputeThreads(std::getenv, UsableCores());
//   SetComputeThreads(c.threads);   // once, at start; prints nothing
//   ApplyComputeThreadsHere();      // on every thread that runs kernels (Executor does)
//
// OpenMP keeps the team size per thread, so the choice is applied on each thread that runs
// kernels, not only on the main one.
//
// A worker machine with several devices (cluster.devices_per_machine = D; on a CPU each device is
// a worker thread with its own net and oneDNN engine) divides the process's share among its
// devices: every thread sets a team of DeviceThreads(T, D) = max(1, T / D), T being the choice
// above (or, when that leaves OpenMP alone, the team OpenMP would run: OMP_NUM_THREADS or every
// core), so that the D devices together use what one process would.
//
//   SetComputeThreads(c.threads, /*devices=*/2);
#pragma once

#include <functional>
#include <string>

namespace poseidon::rt {

struct ThreadChoice {
  int threads = 0;  // 0: leave OpenMP's default (or the user's OMP_NUM_THREADS)
  std::string why;  // one phrase for the start-up line: "2 cores / 7 ranks on this machine (...)"
};

// `env` returns a variable's value or nullptr (std::getenv in a process, a map in tests).
ThreadChoice ChooseComputeThreads(const std::function<const char*(const char*)>& env, int cores);

// The CPUs this process may run on (sched_getaffinity), at least 1.
int UsableCores();

// Each device's team when `devices` devices share `process_threads` threads: at least one.
int DeviceThreads(int process_threads, int devices);

// Process-wide: the team size ApplyComputeThreadsHere sets (0 = leave OpenMP alone); with
// devices > 1, each device's share of it. Returns the team size set (0: OpenMP's own).
int SetComputeThreads(int threads, int devices = 1);
void ApplyComputeThreadsHere();

}  // namespace poseidon::rt
