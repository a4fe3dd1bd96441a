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
  kDone = 5,      // worker -> coordinator: finished the last iteration
  kFactors = 6,   // worker -> worker: sufficient factors of one FC layer for one clock (SFB)
  kRing = 7,      // worker -> next worker: one step of a ring all-reduce of one layer piece
};
const char* MsgTypeName(MsgType t);

struct Message {
  MsgType type = MsgType::kRegister;
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
