#include "core/nccl_tuning.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <span>

namespace poseidon::core {

namespace {

// NCCL's constants (src/graph/tuning.cc, ncclTunerConstantsDefaults; src/graph/search.cc), for
// the Simple protocol of the ring and the tree.
constexpr double kBaseLatencyUs = 8.4;     // baseLatencies[Tree|Ring][Simple]
constexpr double kNvlinkRingUs = 3.4;      // hwLatencies[NVLINK][Ring][Simple]
constexpr double kNvlinkTreeUs = 4.0;      // hwLatencies[NVLINK][Tree][Simple]
constexpr double kPciRingUs = 5.7;         // hwLatencies[PCI][Ring][Simple]
constexpr double kPciTreeUs = 4.0;         // hwLatencies[PCI][Tree][Simple]
constexpr double kNetUs = 14.0;            // hwLatencies[NET][Tree|Ring][Simple]
constexpr double kTreeAllreduceShare = 0.92;
// perChMaxTreeBws[compCapIndex][nNodes <= 2 ? nNodes - 1 : 2], GB/s.
constexpr double kPerChMaxTreeGBps[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
// treeCorrectionFactor[Simple][log2(bytes / 64)], 64 B to 256 MiB.
constexpr std::array<double, 24> kTreeCorrection = {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
                                                    .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9};
// The search's channel speeds across machines, GB/s, fastest first (speedArrayInter and the sm90
// and sm100 arrays).
constexpr double kSpeeds[] = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                              7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSpeedsSm90[] = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                  15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSpeedsSm100[] = {96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0,
                                   20.0, 17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};

std::span<const double> Speeds(NcclGeneration g) {
  if (g == NcclGeneration::kBlackwell) return kSpeedsSm100;
  if (g == NcclGeneration::kHopper) return kSpeedsSm90;
  return kSpeeds;
}

int Log2Floor(int64_t v) {  // NCCL's log2i: -1 for v <= 0
  return v <= 0 ? -1 : static_cast<int>(std::bit_width(static_cast<uint64_t>(v))) - 1;
}

// The search's channels: the fastest speed a channel through the machine's NIC (and its own
// path, with several ranks on it) can run at, one channel, two of half the speed from 25 GB/s on
// (ncclTopoDupChannels). `tree_intra`: the tree's intra speed on one or two machines, raised
// step by step while below twice the inter speed (pass 2 of ncclTopoCompute).
struct Channels {
  int count = 1;
  double inter = 0;  // bwInter per channel
  double tree_intra = 0;
};

Channels SearchChannels(const NcclTopology& t) {
  const std::span<const double> speeds = Speeds(t.generation);
  const double cap = t.ranks > t.nodes ? std::min(t.net_GBps, t.intra_GBps) : t.net_GBps;
  size_t i = 0;
  while (i + 1 < speeds.size() && speeds[i] > cap) ++i;
  Channels c;
  c.inter = speeds[i];
  if (c.inter >= 25.0) {
    c.count = 2;
    c.inter /= 2;
  }
  // Pass 2 starts again from the channel speed and, for a tree, raises the intra speed while it
  // stays below twice the inter speed and the machine's own path carries it.
  size_t j = 0;
  while (j + 1 < speeds.size() && speeds[j] > c.inter) ++j;
  const double intra_cap =
      t.ranks > t.nodes ? t.intra_GBps / c.count : std::numeric_limits<double>::max();
  c.tree_intra = speeds[j];
  while (j > 0 && c.tree_intra < c.inter * 2 && speeds[j - 1] <= intra_cap) c.tree_intra = speeds[--j];
  return c;
}

}  // namespace

NcclAlgoCost NcclAllreduceCost(AllreduceAlgorithm a, const NcclTopology& t) {
  NcclAlgoCost cost;
  const int R = std::max(t.ranks, 1), N = std::max(t.nodes, 1);
  const bool tree = a == AllreduceAlgorithm::kTree;
  const Channels ch = SearchChannels(t);
  cost.channels = ch.count;
  // busBw: channels x (bwIntra on one or two machines, bwInter beyond); the ring's bwIntra is its
  // bwInter, the tree's may have been raised.
  const double per_channel = tree && N <= 2 ? ch.tree_intra : ch.inter;
  cost.bus_GBps = ch.count * per_channel;
  const int gen = static_cast<int>(t.generation);
  if (tree) {
    cost.bus_GBps = std::min(cost.bus_GBps * kTreeAllreduceShare,
                             ch.count * kPerChMaxTreeGBps[gen][N <= 2 ? N - 1 : 2]);
    cost.alg_GBps = cost.bus_GBps * 0.5;
  } else {
    cost.alg_GBps = cost.bus_GBps * R / (2.0 * (R - 1));
  }
  const double intra_hw = t.intra_nvlink ? (tree ? kNvlinkTreeUs : kNvlinkRingUs)
                                         : (tree ? kPciTreeUs : kPciRingUs);
  // The network's latency (with one rank per machine NCCL takes the tree's for both: equal).
  const double inter = kNetUs;
  cost.latency_us = kBaseLatencyUs;
  if (tree) {
    cost.latency_us += 2 * ((R / N - 1) * intra_hw + Log2Floor(N) * inter);
  } else {
    const double intra = N > 1 ? std::max(intra_hw, 3 * t.net_overhead_us) : intra_hw;
    const int steps = 2 * (R - 1);
    const int inter_steps = N == 1 ? 0 : 2 * (N - 1);
    cost.latency_us += (steps - inter_steps) * intra + inter_steps * inter;
  }
  return cost;
}

double NcclAllreduceTimeUs(AllreduceAlgorithm a, int64_t bytes, const NcclTopology& t) {
  const NcclAlgoCost c = NcclAllreduceCost(a, t);
  double bw = c.alg_GBps;
  double lat = c.latency_us;
  const int log_size = Log2Floor(bytes >> 6);
  if (a == AllreduceAlgorithm::kTree && log_size >= 0 && log_size < 23) {
    bw *= kTreeCorrection[static_cast<size_t>(log_size)];
  }
  if (a == AllreduceAlgorithm::kRing && t.nodes > 1 &&
      bytes / (static_cast<int64_t>(c.channels) * std::max(t.ranks, 1)) >= 64) {
    lat *= t.generation == NcclGeneration::kVolta ? 1.9 : 1.4;  // "plateau effect of ring"
  }
  return lat + static_cast<double>(bytes) / (1000 * bw);
}

AllreduceAlgorithm NcclChooseAllreduce(int64_t bytes, const NcclTopology& t) {
  if (t.nodes < 2 || t.ranks < 2) return AllreduceAlgorithm::kRing;
  // NCCL walks its algorithms in order (the tree before the ring) and keeps a strictly smaller
  // time, so a tie goes to the tree.
  return NcclAllreduceTimeUs(AllreduceAlgorithm::kTree, bytes, t) <=
                 NcclAllreduceTimeUs(AllreduceAlgorithm::kRing, bytes, t)
             ? AllreduceAlgorithm::kTree
             : AllreduceAlgorithm::kRing;
}

int64_t NcclRingFromBytes(const NcclTopology& t) {
  if (t.nodes < 2 || t.ranks < 2) return 0;
  int64_t from = -1;
  for (int k = 40; k >= 0; --k) {
    if (NcclChooseAllreduce(int64_t{1} << k, t) != AllreduceAlgorithm::kRing) break;
    from = int64_t{1} << k;
  }
  return from;
}

}  // namespace poseidon::core
