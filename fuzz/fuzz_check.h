// fuzz/fuzz_check.h: an invariant check for the fuzz bodies that aborts in every build type
// (assert() is compiled out in Release), so that libFuzzer records the input and the replay
// test dies loudly.
#pragma once

#include <cstdio>
#include <cstdlib>

#define POSEIDON_FUZZ_CHECK(cond)                                                     \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                            \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
