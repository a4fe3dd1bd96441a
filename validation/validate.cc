#include "validation/validate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "config/job_config.h"
#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "core/trace.h"
#include "cost/jitter.h"
#include "real_runtime/launch.h"
#include "sim/simulation.h"
#include "sim/text_escape.h"
#include "validation/cpu_window.h"
#include "validation/host_load.h"
#include "validation/network_replay.h"
#include "validation/predict.h"
#include "validation/summary.h"
#include "validation/testbed_keys.h"
#include "validation/trace_pace.h"
#include "validation/trace_reader.h"

namespace poseidon::validation {
namespace {

using config::ConfigError;
using sim::CsvField;
namespace fs = std::filesystem;

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string YamlText(const YAML::Node& n) {
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  e << n;
  return e.c_str();
}

struct Config {
  std::string name;
  std::vector<std::pair<std::string, std::string>> values;  // for the CSV
  std::vector<std::string> overrides;                       // --set for this configuration
  config::ScenarioSpec scenario;                            // live
  config::ScenarioSpec sim_scenario;                        // with --sim-set on top
};

// `extra` (the testbed keys) go between the configuration's --set and the user's --sim-set.
config::ScenarioSpec WithSimOverrides(const std::string& file, std::vector<std::string> overrides,
                                      const ValidateOptions& o,
                                      const std::vector<std::string>& extra = {}) {
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  overrides.insert(overrides.end(), o.sim_overrides.begin(), o.sim_overrides.end());
  return config::LoadScenarioFile(file, overrides);
}

std::vector<Config> Configurations(const ValidateOptions& o, std::string* base_file,
                                   std::vector<std::string>* axes) {
  std::vector<Config> out;
  const YAML::Node doc = config::YamlFile::Load(o.input).root();
  if (doc.IsMap() && doc["vary"]) {
    const config::SweepSpec sw = config::LoadSweepFile(o.input);
    *base_file = sw.base_file;
    for (const config::SweepAxis& a : sw.axes) axes->push_back(a.path);
    for (const config::SweepPoint& p : sw.points) {
      Config c;
      c.values = p.values;
      c.overrides = o.overrides;
      for (size_t i = 0; i < p.values.size(); ++i) {
        const config::SweepAxis& a = sw.axes[i];
        if (!a.variant_names.empty()) {  // a bundle axis
          const auto it = std::find(a.variant_names.begin(), a.variant_names.end(), p.values[i].second);
          const auto& sets = a.variant_sets[static_cast<size_t>(it - a.variant_names.begin())];
          for (const auto& [path, value] : sets) c.overrides.push_back(path + "=" + YamlText(value));
        } else {
          c.overrides.push_back(a.path + "=" + p.values[i].second);
        }
      }
      c.scenario = config::LoadScenarioFile(sw.base_file, c.overrides);
      c.sim_scenario = WithSimOverrides(sw.base_file, c.overrides, o);
      c.name = c.scenario.name;
      for (const auto& [k, v] : p.values) c.name += fmt::format(" {}={}", k, v);
      out.push_back(std::move(c));
    }
  } else {
    *base_file = o.input;
    Config c;
    c.overrides = o.overrides;
    c.scenario = config::LoadScenarioFile(o.input, o.overrides);
    c.sim_scenario = WithSimOverrides(o.input, o.overrides, o);
    c.name = c.scenario.name;
    out.push_back(std::move(c));
  }
  return out;
}

// A figure for the JSON document: null when there is none.
std::string JsonNumber(double v) { return std::isfinite(v) ? fmt::format("{:.1f}", v) : "null"; }

std::string HostJson(const HostRecord& r) {
  return fmt::format("{{\"wall_s\":{:.3f},\"cores\":{},\"others_cpu_pct\":{:.2f},\"steal_pct\":{:.2f},"
                     "\"job_cpu_pct\":{:.2f},\"irq_pct\":{:.2f},\"run_queue_mean\":{:.2f},"
                     "\"run_queue_max\":{:g},\"job_processes_max\":{}}}",
                     r.wall_s, r.cores, r.others_pct, r.steal_pct, r.job_pct, r.irq_pct,
                     r.run_queue_mean, r.run_queue_max, r.job_processes_max);
}

// What a run of one configuration left: its workers' traces (for the pace) and every process's
// events (for the network replay).
struct LiveTraces {
  std::vector<std::vector<TraceRecord>> workers;
  std::vector<TraceRecord> all;
};

// Reads the run in `dir`; with `merge`, also writes DIR/live.json, one timeline of every process
// beside the simulated one (config-N/sim.json). Throws TraceError for a trace it cannot read.
LiveTraces ReadLive(const std::string& dir, const config::ScenarioSpec& s, bool merge) {
  LiveTraces t;
  if (!merge) {
    for (int w = 1; w <= s.workers; ++w) {
      t.workers.push_back(ReadTraceFile(fmt::format("{}/trace/rank-{}.json", dir, w)));
    }
    // (Without the merged timeline the network model has nothing to replay: NAN, as before.)
    if (fs::exists(dir + "/live.json")) t.all = ReadTraceFile(dir + "/live.json");
    return t;
  }
  std::vector<std::string> texts;
  for (int a = 0; a < 1 + s.workers + s.servers; ++a) {
    texts.push_back(ReadText(fmt::format("{}/trace/rank-{}.json", dir, a)));
  }
  std::string merged, merge_error;
  if (core::MergeChromeTraces(texts, &merged, &merge_error)) {
    std::ofstream(dir + "/live.json", std::ios::binary) << merged;
  }
  for (int a = 0; a < 1 + s.workers + s.servers; ++a) {
    std::vector<TraceRecord> events =
        ReadTrace(texts[static_cast<size_t>(a)], fmt::format("{}/trace/rank-{}.json", dir, a));
    if (a >= 1 && a <= s.workers) t.workers.push_back(events);
    t.all.insert(t.all.end(), std::make_move_iterator(events.begin()),
                 std::make_move_iterator(events.end()));
  }
  return t;
}

// The faithfulness rule's lateness clause for a run (host_load.h): its compute tasks' lateness
// against the simulated run's (`late`: none when its traces could not be read, and then no median:
// the pace says why), bounded by the wake-up the simulator charged. Emulated clusters only: over
// loopback (--loopback) the processes are not the hosts the simulator's host model describes, so
// the clause has no bound there.
ComputeLateness RunLateness(const std::optional<TaskLateness>& late,
                            const config::ScenarioSpec& sim, bool emulated) {
  ComputeLateness l;
  if (!emulated) return l;
  l.bound_us = sim.network.host_wakeup_ns / 1e3;
  if (l.bound_us <= 0 || !late) return l;
  l.median_us = late->median_us;
  return l;
}

// ReadLive, or nothing when the traces cannot be read (the caller reads them again for the error).
std::optional<LiveTraces> TryReadLive(const std::string& dir, const config::ScenarioSpec& s,
                                      bool merge) {
  try {
    return ReadLive(dir, s, merge);
  } catch (const TraceError&) {
    return std::nullopt;
  }
}

// Which testbed keys the simulator charges: the network files' (nothing to do), a file's or
// measured here (both replace each emulated configuration's CPU keys on the simulator's side).
struct TestbedKeysChoice {
  std::string file;  // "" for the network files' own
  TestbedKeys keys;
};

// Writes keys measured here to WORK_DIR/testbed_keys.yaml, which k->file then names.
void WriteMeasuredKeys(const ValidateOptions& o, TestbedKeysChoice* k) {
  k->file = o.work_dir + "/testbed_keys.yaml";
  std::ofstream out(k->file, std::ios::binary);
  WriteTestbedKeys(k->keys, out);
  if (!out) throw ConfigError(k->file + ": error: cannot write the measured testbed keys");
}

TestbedKeysChoice ChooseTestbedKeys(const ValidateOptions& o, std::vector<Config>* configs,
                                    const std::string& base_file) {
  TestbedKeysChoice k;
  if (o.testbed_keys == "files") return k;
  if (o.testbed_keys == "measure") {
    if (!o.emulate) {
      throw ConfigError("error: --testbed-keys measure needs the emulated cluster (the kernel's CPU "
                        "per byte is measured over its links); drop --loopback or give a file");
    }
    std::vector<double> rates;
    for (const Config& c : *configs) {
      if (c.sim_scenario.network.host_cores <= 0) continue;
      const double g = LinkGbps(c.sim_scenario.network);
      if (std::find(rates.begin(), rates.end(), g) == rates.end()) rates.push_back(g);
    }
    std::sort(rates.begin(), rates.end());
    fmt::print(stderr, "validate: measuring the testbed's keys on this host ({} rate{})\n",
               rates.size(), rates.size() == 1 ? "" : "s");
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) throw ConfigError("/proc/self/exe: error: cannot find this program: " + ec.message());
    k.keys = MeasureTestbedKeys(rates, o.netns_script, exe.string(), o.command,
                                [](const std::string& m) { fmt::print(stderr, "  {}\n", m); });
    WriteMeasuredKeys(o, &k);
    fmt::print(stderr, "validate: testbed keys measured, written to {}\n", k.file);
  } else if (o.testbed_keys == "latencies") {
    fmt::print(stderr, "validate: measuring the host's wake-up and hand-off latencies\n");
    k.keys = MeasureTestbedLatencies(o.command,
                                     [](const std::string& m) { fmt::print(stderr, "  {}\n", m); });
    WriteMeasuredKeys(o, &k);
    fmt::print(stderr, "validate: wake-up {:.1f} us, hand-off {:.1f} us, written to {}\n",
               k.keys.host_wakeup_us, k.keys.host_handoff_us, k.file);
    const auto w = k.keys.measurements.find("latency_warning");
    if (w != k.keys.measurements.end()) fmt::print(stderr, "validate: {}\n", w->second);
  } else {
    k.file = o.testbed_keys;
    k.keys = LoadTestbedKeys(k.file);
  }
  for (Config& c : *configs) {
    if (c.sim_scenario.network.host_cores <= 0) continue;
    c.sim_scenario = WithSimOverrides(base_file, c.overrides, o,
                                      TestbedKeyOverrides(k.keys, c.sim_scenario.network, k.file));
  }
  return k;
}

// The testbed keys each configuration was charged, grouped by network and rate.
class TestbedKeysTally {
 public:
  TestbedKeysTally(const std::vector<Config>& configs, const TestbedKeysChoice& choice) {
    for (const Config& c : configs) {
      TestbedKeysUsed u;
      if (!KeysUsed(c.sim_scenario, choice.file, choice.file.empty() ? nullptr : &choice.keys, &u)) {
        index_.push_back(-1);
        continue;
      }
      int found = -1;
      for (size_t e = 0; e < entries_.size(); ++e) {
        const TestbedKeysUsed& v = entries_[e].used;
        if (v.network == u.network && v.gbps == u.gbps && v.message_us == u.message_us &&
            v.ns_per_byte == u.ns_per_byte && v.kernel_ns_per_byte == u.kernel_ns_per_byte &&
            v.wakeup_us == u.wakeup_us && v.handoff_us == u.handoff_us) {
          found = static_cast<int>(e);
        }
      }
      if (found < 0) {
        found = static_cast<int>(entries_.size());
        entries_.push_back({std::move(u), {}, 0});
      }
      ++entries_[static_cast<size_t>(found)].configurations;
      index_.push_back(found);
    }
  }
  // A live run's workers' traces: its wake-ups and hand-offs, which it also returns (none when
  // the configuration's hosts are not emulated).
  HostLatencySamples AddRun(size_t config, const std::vector<std::vector<TraceRecord>>& workers,
                            int64_t warmup) {
    HostLatencySamples run;
    if (index_[config] < 0) return run;
    for (const auto& w : workers) AddHostLatencies(w, warmup, &run);
    HostLatencySamples& all = entries_[static_cast<size_t>(index_[config])].live;
    auto append = [](std::vector<double>& to, const std::vector<double>& from) {
      to.insert(to.end(), from.begin(), from.end());
    };
    append(all.wakeup_us, run.wakeup_us);
    append(all.handoff_us, run.handoff_us);
    append(all.wakeup_quiet_us, run.wakeup_quiet_us);
    append(all.handoff_quiet_us, run.handoff_quiet_us);
    return run;
  }
  const std::vector<TestbedKeysEntry>& entries() const { return entries_; }

 private:
  std::vector<TestbedKeysEntry> entries_;
  std::vector<int> index_;  // per configuration, its entry (-1: not an emulated host)
};

}  // namespace

std::vector<std::string> LiveOverrides(const std::vector<std::string>& overrides,
                                       const config::ScenarioSpec& s, int run) {
  std::vector<std::string> out = overrides;
  if (cost::ComputeJitter::Varies(cost::ComputeJitter::KindOf(s.jitter), s.jitter_cv)) {
    out.push_back(
        fmt::format("seed={}", s.seed + kLiveJitterSeedOffset + static_cast<uint64_t>(run)));
  }
  return out;
}

int RunValidate(const ValidateOptions& o) {
  if (o.repeat < 1) throw ConfigError(fmt::format("error: --repeat must be >= 1, got {}", o.repeat));
  if (o.run_missing && !o.reuse_live) {
    throw ConfigError(
        "error: --run-missing runs what --reuse-live finds no live run for: add "
        "--reuse-live (without it every run is live anyway)");
  }
  std::string base_file;
  std::vector<std::string> axes;
  std::vector<Config> configs = Configurations(o, &base_file, &axes);
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec) throw ConfigError(o.work_dir + ": error: cannot create the work folder: " + ec.message());
  const TestbedKeysChoice keys = ChooseTestbedKeys(o, &configs, base_file);
  const bool runs = o.repeat > 1;

  if (o.rerun_disturbed < 0) {
    throw ConfigError(fmt::format("error: --rerun-disturbed must be >= 0, got {}", o.rerun_disturbed));
  }
  if (o.repeat_spread != 0 && (o.repeat < 2 || o.repeat_spread <= o.repeat)) {
    throw ConfigError(fmt::format(
        "error: --repeat-spread {} needs --repeat 2 or more (a spread needs two runs) and a count "
        "above it (--repeat is {})",
        o.repeat_spread, o.repeat));
  }
  if (!(o.wait_quiet_s >= 0)) {
    throw ConfigError(fmt::format("error: --wait-quiet must be >= 0 seconds, got {}", o.wait_quiet_s));
  }
  if (o.sim_seeds < 1) {
    throw ConfigError(fmt::format("error: --sim-seeds must be >= 1, got {}", o.sim_seeds));
  }
  std::vector<Prediction> predictions;
  for (size_t i = 0; i < configs.size(); ++i) {
    predictions.push_back(Predict(configs[i].sim_scenario, configs[i].scenario, o.sim_seeds,
                                  fmt::format("{}/config-{}", o.work_dir, i)));
  }

  std::string csv = runs ? "run,index,name" : "index,name";
  for (const std::string& a : axes) csv += "," + CsvField(a);
  csv +=
      ",workers,measured_ms,measured_std_ms,predicted_ms,predicted_std_ms,error_pct,"
      "network_error_pct,faithful,lost_cpu_pct,others_cpu_pct,steal_pct,job_cpu_pct,irq_pct,"
      "run_queue_per_core,compute_late_us,cpu_ms,booked_cpu_ms,not_faithful_why\n";
  std::string json = "{\"configurations\":[";
  std::vector<std::string> names;
  for (const Config& c : configs) names.push_back(c.name);
  Tally tally(names, o.repeat);
  TestbedKeysTally testbed(configs, keys);
  int failures = 0;
  bool first_row = true;
  std::vector<size_t> round(configs.size());  // the configurations each round runs
  std::iota(round.begin(), round.end(), size_t{0});
  const int last_run = std::max(o.repeat, o.repeat_spread);
  for (int run = 1; run <= last_run; ++run) {
    if (run == o.repeat + 1) {
      // --repeat-spread: the configurations whose live runs still differ by more than the goal.
      round = tally.SpreadBeyondGoal();
      if (round.empty()) break;
      std::string list;
      for (size_t i : round) list += fmt::format("{}config-{}", list.empty() ? "" : ", ", i);
      fmt::print(stderr,
                 "validate: {} configurations whose live runs differ by more than 8% get runs {} "
                 "to {} (--repeat-spread): {}\n",
                 round.size(), run, last_run, list);
    }
    for (size_t i : round) {
      const Config& c = configs[i];
      const config::ScenarioSpec& s = c.scenario;
      const Pace& pred = predictions[i].pace;
      if (runs) {
        fmt::print(stderr, "validate run {}/{}, {}/{}: {}\n", run,
                   run <= o.repeat ? o.repeat : last_run, i + 1, configs.size(), c.name);
      } else {
        fmt::print(stderr, "validate {}/{}: {}\n", i + 1, configs.size(), c.name);
      }
      const std::string dir = runs ? fmt::format("{}/config-{}/run-{}", o.work_dir, i, run)
                                   : fmt::format("{}/config-{}", o.work_dir, i);
      int rc = 0;
      // What the live run was: its input and --set, recorded beside it, checked by --reuse-live.
      const std::vector<std::string> live_overrides = LiveOverrides(c.overrides, s, run);
      std::string recorded = "input: " + fs::absolute(o.input).lexically_normal().string() + "\n";
      for (const std::string& ov : live_overrides) recorded += "set: " + ov + "\n";
      std::string reuse_why;
      RunHost host;
      HostRecord record;
      bool recorded_host = false;
      // The run's traces, once read (for the lateness clause and then for the pace).
      std::optional<LiveTraces> traces;
      // Its compute tasks' lateness, read once from those traces (the rule's and the report's).
      std::optional<TaskLateness> late;
      const auto lateness = [&](const std::vector<TraceRecord>& all) {
        return LiveTaskLateness(predictions[i].tasks, all, config::BuildLayout(c.sim_scenario));
      };
      bool run_live = pred.ok && !o.reuse_live;
      if (!pred.ok) {
        rc = 2;  // the simulator could not run it: a live run would not be compared with anything
      } else if (o.reuse_live) {
        const std::string file = dir + "/live-run.txt";
        if (!fs::exists(file)) {
          rc = 2;
          reuse_why = fmt::format(
              "{}: no live run recorded here; run validate without --reuse-live "
              "first (same input, --set, --repeat and --work-dir), or add "
              "--run-missing",
              file);
        } else if (ReadText(file) != recorded) {
          rc = 2;
          reuse_why = fmt::format(
              "{}: the live run recorded here was of another configuration "
              "(input or --set differ); rerun it without --reuse-live, or add "
              "--run-missing",
              file);
        } else if (ParseHostRecordText(ReadText(dir + "/host.txt"), &record)) {
          traces = TryReadLive(dir, s, false);
          if (traces) late = lateness(traces->all);
          const Verdict v = Judge(record, RunLateness(late, c.sim_scenario, o.emulate));
          host.state = v.faithful ? RunHost::State::kFaithful : RunHost::State::kNotFaithful;
          host.why = v.why;
          host.job_cpu_pct = record.job_pct;
          recorded_host = true;
        }
        if (rc == 2 && o.run_missing) {
          fmt::print(stderr, "validate: {}: {}\n", c.name, reuse_why);
          fmt::print(stderr, "validate: running it live (--run-missing)\n");
          rc = 0;
          reuse_why.clear();
          run_live = true;
        }
      }
      if (run_live) {
        try {
          // Measured: live, compute replayed, the host sampled meanwhile.
          fs::create_directories(dir, ec);
          rt::LaunchOptions lo;
          lo.scenario_file = base_file;
          lo.overrides = live_overrides;
          lo.log_dir = dir;
          lo.emulate = o.emulate;
          lo.netns_script = o.netns_script;
          lo.node_args = {"--compute", "replay", "--no-test", "--trace-dir", dir + "/trace"};
          for (int attempt = 1;; ++attempt) {
            fs::remove_all(dir + "/trace", ec);
            fs::remove(dir + "/live-run.txt", ec);
            fs::remove(dir + "/host.txt", ec);
            fs::remove(dir + "/live.json", ec);  // an earlier attempt's: never judged or read again
            if (o.wait_quiet_s > 0) {
              const QuietWait w = WaitForQuietHost(o.wait_quiet_s);
              if (!w.quiet) {
                fmt::print(stderr,
                           "validate: the host is still busy after {:.0f} s ({:.1f}% of its CPUs "
                           "used or stolen, bound {:g}%); running anyway\n",
                           w.waited_s, w.busy_pct, kMaxLostPct);
              } else if (w.waited_s > 1.5) {
                fmt::print(stderr, "validate: the host was quiet after {:.0f} s\n", w.waited_s);
              }
            }
            HostSampler sampler;
            rc = rt::RunLaunch(lo);
            const std::vector<HostSample> samples = sampler.Stop();
            if (rc == 130) {
              fmt::print(stderr, "validate: interrupted\n");
              return 130;
            }
            record = RecordFromSamples(samples, TicksPerSecond());
            recorded_host = true;
            std::ofstream(dir + "/host.txt", std::ios::binary) << HostRecordText(record);
            // The run just made: its processes' traces are merged into DIR/live.json and read
            // once, for the clause and, once judged, for its pace.
            traces = rc == 0 ? TryReadLive(dir, s, true) : std::nullopt;
            late = traces ? std::optional(lateness(traces->all)) : std::nullopt;
            const Verdict v = Judge(
                record, rc == 0 ? RunLateness(late, c.sim_scenario, o.emulate) : ComputeLateness{});
            host.state = v.faithful ? RunHost::State::kFaithful : RunHost::State::kNotFaithful;
            host.why = v.why;
            host.job_cpu_pct = record.job_pct;
            host.attempts = attempt;
            if (rc != 0 || v.faithful) break;
            if (!RunAgain(v, attempt, o.rerun_disturbed)) {
              if (!v.rerun_may_help && attempt <= o.rerun_disturbed) {
                fmt::print(stderr, "validate: not a faithful run, not run again: {}\n", v.why);
              }
              break;
            }
            fmt::print(stderr, "validate: not a faithful run, running it again ({} of {}): {}\n",
                       attempt, o.rerun_disturbed, v.why);
          }
          if (rc == 0) std::ofstream(dir + "/live-run.txt", std::ios::binary) << recorded;
        } catch (const ConfigError& e) {
          // One configuration that cannot run does not stop the others.
          fmt::print(stderr, "validate: {}: {}\n", c.name, e.what());
          rc = 2;
        }
      }
      Pace meas{false, !pred.ok            ? pred.why
                       : !reuse_why.empty() ? reuse_why
                                            : fmt::format("the live run failed (exit code {}); see {}", rc, dir)};
      LiveTraces live;
      if (rc == 0) {
        try {
          live = traces ? std::move(*traces) : ReadLive(dir, s, run_live);
          meas = IterationPaceFromTraces(live.workers, s.workers, s.warmup_iterations, s.iterations,
                                         s.consistency == "bsp");
          // The job's processes' CPU over the span the pace is measured on, beside the bookings.
          host.cpu_ms = CpuMsPerIteration(live.all, meas, s.iterations - s.warmup_iterations);
          if (std::isfinite(host.cpu_ms)) host.booked_cpu_ms = predictions[i].booked_cpu_ms;
          const HostLatencySamples lat = testbed.AddRun(i, live.workers, s.warmup_iterations);
          if (!lat.handoff_us.empty() && c.sim_scenario.network.host_handoff_ns > 0) {
            host.handoff_us = std::accumulate(lat.handoff_us.begin(), lat.handoff_us.end(), 0.0) /
                              static_cast<double>(lat.handoff_us.size());
            host.charged_handoff_us = c.sim_scenario.network.host_handoff_ns / 1e3;
          }
        } catch (const TraceError& e) {
          meas = Pace{false, e.what()};
        }
      }
      std::string err_text, net_text, late_text;
      if (meas.ok && pred.ok) {
        const double err = 100.0 * (pred.mean_ms - meas.mean_ms) / meas.mean_ms;
        err_text = fmt::format("{:.2f}", err);
        const double net = NetworkReplayError(c.sim_scenario, live.all, dir);
        if (std::isfinite(net)) net_text = fmt::format("{:.2f}", net);
        if (!late) late = lateness(live.all);
        if (std::isfinite(late->median_us)) late_text = fmt::format("{:.1f}", late->median_us);
        tally.Add(i, run, err, meas.mean_ms, net, host);
      } else {
        ++failures;
        fmt::print(stderr, "validate: {}: {}\n", c.name, !meas.ok ? meas.why : pred.why);
      }
      csv += runs ? fmt::format("{},{},{}", run, i, CsvField(s.name)) : fmt::format("{},{}", i, CsvField(s.name));
      for (const auto& [k, v] : c.values) csv += "," + CsvField(v);
      const bool judged = recorded_host && rc == 0;
      const std::string faithful_text =
          !judged ? "" : host.state == RunHost::State::kFaithful ? "yes" : "no";
      const std::string host_csv =
          !judged ? ",,,,,,"
                  : fmt::format(",{:.2f},{:.2f},{:.2f},{:.2f},{:.2f},{:.2f}",
                                record.others_pct + record.steal_pct, record.others_pct,
                                record.steal_pct, record.job_pct, record.irq_pct,
                                record.cores > 0 ? record.run_queue_mean / record.cores : 0.0);
      const auto ms_text = [](double v) {
        return std::isfinite(v) ? fmt::format("{:.3f}", v) : std::string();
      };
      const auto ms_json = [](double v) {
        return std::isfinite(v) ? fmt::format("{:.3f}", v) : std::string("null");
      };
      csv += fmt::format(",{},{:.3f},{:.3f},{:.3f},{:.3f},{},{},{}{},{},{},{},{}\n", s.workers,
                         meas.mean_ms, meas.std_ms, pred.mean_ms, pred.std_ms, err_text, net_text,
                         faithful_text, host_csv, late_text, ms_text(host.cpu_ms),
                         ms_text(host.booked_cpu_ms), CsvField(judged ? host.why : ""));
      json += fmt::format(
          "{}{{{}\"index\":{},\"name\":\"{}\",\"workers\":{},\"measured_ms\":{:.3f},"
          "\"measured_std_ms\":{:.3f},\"predicted_ms\":{:.3f},\"predicted_std_ms\":{:.3f},"
          "\"error_pct\":{},\"network_error_pct\":{},\"faithful\":{},\"host\":{},"
          "\"compute_late_us\":{},\"handoff_us\":{},\"charged_handoff_us\":{},"
          "\"cpu_ms\":{},\"booked_cpu_ms\":{},\"not_faithful_why\":\"{}\"}}",
          first_row ? "" : ",", runs ? fmt::format("\"run\":{},", run) : "", i, s.name, s.workers,
          meas.mean_ms, meas.std_ms, pred.mean_ms, pred.std_ms,
          err_text.empty() ? "null" : err_text, net_text.empty() ? "null" : net_text,
          !judged                  ? "null"
          : faithful_text == "yes" ? "true"
                                   : "false",
          !judged ? std::string("null") : HostJson(record), late_text.empty() ? "null" : late_text,
          JsonNumber(host.handoff_us), JsonNumber(host.charged_handoff_us), ms_json(host.cpu_ms),
          ms_json(host.booked_cpu_ms), judged ? host.why : "");
      first_row = false;
      fmt::print(stderr,
                 "  measured {:.3f} ms (std {:.3f}), predicted {:.3f} ms: error {}%; network model "
                 "on the live traffic: {}%\n",
                 meas.mean_ms, meas.std_ms, pred.mean_ms, err_text.empty() ? "n/a" : err_text,
                 net_text.empty() ? "n/a" : net_text);
      if (pred.ok && o.sim_seeds > 1) {
        const std::vector<double>& m = predictions[i].seed_means_ms;
        fmt::print(
            stderr,
            "  predicted with {} seeds: the median run's (seed {}), of {:.3f} to {:.3f} ms\n",
            m.size(), predictions[i].seed, *std::min_element(m.begin(), m.end()),
            *std::max_element(m.begin(), m.end()));
      }
      if (judged) {
        fmt::print(
            stderr,
            "  host: others {:.1f}%, steal {:.1f}%, the job {:.1f}%, interrupts {:.1f}% of {} "
            "cores; {:.1f} ready to run per core; compute {} us late (median{}){}{}: {}\n",
            record.others_pct, record.steal_pct, record.job_pct, record.irq_pct, record.cores,
            record.cores > 0 ? record.run_queue_mean / record.cores : 0.0,
            late_text.empty() ? "n/a" : late_text,
            late_text.empty() || late->latest_host.empty()
                ? std::string()
                : fmt::format("; the latest host, {}, {:.1f}", late->latest_host,
                              late->latest_host_us),
            std::isfinite(host.handoff_us) ? fmt::format("; hand-offs {:.1f} us (charged {:.1f})",
                                                         host.handoff_us, host.charged_handoff_us)
                                           : std::string(),
            std::isfinite(host.cpu_ms) && std::isfinite(host.booked_cpu_ms)
                ? fmt::format("; process CPU {:.2f} ms per iteration (booked {:.2f})", host.cpu_ms,
                              host.booked_cpu_ms)
                : std::string(),
            host.state == RunHost::State::kFaithful ? "faithful" : "not faithful: " + host.why);
      }
    }
  }
  const HostIdentity here = ThisHost();
  json += "]," + tally.JsonTail(failures) + ",\"testbed_keys\":" +
          TestbedKeysJson(testbed.entries(), here) + "}\n";
  const std::string summary = tally.Text(failures) + TestbedKeysText(testbed.entries(), here);
  if (o.csv.empty()) {
    std::cout << csv;
  } else {
    std::ofstream(o.csv, std::ios::binary) << csv;
  }
  if (!o.json.empty()) std::ofstream(o.json, std::ios::binary) << json;
  std::cerr << summary;
  return failures ? 1 : 0;
}

}  // namespace poseidon::validation
