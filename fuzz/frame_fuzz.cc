// fuzz/frame_fuzz.cc: the frame header decoder and the core-message fixed-part decoder.
//
// Input layout: byte 0 holds mode bits, bytes 1..32 a frame header, the rest a message body.
//   bit 0: rewrite the header's CRC so that the fuzzer gets past the checksum to the field checks;
//   bit 1: expect the header's own sequence number and epoch (else 0 and 0);
//   bit 2: decode the body with the header's type and length (else with the next 5 input bytes).
#include <boost/crc.hpp>

#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "real_runtime/frame.h"

namespace poseidon::fuzz {
namespace {

uint64_t GetLe(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

int FuzzFrame(const uint8_t* data, size_t size) {
  if (size < 1 + rt::kFrameHeaderBytes) return 0;
  const uint8_t mode = data[0];
  std::array<uint8_t, rt::kFrameHeaderBytes> hdr;
  std::memcpy(hdr.data(), data + 1, hdr.size());
  if (mode & 1) {
    boost::crc_32_type crc;
    crc.process_bytes(hdr.data(), 28);
    const uint32_t c = crc.checksum();
    for (int i = 0; i < 4; ++i) hdr[28 + i] = static_cast<uint8_t>(c >> (8 * i));
  }
  const uint64_t seq = (mode & 2) ? GetLe(hdr.data() + 12, 8) : 0;
  const uint32_t epoch = (mode & 2) ? static_cast<uint32_t>(GetLe(hdr.data() + 24, 4)) : 0;
  const uint32_t limit = uint32_t{1} << 20;
  const rt::DecodeResult r = rt::DecodeFrameHeader(hdr.data(), 96, limit, seq, epoch);
  POSEIDON_FUZZ_CHECK(r.ok != !r.error.empty());
  if (r.ok) {
    // A header that decodes re-encodes to the same bytes, and its length is within the limit.
    POSEIDON_FUZZ_CHECK(rt::EncodeFrameHeader(r.header) == hdr);
    POSEIDON_FUZZ_CHECK(r.header.length <= limit);
  }

  const uint8_t* rest = data + 1 + rt::kFrameHeaderBytes;
  size_t rest_size = size - 1 - rt::kFrameHeaderBytes;
  uint8_t type = 0;
  uint32_t length = 0;
  uint8_t flags = 0;  // a core message's wire format (fp32, fp16, bf16), or junk
  if ((mode & 4) && r.ok) {
    type = r.header.type;
    length = r.header.length;
    flags = r.header.flags;
  } else {
    if (rest_size < 5) return 0;
    type = rest[0];
    length = static_cast<uint32_t>(GetLe(rest + 1, 4));
    rest += 5;
    rest_size -= 5;
  }
  // The transport always hands the decoder a full 40-byte buffer (asio::async_read of `fixed`).
  std::vector<uint8_t> fixed(rt::kMessageFixedBytes, 0);
  std::memcpy(fixed.data(), rest, std::min(rest_size, fixed.size()));
  const rt::MessageFixedResult m = rt::DecodeMessageFixed(fixed.data(), type, length, 128, flags);
  POSEIDON_FUZZ_CHECK(m.ok != !m.error.empty());
  if (m.ok) {
    POSEIDON_FUZZ_CHECK(rt::IsCoreMessageType(type));
    core::WireFormat wire = core::WireFormat::kFp32;
    POSEIDON_FUZZ_CHECK(rt::WireFormatOfFlags(flags, &wire) && wire == m.fixed.msg.wire);
    POSEIDON_FUZZ_CHECK(rt::kMessageFixedBytes + m.fixed.value_bytes() == length);
    if (m.fixed.float_count == 0) {
      // A phantom message (no floats) re-encodes to the same 40 bytes.
      const auto again = rt::EncodeMessageFixed(m.fixed.msg);
      POSEIDON_FUZZ_CHECK(std::memcmp(again.data(), fixed.data(), again.size()) == 0);
    }
  }
  return 0;
}

}  // namespace poseidon::fuzz
