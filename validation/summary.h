// validation/summary.h: what `poseidon validate` says over its configurations: per
// configuration the median of its runs' errors, over the configurations the median and largest
// absolute error, the ones outside the goal (worst first, with the network model's error on
// their own traffic and how far their live runs spread), and the live runs' own repeatability.
//
//   Tally t(names, repeat);
//   t.Add(i, run, error_pct, measured_ms, net_error_pct, host);  // per successful run
//   std::cerr << t.Text(failures);
//
// Each run also carries whether it was a faithful emulation (validation/host_load.h). The
// figures over all runs stay as they were; the faithful runs are summarised apart, every run
// that was not faithful is listed with why, and a configuration left without a faithful run is
// named: none is dropped silently.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace poseidon::validation {

// The error goal: a configuration whose |error| is above it is listed.
inline constexpr double kErrorGoalPct = 8;

// The median of `v` (mean of the middle two for an even count); NaN when empty.
double Median(std::vector<double> v);

// How far the live runs of one configuration differ among themselves: (max - min) / median of
// their measured iteration times, in percent; NaN with fewer than two runs. A configuration whose
// live runs spread by more than the error goal cannot meet it in every run, whatever the model.
double LiveSpreadPct(const std::vector<double>& measured_ms);

// "median |error| X%, max |error| Y%, K outside 8%" over absolute errors.
std::string ErrorSummary(const std::vector<double>& abs_errors);

// Whether a run was a faithful emulation: judged from its host record, or not judged (a run
// recorded before host records existed, read back by --reuse-live).
struct RunHost {
  enum class State { kNotRecorded, kFaithful, kNotFaithful };
  State state = State::kNotRecorded;
  std::string why;  // kNotFaithful: the rule's reason
  int attempts = 1;  // live runs it took (--rerun-disturbed)
  // The job's own CPU over the run, % of the host's cores x wall time (HostRecord::job_pct); NaN
  // when the host was not sampled.
  double job_cpu_pct = NAN;
  // The run's hand-offs between awake threads as its workers' traces show them (mean, us;
  // AddHostLatencies) and what the simulator charged for one (host_handoff_us); NaN when there
  // are none or the hosts are not emulated.
  double handoff_us = NAN, charged_handoff_us = NAN;
  // The job's processes' CPU per measured iteration (ms): live, their own CPU clocks over the
  // span the pace is measured on; booked, what the simulator's host model booked for them over
  // the simulated run's span (validation/cpu_window.h). NaN when a trace has no CPU counters.
  double cpu_ms = NAN, booked_cpu_ms = NAN;
};

// The bands of the job's own CPU the summary breaks the errors down by (percent of the host's
// cores x wall time): an emulation whose own processes keep the host's cores busy makes its
// emulated hosts wait for a core more than the simulator's host model charges (docs/validation.md,
// "The job's own CPU").
inline constexpr double kJobCpuBandsPct[] = {50, 60, 70};

// "by the job's own CPU ...: below 50%: ...; 50-60%: ...": per band the configurations whose
// median job CPU lies in it and their errors' summary; empty when no configuration has one.
// job_cpu_pct[i] and abs_errors[i] belong to configuration i (NaN job CPU: left out).
std::string JobCpuBreakdown(const std::vector<double>& job_cpu_pct,
                            const std::vector<double>& abs_errors);

class Tally {
 public:
  // names[i]: configuration i's name in the summary; repeat: live runs per configuration (some
  // may get more: validate --repeat-spread).
  Tally(std::vector<std::string> names, int repeat);

  // A run (1-based) of configuration i that was measured and predicted; run > repeat: one added
  // by validate --repeat-spread.
  void Add(size_t config, int run, double error_pct, double measured_ms, double net_error_pct,
           const RunHost& host = {});

  // Per configuration the median of its runs' errors, absolute, for those with at least one run.
  std::vector<double> AbsMedianErrors() const;
  // The same over faithful runs only.
  std::vector<double> AbsMedianFaithfulErrors() const;
  // The configurations whose live runs, those not judged disturbed (faithful, or not judged),
  // differ among themselves by more than the error goal (LiveSpreadPct), in index order: the ones
  // `validate --repeat-spread` runs again. The rule reads the live runs alone, never the
  // prediction, so adding runs cannot favour the model.
  std::vector<size_t> SpreadBeyondGoal() const;
  // The summary lines (each "validate: ...\n"); `failures`: runs that could not be compared.
  std::string Text(int failures) const;
  // The JSON document's last fields: "runs", the median and largest |error|, "failed".
  std::string JsonTail(int failures) const;

 private:
  std::string FaithfulText() const;
  // The job's processes' CPU against the simulator's bookings (RunHost::cpu_ms); "" without any.
  std::string CpuText() const;

  std::vector<std::string> names_;
  int repeat_;
  std::vector<std::vector<double>> errors_;      // per configuration, one per run
  std::vector<std::vector<double>> net_errors_;  // network model on the live traffic
  std::vector<std::vector<double>> measured_;    // live iteration times, per run
  std::vector<std::vector<double>> undisturbed_measured_;  // the same, runs not judged disturbed
  std::vector<std::vector<double>> run_abs_;     // per run, |error| of every configuration
  std::vector<std::vector<double>> faithful_errors_;  // per configuration, its faithful runs
  std::vector<int> not_faithful_;                     // per configuration, runs not faithful
  std::vector<std::vector<double>> job_cpu_;          // per configuration, its runs' job CPU %
  std::vector<std::vector<double>> handoff_;          // per configuration, its runs' hand-off (us)
  std::vector<double> charged_handoff_;               // per configuration, NaN when none
  std::vector<std::vector<double>> cpu_ratio_;        // per configuration, live / booked CPU
  struct Disturbed {
    size_t config;
    int run;
    double error_pct;
    std::string why;
  };
  std::vector<Disturbed> disturbed_;  // every run not faithful, in run order
  int not_recorded_ = 0, judged_ = 0, rerun_ = 0;
};

}  // namespace poseidon::validation
