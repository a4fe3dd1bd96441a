#include "validation/summary.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

namespace poseidon::validation {

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double LiveSpreadPct(const std::vector<double>& measured_ms) {
  if (measured_ms.size() < 2) return NAN;
  const auto [lo, hi] = std::minmax_element(measured_ms.begin(), measured_ms.end());
  return 100.0 * (*hi - *lo) / Median(measured_ms);
}

std::string ErrorSummary(const std::vector<double>& abs_errors) {
  const double max = abs_errors.empty() ? NAN : *std::max_element(abs_errors.begin(), abs_errors.end());
  const auto outside =
      std::count_if(abs_errors.begin(), abs_errors.end(), [](double e) { return e > kErrorGoalPct; });
  return fmt::format("median |error| {:.2f}%, max |error| {:.2f}%, {} outside 8%", Median(abs_errors),
                     max, outside);
}

Tally::Tally(std::vector<std::string> names, int repeat)
    : names_(std::move(names)),
      repeat_(repeat),
      errors_(names_.size()),
      net_errors_(names_.size()),
      measured_(names_.size()),
      undisturbed_measured_(names_.size()),
      run_abs_(static_cast<size_t>(repeat)),
      faithful_errors_(names_.size()),
      not_faithful_(names_.size()),
      job_cpu_(names_.size()),
      handoff_(names_.size()),
      charged_handoff_(names_.size(), NAN),
      cpu_ratio_(names_.size()) {}

void Tally::Add(size_t config, int run, double error_pct, double measured_ms, double net_error_pct,
                const RunHost& host) {
  errors_[config].push_back(error_pct);
  if (host.attempts > 1) ++rerun_;
  switch (host.state) {
    case RunHost::State::kNotRecorded: ++not_recorded_; break;
    case RunHost::State::kFaithful:
      ++judged_;
      faithful_errors_[config].push_back(error_pct);
      break;
    case RunHost::State::kNotFaithful:
      ++judged_;
      ++not_faithful_[config];
      disturbed_.push_back({config, run, error_pct, host.why});
      break;
  }
  measured_[config].push_back(measured_ms);
  if (host.state != RunHost::State::kNotFaithful)
    undisturbed_measured_[config].push_back(measured_ms);
  if (std::isfinite(host.job_cpu_pct)) job_cpu_[config].push_back(host.job_cpu_pct);
  if (std::isfinite(host.handoff_us)) handoff_[config].push_back(host.handoff_us);
  if (std::isfinite(host.charged_handoff_us)) charged_handoff_[config] = host.charged_handoff_us;
  if (std::isfinite(host.cpu_ms) && std::isfinite(host.booked_cpu_ms) && host.booked_cpu_ms > 0) {
    cpu_ratio_[config].push_back(host.cpu_ms / host.booked_cpu_ms);
  }
  if (static_cast<size_t>(run) > run_abs_.size()) run_abs_.resize(static_cast<size_t>(run));
  run_abs_[static_cast<size_t>(run - 1)].push_back(std::fabs(error_pct));
  if (std::isfinite(net_error_pct)) net_errors_[config].push_back(net_error_pct);
}

std::vector<double> Tally::AbsMedianErrors() const {
  std::vector<double> abs_errors;
  for (const std::vector<double>& e : errors_) {
    if (!e.empty()) abs_errors.push_back(std::fabs(Median(e)));
  }
  return abs_errors;
}

std::vector<double> Tally::AbsMedianFaithfulErrors() const {
  std::vector<double> abs_errors;
  for (const std::vector<double>& e : faithful_errors_) {
    if (!e.empty()) abs_errors.push_back(std::fabs(Median(e)));
  }
  return abs_errors;
}

std::vector<size_t> Tally::SpreadBeyondGoal() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < undisturbed_measured_.size(); ++i) {
    const double s = LiveSpreadPct(undisturbed_measured_[i]);
    if (std::isfinite(s) && s > kErrorGoalPct) out.push_back(i);
  }
  return out;
}

std::string Tally::JsonTail(int failures) const {
  const std::vector<double> abs_errors = AbsMedianErrors();
  const double max = abs_errors.empty() ? NAN : *std::max_element(abs_errors.begin(), abs_errors.end());
  std::string tail = fmt::format(
      "\"runs\":{},\"median_abs_error_pct\":{:.3f},\"max_abs_error_pct\":{:.3f},\"failed\":{}",
      repeat_, Median(abs_errors), max, failures);
  if (judged_ > 0) {
    const std::vector<double> f = AbsMedianFaithfulErrors();
    const double fmax = f.empty() ? NAN : *std::max_element(f.begin(), f.end());
    // (JSON has no NaN: no faithful configuration gives null.)
    auto number = [&](double v) { return f.empty() ? std::string("null") : fmt::format("{:.3f}", v); };
    tail += fmt::format(",\"faithful_runs\":{},\"not_faithful_runs\":{},"
                        "\"faithful_configurations\":{},\"faithful_median_abs_error_pct\":{},"
                        "\"faithful_max_abs_error_pct\":{}",
                        judged_ - static_cast<int>(disturbed_.size()), disturbed_.size(), f.size(),
                        number(Median(f)), number(fmax));
  }
  return tail;
}

std::string Tally::Text(int failures) const {
  const bool runs = repeat_ > 1;
  std::vector<std::pair<double, size_t>> outside;  // (signed median error, configuration)
  for (size_t i = 0; i < errors_.size(); ++i) {
    if (errors_[i].empty()) continue;
    const double m = Median(errors_[i]);
    if (std::fabs(m) > kErrorGoalPct) outside.emplace_back(m, i);
  }
  std::sort(outside.begin(), outside.end(),
            [](const auto& a, const auto& b) { return std::fabs(a.first) > std::fabs(b.first); });
  std::string summary;
  if (runs) {
    for (size_t r = 0; r < run_abs_.size(); ++r) {
      summary += fmt::format("validate: run {}: {} configurations, {}\n", r + 1, run_abs_[r].size(),
                             ErrorSummary(run_abs_[r]));
    }
  }
  // Configurations run more than `repeat` times (validate --repeat-spread), and their most runs.
  size_t extended = 0, most = 0;
  for (const std::vector<double>& m : measured_) {
    if (m.size() > static_cast<size_t>(repeat_)) ++extended;
    most = std::max(most, m.size());
  }
  const std::string added =
      extended == 0
          ? std::string()
          : fmt::format(" ({} of them up to {} runs: their live runs spread by more than 8%)",
                        extended, most);
  summary += fmt::format(
      "validate: {} configurations{}, {}{}\n", names_.size(),
      runs ? fmt::format(" x {} runs{}, per configuration the median of its runs", repeat_, added)
           : std::string(),
      ErrorSummary(AbsMedianErrors()),
      failures ? fmt::format(", {} failed", failures) : std::string());
  // The live system's own repeatability: configurations whose runs differ by more than the goal.
  if (runs) {
    std::vector<std::pair<double, size_t>> spread;
    for (size_t i = 0; i < measured_.size(); ++i) {
      const double s = LiveSpreadPct(measured_[i]);
      if (std::isfinite(s) && s > kErrorGoalPct) spread.emplace_back(s, i);
    }
    summary += fmt::format("validate: live runs that differ among themselves by more than 8% "
                           "((max - min) / median): {} of {} configurations{}\n",
                           spread.size(), names_.size(),
                           spread.empty() ? std::string() : "; no single prediction is within 8% of all their runs");
  }
  // Where to look first: the configurations outside the goal, worst first, with the network
  // model's error on the same runs' own traffic (near zero, the simulated schedule is what
  // differs; far from zero, the network model) and, on emulated hosts, the hand-offs the live
  // runs showed against the one charged (docs/validation.md, "What a hand-off is made of").
  for (const auto& [err, i] : outside) {
    const double s = LiveSpreadPct(measured_[i]);
    const std::string handoff =
        handoff_[i].empty() || !std::isfinite(charged_handoff_[i])
            ? std::string()
            : fmt::format("; its workers' hand-offs {:.1f} us live, {:.1f} charged",
                          Median(handoff_[i]), charged_handoff_[i]);
    const std::string cpu =
        cpu_ratio_[i].empty()
            ? std::string()
            : fmt::format("; its processes' CPU {:.2f}x what the simulator booked",
                          Median(cpu_ratio_[i]));
    summary += fmt::format(
        "validate: outside 8%: {:+.2f}% {} (config-{}){}{}{}{}{}\n", err, names_[i], i,
        net_errors_[i].empty()
            ? std::string()
            : fmt::format("; network model on its live traffic {:+.2f}%", Median(net_errors_[i])),
        std::isfinite(s) ? fmt::format("; its live runs spread {:.1f}%", s) : std::string(),
        handoff, cpu,
        not_faithful_[i] > 0 ? fmt::format("; {} of its runs not faithful", not_faithful_[i])
                             : std::string());
  }
  summary += FaithfulText();
  summary += CpuText();
  // Where the emulation itself loads the host: the errors by the job's own CPU.
  std::vector<double> job_cpu, abs_errors;
  for (size_t i = 0; i < errors_.size(); ++i) {
    if (errors_[i].empty()) continue;
    job_cpu.push_back(Median(job_cpu_[i]));
    abs_errors.push_back(std::fabs(Median(errors_[i])));
  }
  const std::string bands = JobCpuBreakdown(job_cpu, abs_errors);
  if (!bands.empty()) summary += "validate: " + bands + "\n";
  return summary;
}

std::string JobCpuBreakdown(const std::vector<double>& job_cpu_pct,
                            const std::vector<double>& abs_errors) {
  constexpr size_t kBands = std::size(kJobCpuBandsPct) + 1;
  std::vector<double> in[kBands];
  for (size_t i = 0; i < job_cpu_pct.size() && i < abs_errors.size(); ++i) {
    if (!std::isfinite(job_cpu_pct[i])) continue;
    size_t b = 0;
    while (b + 1 < kBands && job_cpu_pct[i] >= kJobCpuBandsPct[b]) ++b;
    in[b].push_back(abs_errors[i]);
  }
  std::string out;
  for (size_t b = 0; b < kBands; ++b) {
    if (in[b].empty()) continue;
    const std::string band =
        b == 0            ? fmt::format("below {:g}%", kJobCpuBandsPct[0])
        : b + 1 == kBands ? fmt::format("{:g}% and over", kJobCpuBandsPct[b - 1])
                          : fmt::format("{:g}-{:g}%", kJobCpuBandsPct[b - 1], kJobCpuBandsPct[b]);
    out += fmt::format("{}{}: {} configurations, {}", out.empty() ? "" : "; ", band, in[b].size(),
                       ErrorSummary(in[b]));
  }
  if (out.empty()) return out;
  return "by the job's own CPU (per configuration the median of its runs, % of the host's cores x "
         "wall time): " +
         out;
}

std::string Tally::CpuText() const {
  // Per configuration the median of its runs' ratios, then over the configurations.
  std::vector<double> ratios;
  size_t runs = 0;
  for (const std::vector<double>& r : cpu_ratio_) {
    if (r.empty()) continue;
    ratios.push_back(Median(r));
    runs += r.size();
  }
  if (ratios.empty()) return "";
  return fmt::format(
      "validate: the job's processes' CPU over the measured iterations, live against what the "
      "simulator's host model booked for them (the testbed's CPU keys on this host; "
      "docs/validation.md, \"The job's CPU against the bookings\"): {:.2f}x at the median of {} "
      "configurations ({} runs), from {:.2f}x to {:.2f}x\n",
      Median(ratios), ratios.size(), runs, *std::min_element(ratios.begin(), ratios.end()),
      *std::max_element(ratios.begin(), ratios.end()));
}

std::string Tally::FaithfulText() const {
  std::string out;
  if (not_recorded_ > 0) {
    out += fmt::format("validate: {} runs without a host record (run before validate sampled the "
                       "host): not judged faithful or not\n",
                       not_recorded_);
  }
  if (judged_ == 0) return out;
  const std::vector<double> f = AbsMedianFaithfulErrors();
  out += fmt::format("validate: faithful runs (docs/validation.md, \"Faithful runs\"): {} of {}; over "
                     "them, per configuration the median of its faithful runs: {} configurations, {}\n",
                     judged_ - static_cast<int>(disturbed_.size()), judged_, f.size(),
                     f.empty() ? std::string("no error to summarise") : ErrorSummary(f));
  for (const Disturbed& d : disturbed_) {
    out += fmt::format("validate: not faithful: run {} of config-{} ({}), error {:+.2f}%: {}\n", d.run,
                       d.config, names_[d.config], d.error_pct, d.why);
  }
  std::vector<std::string> without;
  for (size_t i = 0; i < names_.size(); ++i) {
    if (!errors_[i].empty() && faithful_errors_[i].empty() && not_faithful_[i] > 0) {
      without.push_back(fmt::format("config-{} ({})", i, names_[i]));
    }
  }
  if (!without.empty()) {
    std::string list;
    for (const std::string& w : without) list += (list.empty() ? "" : ", ") + w;
    out += fmt::format("validate: {} configurations without a faithful run, left out of the faithful "
                       "figures: {}\n",
                       without.size(), list);
  }
  if (rerun_ > 0) {
    out += fmt::format("validate: {} runs were disturbed and run again (--rerun-disturbed)\n", rerun_);
  }
  return out;
}

}  // namespace poseidon::validation
