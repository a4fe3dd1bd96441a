// sim/engine.h: the discrete-event queue.
//
// Time is int64 nanoseconds. Events that fall on the same nanosecond are popped in the order
// they were pushed (ties broken by a sequence number), which makes a run reproducible. Events
// are small PODs (time, sequence, kind, target, argument) kept in a 4-ary heap over one vector:
// no allocation per event once the vector has grown, and no global state (two engines can live
// in one process).
//
//   EventQueue q;
//   q.Push(100, kDeliver, /*target=*/3, /*arg=*/slot);
//   Event e;
//   while (q.Pop(&e)) { ... e.time ... }
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace poseidon::sim {

struct Event {
  int64_t time = 0;
  uint64_t seq = 0;
  uint32_t kind = 0;
  uint32_t target = 0;
  uint64_t arg = 0;
};

class EventQueue {
 public:
  void Push(int64_t time, uint32_t kind, uint32_t target, uint64_t arg) {
    heap_.push_back(Event{time, next_seq_++, kind, target, arg});
    SiftUp(heap_.size() - 1);
  }
  // Pops the earliest event; false when empty.
  bool Pop(Event* out) {
    if (heap_.empty()) return false;
    *out = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) ReplaceTop(last);
    return true;
  }
  const Event& Top() const { return heap_.front(); }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  uint64_t pushed() const { return next_seq_; }
  void Reserve(size_t n) { heap_.reserve(n); }

 private:
  // (time, seq) as one 128-bit key: one branch-free comparison (times are never negative).
  static bool Before(const Event& a, const Event& b) {
    __extension__ using Key = unsigned __int128;
    const Key ka = (static_cast<Key>(static_cast<uint64_t>(a.time)) << 64) | a.seq;
    const Key kb = (static_cast<Key>(static_cast<uint64_t>(b.time)) << 64) | b.seq;
    return ka < kb;
  }
  void SiftUp(size_t i) {
    Event e = heap_[i];
    while (i > 0) {
      size_t parent = (i - 1) / kArity;
      if (!Before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  // Puts `e` at the root and restores the heap: the hole left at the root walks down along the
  // smallest children to a leaf (one comparison per child, none against `e`), then `e` sifts up
  // from there -- fewer comparisons than a plain sift-down, since `e` (a former leaf) usually
  // belongs near the bottom.
  void ReplaceTop(const Event& e) {
    const size_t n = heap_.size();
    size_t i = 0;
    for (;;) {
      const size_t first = kArity * i + 1;
      if (first >= n) break;
      size_t best = first;
      const size_t last = first + kArity < n ? first + kArity : n;
      for (size_t c = first + 1; c < last; ++c) {
        if (Before(heap_[c], heap_[best])) best = c;
      }
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = e;
    SiftUp(i);
  }

  static constexpr size_t kArity = 4;  // 4-ary: measured faster than 2 at 10^4 and 10^6 events
  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace poseidon::sim
