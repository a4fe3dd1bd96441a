// real_runtime/frame.h: the fixed frame header of the live wire protocol.
//
// Every frame on a connection is a 32-byte header followed by `length` payload bytes. All
// integers are little-endian:
//
//   offset  size  field
//        0     4  magic "PSDN"
//        4     2  protocol version (kProtocolVersion)
//        6     1  message type (core::MsgType, or a transport type such as the handshake)
//        7     1  flags
//        8     4  sender rank
//       12     8  sequence number (per connection and direction, starting at 0)
//       20     4  payload length in bytes
//       24     4  reserved, must be 0
//       28     4  CRC-32 of bytes 0..27
//
// DecodeFrameHeader checks every field -- the length against the configured limit *before*
// anything is allocated -- and says what was wrong and at which byte offset of the stream, so
// that the connection can be closed with a logged reason and the process goes on.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace poseidon::rt {

inline constexpr uint32_t kFrameMagic = 0x4E445350;  // "PSDN" little-endian
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 32;

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t sender = 0;
  uint64_t seq = 0;
  uint32_t length = 0;
};

std::array<uint8_t, kFrameHeaderBytes> EncodeFrameHeader(const FrameHeader& h);

struct DecodeResult {
  bool ok = false;
  FrameHeader header;
  std::string error;  // "bad magic 0x12345678 at stream offset 64; not a Poseidon peer?"
};

// `bytes` holds kFrameHeaderBytes bytes read at `stream_offset` of the connection.
DecodeResult DecodeFrameHeader(const uint8_t* bytes, uint64_t stream_offset,
                               uint32_t max_payload_bytes, uint64_t expected_seq);

}  // namespace poseidon::rt
