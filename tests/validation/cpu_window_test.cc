// Tests of validation/cpu_window.cc: a run's process CPU over a span, from its CPU counters.
#include "validation/cpu_window.h"

#include <gtest/gtest.h>

#include <vector>

namespace poseidon::validation {
namespace {

TraceRecord Cpu(core::ActorId actor, core::TimeNs ts, int64_t cpu_ns) {
  TraceRecord r;
  r.phase = 'C';
  r.kind = TraceRecordKind::kProcessCpu;
  r.thread.actor = actor;
  r.ts = ts;
  r.cpu_ns = cpu_ns;
  return r;
}

TEST(ProcessCpuOver, EachProcessReadLinearlyBetweenItsCountersAndSummed) {
  // Process 1 uses 1 ms of CPU per 2 ms from t = 0 to 10 ms (counters out of time order, as a
  // simulator books them); process 2 has two counters, 4 ms apart, 3 ms used between them.
  std::vector<TraceRecord> events = {Cpu(1, 10'000'000, 5'000'000), Cpu(1, 0, 0),
                                     Cpu(2, 2'000'000, 1'000'000), Cpu(1, 4'000'000, 2'000'000),
                                     Cpu(2, 6'000'000, 4'000'000)};
  TraceRecord task;
  task.kind = TraceRecordKind::kTask;  // not a counter: ignored
  task.thread.actor = 3;
  events.push_back(task);
  const std::optional<WindowCpu> w = ProcessCpuOver(events, 3'000'000, 5'000'000);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->processes, 2);
  // Process 1: 1.5 ms at 3 ms, 2.5 ms at 5 ms (1 ms); process 2: 1.75 ms at 3 ms, 3.25 at 5 (1.5).
  EXPECT_DOUBLE_EQ(w->ns, 1'000'000 + 1'500'000);
  // Before a process's first counter and after its last, the CPU stays at that counter's.
  const std::optional<WindowCpu> outside = ProcessCpuOver(events, 6'000'000, 20'000'000);
  ASSERT_TRUE(outside.has_value());
  EXPECT_DOUBLE_EQ(outside->ns, 2'000'000);  // process 1: 3 ms -> 5 ms; process 2: none
  // No counters, or a span that ends before it begins: nothing to say.
  EXPECT_FALSE(ProcessCpuOver({task}, 0, 1).has_value());
  EXPECT_FALSE(ProcessCpuOver(events, 5, 4).has_value());
}

}  // namespace
}  // namespace poseidon::validation
