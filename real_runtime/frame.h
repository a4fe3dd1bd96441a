// real_runtime/frame.h: the fixed frame header of the live wire protocol.
//
// Every frame on a connection is a 32-byte header followed by `length` payload bytes and, on a
// connection whose handshake is done, a 16-byte tag (frame_mac.h) over header and payload. All
// integers are little-endian:
//
//   offset  size  field
//        0     4  magic "PSDN"
//        4     2  protocol version (kProtocolVersion)
//        6     1  message type (core::MsgType, or a transport type such as the handshake)
//        7     1  flags (a core message's wire format, kFrameFlagsFp16 / Bf16; else 0)
//        8     4  sender rank
//       12     8  sequence number (per connection and direction, starting at 0)
//       20     4  payload length in bytes
//       24     4  epoch (the job's restart epoch, bound in the handshake; 0 today)
//       28     4  CRC-32 of bytes 0..27
//
// A frame is thus bound to (job, rank, epoch, sequence number): the job and rank by the
// connection's handshake, the epoch and sequence number by the header, and all of it by the tag
// under the connection's per-direction session key, so a frame replayed from an older epoch or
// out of order, injected, or moved from another connection or direction is refused.
//
// DecodeFrameHeader checks every field -- the length against the configured limit *before*
// anything is allocated -- and says what was wrong and at which byte offset of the stream, so
// that the connection can be closed with a logged reason and the process goes on.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/messages.h"

namespace poseidon::rt {

inline constexpr uint32_t kFrameMagic = 0x4E445350;  // "PSDN" little-endian
// 2: handshake v2 (transcript-bound mutual authentication, handshake.h) and a tag on every frame
// after it. Version 1 peers are refused with a message that says to upgrade them.
inline constexpr uint16_t kProtocolVersion = 2;
inline constexpr size_t kFrameHeaderBytes = 32;

// Frame types. 1..10 are core::MsgType values (a core message); the handshake uses its own
// types and is the only thing allowed before a connection is authenticated; >= 64 are runtime
// control frames that the transport delivers opaquely (TransportCallbacks::on_control).
inline constexpr uint8_t kFrameHello = 16;
inline constexpr uint8_t kFrameAuth = 17;
// An acceptor's answer to a dialer's AUTH that failed (1 byte: the reason code), then it closes.
inline constexpr uint8_t kFrameRefused = 18;
inline constexpr uint8_t kFrameControlMin = 64;
bool IsCoreMessageType(uint8_t type);

// A core message frame's flags: how its values travel (core::WireFormat, protocol.gradient_wire):
// 0 as fp32 words, kFrameFlagsFp16 / kFrameFlagsBf16 as 2-byte values (half.h). Other bits, and
// flags on any other frame, are refused.
inline constexpr uint8_t kFrameFlagsFp16 = static_cast<uint8_t>(core::WireFormat::kFp16);
inline constexpr uint8_t kFrameFlagsBf16 = static_cast<uint8_t>(core::WireFormat::kBf16);
// The wire format `flags` declare; false for flags no core message frame carries.
bool WireFormatOfFlags(uint8_t flags, core::WireFormat* w);

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t sender = 0;
  uint64_t seq = 0;
  uint32_t length = 0;
  uint32_t epoch = 0;
};

std::array<uint8_t, kFrameHeaderBytes> EncodeFrameHeader(const FrameHeader& h);

struct DecodeResult {
  bool ok = false;
  FrameHeader header;
  std::string error;  // "bad magic 0x12345678 at stream offset 64; not a Poseidon peer?"
};

// `bytes` holds kFrameHeaderBytes bytes read at `stream_offset` of the connection.
DecodeResult DecodeFrameHeader(const uint8_t* bytes, uint64_t stream_offset,
                               uint32_t max_payload_bytes, uint64_t expected_seq,
                               uint32_t expected_epoch = 0);

// The body of a core-message frame: a fixed 48-byte little-endian part followed by the floats.
//
//   offset  size  field
//        0     4  from (int32)
//        4     4  to (int32)
//        8     8  clock (int64)
//       16     4  chunk (int32)
//       20     4  layer (int32)
//       24     4  step (int32)
//       28     8  payload_bytes (int64): 4 * float count (2 * count in a 16-bit wire format),
//                  or, with no floats, the phantom size
//       36     4  float count (uint32): the values carried
//       40     8  sent_at: when the sender handed the message over, ns on the job time base
//                  (tracing only; 0 when unknown)
//       48  4*n  the floats (IEEE-754 binary32, little-endian: the host's own layout), or, when
//           2*n  the header's flags say fp16 / bf16, the values in that format (half.h)
//
// fp32 floats are never copied into a frame buffer: the sender writes them straight from the
// message's shared vector (scatter/gather) and the receiver reads straight into a new vector.
// 16-bit values are encoded into a buffer of the frame, and decoded into floats on arrival.
inline constexpr size_t kMessageFixedBytes = 48;
std::array<uint8_t, kMessageFixedBytes> EncodeMessageFixed(const core::Message& m);

struct MessageFixed {
  core::Message msg;  // every field but data (msg.wire from the header's flags)
  uint32_t float_count = 0;
  // Bytes of the values after the fixed part: float_count x 4, or x 2 in a 16-bit format.
  uint64_t value_bytes() const;
};
// Decodes and checks the fixed part of a frame of `type`, `flags` and `frame_length` payload bytes
// that starts at `stream_offset`: an error names the field, the offset and what was wrong.
struct MessageFixedResult {
  bool ok = false;
  MessageFixed fixed;
  std::string error;
};
MessageFixedResult DecodeMessageFixed(const uint8_t* bytes, uint8_t type, uint32_t frame_length,
                                      uint64_t stream_offset, uint8_t flags = 0);

}  // namespace poseidon::rt
