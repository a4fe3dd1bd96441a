#include "real_runtime/wakeup_cpu.h"

#include <cmath>
#include <iostream>

#include <gtest/gtest.h>

namespace poseidon::rt {
namespace {

// Every round hands a task over and back, and the rounds cost the process CPU: a wake-up's cost
// is positive and finite (its size is this host's; validate --testbed-keys measure records it).
TEST(WakeupCpu, RunsEveryRoundAndChargesEachWakeUpItsShareOfTheCpu) {
  const WakeupCpu w = MeasureWakeupCpu(500, std::chrono::microseconds(50));
  EXPECT_EQ(w.rounds, 500);
  EXPECT_GT(w.cpu_s, 0);
  EXPECT_GE(w.wall_s, 500 * 50e-6);  // every round slept
  EXPECT_DOUBLE_EQ(w.us_per_wakeup, 1e6 * w.cpu_s / 1500);
  std::cout << "this host: " << w.us_per_wakeup << " us of CPU per wake-up (" << w.rounds
            << " rounds, " << w.wall_s << " s)\n";
}

}  // namespace
}  // namespace poseidon::rt
