// tests/core/clock_counter_test.cc: ClockCounter completes clocks strictly in order, buffers
// arrivals for later clocks (a fast peer under SSP), and keeps doing so over many clocks with
// arrivals always buffered ahead (its buffer is compacted, never lost).
#include "core/clock_counter.h"

#include <gtest/gtest.h>

namespace poseidon::core {
namespace {

TEST(ClockCounter, CompletesInOrderAndBuffersLaterClocks) {
  ClockCounter c(2);
  c.Add(1);
  c.Add(1);  // clock 1 is complete, clock 0 is not: nothing advances
  EXPECT_FALSE(c.FrontComplete());
  EXPECT_EQ(c.Count(0), 0);
  EXPECT_EQ(c.Count(1), 2);
  c.Add(0);
  EXPECT_FALSE(c.FrontComplete());
  c.Add(0);
  ASSERT_TRUE(c.FrontComplete());
  c.Advance();
  EXPECT_EQ(c.version(), 1);
  EXPECT_EQ(c.Count(0), 2);  // before the version: complete
  ASSERT_TRUE(c.FrontComplete());
  c.Advance();
  EXPECT_EQ(c.version(), 2);
  EXPECT_FALSE(c.FrontComplete());
  EXPECT_EQ(c.Count(2), 0);
}

TEST(ClockCounter, KeepsCountsAcrossManyClocksWithArrivalsAlwaysAhead) {
  // A peer three clocks ahead at every step: the buffer never empties, so the front is
  // compacted as it advances; every count must survive that.
  ClockCounter c(3);
  for (int64_t k = 0; k < 3; ++k) c.Add(k);  // the fast peer's first three clocks
  for (int64_t v = 0; v < 1000; ++v) {
    c.Add(v + 3);  // fast peer, three ahead
    EXPECT_EQ(c.Count(v + 1), 1);
    EXPECT_EQ(c.Count(v + 3), 1);
    c.Add(v);
    EXPECT_FALSE(c.FrontComplete());
    c.Add(v);
    ASSERT_TRUE(c.FrontComplete()) << "clock " << v;
    c.Advance();
    EXPECT_EQ(c.version(), v + 1);
  }
  c.ResetTo(50);
  EXPECT_EQ(c.version(), 50);
  EXPECT_EQ(c.Count(50), 0);
  EXPECT_FALSE(c.FrontComplete());
}

}  // namespace
}  // namespace poseidon::core
