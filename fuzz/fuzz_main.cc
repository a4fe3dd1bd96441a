// fuzz/fuzz_main.cc: the libFuzzer entry point, compiled once per target with
// -DPOSEIDON_FUZZ_BODY=FuzzFrame (or FuzzHandshake, ...). See fuzz/README.md.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return poseidon::fuzz::POSEIDON_FUZZ_BODY(data, size);
}
