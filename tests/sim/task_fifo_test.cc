#include "sim/task_fifo.h"

#include <deque>
#include <random>

#include <gtest/gtest.h>

namespace poseidon::sim {
namespace {

core::ComputeTask Task(int32_t layer) {
  core::ComputeTask t;
  t.layer = layer;
  t.clock = layer * 3;
  return t;
}

TEST(TaskFifo, OneTaskAtATimeAsAComputeStreamRunsThem) {
  TaskFifo q;
  EXPECT_TRUE(q.empty());
  for (int32_t i = 0; i < 5; ++i) {
    q.push_back(Task(i));
    ASSERT_FALSE(q.empty());
    EXPECT_EQ(q.size(), 1u);
    EXPECT_EQ(q.front().layer, i);
    EXPECT_EQ(q.front().clock, i * 3);
    q.pop_front();
    EXPECT_TRUE(q.empty());
  }
}

// Against std::deque under random pushes and pops, with backlogs long enough to compact.
TEST(TaskFifo, MatchesADequeUnderRandomUse) {
  std::mt19937_64 rng(7);
  TaskFifo q;
  std::deque<int32_t> ref;
  int32_t next = 0;
  for (int step = 0; step < 20000; ++step) {
    // Phases that grow the backlog to hundreds of tasks, then drain it.
    const bool grow = (step / 1000) % 2 == 0;
    const bool push = ref.empty() || rng() % 100 < (grow ? 70u : 30u);
    if (push) {
      q.push_back(Task(next));
      ref.push_back(next++);
    } else {
      ASSERT_EQ(q.front().layer, ref.front()) << "step " << step;
      q.pop_front();
      ref.pop_front();
    }
    ASSERT_EQ(q.size(), ref.size()) << "step " << step;
    ASSERT_EQ(q.empty(), ref.empty());
  }
  while (!ref.empty()) {
    ASSERT_EQ(q.front().layer, ref.front());
    q.pop_front();
    ref.pop_front();
  }
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace poseidon::sim
