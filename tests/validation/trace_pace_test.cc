// The job's iteration time as `poseidon validate` reads it from traces, live and simulated alike
// (validation/trace_pace.h; the arithmetic is core/pace.h's).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/trace.h"
#include "validation/trace_pace.h"
#include "validation/trace_reader.h"

namespace poseidon::validation {
namespace {

// One instant event as core/trace.h writes it, on worker actor `actor`'s protocol lane.
std::string Instant(const std::string& name, int actor, double ts_ms, int64_t clock) {
  return fmt::format("{{\"ph\":\"i\",\"s\":\"t\",\"name\":\"{}\",\"cat\":\"protocol\",\"pid\":0,"
                     "\"tid\":{},\"ts\":{:.3f},\"args\":{{\"clock\":{}}}}}",
                     name, core::TraceThreadId(actor, 0, core::kLaneProtocol), ts_ms * 1e3, clock);
}

// Two workers run iterations of 10 and 12 ms; their values arrive (synced) late and irregularly,
// as under ASP, which must not change the pace.
std::vector<TraceRecord> AspLikeTrace() {
  std::string t = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  for (int w = 0; w < 2; ++w) {
    const double step = w == 0 ? 10 : 12;
    t += Instant("iteration 0", w + 1, 1, 0);
    for (int c = 0; c < 6; ++c) {
      t += Instant(fmt::format("iteration end {}", c), w + 1, 1 + step * (c + 1), c);
      t += Instant("synced fc1", w + 1, 1 + step * (c + 1) + 7 * (c % 3), c);
    }
  }
  // (Events joined by ",\n" as the writer joins them.)
  for (size_t p = t.find("}}{"); p != std::string::npos; p = t.find("}}{", p)) t.replace(p, 3, "}},\n{");
  return ReadTrace(t + "\n]}\n", "asp.json");
}

TEST(ValidatePace, UnderAspTheSlowestWorkersOwnIterationsSetThePace) {
  const Pace p = IterationPaceFromTraces({AspLikeTrace()}, 2, 2, 6, /*bsp=*/false);
  ASSERT_TRUE(p.ok) << p.why;
  // (max end of iteration 5 - max end of iteration 1) / 4 = (73 - 25) / 4.
  EXPECT_DOUBLE_EQ(p.mean_ms, 12.0);
  // Per-worker iterations: four of 10 ms, four of 12 ms.
  EXPECT_NEAR(p.std_ms, 1.0, 1e-9);
}

TEST(ValidatePace, UnderBspTheSyncPointsSetThePace) {
  // The same trace read as BSP: T(w, v) is when fc1 first held clock v-1, 7 ms late every third
  // clock: (max at clock 5 - max at clock 1) / 4, worker 1: (1 + 72 + 14) - (1 + 24 + 7).
  const Pace p = IterationPaceFromTraces({AspLikeTrace()}, 2, 2, 6, /*bsp=*/true);
  ASSERT_TRUE(p.ok) << p.why;
  EXPECT_DOUBLE_EQ(p.mean_ms, (87.0 - 32.0) / 4);
}

TEST(ValidatePace, AMissingIterationIsNamed) {
  const Pace p = IterationPaceFromTraces({AspLikeTrace()}, 2, 2, 8, false);
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.why.find("no end of iteration 7"), std::string::npos) << p.why;
  const Pace q = IterationPaceFromTraces({AspLikeTrace()}, 3, 2, 6, false);
  EXPECT_FALSE(q.ok);
  EXPECT_NE(q.why.find("2 of 3 workers"), std::string::npos) << q.why;
}

}  // namespace
}  // namespace poseidon::validation
