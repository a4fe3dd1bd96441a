#include "real_runtime/handshake.h"

#include <fmt/format.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <cstring>
#include <stdexcept>

#include "real_runtime/frame.h"

namespace poseidon::rt {
namespace {

template <typename T>
void Append(std::vector<uint8_t>* v, T x) {
  for (size_t i = 0; i < sizeof(T); ++i) v->push_back(static_cast<uint8_t>(x >> (8 * i)));
}

template <typename T>
T Get(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}

void AppendBytes(std::vector<uint8_t>* v, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  v->insert(v->end(), b, b + n);
}

Mac Hmac(const uint8_t* key, size_t key_len, const std::vector<uint8_t>& msg) {
  Mac mac{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key, static_cast<int>(key_len), msg.data(), msg.size(), mac.data(),
           &len) == nullptr ||
      len != kMacBytes) {
    throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
  }
  return mac;
}

}  // namespace

const char* RoleName(Role r) { return r == Role::kDialer ? "dialer" : "acceptor"; }

std::vector<uint8_t> EncodeHello(const Hello& h) {
  std::vector<uint8_t> b;
  b.reserve(kHelloFixedBytes + h.job_id.size());
  Append<uint16_t>(&b, h.version);
  b.push_back(static_cast<uint8_t>(h.role));
  Append<uint32_t>(&b, h.rank);
  Append<uint32_t>(&b, h.epoch);
  Append<uint32_t>(&b, h.peer_rank);
  AppendBytes(&b, h.nonce.data(), h.nonce.size());
  Append<uint16_t>(&b, static_cast<uint16_t>(h.job_id.size()));
  AppendBytes(&b, h.job_id.data(), h.job_id.size());
  return b;
}

bool DecodeHello(const std::vector<uint8_t>& b, uint64_t off, Hello* out, std::string* error) {
  // The version first: a v1 HELLO is shorter than v2's fixed part, and its sender must be told
  // to upgrade rather than that its bytes are short.
  if (b.size() >= 2 && Get<uint16_t>(b.data()) != kProtocolVersion) {
    *error = fmt::format("HELLO at stream offset {} speaks protocol version {}, this build {}; "
                         "run the same Poseidon build on every node",
                         off, Get<uint16_t>(b.data()), kProtocolVersion);
    return false;
  }
  if (b.size() < kHelloFixedBytes) {
    *error = fmt::format("HELLO at stream offset {} has {} bytes, fewer than its {}-byte fixed "
                         "part",
                         off, b.size(), kHelloFixedBytes);
    return false;
  }
  Hello h;
  h.version = Get<uint16_t>(b.data());
  const uint8_t role = b[2];
  if (role != static_cast<uint8_t>(Role::kDialer) && role != static_cast<uint8_t>(Role::kAcceptor)) {
    *error = fmt::format("HELLO at stream offset {}: role {} is neither 1 (dialer) nor 2 "
                         "(acceptor)",
                         off + 2, role);
    return false;
  }
  h.role = static_cast<Role>(role);
  h.rank = Get<uint32_t>(b.data() + 3);
  h.epoch = Get<uint32_t>(b.data() + 7);
  h.peer_rank = Get<uint32_t>(b.data() + 11);
  std::memcpy(h.nonce.data(), b.data() + 15, kNonceBytes);
  const size_t n = Get<uint16_t>(b.data() + 47);
  if (n > kMaxJobIdBytes || kHelloFixedBytes + n != b.size()) {
    *error = fmt::format("HELLO at stream offset {}: job id length {} does not fit the {}-byte "
                         "body (at most {})",
                         off + 47, n, b.size(), kMaxJobIdBytes);
    return false;
  }
  h.job_id.assign(reinterpret_cast<const char*>(b.data() + kHelloFixedBytes), n);
  *out = std::move(h);
  return true;
}

namespace {

// An attacker-chosen string (a peer's job id) made safe for a log line.
std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
      out.push_back(static_cast<char>(ch));
    } else {
      out += fmt::format("\\x{:02x}", ch);
    }
  }
  return out;
}

}  // namespace

std::string CheckHello(const Hello& h, const HelloRules& r, uint64_t off) {
  if (h.rank != r.header_sender) {
    return fmt::format("HELLO at stream offset {} claims rank {} but its header says {}", off + 3,
                       h.rank, r.header_sender);
  }
  if (h.epoch != r.header_epoch) {
    return fmt::format("HELLO at stream offset {}: epoch {} but its header says {}", off + 7,
                       h.epoch, r.header_epoch);
  }
  if (h.job_id != r.job_id) {
    return fmt::format("HELLO at stream offset {}: the peer belongs to job '{}', this node to "
                       "job '{}'",
                       off + kHelloFixedBytes, Printable(h.job_id), Printable(r.job_id));
  }
  const Role want_role = r.my_role == Role::kDialer ? Role::kAcceptor : Role::kDialer;
  if (h.role != want_role) {
    return fmt::format("HELLO at stream offset {}: the peer says it is the {} of this "
                       "connection, and so is this node",
                       off + 2, RoleName(h.role));
  }
  if (r.num_ranks > 0 && h.rank >= static_cast<uint32_t>(r.num_ranks)) {
    return fmt::format("HELLO at stream offset {} claims rank {}, which is not in this job "
                       "(ranks 0..{})",
                       off + 3, h.rank, r.num_ranks - 1);
  }
  if (h.rank == r.my_rank) {
    return fmt::format("HELLO at stream offset {} claims this node's own rank {}", off + 3,
                       r.my_rank);
  }
  if (h.peer_rank != r.my_rank) {
    return fmt::format("HELLO at stream offset {}: rank {} means to reach rank {}, but this is "
                       "rank {}",
                       off + 11, h.rank, h.peer_rank, r.my_rank);
  }
  if (r.my_role == Role::kDialer && static_cast<int>(h.rank) != r.expected_peer) {
    return fmt::format("HELLO at stream offset {}: dialed rank {} but reached rank {}", off + 3,
                       r.expected_peer, h.rank);
  }
  return {};
}

Digest TranscriptHash(const std::vector<uint8_t>& dialer_hello,
                      const std::vector<uint8_t>& acceptor_hello) {
  std::vector<uint8_t> t;
  static constexpr char kLabel[] = "poseidon-handshake-v2";
  AppendBytes(&t, kLabel, sizeof(kLabel) - 1);
  Append<uint32_t>(&t, static_cast<uint32_t>(dialer_hello.size()));
  AppendBytes(&t, dialer_hello.data(), dialer_hello.size());
  Append<uint32_t>(&t, static_cast<uint32_t>(acceptor_hello.size()));
  AppendBytes(&t, acceptor_hello.data(), acceptor_hello.size());
  Digest d{};
  unsigned int len = 0;
  if (EVP_Digest(t.data(), t.size(), d.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != d.size()) {
    throw std::runtime_error("OpenSSL SHA-256 failed");
  }
  return d;
}

SessionKeys DeriveSessionKeys(const std::string& secret, const Digest& transcript) {
  std::array<uint8_t, 4 * 32> okm{};
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf ? EVP_KDF_CTX_new(kdf) : nullptr;
  EVP_KDF_free(kdf);
  if (ctx == nullptr) throw std::runtime_error("OpenSSL has no HKDF");
  static constexpr char kInfo[] = "poseidon v2 session keys";
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                        const_cast<uint8_t*>(transcript.data()),
                                        transcript.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(kInfo),
                                        sizeof(kInfo) - 1),
      OSSL_PARAM_construct_end()};
  const int ok = EVP_KDF_derive(ctx, okm.data(), okm.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) throw std::runtime_error("OpenSSL HKDF-SHA256 failed");
  SessionKeys k;
  std::memcpy(k.dialer_auth.data(), okm.data(), 32);
  std::memcpy(k.acceptor_auth.data(), okm.data() + 32, 32);
  std::memcpy(k.dialer_to_acceptor.data(), okm.data() + 64, 32);
  std::memcpy(k.acceptor_to_dialer.data(), okm.data() + 96, 32);
  OPENSSL_cleanse(okm.data(), okm.size());
  return k;
}

Mac AuthProof(const SessionKeys& keys, Role prover, const Digest& transcript) {
  std::vector<uint8_t> msg;
  const char* label = RoleName(prover);
  AppendBytes(&msg, label, std::strlen(label));
  AppendBytes(&msg, transcript.data(), transcript.size());
  const Mac& key = prover == Role::kDialer ? keys.dialer_auth : keys.acceptor_auth;
  return Hmac(key.data(), key.size(), msg);
}

Nonce RandomNonce() {
  Nonce n;
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    throw std::runtime_error("OpenSSL RAND_bytes failed: no randomness for a handshake nonce");
  }
  return n;
}

bool MacEqual(const uint8_t* a, const uint8_t* b) { return CRYPTO_memcmp(a, b, kMacBytes) == 0; }

}  // namespace poseidon::rt
