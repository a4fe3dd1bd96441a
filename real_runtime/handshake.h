// real_runtime/handshake.h: handshake v2, the mutual authentication that opens every live
// connection, and the session keys it leaves behind. Pure functions: no sockets, no state.
//
// The exchange (wire protocol version 2; frame types kFrameHello / kFrameAuth, sequence numbers
// 0 and 1 in each direction):
//
//   dialer                                                acceptor
//     HELLO_d {version, role=dialer, rank, epoch, peer=rank it dials, nonce_d, job}  -->
//                                        (acceptor checks it: CheckHello, epoch, duplicates)
//     <--  HELLO_a {version, role=acceptor, rank, epoch, peer=dialer's rank, nonce_a, job}
//     T = SHA-256("poseidon-handshake-v2" | len | HELLO_d | len | HELLO_a), both sides
//     keys = HKDF-SHA256(ikm = secret, salt = T, info = "poseidon v2 session keys")
//     AUTH_d = HMAC-SHA256(keys.dialer_auth, "dialer" | T)                           -->
//                                        (acceptor verifies AUTH_d; only then it proves)
//     <--  AUTH_a = HMAC-SHA256(keys.acceptor_auth, "acceptor" | T)
//
// The transcript T covers both HELLOs whole (job, both ranks, both roles, both epochs, both
// nonces, the version), so a proof is valid on one connection, in one direction, only: it
// cannot be relayed to another connection (the other connection's transcript has other nonces
// and ranks), reflected back (the roles differ), or replayed (the peer's nonce is fresh). The
// acceptor proves only after the dialer's proof checked out, so an outsider who dials a node
// never obtains a proof from it. After AUTH every frame carries a 16-byte tag (frame_mac.h)
// under a per-direction key, over its header (sequence number included) and body: a relayed,
// reflected, replayed, reordered or injected frame closes that connection. The secret never
// leaves the process and is never logged.
//
//   std::string secret = LoadSecretFile("/etc/poseidon/job.secret");  // secret_file.h
//   Hello mine{.role = Role::kDialer, .rank = 3, .peer_rank = 0, .nonce = RandomNonce(),
//              .job_id = "job-42"};
//   std::vector<uint8_t> hello_d = EncodeHello(mine);
//   ... send it, receive hello_a, check it with CheckHello ...
//   const Digest t = TranscriptHash(hello_d, hello_a);
//   const SessionKeys k = DeriveSessionKeys(secret, t);
//   const Mac proof = AuthProof(k, Role::kDialer, t);
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "real_runtime/frame_mac.h"

namespace poseidon::rt {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kMaxJobIdBytes = 256;
// The largest frame accepted before a connection is authenticated: an unauthenticated peer
// can make this process allocate no more than this per pending connection.
inline constexpr uint32_t kMaxHandshakeFrameBytes = 1024;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;
using Digest = std::array<uint8_t, 32>;

// Which end of the TCP connection a side is: the one that dialled or the one that accepted.
enum class Role : uint8_t { kDialer = 1, kAcceptor = 2 };
const char* RoleName(Role r);

// The HELLO body, little-endian:
//
//   offset  size  field
//        0     2  protocol version (kProtocolVersion)
//        2     1  role of the sender (1 dialer, 2 acceptor)
//        3     4  rank of the sender
//        7     4  epoch (incarnation) of the sender
//       11     4  peer rank: the rank the dialer means to reach; the acceptor echoes the dialer's
//       15    32  nonce (fresh, from RAND_bytes)
//       47     2  job id length (<= kMaxJobIdBytes)
//       49     n  job id bytes
inline constexpr size_t kHelloFixedBytes = 49;

struct Hello {
  uint16_t version = 0;
  Role role = Role::kDialer;
  uint32_t rank = 0;
  uint32_t epoch = 0;
  uint32_t peer_rank = 0;
  Nonce nonce{};
  std::string job_id;
};

std::vector<uint8_t> EncodeHello(const Hello& h);
// Returns false and sets `error` (naming the field and the stream offset) on a malformed body or
// another protocol version.
bool DecodeHello(const std::vector<uint8_t>& body, uint64_t stream_offset, Hello* out,
                 std::string* error);

// What a peer's HELLO must say for this side to go on, whatever the connection's history (the
// transport adds what needs its state: incarnations declared dead, ranks already connected).
struct HelloRules {
  std::string job_id;
  uint32_t my_rank = 0;
  Role my_role = Role::kDialer;
  int num_ranks = 0;            // ranks 0..num_ranks-1 (0 = no check)
  int expected_peer = -1;       // dialer: the rank dialled
  uint32_t header_sender = 0;   // the HELLO frame's header, which must agree with its body
  uint32_t header_epoch = 0;
};
// "" when `theirs` passes, else one sentence naming the field, its stream offset (the body
// starts at `body_offset`) and what was wrong.
std::string CheckHello(const Hello& theirs, const HelloRules& rules, uint64_t body_offset);

// SHA-256 over both HELLO bodies as sent, the dialer's first.
Digest TranscriptHash(const std::vector<uint8_t>& dialer_hello,
                      const std::vector<uint8_t>& acceptor_hello);

struct SessionKeys {
  Mac dialer_auth{}, acceptor_auth{};                   // the two AUTH proofs' HMAC keys
  FrameKey dialer_to_acceptor{}, acceptor_to_dialer{};  // the frame tags' keys, per direction
  const FrameKey& Sending(Role me) const {
    return me == Role::kDialer ? dialer_to_acceptor : acceptor_to_dialer;
  }
  const FrameKey& Receiving(Role me) const {
    return me == Role::kDialer ? acceptor_to_dialer : dialer_to_acceptor;
  }
};
// HKDF-SHA256 (OpenSSL) of the secret, salted with the transcript. Throws std::runtime_error if
// OpenSSL fails.
SessionKeys DeriveSessionKeys(const std::string& secret, const Digest& transcript);

// The AUTH body that `prover` sends.
Mac AuthProof(const SessionKeys& keys, Role prover, const Digest& transcript);

// A fresh random nonce (OpenSSL RAND_bytes); throws std::runtime_error if the CSPRNG fails.
Nonce RandomNonce();

// Constant-time comparison of two kMacBytes-byte values (CRYPTO_memcmp).
bool MacEqual(const uint8_t* a, const uint8_t* b);

}  // namespace poseidon::rt
