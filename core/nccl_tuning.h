// core/nccl_tuning.h: how NCCL chooses between its ring and its tree for an all-reduce when
// NCCL_ALGO is not set (protocol.allreduce_algorithm: auto; core/collectives.h).
//
// NCCL prices every (algorithm, protocol) pair with a latency and a bandwidth fixed when the
// communicator is created (src/graph/tuning.cc, ncclTopoTuneModel) and runs each collective with
// the pair of least time = latency + bytes / bandwidth (ncclTopoGetAlgoTime). This is that model
// re-derived for the two algorithms the core runs (core/ring.h, core/tree.h) and the protocol it
// pipelines them with (Simple: whole chunks, core/collectives.h TreePieceBytes):
//
//   latency, us   ring: base + (2(R-1) - 2(N-1)) * intra + 2(N-1) * inter    (x 1.9 before Ampere,
//                       x 1.4 from Ampere on, for a collective of >= 64 bytes per channel and rank
//                       across machines: "plateau effect of ring")
//                 tree: base + 2 * ((R/N - 1) * intra + floor(log2 N) * inter)
//   bandwidth     ring: busBw * R / (2(R-1));   tree: min(0.92 busBw, channels * perChMaxTreeBw)
//                 * 0.5 * treeCorrectionFactor(bytes)
//
// R ranks on N machines; base 8.4 us for both (baseLatencies, Simple); intra the NVLink or PCI
// hardware latency of a step inside a machine (ring 3.4 / 5.7 us, tree 4.0 / 4.0; the ring's at
// least 3 x the network post overhead across machines: 1 us on Intel CPUs, 2 on AMD); inter the
// network's (14 us; the tree's with one rank per machine). busBw is the channels' speed times
// their number as NCCL's topology search finds them (src/graph/search.cc), which this model
// takes for one NIC per machine (the simulator's): one channel at the largest entry of NCCL's
// speed array not above the NIC's rate (and the machine's own path), doubled into two channels of
// half that speed when it is at least 25 GB/s (ncclTopoDupChannels); with one or two machines the
// tree's channel may run up to twice the ring's (the search's "increase bwIntra for trees").
// Inside one machine NCCL's tree is a chain, which the core does not run: with one machine auto
// always chooses the ring. Not modelled: the LL and LL128 protocols (NCCL would run small
// collectives with them, at lower latency), CollNet and NVLS, several NICs per machine, and the
// search's unbalanced-tree pattern (x 0.85).
//
//   NcclTopology t = ...;                       // from the scenario's cluster (config/job_config)
//   AllreduceAlgorithm a = NcclChooseAllreduce(25 << 20, t);
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

namespace poseidon::core {

// How a collective all-reduces (NCCL_ALGO): the chunked ring of core/ring.h, or NCCL's double
// binary tree across machines with a chain inside each (core/tree.h); kAuto: per collective, as
// NCCL's tuning model chooses (above). A collective itself always runs a ring or a tree.
enum class AllreduceAlgorithm : uint8_t { kRing, kTree, kAuto };

// The rows of NCCL's per-generation tables (compCapIndex): below sm_80 is Volta's row.
enum class NcclGeneration : uint8_t { kVolta, kAmpere, kHopper, kBlackwell };

// What NCCL's tuning model reads of the cluster.
struct NcclTopology {
  int ranks = 1;               // processes in the communicator (the job's workers)
  int nodes = 1;               // machines they run on
  double net_GBps = 0;         // one machine's NIC, GB/s (1e9 bytes/s), each direction
  double intra_GBps = 0;       // a device's path to the next inside a machine, GB/s
  bool intra_nvlink = false;   // NVLink inside a machine (else PCI latencies)
  NcclGeneration generation = NcclGeneration::kVolta;
  double net_overhead_us = 1;  // getNetOverhead: 1 on Intel x86 CPUs, 2 on AMD
};

// One algorithm's price for a topology (Simple protocol), before the size's corrections.
struct NcclAlgoCost {
  double latency_us = 0;
  double bus_GBps = 0;   // busBw
  double alg_GBps = 0;   // the bandwidth bytes are divided by
  int channels = 0;
};
NcclAlgoCost NcclAllreduceCost(AllreduceAlgorithm a, const NcclTopology& t);
// ncclTopoGetAlgoTime for one all-reduce of `bytes`, microseconds. `a`: kRing or kTree.
double NcclAllreduceTimeUs(AllreduceAlgorithm a, int64_t bytes, const NcclTopology& t);
// The algorithm NCCL runs an all-reduce of `bytes` with: the tree when it is cheaper (or equal:
// NCCL tries it first), the ring otherwise and always on one machine.
AllreduceAlgorithm NcclChooseAllreduce(int64_t bytes, const NcclTopology& t);
// The smallest power of two (bytes) from which NCCL keeps to the ring up to 2^40 bytes; 0 when it
// always does (one machine), -1 when it runs the tree even at 2^40 (one or two machines, where the
// tree's channels may run at twice the ring's).
int64_t NcclRingFromBytes(const NcclTopology& t);

}  // namespace poseidon::core
