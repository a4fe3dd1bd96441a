// fuzz/handshake_fuzz.cc: the HELLO decoder and the AUTH check of the handshake.
//
// The transport's connection state machine is written against asio sockets and cannot be
// driven from bytes alone, so this target covers what it parses: the HELLO body (DecodeHello,
// which sees at most kMaxHandshakeFrameBytes bytes) and the AUTH body (length check, then
// AuthMac + MacEqual against a fixed secret and nonces). Byte 0 chooses which.
#include <vector>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "real_runtime/handshake.h"

namespace poseidon::fuzz {

int FuzzHandshake(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool auth = data[0] & 1;
  std::vector<uint8_t> body(data + 1, data + size);
  if (body.size() > rt::kMaxHandshakeFrameBytes) body.resize(rt::kMaxHandshakeFrameBytes);
  if (!auth) {
    rt::Hello h;
    std::string error;
    const bool ok = rt::DecodeHello(body, 32, &h, &error);
    POSEIDON_FUZZ_CHECK(ok == error.empty());
    if (ok) {
      POSEIDON_FUZZ_CHECK(h.job_id.size() <= rt::kMaxJobIdBytes);
      POSEIDON_FUZZ_CHECK(rt::EncodeHello(h) == body);  // what decodes re-encodes identically
    }
    return 0;
  }
  // As the transport does: an AUTH body of any other length is refused before the MAC check.
  if (body.size() != rt::kMacBytes) return 0;
  rt::Nonce mine{}, theirs{};
  for (size_t i = 0; i < rt::kNonceBytes; ++i) {
    mine[i] = static_cast<uint8_t>(i);
    theirs[i] = static_cast<uint8_t>(255 - i);
  }
  const rt::Mac want = rt::AuthMac("fuzz-secret", "fuzz-job", 1, 0, 0, theirs, mine);
  const bool equal = rt::MacEqual(want.data(), body.data());
  POSEIDON_FUZZ_CHECK(equal == std::equal(want.begin(), want.end(), body.begin()));
  return 0;
}

}  // namespace poseidon::fuzz
