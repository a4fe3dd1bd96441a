// The faithfulness rule (validation/host_load.h) on recorded /proc text: it holds on a quiet
// host, fails when other processes or the hypervisor take the CPUs, and says why. No clock, no
// live /proc: the samples are text recorded on the 2-core VM (2026-12-03), with the counters
// moved as the case needs.
#include "validation/host_load.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace poseidon::validation {
namespace {

// /proc/stat as the 2-core VM wrote it, with the aggregate counters given.
std::string ProcStat(int64_t user, int64_t system, int64_t idle, int64_t softirq, int64_t steal,
                     int running) {
  return fmt::format(
      "cpu  {} 70207 {} {} 6678 0 {} {} 0 0\n"
      "cpu0 1662605 36015 459022 1235219 1865 0 38199 4517 0 0\n"
      "cpu1 1695045 34191 460474 1199686 4813 0 38464 4658 0 0\n"
      "intr 62045892 0 0 0 0\n"
      "ctxt 636863858\n"
      "btime 1796301676\n"
      "processes 254456\n"
      "procs_running {}\n"
      "procs_blocked 0\n"
      "softirq 167126350 0 2773189 18007651 107360203 710279 0 12623273 1766486 20644881 3240388\n",
      user, system, idle, softirq, steal, running);
}

// A sample at `t_s` whose job has used `job` ticks.
HostSample Sample(double t_s, const std::string& stat, int64_t job, int processes) {
  HostSample s;
  std::string error;
  EXPECT_TRUE(ParseProcStat(stat, &s, &error)) << error;
  s.t_s = t_s;
  s.job_ticks = job;
  s.job_processes = processes;
  return s;
}

constexpr double kHz = 100;  // USER_HZ on Linux

TEST(HostLoad, ParsesProcStatAndAProcessesStat) {
  HostSample s;
  std::string error;
  ASSERT_TRUE(ParseProcStat(ProcStat(3357650, 919497, 2434906, 76663, 9175, 7), &s, &error)) << error;
  EXPECT_EQ(s.cores, 2);
  EXPECT_EQ(s.procs_running, 7);
  EXPECT_EQ(s.cpu.user, 3357650);
  EXPECT_EQ(s.cpu.nice, 70207);
  EXPECT_EQ(s.cpu.system, 919497);
  EXPECT_EQ(s.cpu.softirq, 76663);
  EXPECT_EQ(s.cpu.steal, 9175);
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3\nprocs_running 1\ncpu0 1 2 3 4 5 6 7 8\n", &s, &error));
  EXPECT_NE(error.find("fewer than 8 numbers"), std::string::npos) << error;
  EXPECT_FALSE(ParseProcStat("hello\n", &s, &error));

  int ppid = 0;
  int64_t ticks = 0;
  // A command name with spaces and a parenthesis; utime 120, stime 30, cutime 7, cstime 3.
  ASSERT_TRUE(ParseProcPidStat(
      "27223 (poseidon node (1)) S 27178 27178 16896 0 -1 4194304 101 0 0 0 120 30 7 3 20 0 1 0 "
      "3454055 3133440 393 18446744073709551615\n",
      &ppid, &ticks));
  EXPECT_EQ(ppid, 27178);
  EXPECT_EQ(ticks, 160);
  EXPECT_FALSE(ParseProcPidStat("27223 (cat) R 27178\n", &ppid, &ticks));
  EXPECT_FALSE(ParseProcPidStat("", &ppid, &ticks));
}

// 10 s on 2 cores = 2,000 ticks of capacity.
TEST(HostLoad, AQuietHostIsFaithful) {
  // The job used 1,100 ticks; the CPUs were busy 1,150 (user + system): 50 ticks (2.5%) others.
  const std::vector<HostSample> samples = {
      Sample(100, ProcStat(1000000, 500000, 900000, 7000, 900, 3), 4000, 1),
      Sample(105, ProcStat(1000500, 500100, 900400, 7050, 905, 6), 4600, 7),
      Sample(110, ProcStat(1001000, 500150, 900800, 7100, 910, 5), 5100, 7)};
  const HostRecord r = RecordFromSamples(samples, kHz);
  EXPECT_EQ(r.samples, 3);
  EXPECT_DOUBLE_EQ(r.wall_s, 10);
  EXPECT_EQ(r.cores, 2);
  EXPECT_NEAR(r.job_pct, 55.0, 1e-9);
  EXPECT_NEAR(r.others_pct, 2.5, 1e-9);
  EXPECT_NEAR(r.steal_pct, 0.5, 1e-9);
  EXPECT_NEAR(r.irq_pct, 5.0, 1e-9);
  EXPECT_NEAR(r.run_queue_mean, (2.0 + 5 + 4) / 3, 1e-9);  // the sampler itself left out
  EXPECT_EQ(r.run_queue_max, 5);
  EXPECT_EQ(r.job_processes_max, 7);
  const Verdict v = Judge(r);
  EXPECT_TRUE(v.faithful) << v.why;
}

TEST(HostLoad, AnotherProcessOnACoreMakesTheRunUnfaithful) {
  // A busy loop beside the job: of the 2,000 ticks, 1,900 user + system, 1,100 of them the job's.
  const std::vector<HostSample> samples = {
      Sample(100, ProcStat(1000000, 500000, 900000, 7000, 900, 3), 4000, 1),
      Sample(110, ProcStat(1001700, 500200, 900000, 7100, 900, 9), 5100, 7)};
  const HostRecord r = RecordFromSamples(samples, kHz);
  EXPECT_NEAR(r.others_pct, 40.0, 1e-9);
  const Verdict v = Judge(r);
  EXPECT_FALSE(v.faithful);
  EXPECT_EQ(v.why,
            "other processes used 40.0% and the hypervisor stole 0.0% of the 2 cores (40.0% lost; "
            "bound 10%)");
}

TEST(HostLoad, StealCountsAsLostAndTheBoundIsInclusive) {
  // 6% others + 4% steal = 10%: at the bound, faithful; one tick more of steal is over it.
  auto run = [](int64_t steal_ticks) {
    return RecordFromSamples({Sample(0, ProcStat(1000000, 500000, 900000, 7000, 900, 3), 0, 1),
                              Sample(10, ProcStat(1001000, 500120, 900000, 7000, 900 + steal_ticks, 3),
                                     1000, 5)},
                             kHz);
  };
  EXPECT_TRUE(Judge(run(80)).faithful) << Judge(run(80)).why;
  const Verdict over = Judge(run(81));
  EXPECT_FALSE(over.faithful);
  EXPECT_NE(over.why.find("other processes used 6.0% and the hypervisor stole"), std::string::npos)
      << over.why;
}

TEST(HostLoad, EmulatedHostsThatRanTheirComputeLateMakeTheRunUnfaithful) {
  // A quiet host by /proc/stat (2.5% others, 0.5% steal), whose emulated hosts ran their replayed
  // compute 150 us later than simulated at the median, against one charged wake-up of 95 us.
  const HostRecord r =
      RecordFromSamples({Sample(100, ProcStat(1000000, 500000, 900000, 7000, 900, 3), 4000, 1),
                         Sample(110, ProcStat(1001000, 500150, 900800, 7100, 910, 5), 5100, 7)},
                        kHz);
  ASSERT_TRUE(Judge(r).faithful);
  const Verdict late = Judge(r, {150, 95});
  EXPECT_FALSE(late.faithful);
  EXPECT_EQ(late.why,
            "its emulated hosts ran their compute 150.0 us later than simulated at the median "
            "(bound 95.0 us: one wake-up as charged) with 3.0% of the 2 cores counted as lost");
  EXPECT_EQ(late.why.find(','), std::string::npos);  // a CSV field
  // At the bound, faithful; without a median (no task matched), or without a charged wake-up
  // (hosts not emulated), the clause does not apply.
  EXPECT_TRUE(Judge(r, {95, 95}).faithful);
  EXPECT_TRUE(Judge(r, {-40, 95}).faithful);
  EXPECT_TRUE(Judge(r, {NAN, 95}).faithful);
  EXPECT_TRUE(Judge(r, {900, 0}).faithful);
  // CPU lost beyond its bound is reported first.
  const HostRecord busy =
      RecordFromSamples({Sample(100, ProcStat(1000000, 500000, 900000, 7000, 900, 3), 4000, 1),
                         Sample(110, ProcStat(1001700, 500200, 900000, 7100, 900, 9), 5100, 7)},
                        kHz);
  EXPECT_NE(Judge(busy, {150, 95}).why.find("other processes used 40.0%"), std::string::npos);
}

TEST(HostLoad, AJobThatKeepsMostOfTheHostBusyIsNotFaithfulAndNotRunAgain) {
  // Nothing else ran (2.5% others, 0.5% steal) and the compute ran on time, but the job's own
  // processes used 1,230 of the 2,000 ticks: 61.5% of the cores, over the 60% bound.
  auto run = [](int64_t job_ticks) {
    return RecordFromSamples(
        {Sample(100, ProcStat(1000000, 500000, 900000, 7000, 900, 3), 4000, 1),
         Sample(110, ProcStat(1001000, 500000 + job_ticks - 950, 900800, 7100, 910, 5),
                4000 + job_ticks, 7)},
        kHz);
  };
  const HostRecord busy = run(1230);
  EXPECT_NEAR(busy.job_pct, 61.5, 1e-9);
  EXPECT_NEAR(busy.others_pct, 2.5, 1e-9);
  const Verdict v = Judge(busy, {10, 95});
  EXPECT_FALSE(v.faithful);
  EXPECT_FALSE(v.rerun_may_help);
  EXPECT_EQ(v.why,
            "the job's processes kept 61.5% of the 2 cores busy (bound 60%): its emulated machines "
            "waited for the host's cores; a host with more cores or fewer processes per core "
            "emulates it");
  EXPECT_EQ(v.why.find(','), std::string::npos);  // a CSV field
  // At the bound, faithful.
  const HostRecord at = run(1200);
  EXPECT_NEAR(at.job_pct, 60.0, 1e-9);
  EXPECT_TRUE(Judge(at, {10, 95}).faithful) << Judge(at, {10, 95}).why;
  // CPU lost to others is reported first, and may go away when the run is made again.
  const HostRecord disturbed =
      RecordFromSamples({Sample(100, ProcStat(1000000, 500000, 900000, 7000, 900, 3), 4000, 1),
                         Sample(110, ProcStat(1001700, 500200, 900000, 7100, 900, 9), 5100, 7)},
                        kHz);
  EXPECT_FALSE(Judge(disturbed).faithful);
  EXPECT_TRUE(Judge(disturbed).rerun_may_help);
  EXPECT_TRUE(Judge(disturbed, {150, 95}).rerun_may_help);
  // --rerun-disturbed 2: the disturbed run is made again twice at most; the busy job never; a
  // faithful run never.
  EXPECT_TRUE(RunAgain(Judge(disturbed), 1, 2));
  EXPECT_TRUE(RunAgain(Judge(disturbed), 2, 2));
  EXPECT_FALSE(RunAgain(Judge(disturbed), 3, 2));
  EXPECT_FALSE(RunAgain(Judge(disturbed), 1, 0));
  EXPECT_FALSE(RunAgain(v, 1, 2));
  EXPECT_FALSE(RunAgain(Judge(at, {10, 95}), 1, 2));
  EXPECT_TRUE(RunAgain(Judge(at, {150, 95}), 1, 2));  // late compute: the host may be quieter
}

TEST(HostLoad, ARunThatWasNotSampledIsNotFaithful) {
  EXPECT_FALSE(Judge(RecordFromSamples({}, kHz)).faithful);
  const Verdict one =
      Judge(RecordFromSamples({Sample(0, ProcStat(1, 1, 1, 1, 1, 1), 0, 1)}, kHz));
  EXPECT_FALSE(one.faithful);
  EXPECT_EQ(one.why, "the host was not sampled during the run");
}

TEST(HostLoad, TheRecordSurvivesItsText) {
  HostRecord r;
  r.samples = 51;
  r.wall_s = 10.25;
  r.cores = 2;
  r.job_pct = 61.5;
  r.others_pct = 12.25;
  r.steal_pct = 0.5;
  r.irq_pct = 3;
  r.run_queue_mean = 5.0 / 7.0;  // every digit survives: --reuse-live judges the same figures
  r.run_queue_max = 6;
  r.job_processes_max = 7;
  HostRecord back;
  ASSERT_TRUE(ParseHostRecordText(HostRecordText(r), &back));
  EXPECT_EQ(HostRecordText(back), HostRecordText(r));
  EXPECT_EQ(back.run_queue_mean, r.run_queue_mean);
  EXPECT_EQ(back.others_pct, r.others_pct);
  EXPECT_EQ(Judge(back).why, Judge(r).why);
  EXPECT_FALSE(ParseHostRecordText("samples=3 wall_s=x\n", &back));
  EXPECT_FALSE(ParseHostRecordText("samples=3\n", &back));
}

}  // namespace
}  // namespace poseidon::validation
