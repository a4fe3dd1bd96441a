#include "real_runtime/handshake.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
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

}  // namespace

std::vector<uint8_t> EncodeHello(const Hello& h) {
  std::vector<uint8_t> b;
  b.reserve(44 + h.job_id.size());
  Append<uint16_t>(&b, h.version);
  Append<uint32_t>(&b, h.rank);
  Append<uint32_t>(&b, h.epoch);
  b.insert(b.end(), h.nonce.begin(), h.nonce.end());
  Append<uint16_t>(&b, static_cast<uint16_t>(h.job_id.size()));
  b.insert(b.end(), h.job_id.begin(), h.job_id.end());
  return b;
}

bool DecodeHello(const std::vector<uint8_t>& b, uint64_t off, Hello* out, std::string* error) {
  if (b.size() < 44) {
    *error = fmt::format("HELLO at stream offset {} has {} bytes, fewer than its 44-byte fixed "
                         "part",
                         off, b.size());
    return false;
  }
  Hello h;
  h.version = Get<uint16_t>(b.data());
  h.rank = Get<uint32_t>(b.data() + 2);
  h.epoch = Get<uint32_t>(b.data() + 6);
  std::memcpy(h.nonce.data(), b.data() + 10, kNonceBytes);
  const size_t n = Get<uint16_t>(b.data() + 42);
  if (n > kMaxJobIdBytes || 44 + n != b.size()) {
    *error = fmt::format("HELLO at stream offset {}: job id length {} does not fit the {}-byte "
                         "body (at most {})",
                         off + 42, n, b.size(), kMaxJobIdBytes);
    return false;
  }
  h.job_id.assign(reinterpret_cast<const char*>(b.data() + 44), n);
  if (h.version != kProtocolVersion) {
    *error = fmt::format("HELLO at stream offset {} speaks protocol version {}, this build {}",
                         off, h.version, kProtocolVersion);
    return false;
  }
  *out = std::move(h);
  return true;
}

Nonce RandomNonce() {
  Nonce n;
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    throw std::runtime_error("OpenSSL RAND_bytes failed: no randomness for a handshake nonce");
  }
  return n;
}

Mac AuthMac(const std::string& secret, const std::string& job_id, uint32_t prover_rank,
            uint32_t verifier_rank, uint32_t epoch, const Nonce& prover_nonce,
            const Nonce& verifier_nonce) {
  std::vector<uint8_t> msg;
  static constexpr char kLabel[] = "poseidon-auth-v1";
  msg.insert(msg.end(), kLabel, kLabel + sizeof(kLabel) - 1);
  Append<uint16_t>(&msg, kProtocolVersion);
  Append<uint16_t>(&msg, static_cast<uint16_t>(job_id.size()));
  msg.insert(msg.end(), job_id.begin(), job_id.end());
  Append<uint32_t>(&msg, prover_rank);
  Append<uint32_t>(&msg, verifier_rank);
  Append<uint32_t>(&msg, epoch);
  msg.insert(msg.end(), prover_nonce.begin(), prover_nonce.end());
  msg.insert(msg.end(), verifier_nonce.begin(), verifier_nonce.end());
  Mac mac{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(),
           mac.data(), &len) == nullptr ||
      len != kMacBytes) {
    throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
  }
  return mac;
}

bool MacEqual(const uint8_t* a, const uint8_t* b) { return CRYPTO_memcmp(a, b, kMacBytes) == 0; }

std::string LoadSecretFile(const std::string& path) {
  const std::string fix = fmt::format(
      "; create it with `head -c 32 /dev/urandom > {0} && chmod 600 {0}` and copy the same file "
      "to every node of the job",
      path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw std::runtime_error(
        fmt::format("secret file {}: {}{}", path, std::strerror(errno), fix));
  }
  if (!S_ISREG(st.st_mode)) {
    throw std::runtime_error(fmt::format("secret file {}: not a regular file{}", path, fix));
  }
  if ((st.st_mode & 077) != 0) {
    throw std::runtime_error(fmt::format(
        "secret file {}: mode {:04o} gives group or others access; run `chmod 600 {}`", path,
        st.st_mode & 07777, path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(fmt::format("secret file {}: cannot be opened for reading{}", path,
                                         fix));
  }
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (s.empty()) {
    throw std::runtime_error(fmt::format("secret file {}: is empty{}", path, fix));
  }
  return s;
}

}  // namespace poseidon::rt
