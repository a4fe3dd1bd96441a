// validate's summaries (validation/summary.h): medians per configuration, the worst first, the
// live runs' own spread.
#include "validation/summary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace poseidon::validation {
namespace {

// d08 of held-out set 3: one run in the fair-share mode, two where one worker's connection kept
// the larger share of the shard's link.
TEST(ValidateSpread, IsTheRangeOfTheLiveRunsOverTheirMedian) {
  EXPECT_NEAR(LiveSpreadPct({1346.186, 1510.572, 1505.700}), 100.0 * (1510.572 - 1346.186) / 1505.700,
              1e-9);
  EXPECT_NEAR(LiveSpreadPct({10, 10}), 0, 1e-12);
  EXPECT_TRUE(std::isnan(LiveSpreadPct({72.5})));
  EXPECT_TRUE(std::isnan(LiveSpreadPct({})));
}

TEST(ValidateSummary, MediansPerConfigurationAndTheWorstFirst) {
  Tally t({"a", "b", "c"}, 2);
  t.Add(0, 1, 1.0, 100, 0.5);
  t.Add(1, 1, -9.0, 100, NAN);
  t.Add(2, 1, 12.0, 100, 1.0);
  t.Add(0, 2, 3.0, 110, 0.5);
  t.Add(1, 2, -11.0, 101, NAN);
  t.Add(2, 2, 14.0, 100, 2.0);
  EXPECT_EQ(t.AbsMedianErrors(), (std::vector<double>{2.0, 10.0, 13.0}));
  const std::string text = t.Text(1);
  EXPECT_EQ(text,
            "validate: run 1: 3 configurations, median |error| 9.00%, max |error| 12.00%, 2 outside 8%\n"
            "validate: run 2: 3 configurations, median |error| 11.00%, max |error| 14.00%, 2 outside 8%\n"
            "validate: 3 configurations x 2 runs, per configuration the median of its runs, median "
            "|error| 10.00%, max |error| 13.00%, 2 outside 8%, 1 failed\n"
            "validate: live runs that differ among themselves by more than 8% ((max - min) / median): "
            "1 of 3 configurations; no single prediction is within 8% of all their runs\n"
            "validate: outside 8%: +13.00% c (config-2); network model on its live traffic +1.50%; its "
            "live runs spread 0.0%\n"
            "validate: outside 8%: -10.00% b (config-1); its live runs spread 1.0%\n"
            "validate: 6 runs without a host record (run before validate sampled the host): not "
            "judged faithful or not\n");
  EXPECT_EQ(t.JsonTail(1),
            "\"runs\":2,\"median_abs_error_pct\":10.000,\"max_abs_error_pct\":13.000,\"failed\":1");
}

// On emulated hosts an outside line also names the hand-offs its live runs showed (the median of
// the runs' means) against the one the simulator charged; a configuration within the goal does not.
TEST(ValidateSummary, AnOutsideLineNamesItsHandOffs) {
  RunHost h;
  h.charged_handoff_us = 66.8;
  Tally t({"a", "b"}, 3);
  for (int run = 1; run <= 3; ++run) {
    h.handoff_us = 80.0 + 10.0 * run;  // 90, 100, 110
    t.Add(0, run, -10.0, 100, NAN, h);
    t.Add(1, run, 1.0, 100, NAN, h);
  }
  const std::string text = t.Text(0);
  EXPECT_NE(text.find("validate: outside 8%: -10.00% a (config-0); its live runs spread 0.0%; its "
                      "workers' hand-offs 100.0 us live, 66.8 charged\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("(config-1)"), std::string::npos) << text;
  // Without a charged hand-off (hosts not emulated) the line says nothing of them.
  Tally real({"a"}, 1);
  real.Add(0, 1, -10.0, 100, NAN, RunHost{});
  EXPECT_EQ(real.Text(0).find("hand-offs"), std::string::npos) << real.Text(0);
}

// The job's processes' CPU against the bookings: per configuration the median of its runs'
// ratios, summarised over the configurations, and named on an outside line.
TEST(ValidateSummary, TheJobsCpuAgainstTheBookings) {
  Tally t({"a", "b", "c"}, 2);
  RunHost h;
  h.booked_cpu_ms = 10;
  for (int run = 1; run <= 2; ++run) {
    h.cpu_ms = 14 + 2 * run;  // 16, 18: a's median 1.7x
    t.Add(0, run, -12.0, 100, NAN, h);
    h.cpu_ms = 9;  // b: 0.9x
    t.Add(1, run, 1.0, 100, NAN, h);
    t.Add(2, run, 1.0, 100, NAN, RunHost{});  // c: no counters, left out
  }
  const std::string text = t.Text(0);
  EXPECT_NE(text.find("; its processes' CPU 1.70x what the simulator booked"), std::string::npos)
      << text;
  EXPECT_NE(text.find("): 1.30x at the median of 2 configurations (4 runs), from 0.90x to 1.70x\n"),
            std::string::npos)
      << text;
  Tally none({"a"}, 1);
  none.Add(0, 1, 1.0, 100, NAN, RunHost{});
  EXPECT_EQ(none.Text(0).find("processes' CPU"), std::string::npos) << none.Text(0);
}

// Faithful runs are summarised apart; every other run is listed with why; a configuration with
// no faithful run is named, not dropped.
TEST(ValidateSummary, FaithfulRunsApartAndTheOthersListedWithWhy) {
  const RunHost ok{RunHost::State::kFaithful, "", 1};
  const RunHost busy{RunHost::State::kNotFaithful, "other processes used 40.0%", 1};
  const RunHost rerun{RunHost::State::kFaithful, "", 2};
  Tally t({"a", "b"}, 2);
  t.Add(0, 1, 1.0, 100, NAN, ok);
  t.Add(1, 1, 12.0, 100, NAN, busy);
  t.Add(0, 2, 3.0, 100, NAN, rerun);
  t.Add(1, 2, 14.0, 100, NAN, busy);
  EXPECT_EQ(t.AbsMedianFaithfulErrors(), (std::vector<double>{2.0}));
  const std::string text = t.Text(0);
  // The figures over every run stay; the outside line says its runs were not faithful.
  EXPECT_NE(text.find("validate: outside 8%: +13.00% b (config-1); its live runs spread 0.0%; 2 of "
                      "its runs not faithful\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("validate: faithful runs (docs/validation.md, \"Faithful runs\"): 2 of 4; over "
                      "them, per configuration the median of its faithful runs: 1 configurations, "
                      "median |error| 2.00%, max |error| 2.00%, 0 outside 8%\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("validate: not faithful: run 1 of config-1 (b), error +12.00%: other processes "
                      "used 40.0%\n"
                      "validate: not faithful: run 2 of config-1 (b), error +14.00%: other processes "
                      "used 40.0%\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("validate: 1 configurations without a faithful run, left out of the faithful "
                      "figures: config-1 (b)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("validate: 1 runs were disturbed and run again"), std::string::npos) << text;
  EXPECT_EQ(text.find("without a host record"), std::string::npos) << text;
  EXPECT_NE(t.JsonTail(0).find("\"faithful_runs\":2,\"not_faithful_runs\":2,\"faithful_configurations\":1,"
                               "\"faithful_median_abs_error_pct\":2.000"),
            std::string::npos)
      << t.JsonTail(0);
  // No faithful run at all: null, not NaN (JSON has none).
  Tally none({"a"}, 1);
  none.Add(0, 1, 5.0, 100, NAN, busy);
  EXPECT_NE(none.JsonTail(0).find("\"faithful_median_abs_error_pct\":null,\"faithful_max_abs_error_pct\":null"),
            std::string::npos)
      << none.JsonTail(0);
}

// The errors by the job's own CPU: each configuration in the band of its runs' median job CPU,
// bands' bounds included in the band above them; runs without a host record left out.
TEST(ValidateSummary, ErrorsByTheJobsOwnCpu) {
  EXPECT_EQ(JobCpuBreakdown({}, {}), "");
  EXPECT_EQ(JobCpuBreakdown({NAN}, {3.0}), "");
  EXPECT_EQ(
      JobCpuBreakdown({30, 49.9, 50, 65, 70, 90, NAN}, {1, 3, 2, 9, 12, 20, 50}),
      "by the job's own CPU (per configuration the median of its runs, % of the host's cores x "
      "wall time): below 50%: 2 configurations, median |error| 2.00%, max |error| 3.00%, 0 "
      "outside 8%; 50-60%: 1 configurations, median |error| 2.00%, max |error| 2.00%, 0 outside "
      "8%; 60-70%: 1 configurations, median |error| 9.00%, max |error| 9.00%, 1 outside 8%; 70% "
      "and over: 2 configurations, median |error| 16.00%, max |error| 20.00%, 2 outside 8%");
  // In the summary: per configuration the median of its runs' job CPU and of their errors.
  RunHost light{RunHost::State::kFaithful, "", 1, 40};
  RunHost heavy{RunHost::State::kFaithful, "", 1, 75};
  Tally t({"a", "b"}, 2);
  t.Add(0, 1, 1.0, 100, NAN, light);
  t.Add(0, 2, -3.0, 100, NAN, light);
  t.Add(1, 1, -10.0, 100, NAN, heavy);
  light.job_cpu_pct = 90;  // b's median job CPU: 82.5%
  t.Add(1, 2, -14.0, 100, NAN, light);
  const std::string text = t.Text(0);
  EXPECT_NE(
      text.find("validate: by the job's own CPU (per configuration the median of its runs, % of "
                "the host's cores x wall time): below 50%: 1 configurations, median |error| "
                "1.00%, max |error| 1.00%, 0 outside 8%; 70% and over: 1 configurations, median "
                "|error| 12.00%, max |error| 12.00%, 1 outside 8%\n"),
      std::string::npos)
      << text;
  // Without host records, no such line.
  Tally old({"a"}, 1);
  old.Add(0, 1, 5.0, 100, NAN);
  EXPECT_EQ(old.Text(0).find("job's own CPU"), std::string::npos);
}

// validate --repeat-spread runs again the configurations whose runs not judged disturbed differ
// by more than the goal: d07 of held-out set 21 (live 9.106, 6.876 and 7.072 ms), not one whose
// runs agree, nor one whose only outlier was a disturbed run, nor one with a single run. The
// rule reads the measured times alone: the errors below would pick other configurations.
TEST(ValidateSpread, TheConfigurationsWhoseUndisturbedRunsDifferBeyondTheGoal) {
  RunHost faithful, disturbed, unjudged;
  faithful.state = RunHost::State::kFaithful;
  disturbed.state = RunHost::State::kNotFaithful;
  disturbed.why = "the hypervisor stole 15% of the 2 cores";
  Tally t({"agree", "d07", "outlier disturbed", "one run", "unjudged"}, 3);
  const double agree[] = {10.0, 10.5, 10.2}, d07[] = {9.106, 6.876, 7.072},
               d07_error[] = {-2.75, 28.78, 25.22}, outlier[] = {20.0, 20.4, 26.0},
               unjudged_ms[] = {50.0, 55.0, 50.5};
  for (int run = 1; run <= 3; ++run) {
    const size_t r = static_cast<size_t>(run - 1);
    t.Add(0, run, 30.0, agree[r], NAN, faithful);
    t.Add(1, run, d07_error[r], d07[r], NAN, faithful);
    t.Add(2, run, 1.0, outlier[r], NAN, run == 3 ? disturbed : faithful);
    t.Add(4, run, 1.0, unjudged_ms[r], NAN, unjudged);
  }
  t.Add(3, 1, 1.0, 5.0, NAN, faithful);
  EXPECT_EQ(t.SpreadBeyondGoal(), (std::vector<size_t>{1, 4}));
  // Two more runs of d07: the summary says which configurations got more runs, and a run beyond
  // --repeat has its own line.
  EXPECT_EQ(t.AbsMedianErrors()[1], 25.22);  // the median of three runs
  t.Add(1, 4, -1.7, 8.8, NAN, faithful);
  t.Add(1, 5, 3.0, 8.5, NAN, faithful);
  const std::string text = t.Text(0);
  EXPECT_NE(text.find("validate: run 5: 1 configurations, median |error| 3.00%, max |error| 3.00%"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("validate: 5 configurations x 3 runs (1 of them up to 5 runs: their live runs "
                "spread by more than 8%), per configuration the median of its runs"),
      std::string::npos)
      << text;
  EXPECT_EQ(t.AbsMedianErrors()[1], 3.0);  // the median of its five
}

}  // namespace
}  // namespace poseidon::validation
