// core/clock_counter.h: counts arrivals per clock and advances a version while the oldest
// outstanding clock is complete.
//
// Used wherever "all N contributions of clock c are in" gates progress: a worker waiting for
// every chunk of a layer, for every peer's sufficient factors, for every ring piece; a shard
// waiting for every worker's push. Clocks complete strictly in order: version() is the number of
// leading clocks 0..version()-1 whose arrivals are all in. Arrivals for later clocks (a fast peer
// under SSP) are buffered.
//
// The buffer is a vector read from head_ (not a std::deque, which allocates a node and a map
// even when empty: two counters per layer of every worker made deques a third of the
// simulator's memory at 2,048 machines).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/types.h"

namespace poseidon::core {

class ClockCounter {
 public:
  explicit ClockCounter(int need = 1) : need_(need) {}
  // Records one arrival for clock c (c >= version()).
  void Add(int64_t c) {
    POSEIDON_CHECK(c >= version_) << "arrival for clock " << c << " after version " << version_;
    const size_t i = head_ + static_cast<size_t>(c - version_);
    if (counts_.size() <= i) counts_.resize(i + 1, 0);
    ++counts_[i];
    POSEIDON_CHECK(counts_[i] <= need_) << "clock " << c << " got more than " << need_;
  }
  // True when clock version() has all its arrivals.
  bool FrontComplete() const { return head_ < counts_.size() && counts_[head_] == need_; }
  // Arrivals so far for clock c.
  int Count(int64_t c) const {
    const size_t i = head_ + static_cast<size_t>(c - version_);
    return c < version_ ? need_ : (i < counts_.size() ? counts_[i] : 0);
  }
  // Moves past the completed front clock.
  void Advance() {
    POSEIDON_CHECK(FrontComplete());
    ++head_;
    ++version_;
    if (head_ == counts_.size()) {  // nothing buffered: start over, keeping the capacity
      counts_.clear();
      head_ = 0;
    } else if (head_ >= 16 && 2 * head_ >= counts_.size()) {  // keep the dead front bounded
      counts_.erase(counts_.begin(), counts_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  // Restarts the count at version v with nothing buffered (a rejoining worker, a restored
  // shard).
  void ResetTo(int64_t v) {
    version_ = v;
    counts_.clear();
    head_ = 0;
  }
  int64_t version() const { return version_; }
  int need() const { return need_; }

 private:
  int need_;
  int64_t version_ = 0;
  std::vector<int> counts_;  // arrivals of clocks version_, version_ + 1, ... from counts_[head_]
  size_t head_ = 0;
};

}  // namespace poseidon::core
