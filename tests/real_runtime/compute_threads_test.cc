// A live process's OpenMP team size from its launcher's environment (compute_threads.h).
#include "real_runtime/compute_threads.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace poseidon::rt {
namespace {

ThreadChoice Choose(const std::map<std::string, std::string>& vars, int cores) {
  return ChooseComputeThreads(
      [&](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      cores);
}

TEST(ComputeThreads, TheUsersOmpNumThreadsIsNeverOverridden) {
  const ThreadChoice c = Choose({{"OMP_NUM_THREADS", "3"}, {"SLURM_CPUS_PER_TASK", "8"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                                16);
  EXPECT_EQ(c.threads, 0);
  EXPECT_EQ(c.why, "OMP_NUM_THREADS=3, as set");
}

TEST(ComputeThreads, SlurmCpusPerTaskComesBeforeCountingRanks) {
  const ThreadChoice c =
      Choose({{"SLURM_CPUS_PER_TASK", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "8"}}, 16);
  EXPECT_EQ(c.threads, 4);
  EXPECT_EQ(c.why, "SLURM_CPUS_PER_TASK=4");
}

TEST(ComputeThreads, CoresAreSharedByTheRanksOnThisMachine) {
  EXPECT_EQ(Choose({{"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}, 16).threads, 4);
  EXPECT_EQ(Choose({{"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}, 16).why,
            "16 cores / 4 ranks on this machine (OMPI_COMM_WORLD_LOCAL_SIZE)");
  EXPECT_EQ(Choose({{"MPI_LOCALNRANKS", "3"}}, 16).threads, 5);
  // More ranks than cores: still one thread each.
  EXPECT_EQ(Choose({{"SLURM_STEP_TASKS_PER_NODE", "7"}}, 2).threads, 1);
  // Slurm's compressed list, at this node's index: nodes 0-1 run 4 tasks, node 2 runs 2.
  EXPECT_EQ(Choose({{"SLURM_TASKS_PER_NODE", "4(x2),2"}, {"SLURM_NODEID", "1"}}, 8).threads, 2);
  EXPECT_EQ(Choose({{"SLURM_TASKS_PER_NODE", "4(x2),2"}, {"SLURM_NODEID", "2"}}, 8).threads, 4);
  // The step's list wins over the job's.
  EXPECT_EQ(Choose({{"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_TASKS_PER_NODE", "8"}}, 8).threads,
            4);
}

TEST(ComputeThreads, NoLauncherLeavesOpenMpsDefaultAndSaysHowToChoose) {
  const ThreadChoice c = Choose({}, 8);
  EXPECT_EQ(c.threads, 0);
  EXPECT_NE(c.why.find("set OMP_NUM_THREADS to choose"), std::string::npos) << c.why;
  // Malformed values are ignored, not trusted.
  EXPECT_EQ(Choose({{"SLURM_CPUS_PER_TASK", "x"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "0"},
                    {"SLURM_TASKS_PER_NODE", "4(x"}},
                   8)
                .threads,
            0);
  EXPECT_GE(UsableCores(), 1);
}

// A worker machine with several (CPU) devices divides the process's share among them.
TEST(ComputeThreads, TheDevicesOfAMachineShareItsThreads) {
  EXPECT_EQ(DeviceThreads(8, 1), 8);
  EXPECT_EQ(DeviceThreads(8, 2), 4);
  EXPECT_EQ(DeviceThreads(8, 3), 2);
  EXPECT_EQ(DeviceThreads(2, 4), 1) << "at least one each";
  EXPECT_EQ(DeviceThreads(0, 2), 1);
  EXPECT_EQ(SetComputeThreads(6, 2), 3);
  EXPECT_EQ(SetComputeThreads(6, 1), 6);
  EXPECT_EQ(SetComputeThreads(0, 1), 0) << "one device: OpenMP's own team, as always";
  SetComputeThreads(0);
}

}  // namespace
}  // namespace poseidon::rt
