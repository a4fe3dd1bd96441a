#include "real_runtime/frame.h"

#include <boost/crc.hpp>
#include <fmt/format.h>

namespace poseidon::rt {
namespace {

template <typename T>
void Put(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

template <typename T>
T Get(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}

uint32_t Crc(const uint8_t* p, size_t n) {
  boost::crc_32_type crc;
  crc.process_bytes(p, n);
  return crc.checksum();
}

}  // namespace

std::array<uint8_t, kFrameHeaderBytes> EncodeFrameHeader(const FrameHeader& h) {
  std::array<uint8_t, kFrameHeaderBytes> b{};
  Put<uint32_t>(&b[0], kFrameMagic);
  Put<uint16_t>(&b[4], h.version);
  b[6] = h.type;
  b[7] = h.flags;
  Put<uint32_t>(&b[8], h.sender);
  Put<uint64_t>(&b[12], h.seq);
  Put<uint32_t>(&b[20], h.length);
  Put<uint32_t>(&b[24], h.epoch);
  Put<uint32_t>(&b[28], Crc(b.data(), 28));
  return b;
}

DecodeResult DecodeFrameHeader(const uint8_t* b, uint64_t off, uint32_t max_payload_bytes,
                               uint64_t expected_seq, uint32_t expected_epoch) {
  DecodeResult r;
  const uint32_t magic = Get<uint32_t>(b);
  if (magic != kFrameMagic) {
    r.error = fmt::format("bad magic 0x{:08x} at stream offset {}; the peer is not speaking the "
                          "Poseidon protocol",
                          magic, off);
    return r;
  }
  const uint32_t crc = Get<uint32_t>(b + 28);
  if (crc != Crc(b, 28)) {
    r.error = fmt::format("header checksum mismatch at stream offset {} (got 0x{:08x}, computed "
                          "0x{:08x}); the frame is corrupt",
                          off + 28, crc, Crc(b, 28));
    return r;
  }
  FrameHeader h;
  h.version = Get<uint16_t>(b + 4);
  h.type = b[6];
  h.flags = b[7];
  h.sender = Get<uint32_t>(b + 8);
  h.seq = Get<uint64_t>(b + 12);
  h.length = Get<uint32_t>(b + 20);
  if (h.version != kProtocolVersion) {
    r.error = fmt::format("protocol version {} at stream offset {}, this build speaks {}{}; run the "
                          "same Poseidon version on every node",
                          h.version, off + 4, kProtocolVersion,
                          h.version < kProtocolVersion
                              ? " (the peer runs an older Poseidon whose handshake is not bound "
                                "to its transcript: upgrade it)"
                              : "");
    return r;
  }
  h.epoch = Get<uint32_t>(b + 24);
  if (h.epoch != expected_epoch) {
    r.error = fmt::format("epoch {} at stream offset {}, this connection is bound to epoch {}; "
                          "a frame from another incarnation of the job",
                          h.epoch, off + 24, expected_epoch);
    return r;
  }
  if (h.seq != expected_seq) {
    r.error = fmt::format("sequence number {} at stream offset {}, expected {}; frame replayed, "
                          "lost or reordered",
                          h.seq, off + 12, expected_seq);
    return r;
  }
  if (h.length > max_payload_bytes) {
    r.error = fmt::format("payload length {} at stream offset {} exceeds the limit of {} bytes",
                          h.length, off + 20, max_payload_bytes);
    return r;
  }
  r.ok = true;
  r.header = h;
  return r;
}

bool IsCoreMessageType(uint8_t type) {
  return type >= static_cast<uint8_t>(core::MsgType::kRegister) &&
         type <= static_cast<uint8_t>(core::kLastMsgType);
}

bool WireFormatOfFlags(uint8_t flags, core::WireFormat* w) {
  if (flags != 0 && flags != kFrameFlagsFp16 && flags != kFrameFlagsBf16) return false;
  *w = static_cast<core::WireFormat>(flags);
  return true;
}

uint64_t MessageFixed::value_bytes() const {
  return uint64_t{msg.wire == core::WireFormat::kFp32 ? 4u : 2u} * float_count;
}

std::array<uint8_t, kMessageFixedBytes> EncodeMessageFixed(const core::Message& m) {
  std::array<uint8_t, kMessageFixedBytes> b{};
  const uint32_t n = m.data ? static_cast<uint32_t>(m.data->size()) : 0;
  // On the wire a message carries exactly its values (4 or, in a 16-bit format, 2 bytes each); a
  // phantom message (no floats) keeps its payload_bytes field, which replayed compute relies on.
  const int64_t per_value = m.wire == core::WireFormat::kFp32 ? 4 : 2;
  const int64_t payload_bytes = m.data ? per_value * n : m.payload_bytes;
  Put<uint32_t>(&b[0], static_cast<uint32_t>(m.from));
  Put<uint32_t>(&b[4], static_cast<uint32_t>(m.to));
  Put<uint64_t>(&b[8], static_cast<uint64_t>(m.clock));
  Put<uint32_t>(&b[16], static_cast<uint32_t>(m.chunk));
  Put<uint32_t>(&b[20], static_cast<uint32_t>(m.layer));
  Put<uint32_t>(&b[24], static_cast<uint32_t>(m.step));
  Put<uint64_t>(&b[28], static_cast<uint64_t>(payload_bytes));
  Put<uint32_t>(&b[36], n);
  Put<uint64_t>(&b[40], static_cast<uint64_t>(m.sent_at));
  return b;
}

MessageFixedResult DecodeMessageFixed(const uint8_t* b, uint8_t type, uint32_t frame_length,
                                      uint64_t off, uint8_t flags) {
  MessageFixedResult r;
  if (!IsCoreMessageType(type)) {
    r.error = fmt::format("unknown message type {} in the frame at stream offset {}", type, off);
    return r;
  }
  core::WireFormat wire = core::WireFormat::kFp32;
  if (!WireFormatOfFlags(flags, &wire)) {
    r.error = fmt::format("unknown flags 0x{:02x} of the message frame whose body starts at stream "
                          "offset {}",
                          flags, off);
    return r;
  }
  if (frame_length < kMessageFixedBytes) {
    r.error = fmt::format("a core message frame of {} bytes at stream offset {} is shorter than "
                          "its {}-byte fixed part",
                          frame_length, off, kMessageFixedBytes);
    return r;
  }
  MessageFixed f;
  f.msg.type = static_cast<core::MsgType>(type);
  f.msg.from = static_cast<int32_t>(Get<uint32_t>(b + 0));
  f.msg.to = static_cast<int32_t>(Get<uint32_t>(b + 4));
  f.msg.clock = static_cast<int64_t>(Get<uint64_t>(b + 8));
  f.msg.chunk = static_cast<int32_t>(Get<uint32_t>(b + 16));
  f.msg.layer = static_cast<int32_t>(Get<uint32_t>(b + 20));
  f.msg.step = static_cast<int32_t>(Get<uint32_t>(b + 24));
  f.msg.payload_bytes = static_cast<int64_t>(Get<uint64_t>(b + 28));
  f.float_count = Get<uint32_t>(b + 36);
  f.msg.sent_at = static_cast<int64_t>(Get<uint64_t>(b + 40));
  f.msg.wire = wire;
  const uint64_t expected_length = kMessageFixedBytes + f.value_bytes();
  const char* format = wire == core::WireFormat::kFp32 ? "" : core::WireFormatName(wire);
  if (expected_length != frame_length) {
    r.error = fmt::format("float count {}{}{} at stream offset {} needs a {}-byte frame, the "
                          "header says {}",
                          f.float_count, *format ? " in " : "", format, off + 36, expected_length,
                          frame_length);
    return r;
  }
  if (f.float_count > 0 ? f.msg.payload_bytes != static_cast<int64_t>(f.value_bytes())
                        : f.msg.payload_bytes < 0) {
    r.error = fmt::format("payload_bytes {} at stream offset {} does not match the {} {} "
                          "carried",
                          f.msg.payload_bytes, off + 28, f.float_count,
                          *format ? std::string(format) + " values" : std::string("floats"));
    return r;
  }
  r.ok = true;
  r.fixed = f;
  return r;
}

}  // namespace poseidon::rt
