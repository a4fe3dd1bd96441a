// fuzz/handshake_fuzz.cc: the pure parts of handshake v2 and the frame tag.
//
// The transport's connection state machine is written against asio sockets and cannot be
// driven from bytes alone, so this target covers what it parses and checks: the HELLO body
// (DecodeHello, which sees at most kMaxHandshakeFrameBytes bytes, then CheckHello against the
// rules of both roles), the AUTH body (length check, then AuthProof + MacEqual over a fixed
// transcript) and a frame's tag (FrameMac::Verify of the input's last 16 bytes over the rest).
// Byte 0 chooses which.
#include <vector>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "real_runtime/frame.h"
#include "real_runtime/frame_mac.h"
#include "real_runtime/handshake.h"

namespace poseidon::fuzz {

int FuzzHandshake(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int which = data[0] % 3;
  std::vector<uint8_t> body(data + 1, data + size);
  if (body.size() > rt::kMaxHandshakeFrameBytes) body.resize(rt::kMaxHandshakeFrameBytes);
  if (which == 0) {
    rt::Hello h;
    std::string error;
    const bool ok = rt::DecodeHello(body, 32, &h, &error);
    POSEIDON_FUZZ_CHECK(ok == error.empty());
    if (ok) {
      POSEIDON_FUZZ_CHECK(h.job_id.size() <= rt::kMaxJobIdBytes);
      POSEIDON_FUZZ_CHECK(rt::EncodeHello(h) == body);  // what decodes re-encodes identically
      for (rt::Role role : {rt::Role::kDialer, rt::Role::kAcceptor}) {
        rt::HelloRules rules;
        rules.job_id = "fuzz-job";
        rules.my_rank = 0;
        rules.my_role = role;
        rules.num_ranks = 8;
        rules.expected_peer = 1;
        rules.header_sender = h.rank;
        rules.header_epoch = h.epoch;
        const std::string why = rt::CheckHello(h, rules, 32);
        // What passes names another rank of the job, in the other role, that means to reach us.
        if (why.empty()) {
          POSEIDON_FUZZ_CHECK(h.role != role && h.rank < 8 && h.rank != 0 && h.peer_rank == 0 &&
                              h.job_id == "fuzz-job");
        }
      }
    }
    return 0;
  }
  rt::Hello d, a;
  d.version = a.version = rt::kProtocolVersion;
  a.role = rt::Role::kAcceptor;
  d.rank = 1;
  d.job_id = a.job_id = "fuzz-job";
  for (size_t i = 0; i < rt::kNonceBytes; ++i) {
    d.nonce[i] = static_cast<uint8_t>(i);
    a.nonce[i] = static_cast<uint8_t>(255 - i);
  }
  const rt::Digest t = rt::TranscriptHash(rt::EncodeHello(d), rt::EncodeHello(a));
  const rt::SessionKeys keys = rt::DeriveSessionKeys("fuzz-secret", t);
  if (which == 1) {
    // As the transport does: an AUTH body of any other length is refused before the check.
    if (body.size() != rt::kMacBytes) return 0;
    const rt::Mac want = rt::AuthProof(keys, rt::Role::kDialer, t);
    const bool equal = rt::MacEqual(want.data(), body.data());
    POSEIDON_FUZZ_CHECK(equal == std::equal(want.begin(), want.end(), body.begin()));
    return 0;
  }
  if (body.size() < rt::kFrameTagBytes) return 0;
  const size_t n = body.size() - rt::kFrameTagBytes;
  rt::FrameMac mac(keys.dialer_to_acceptor);
  const rt::FrameTag want = mac.Tag(2, {rt::Bytes(body.data(), n)});
  const bool ok = mac.Verify(2, {rt::Bytes(body.data(), n)}, body.data() + n);
  POSEIDON_FUZZ_CHECK(ok == std::equal(want.begin(), want.end(), body.begin() + static_cast<long>(n)));
  return 0;
}

}  // namespace poseidon::fuzz
