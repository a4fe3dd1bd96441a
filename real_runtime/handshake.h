// real_runtime/handshake.h: the authenticated handshake that opens every live connection.
//
// Before any other frame each side sends HELLO (frame type kFrameHello, sequence number 0):
//
//   offset  size  field
//        0     2  protocol version
//        2     4  rank of the sender
//        6     4  epoch
//       10    32  nonce (fresh, from RAND_bytes)
//       42     2  job id length (<= kMaxJobIdBytes)
//       44     n  job id bytes
//
// and, once it holds the peer's HELLO, AUTH (type kFrameAuth, sequence number 1): 32 bytes of
//
//   HMAC-SHA256(secret, "poseidon-auth-v1" | version | job id | prover rank | verifier rank |
//               epoch | prover nonce | verifier nonce)
//
// Each side proves it holds the job's shared secret over the *other* side's fresh nonce, so an
// AUTH cannot be replayed on another connection, reflected back, or moved to another job, rank
// or epoch. The connection is then bound to (job, peer rank, epoch). The secret itself never
// leaves the process and is never logged.
//
//   std::string secret = LoadSecretFile("/etc/poseidon/job.secret");
//   Hello mine{.rank = 3, .epoch = 0, .nonce = RandomNonce(), .job_id = "job-42"};
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace poseidon::rt {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kMaxJobIdBytes = 256;
// The largest frame accepted before a connection is authenticated: an unauthenticated peer
// can make this process allocate no more than this per pending connection.
inline constexpr uint32_t kMaxHandshakeFrameBytes = 1024;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

struct Hello {
  uint16_t version = 0;
  uint32_t rank = 0;
  uint32_t epoch = 0;
  Nonce nonce{};
  std::string job_id;
};

std::vector<uint8_t> EncodeHello(const Hello& h);
// Returns false and sets `error` (naming the field and the stream offset) on a malformed body.
bool DecodeHello(const std::vector<uint8_t>& body, uint64_t stream_offset, Hello* out,
                 std::string* error);

// A fresh random nonce (OpenSSL RAND_bytes); throws std::runtime_error if the CSPRNG fails.
Nonce RandomNonce();

// The AUTH proof that `prover` sends to `verifier` (see above).
Mac AuthMac(const std::string& secret, const std::string& job_id, uint32_t prover_rank,
            uint32_t verifier_rank, uint32_t epoch, const Nonce& prover_nonce,
            const Nonce& verifier_nonce);

// Constant-time comparison (CRYPTO_memcmp).
bool MacEqual(const uint8_t* a, const uint8_t* b);

// Reads the job's shared secret: the file's bytes, exactly (no trimming; every node must use a
// byte-identical file). Throws std::runtime_error naming the path and what to do when the file
// is missing or unreadable, empty, or readable or writable by group or others.
std::string LoadSecretFile(const std::string& path);

}  // namespace poseidon::rt
