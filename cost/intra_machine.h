// cost/intra_machine.h: what moves inside a machine with several devices (Poseidon's three-level
// hybrid): the local reduction of a layer's gradients and the broadcast of its fresh values
// (core::TaskKind::kLocalReduce, kLocalBroadcast), sharing the machine's links and host memory
// with each other and with the NIC.
//
//   IntraMachine intra(spec, /*devices=*/8, /*machines=*/16, nic_Bps);
//   TimeNs next = intra.Start(now, machine, IntraOp::kReduce, layer_bytes, tag);
//   ... at `next`: next = intra.Advance(next, machine, &done);   // done: tags of ended ops
//
// ## Resources of one machine (config::InterconnectSpec)
//
//   host memory   H = host_memory_gbs, shared by every op and the NIC's DMA;
//   device up     C = pcie_gbs, each device to the host (a ring over PCIe also uses it);
//   device down   C, host to each device;
//   nvlink        L = link_gbs, each device to its peers (kind nvlink only).
// The devices are alike and act together, so a per-device resource is one resource whose demand
// is what one device moves.
//
// ## What an op of S bytes moves (D devices, f = (D-1)/D, latency lambda = link_latency_us)
//
// An op is a sequence of stages; a stage waits its latency, then moves its bytes:
//   GPUs, reduce_on: device   reduce:    (D-1) lambda, ring reduce-scatter f S per device (over
//                                        nvlink, or up and down over PCIe); then lambda, each
//                                        device's S/D of the sum up to the host (H: S)
//                             broadcast: lambda, S/D down to each device (H: S); then (D-1) lambda,
//                                        ring all-gather f S per device
//   GPUs, reduce_on: host     reduce:    lambda, every device's S up (H: D S); then the CPU's sum
//                                        (H: (D+1) S: D gradients read, one written)
//                             broadcast: lambda, S down to every device (H: D S)
//   CPU devices (kind host)   reduce:    device 0's gradient plus the others' (H: (D+1) S)
//                             broadcast: device 0's values into the others' (H: 2 (D-1) S)
//
// ## Sharing
//
// The ops of a machine and its NIC share its resources max-min fairly in slowdown (SimGrid's lmm
// for parallel tasks): each consumer i has an alone rate a_ir on resource r (an op's stage at its
// uncontended speed, min_r capacity / demand; the NIC at its line rate per busy direction, on host
// memory only), all are slowed by one common factor u <= 1, raised until a resource saturates;
// the consumers on it stay there, the others rise further. Rates are re-solved when an op starts,
// changes stage or ends, and when the machine's NIC starts or stops sending or receiving. The
// NIC's own rate is the network model's: here it only takes its share of host memory from the
// ops (one-way coupling).
//
// Deterministic: integer ns, ends rounded up, ops of one machine ending at the same ns reported
// in start order. Thread-safety: none; one simulation drives one model.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "config/specs.h"
#include "core/types.h"

namespace poseidon::cost {

using core::TimeNs;
inline constexpr TimeNs kNever = core::kNeverNs;

// kReduce, kBroadcast: every device of the machine at once (the three-level hybrid's local
// reduction and broadcast). kPeerCopy, kToHost, kFromHost: ONE device's copy of `bytes` (a message
// between processes of one machine, one per device: cluster.local_copies: interconnect):
//   kPeerCopy   device to device: lambda, S over nvlink (kind nvlink), or up the source's PCIe and
//               down the destination's (kind pcie, peer to peer), or through host memory (kind
//               host: read and written, 2 S);
//   kToHost     device to a host process (a co-located server shard): lambda, S up, S into memory;
//   kFromHost   the reverse: lambda, S out of memory, S down.
// A copy is capped by one device's link (alone it takes lambda + S / link); on the per-device
// resources, which stand for every device's link at once, it counts S / D, so D copies at once
// (one per device, as in a ring step) each still move at the link's rate.
enum class IntraOp : uint8_t { kReduce, kBroadcast, kPeerCopy, kToHost, kFromHost };

class IntraMachine {
 public:
  // spec: as a loaded scenario holds it (pcie_Bps and host_memory_Bps resolved, > 0 where the
  // kind uses them). devices >= 2. nic_Bps: the NIC's line rate per direction.
  IntraMachine(const config::InterconnectSpec& spec, int devices, int machines, double nic_Bps);

  // The time one op of `bytes` takes on an idle machine (SACP's time model, tests).
  TimeNs AloneNs(IntraOp op, int64_t bytes) const;

  // Each returns the machine's next event time (kNever when nothing is running); the host calls
  // Advance at that time, and earlier results are superseded by later ones.
  TimeNs Start(TimeNs now, int machine, IntraOp op, int64_t bytes, uint64_t tag);
  // The machine's NIC is busy in `directions` (0, 1 or 2) directions from now on.
  TimeNs SetNic(TimeNs now, int machine, int directions);
  // Moves the machine to `now` and appends the tags of the ops that ended by then.
  TimeNs Advance(TimeNs now, int machine, std::vector<uint64_t>* done);

  int devices() const { return devices_; }

 private:
  enum Resource { kHostMemory = 0, kUp = 1, kDown = 2, kNvlink = 3, kNumResources = 4 };
  struct Stage {
    TimeNs latency = 0;
    double bytes[kNumResources] = {0, 0, 0, 0};
    // One device's copy: the fraction of the stage per second that one device's link allows
    // (the per-device resources above count the copy as S / D); infinity for whole-machine ops.
    double alone_limit = std::numeric_limits<double>::infinity();
  };
  struct Op {
    uint64_t tag = 0;
    std::vector<Stage> stages;
    size_t stage = 0;
    bool moving = false;      // past the stage's latency
    TimeNs event = 0;         // the latency's end, or (moving) the stage's end at `rate`
    double remaining = 1;     // fraction of the stage's bytes still to move
    double rate = 0;          // fraction per second
  };
  struct Machine {
    std::vector<Op> ops;      // in start order
    int nic_directions = 0;
    TimeNs last = 0;          // when `remaining` was last brought up to date
  };

  std::vector<Stage> StagesOf(IntraOp op, int64_t bytes) const;
  Stage CopyStage(IntraOp op, double bytes) const;  // kPeerCopy, kToHost, kFromHost
  void Progress(Machine& m, TimeNs now);
  void Solve(Machine& m, TimeNs now);
  TimeNs NextEvent(const Machine& m) const;
  double Capacity(int r) const { return capacity_[r]; }

  config::InterconnectSpec spec_;
  int devices_ = 2;
  double nic_Bps_ = 0;
  double capacity_[kNumResources] = {0, 0, 0, 0};
  std::vector<Machine> machines_;
};

}  // namespace poseidon::cost
