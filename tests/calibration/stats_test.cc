#include "calibration/stats.h"

#include <gtest/gtest.h>

namespace poseidon::calibration {
namespace {

TEST(Stats, PercentilesInterpolateLikeNumpy) {
  // numpy.percentile([1..10], [10, 50, 90]) = [1.9, 5.5, 9.1]
  std::vector<double> v{10, 3, 1, 2, 4, 5, 6, 7, 8, 9};
  Summary s = Summarize(v);
  EXPECT_EQ(s.count, 10);
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_NEAR(s.p10, 1.9, 1e-12);
  EXPECT_NEAR(s.p90, 9.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 10);
  EXPECT_EQ(Summarize({}).count, 0);
  EXPECT_DOUBLE_EQ(Percentile({4}, 0.9), 4);
}

}  // namespace
// The interquartile samples: within [p25, p75]; rare spikes are left out, and the mean of
// per-part means over the same indices adds up (the property the profiler relies on).
TEST(Stats, InterquartileMeanLeavesOutSpikesAndAddsUp) {
  const std::vector<double> a = {1, 1, 1, 1, 100, 1, 1, 1};
  const std::vector<double> b = {2, 2, 2, 2, 2, 2, 2, 50};
  EXPECT_DOUBLE_EQ(InterquartileMean(a), 1.0);
  std::vector<double> total(a.size());
  for (size_t i = 0; i < a.size(); ++i) total[i] = a[i] + b[i];
  double sa = 0, sb = 0;
  const std::vector<size_t> idx = InterquartileIndices(total);
  ASSERT_FALSE(idx.empty());
  for (size_t i : idx) sa += a[i], sb += b[i];
  EXPECT_DOUBLE_EQ(sa / idx.size() + sb / idx.size(), InterquartileMean(total));
  EXPECT_EQ(InterquartileIndices({1.0, 3.0}).size(), 1u);  // none between: the nearest one
  EXPECT_TRUE(InterquartileIndices({}).empty());
}

}  // namespace poseidon::calibration
