// The job's iteration time as `poseidon validate` measures it, live and simulated alike
// (apps/poseidon/validate_command.h: the workers' own iteration ends).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "apps/poseidon/validate_command.h"

namespace poseidon::app {
namespace {

// One instant event as core/trace.h writes it, for worker actor `actor` (lane actor * 8 + 4).
std::string Instant(const std::string& name, int actor, double ts_ms, int64_t clock) {
  return fmt::format("{{\"ph\":\"i\",\"s\":\"t\",\"name\":\"{}\",\"cat\":\"protocol\",\"pid\":0,"
                     "\"tid\":{},\"ts\":{:.3f},\"args\":{{\"clock\":{}}}}},\n",
                     name, actor * 8 + 4, ts_ms * 1e3, clock);
}

// Two workers run iterations of 10 and 12 ms; their values arrive (synced) late and irregularly,
// as under ASP, which must not change the pace.
std::string AspLikeTrace() {
  std::string t;
  for (int w = 0; w < 2; ++w) {
    const double step = w == 0 ? 10 : 12;
    t += Instant("iteration 0", w + 1, 1, 0);
    for (int c = 0; c < 6; ++c) {
      t += Instant(fmt::format("iteration end {}", c), w + 1, 1 + step * (c + 1), c);
      t += Instant("synced fc1", w + 1, 1 + step * (c + 1) + 7 * (c % 3), c);
    }
  }
  return t;
}

TEST(ValidatePace, UnderAspTheSlowestWorkersOwnIterationsSetThePace) {
  const Pace p = IterationPaceFromTraces({AspLikeTrace()}, 2, 2, 6, /*own_pace=*/true);
  ASSERT_TRUE(p.ok) << p.why;
  // (max end of iteration 5 - max end of iteration 1) / 4 = (73 - 25) / 4.
  EXPECT_DOUBLE_EQ(p.mean_ms, 12.0);
  // Per-worker iterations: four of 10 ms, four of 12 ms.
  EXPECT_NEAR(p.std_ms, 1.0, 1e-9);
}

TEST(ValidatePace, UnderBspTheSyncPointsSetThePace) {
  // The same trace read as BSP: T(w, v) is when fc1 first held clock v-1, 7 ms late every third
  // clock: (max at clock 5 - max at clock 1) / 4, worker 1: (1 + 72 + 14) - (1 + 24 + 7).
  const Pace p = IterationPaceFromTraces({AspLikeTrace()}, 2, 2, 6, /*own_pace=*/false);
  ASSERT_TRUE(p.ok) << p.why;
  EXPECT_DOUBLE_EQ(p.mean_ms, (87.0 - 32.0) / 4);
}

TEST(ValidatePace, AMissingIterationIsNamed) {
  const Pace p = IterationPaceFromTraces({AspLikeTrace()}, 2, 2, 8, true);
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.why.find("no end of iteration 7"), std::string::npos) << p.why;
  const Pace q = IterationPaceFromTraces({AspLikeTrace()}, 3, 2, 6, true);
  EXPECT_FALSE(q.ok);
  EXPECT_NE(q.why.find("2 of 3 workers"), std::string::npos) << q.why;
}

// d08 of held-out set 3: one run in the fair-share mode, two where one worker's connection kept
// the larger share of the shard's link.
TEST(ValidateSpread, IsTheRangeOfTheLiveRunsOverTheirMedian) {
  EXPECT_NEAR(LiveSpreadPct({1346.186, 1510.572, 1505.700}), 100.0 * (1510.572 - 1346.186) / 1505.700,
              1e-9);
  EXPECT_NEAR(LiveSpreadPct({10, 10}), 0, 1e-12);
  EXPECT_TRUE(std::isnan(LiveSpreadPct({72.5})));
  EXPECT_TRUE(std::isnan(LiveSpreadPct({})));
}

}  // namespace
}  // namespace poseidon::app
