// fuzz/fuzz_targets.h: the bodies of the libFuzzer targets, one per input surface.
//
// Each function feeds `size` hostile bytes to one parser and returns 0. A clean refusal (a
// false/`ok == false` result, or the parser's own typed error: ConfigError, ModelError,
// YAML::Exception, DataError) is the expected outcome; anything else -- a crash, another
// exception type, a sanitizer report, a broken round-trip invariant (POSEIDON_FUZZ_CHECK aborts) --
// is a finding. The same functions run twice: under libFuzzer (fuzz/fuzz_main.cc, clang, built
// with -DPOSEIDON_FUZZ=ON) and in the normal GoogleTest suite, which replays every file of
// fuzz/corpus/<target>/ and fuzz/regressions/<target>/ through them (tests/fuzz/replay_test.cc).
//
//   poseidon::fuzz::FuzzFrame(bytes.data(), bytes.size());
//
// Deterministic (no clock, no randomness), nothing kept between calls; IdxFuzz writes its input
// to a temporary file named after the process id (the IDX reader reads paths).
#pragma once

#include <cstddef>
#include <cstdint>

namespace poseidon::fuzz {

int FuzzFrame(const uint8_t* data, size_t size);
int FuzzHandshake(const uint8_t* data, size_t size);
int FuzzScenario(const uint8_t* data, size_t size);
int FuzzModel(const uint8_t* data, size_t size);
int FuzzIdx(const uint8_t* data, size_t size);
int FuzzProtocol(const uint8_t* data, size_t size);
int FuzzCollectives(const uint8_t* data, size_t size);  // fuzz/protocol_fuzz.cc, baselines
int FuzzControl(const uint8_t* data, size_t size);

}  // namespace poseidon::fuzz
