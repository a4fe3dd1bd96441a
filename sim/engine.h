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
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(0);
    return true;
  }
  const Event& Top() const { return heap_.front(); }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  uint64_t pushed() const { return next_seq_; }
  void Reserve(size_t n) { heap_.reserve(n); }

 private:
  static bool Before(const Event& a, const Event& b) {
    return a.time < b.time || (a.time == b.time && a.seq < b.seq);
  }
  void SiftUp(size_t i) {
    Event e = heap_[i];
    while (i > 0) {
      size_t parent = (i - 1) / 4;
      if (!Before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  void SiftDown(size_t i) {
    const size_t n = heap_.size();
    Event e = heap_[i];
    for (;;) {
      size_t first = 4 * i + 1;
      if (first >= n) break;
      size_t best = first;
      size_t last = first + 4 < n ? first + 4 : n;
      for (size_t c = first + 1; c < last; ++c) {
        if (Before(heap_[c], heap_[best])) best = c;
      }
      if (!Before(heap_[best], e)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = e;
  }

  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace poseidon::sim
