// real_runtime/frame_mac.h: the tag that authenticates every frame after the handshake.
//
// A connection's handshake (handshake.h) leaves one 256-bit key per direction. Each frame sent
// after AUTH is followed on the wire by a 16-byte tag: AES-256-GCM with no plaintext (GMAC) over
// the frame's 32-byte header and its body, with the 96-bit IV 0x00000000 | sequence number
// (little-endian). The header carries the frame's type, sender, length, epoch and sequence
// number, so a frame that is altered, injected, moved to another connection (other key), sent
// back the way it came (the other direction's key), replayed or reordered (another sequence
// number) fails the check. A key is used for one connection and direction only and the sequence
// number never repeats on it, so no IV is used twice. GCM's GHASH runs on the CPU's carry-less
// multiply (PCLMULQDQ), a few GB/s per core: the live transport keeps its loopback goodput.
//
//   FrameMac tx(keys.Sending(Role::kDialer));
//   const FrameTag tag = tx.Tag(seq, {header_bytes, body_bytes});
//   FrameMac rx(keys.Receiving(Role::kDialer));
//   bool ok = rx.Verify(seq, {header_bytes, body_bytes}, received_tag.data());
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>

struct evp_cipher_ctx_st;

namespace poseidon::rt {

inline constexpr size_t kFrameTagBytes = 16;
using FrameTag = std::array<uint8_t, kFrameTagBytes>;
using FrameKey = std::array<uint8_t, 32>;
using Bytes = std::span<const uint8_t>;

class FrameMac {
 public:
  // Throws std::runtime_error if OpenSSL cannot set up AES-256-GCM.
  explicit FrameMac(const FrameKey& key);
  ~FrameMac();
  FrameMac(const FrameMac&) = delete;
  FrameMac& operator=(const FrameMac&) = delete;

  // The tag of the frame with sequence number `seq` whose bytes are `parts`, in order.
  FrameTag Tag(uint64_t seq, std::initializer_list<Bytes> parts);
  // Whether `tag` (kFrameTagBytes bytes) is that tag; constant-time comparison.
  bool Verify(uint64_t seq, std::initializer_list<Bytes> parts, const uint8_t* tag);

 private:
  evp_cipher_ctx_st* ctx_ = nullptr;
};

}  // namespace poseidon::rt
