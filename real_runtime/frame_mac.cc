#include "real_runtime/frame_mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <climits>
#include <string>
#include <stdexcept>

namespace poseidon::rt {
namespace {

[[noreturn]] void Fail(const char* what) {
  throw std::runtime_error(std::string("OpenSSL AES-256-GCM (frame tags): ") + what);
}

}  // namespace

FrameMac::FrameMac(const FrameKey& key) : ctx_(EVP_CIPHER_CTX_new()) {
  if (ctx_ == nullptr) Fail("EVP_CIPHER_CTX_new failed");
  if (EVP_EncryptInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, key.data(), nullptr) != 1) {
    EVP_CIPHER_CTX_free(ctx_);
    Fail("setting the key failed");
  }
}

FrameMac::~FrameMac() { EVP_CIPHER_CTX_free(ctx_); }

FrameTag FrameMac::Tag(uint64_t seq, std::initializer_list<Bytes> parts) {
  std::array<uint8_t, 12> iv{};
  for (size_t i = 0; i < 8; ++i) iv[4 + i] = static_cast<uint8_t>(seq >> (8 * i));
  // The key stays set: only the IV changes from frame to frame.
  if (EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv.data()) != 1) Fail("IV");
  for (Bytes p : parts) {
    // Additional authenticated data only (no plaintext): GMAC. Fed in pieces of at most INT_MAX.
    size_t off = 0;
    while (off < p.size()) {
      const int n = static_cast<int>(std::min<size_t>(p.size() - off, INT_MAX / 2));
      int out = 0;
      if (EVP_EncryptUpdate(ctx_, nullptr, &out, p.data() + off, n) != 1) Fail("update");
      off += static_cast<size_t>(n);
    }
  }
  int out = 0;
  uint8_t none[16];
  if (EVP_EncryptFinal_ex(ctx_, none, &out) != 1) Fail("final");
  FrameTag tag{};
  if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, static_cast<int>(tag.size()), tag.data()) !=
      1) {
    Fail("reading the tag");
  }
  return tag;
}

bool FrameMac::Verify(uint64_t seq, std::initializer_list<Bytes> parts, const uint8_t* tag) {
  const FrameTag want = Tag(seq, parts);
  return CRYPTO_memcmp(want.data(), tag, want.size()) == 0;
}

}  // namespace poseidon::rt
