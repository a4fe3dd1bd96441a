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
}  // namespace poseidon::calibration
