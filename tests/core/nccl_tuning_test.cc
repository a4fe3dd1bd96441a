// NCCL's choice between ring and tree (core/nccl_tuning.h): its latencies, bandwidths and times
// against values worked out by hand from NCCL's tables (src/graph/tuning.cc, search.cc), and the
// choice that follows on the clusters the docs use.
#include "core/nccl_tuning.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace poseidon::core {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Machines of 8 V100 joined by NVLink (150 GB/s per device), one 100 Gb/s NIC each: DLPerf's.
NcclTopology DgxV100(int machines) {
  NcclTopology t;
  t.ranks = 8 * machines;
  t.nodes = machines;
  t.net_GBps = 12.5;
  t.intra_GBps = 150;
  t.intra_nvlink = true;
  t.generation = NcclGeneration::kVolta;
  return t;
}

// One GPU per machine at 10 GbE (the ATC'17 testbed's Titan X reads Volta's row).
NcclTopology OnePerMachine10G(int machines) {
  NcclTopology t;
  t.ranks = machines;
  t.nodes = machines;
  t.net_GBps = 1.25;
  t.intra_GBps = 1.25;
  return t;
}

TEST(NcclTuning, FourDgxMachinesPriceRingAndTreeAsNcclsTablesDo) {
  const NcclTopology t = DgxV100(4);
  // One channel at 12 GB/s (the largest speed not above 12.5). Ring: busBw 12, algBw 12 x 32/62;
  // latency 8.4 + 56 x 3.4 (NVLink) + 6 x 14 (network) = 282.8 us.
  const NcclAlgoCost ring = NcclAllreduceCost(AllreduceAlgorithm::kRing, t);
  EXPECT_EQ(ring.channels, 1);
  EXPECT_DOUBLE_EQ(ring.bus_GBps, 12.0);
  EXPECT_NEAR(ring.alg_GBps, 12.0 * 32 / 62, 1e-12);
  EXPECT_NEAR(ring.latency_us, 282.8, 1e-9);
  // Tree: min(0.92 x 12, 1 x 10.0 (Volta, 4+ nodes)) = 10, algBw 5; latency
  // 8.4 + 2 x (7 x 4.0 + log2(4) x 14) = 120.4 us.
  const NcclAlgoCost tree = NcclAllreduceCost(AllreduceAlgorithm::kTree, t);
  EXPECT_DOUBLE_EQ(tree.bus_GBps, 10.0);
  EXPECT_DOUBLE_EQ(tree.alg_GBps, 5.0);
  EXPECT_NEAR(tree.latency_us, 120.4, 1e-9);
  // 1 MiB: the tree at 5 x 0.5 (log2(2^20 / 64) = 14) against the ring with its plateau (x 1.9).
  EXPECT_NEAR(NcclAllreduceTimeUs(AllreduceAlgorithm::kTree, kMiB, t), 120.4 + 1048576 / 2500.0,
              1e-6);
  EXPECT_NEAR(NcclAllreduceTimeUs(AllreduceAlgorithm::kRing, kMiB, t),
              282.8 * 1.9 + 1048576 / (1000 * 12.0 * 32 / 62), 1e-6);
  // So DDP's first bucket goes by the tree and its 25 MiB buckets by the ring.
  EXPECT_EQ(NcclChooseAllreduce(kMiB, t), AllreduceAlgorithm::kTree);
  EXPECT_EQ(NcclChooseAllreduce(25 * kMiB, t), AllreduceAlgorithm::kRing);
}

TEST(NcclTuning, TwoMachinesRaiseTheTreesChannelAndKeepTheTree) {
  const NcclTopology t = DgxV100(2);
  // The tree's intra speed rises 12 -> 15 -> 18 -> 20 -> 24 (twice 12); busBw
  // min(0.92 x 24, 18.5 (Volta, 2 nodes)) = 18.5. Latency 8.4 + 2 x (7 x 4 + 14) = 92.4.
  const NcclAlgoCost tree = NcclAllreduceCost(AllreduceAlgorithm::kTree, t);
  EXPECT_DOUBLE_EQ(tree.bus_GBps, 18.5);
  EXPECT_NEAR(tree.latency_us, 92.4, 1e-9);
  // Ring latency 8.4 + 28 x 3.4 + 2 x 14 = 131.6.
  EXPECT_NEAR(NcclAllreduceCost(AllreduceAlgorithm::kRing, t).latency_us, 131.6, 1e-9);
  // The tree moves each byte once per NIC and direction, the ring twice: the tree at every size.
  for (int64_t b : {int64_t{4096}, kMiB, 25 * kMiB, 256 * kMiB}) {
    EXPECT_EQ(NcclChooseAllreduce(b, t), AllreduceAlgorithm::kTree) << b;
  }
  EXPECT_EQ(NcclRingFromBytes(t), -1);
}

TEST(NcclTuning, ManyMachinesAtTenGigabitCrossOverAtSixteenMebibytes) {
  const NcclTopology t = OnePerMachine10G(128);
  // Ring: 254 network steps, (8.4 + 254 x 14) x 1.9 = 6772.36 us; algBw 1.2 x 128 / 254.
  // Tree: 8.4 + 2 x 7 x 14 = 204.4 us; algBw 0.92 x 1.2 / 2 x the size's factor.
  EXPECT_NEAR(NcclAllreduceTimeUs(AllreduceAlgorithm::kRing, 16 * kMiB, t),
              (8.4 + 254 * 14) * 1.9 + 16.0 * kMiB / (1000 * 1.2 * 128 / 254), 1e-6);
  EXPECT_NEAR(NcclAllreduceTimeUs(AllreduceAlgorithm::kTree, 16 * kMiB, t),
              204.4 + 16.0 * kMiB / (1000 * 1.104 / 2 * 0.7), 1e-6);
  // 8 MiB: tree 19,200 us against ring 20,644; 16 MiB: tree 43,623 against ring 34,517.
  EXPECT_EQ(NcclChooseAllreduce(8 * kMiB, t), AllreduceAlgorithm::kTree);
  EXPECT_EQ(NcclChooseAllreduce(16 * kMiB, t), AllreduceAlgorithm::kRing);
  EXPECT_EQ(NcclRingFromBytes(t), 16 * kMiB);
}

TEST(NcclTuning, OneMachineAlwaysRunsTheRing) {
  NcclTopology t = DgxV100(1);
  EXPECT_EQ(NcclChooseAllreduce(1024, t), AllreduceAlgorithm::kRing);
  EXPECT_EQ(NcclChooseAllreduce(512 * kMiB, t), AllreduceAlgorithm::kRing);
  EXPECT_EQ(NcclRingFromBytes(t), 0);
  // No network steps and no plateau: 8.4 + 14 x 3.4 us.
  EXPECT_NEAR(NcclAllreduceCost(AllreduceAlgorithm::kRing, t).latency_us, 8.4 + 14 * 3.4, 1e-9);
}

TEST(NcclTuning, FastNicsSplitIntoTwoChannelsAndNewerGpusReadTheirRows) {
  // 400 Gb/s (50 GB/s) on H100s: the sm90 array's 48, split into two channels of 24 (>= 25).
  NcclTopology t = DgxV100(8);
  t.net_GBps = 50;
  t.intra_GBps = 450;
  t.generation = NcclGeneration::kHopper;
  const NcclAlgoCost ring = NcclAllreduceCost(AllreduceAlgorithm::kRing, t);
  EXPECT_EQ(ring.channels, 2);
  EXPECT_DOUBLE_EQ(ring.bus_GBps, 48.0);
  // Hopper's tree cap for 4+ nodes is 36.0 per channel: 0.92 x 48 binds.
  EXPECT_NEAR(NcclAllreduceCost(AllreduceAlgorithm::kTree, t).bus_GBps, 0.92 * 48, 1e-12);
  // From Ampere on the ring's plateau is x 1.4: 8.4 + 112 x 3.4 + 14 x 14 = 585.2 us.
  EXPECT_NEAR(NcclAllreduceTimeUs(AllreduceAlgorithm::kRing, 64 * kMiB, t),
              585.2 * 1.4 + 64.0 * kMiB / (1000 * 48.0 * 64 / 126), 1e-6);
}

TEST(NcclTuning, AmdCpusRaiseTheRingsStepsInsideMachines) {
  // PCIe machines (5.7 us a ring step) across the network: NCCL's post overhead, 3 x 2 us on
  // AMD CPUs, exceeds it; 3 x 1 us on Intel does not.
  NcclTopology t = DgxV100(4);
  t.intra_nvlink = false;
  t.intra_GBps = 12;
  const double intel = NcclAllreduceCost(AllreduceAlgorithm::kRing, t).latency_us;
  t.net_overhead_us = 2;
  const double amd = NcclAllreduceCost(AllreduceAlgorithm::kRing, t).latency_us;
  EXPECT_NEAR(intel, 8.4 + 56 * 5.7 + 6 * 14, 1e-9);
  EXPECT_NEAR(amd, 8.4 + 56 * 6.0 + 6 * 14, 1e-9);
}

}  // namespace
}  // namespace poseidon::core
