// sim/task_fifo.h: the FIFO of compute tasks that one stream of one simulated process runs.
//
// A job of 2,048 machines of 8 devices has 82k streams (5 per device), and the event loop visits
// them in the order their tasks end, i.e. at random. A compute stream holds one task at a time
// (a worker starts a device's next layer when its last one ends), so the front task lives in the
// record itself (one element inline) and only a stream that queues more (copies, server updates)
// spills to the heap; std::deque allocated a 512-byte node and its map per stream, so every
// TaskDone missed the cache twice (docs/performance.md, "The event loop's stream records").
//
//   TaskFifo q;
//   q.push_back(task);
//   const core::ComputeTask& t = q.front();
//   q.pop_front();
#pragma once

#include <cstddef>
#include <cstdint>

#include <boost/container/small_vector.hpp>

#include "core/host.h"

namespace poseidon::sim {

class TaskFifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }
  const core::ComputeTask& front() const { return items_[head_]; }
  void push_back(const core::ComputeTask& task) { items_.push_back(task); }
  // Precondition: !empty().
  void pop_front() {
    if (++head_ == items_.size()) {
      // Drained: start over at the inline element (the usual case, one task at a time).
      items_.clear();
      head_ = 0;
    } else if (head_ >= kCompactFrom && head_ * 2 >= items_.size()) {
      // A long-lived backlog: drop the consumed front, so the vector stays within twice the
      // queue's length (each element moves at most once per halving: amortised O(1)).
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }

 private:
  static constexpr size_t kCompactFrom = 64;
  boost::container::small_vector<core::ComputeTask, 1> items_;
  size_t head_ = 0;
};

}  // namespace poseidon::sim
