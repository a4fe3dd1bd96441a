// core/types.h: the few vocabulary types every part of the protocol core shares.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>

namespace poseidon::core {

// Time is integer nanoseconds. The core never reads a clock: `now` arrives with every event.
using TimeNs = int64_t;
inline constexpr TimeNs kNeverNs = std::numeric_limits<TimeNs>::max();

// A protocol endpoint: the coordinator, a worker or a parameter-server shard. Ids are dense:
// coordinator 0, workers 1..P, server shards P+1..P+S (see JobLayout).
using ActorId = int32_t;

// Broken invariants (programming errors, never user input) abort with file:line and a message:
//   POSEIDON_CHECK(n > 0) << "n was " << n;
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    os_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << os_.str() << std::endl;
    std::abort();
  }
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

}  // namespace poseidon::core

#define POSEIDON_CHECK(cond) \
  if (cond) {                \
  } else                     \
    ::poseidon::core::CheckFailure(__FILE__, __LINE__, #cond)
