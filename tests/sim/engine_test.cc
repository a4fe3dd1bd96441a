#include "sim/engine.h"

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace poseidon::sim {
namespace {

TEST(EventQueue, SameTimeEventsPopInPushOrder) {
  EventQueue q;
  for (uint32_t i = 0; i < 100; ++i) q.Push(5, 0, i, 0);
  q.Push(1, 0, 1000, 0);
  Event e;
  ASSERT_TRUE(q.Pop(&e));
  EXPECT_EQ(e.time, 1);
  for (uint32_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(q.Pop(&e));
    EXPECT_EQ(e.target, i);
  }
  EXPECT_FALSE(q.Pop(&e));
}

// Against a sorted reference, with pushes interleaved with pops (as a simulation does: an event
// handler pushes new events no earlier than the current time).
TEST(EventQueue, MatchesSortedReferenceUnderRandomUse) {
  std::mt19937_64 rng(42);
  EventQueue q;
  std::vector<std::tuple<int64_t, uint64_t, uint32_t>> ref;  // (time, seq, target)
  uint64_t seq = 0;
  int64_t now = 0;
  std::vector<uint32_t> popped, expected;
  for (int step = 0; step < 20000; ++step) {
    if (ref.empty() || rng() % 3 != 0) {
      int64_t t = now + static_cast<int64_t>(rng() % 50);
      uint32_t target = static_cast<uint32_t>(rng());
      q.Push(t, 1, target, 0);
      ref.emplace_back(t, seq++, target);
    } else {
      auto it = std::min_element(ref.begin(), ref.end());
      expected.push_back(std::get<2>(*it));
      now = std::get<0>(*it);
      ref.erase(it);
      Event e;
      ASSERT_TRUE(q.Pop(&e));
      EXPECT_EQ(e.time, now);
      popped.push_back(e.target);
    }
  }
  EXPECT_EQ(popped, expected);
  EXPECT_EQ(q.size(), ref.size());
}

TEST(EventQueue, TwoQueuesAreIndependent) {
  EventQueue a, b;
  a.Push(10, 0, 1, 0);
  b.Push(5, 0, 2, 0);
  Event e;
  ASSERT_TRUE(a.Pop(&e));
  EXPECT_EQ(e.target, 1u);
  EXPECT_EQ(a.pushed(), 1u);
  EXPECT_EQ(b.size(), 1u);
}

}  // namespace
}  // namespace poseidon::sim
