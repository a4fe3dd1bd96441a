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
  Put<uint32_t>(&b[24], 0);
  Put<uint32_t>(&b[28], Crc(b.data(), 28));
  return b;
}

DecodeResult DecodeFrameHeader(const uint8_t* b, uint64_t off, uint32_t max_payload_bytes,
                               uint64_t expected_seq) {
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
    r.error = fmt::format("protocol version {} at stream offset {}, this build speaks {}; run the "
                          "same Poseidon version on every node",
                          h.version, off + 4, kProtocolVersion);
    return r;
  }
  if (Get<uint32_t>(b + 24) != 0) {
    r.error = fmt::format("reserved header bytes at stream offset {} are not zero", off + 24);
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

}  // namespace poseidon::rt
