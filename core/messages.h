// core/messages.h: the protocol's messages, the same in the simulator and on the wire.
//
// One flat struct rather than a variant: every message type uses a subset of the same few
// integer fields, which keeps the codec simple and the simulator's message slab compact. The
// payload is either phantom (payload_bytes only; the simulator) or real floats (the live
// runtime), shared so that one parameter chunk can be fanned out to many workers without copies.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/types.h"

namespace poseidon::core {

enum class MsgType : uint8_t {
  kRegister = 1,  // any actor -> coordinator: I am up
  kStart = 2,     // coordinator -> all: every actor registered, begin
  kPushGrad = 3,  // worker -> shard: gradient of one chunk for one clock
  kParams = 4,    // shard -> worker: fresh parameters of one chunk after a clock's update
  kDone = 5,      // worker -> coordinator: finished the last iteration (also a shard that has
                  // nothing left to do and stops heartbeating, with fault tolerance on)
  kFactors = 6,   // worker -> worker: sufficient factors of one FC layer for one clock (SFB)
  kRing = 7,      // worker -> next worker: one step of a ring all-reduce of one layer piece
  // Fault tolerance (core/job.h FaultConfig; none of these is sent when it is off):
  kHeartbeat = 8,   // worker or shard -> coordinator: still alive (clock: the sender's clock)
  kMembership = 9,  // coordinator -> all: `step` (an actor) died (chunk kMemberDead) or came
                    // back (chunk kMemberJoined); clock: the new membership epoch
  kRejoin = 10,     // restarted worker -> every shard: send me the current values of your chunks
  // Baselines (ProtocolConfig::baseline, core/collectives.h; none of these is sent without one):
  kBucket = 11,    // worker -> next worker: one step of a fused ring all-reduce (a DDP bucket or a
                   // Horovod fusion) of clock `clock`: `chunk` numbers the piece among all the
                   // pieces of the clock's collectives in order, `step` the ring step, `layer` the
                   // collective's first layer in forward order (for traces and send priority)
  kReady = 12,     // horovod, worker -> worker 0 (the coordinator): `chunk` gradient tensors of
                   // clock `clock` are ready here (a prefix of core/collectives.h's ready order)
  kResponse = 13,  // horovod, worker 0 -> worker: tensors [step, chunk) of clock `clock` are ready
                   // on every worker: all-reduce them, fused, after those answered before
};
// The last message type (the live codec accepts kRegister..kLastMsgType).
inline constexpr MsgType kLastMsgType = MsgType::kResponse;

// kMembership's `chunk` field.
inline constexpr int32_t kMemberDead = 0;
inline constexpr int32_t kMemberJoined = 1;
// kParams' `step` field: -1 for the fresh values after clock `clock`'s update; in a reply to
// kRejoin, kRejoinCurrent for the chunk's current values at version `clock` (they hold the
// updates of clocks 0..clock-1) and kRejoinPrevious for the values of version `clock` before
// the last update (sent under BSP so that a rejoining worker can recompute exactly).
inline constexpr int32_t kRejoinCurrent = 1;
inline constexpr int32_t kRejoinPrevious = 2;
// kPushGrad's `step` field: -1 for a push as computed; kPushResent for one a worker sends again
// to a shard that came back (the pushes it keeps since the shard's last checkpoint), so that the
// shard can tell whether its checkpoint is recent enough (ServerShard::OnPush).
inline constexpr int32_t kPushResent = 1;
const char* MsgTypeName(MsgType t);

// How a message's values travel (protocol.gradient_wire: ProtocolConfig::gradient_wire). kFp32:
// as the job holds them (fp32 words; an fp64 model's values as two words each). kFp16 and kBf16:
// 2 bytes per value, IEEE-754 binary16 or bfloat16 rounded to nearest even, as DDP's fp16 / bf16
// compression hooks and Horovod's fp16 compression send gradients. Only gradients (pushes,
// sufficient factors, ring steps) go 16-bit; a shard's parameters go as the job holds them, and
// the 16-bit forms need fp32 values (config refuses them for an fp64 model). In memory a message
// always holds floats: the live transport encodes and decodes the 16-bit forms on the wire
// (real_runtime/half.h), and payload_bytes is what the wire carries, which the simulator prices.
enum class WireFormat : uint8_t { kFp32 = 0, kFp16 = 1, kBf16 = 2 };
// "fp32", "fp16", "bf16".
const char* WireFormatName(WireFormat w);
bool WireFormatFromName(const std::string& name, WireFormat* w);
// Payload bytes of a message whose values take `job_bytes` bytes as the job holds them and number
// `values` 32-bit words: job_bytes in kFp32 (the phantom size is kept as it was), 2 per value in a
// 16-bit form.
inline int64_t WirePayloadBytes(WireFormat w, int64_t job_bytes, int64_t values) {
  return w == WireFormat::kFp32 ? job_bytes : 2 * values;
}

struct Message {
  MsgType type = MsgType::kRegister;
  WireFormat wire = WireFormat::kFp32;  // how `data` travels (set by the core on gradients)
  ActorId from = 0;
  ActorId to = 0;
  int64_t clock = 0;   // the worker iteration the message belongs to
  int32_t chunk = -1;  // parameter chunk id, -1 when none
  int32_t layer = -1;  // layer id of the chunk (redundant, for tracing), -1 when none
  int32_t step = -1;   // ring all-reduce step (kRing), -1 when none
  int64_t payload_bytes = 0;  // bytes of gradient or parameter data carried
  std::shared_ptr<const std::vector<float>> data;  // real payload, null when phantom
  // When the sending host handed the message over (its job time base, ns); set by hosts for
  // tracing, never read by the protocol. 0 when unknown.
  TimeNs sent_at = 0;

  // Bytes the message occupies on the wire: fixed header + payload.
  int64_t wire_bytes() const { return kHeaderBytes + payload_bytes; }
  static constexpr int64_t kHeaderBytes = 40;
};

std::string Describe(const Message& m);

}  // namespace poseidon::core
