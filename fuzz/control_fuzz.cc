// fuzz/control_fuzz.cc: the decoders of the runtime's control frames (real_runtime/control.h),
// which read what any authenticated peer sends. Byte 0 chooses the decoder; the rest is the body.
// What decodes must encode back to bytes that decode to the same values (the exact same bytes
// for every fixed-layout body).
#include <vector>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "real_runtime/control.h"

namespace poseidon::fuzz {

int FuzzControl(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::vector<uint8_t> body(data + 1, data + size);
  switch (data[0] % 9) {
    case 0: {
      rt::PeerAddress a;
      if (rt::DecodeHelloCtl(body, &a)) {
        POSEIDON_FUZZ_CHECK(!a.host.empty() && a.host.size() <= rt::kMaxHostBytes);
        POSEIDON_FUZZ_CHECK(rt::EncodeHelloCtl(a) == body);
      }
      return 0;
    }
    case 1: {
      std::map<int, rt::PeerAddress> t, again;
      if (rt::DecodePeers(body, 9, &t)) {
        for (const auto& [rank, a] : t) POSEIDON_FUZZ_CHECK(rank >= 1 && rank < 9 && !a.host.empty());
        POSEIDON_FUZZ_CHECK(rt::DecodePeers(rt::EncodePeers(t), 9, &again) && again == t);
      }
      return 0;
    }
    case 2: {
      int64_t c = 0;
      double l = 0;
      if (rt::DecodeLoss(body, &c, &l)) POSEIDON_FUZZ_CHECK(rt::EncodeLoss(c, l) == body);
      return 0;
    }
    case 3: {
      int64_t v = 0;
      if (rt::DecodeI64(body, &v)) POSEIDON_FUZZ_CHECK(rt::EncodeI64(v) == body);
      return 0;
    }
    case 4: {
      double v = 0;
      if (rt::DecodeF64(body, &v)) POSEIDON_FUZZ_CHECK(rt::EncodeF64(v) == body);
      return 0;
    }
    case 5: {
      int64_t a = 0, b = 0;
      if (rt::DecodePong(body, &a, &b)) POSEIDON_FUZZ_CHECK(rt::EncodePong(a, b) == body);
      return 0;
    }
    case 7: {  // a layer table, a job or a refusal (model: torch)
      std::string text;
      const bool ok = rt::DecodeJobText(body, &text);
      POSEIDON_FUZZ_CHECK(ok == (!body.empty() && body.size() <= rt::kMaxJobBytes));
      if (ok) POSEIDON_FUZZ_CHECK(rt::EncodeJobText(text) == body);
      return 0;
    }
    case 8: {  // a part of worker 1's values
      rt::ValuesPart v;
      if (rt::DecodeValuesPart(body, &v)) {
        POSEIDON_FUZZ_CHECK(v.part < v.parts && v.bytes.size() <= rt::kMaxValuesPart);
        POSEIDON_FUZZ_CHECK(rt::EncodeValuesPart(v) == body);
      }
      return 0;
    }
    default: {
      std::string text;
      if (rt::DecodeStatus(body, &text)) POSEIDON_FUZZ_CHECK(rt::EncodeStatus(text) == body);
      POSEIDON_FUZZ_CHECK(rt::DecodeStatus(body, &text) == (body.size() <= rt::kMaxStatusBytes));
      return 0;
    }
  }
}

}  // namespace poseidon::fuzz
