#include "apps/poseidon/validate_command.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "config/job_config.h"
#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "core/trace.h"
#include "real_runtime/launch.h"
#include "sim/simulation.h"

namespace poseidon::app {
namespace {

using config::ConfigError;
using sim::TimeNs;
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

config::ScenarioSpec WithSimOverrides(const std::string& file, std::vector<std::string> overrides,
                                      const ValidateOptions& o) {
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

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

}  // namespace

Pace IterationPaceFromTraces(const std::vector<std::string>& traces, int num_workers,
                             int64_t warmup, int64_t iterations, bool own_pace) {
  Pace p;
  // begin[w]: worker w's first iteration begin; ended[w][c]: when it ended iteration c
  // (core/worker.cc: at the first forward task of iteration c+1, or, for the last, once it holds
  // every layer's final values); synced[w][layer][c]: when that layer of w first held clock c.
  static const std::regex kEvent(
      "\"name\":\"(iteration end ([0-9]+)|iteration 0|synced [^\"]+)\",\"cat\":\"protocol\","
      "\"pid\":[0-9]+,\"tid\":([0-9]+),\"ts\":([0-9.]+),\"args\":\\{\"clock\":([0-9]+)");
  std::map<int, double> begin;
  std::map<int, std::map<int64_t, double>> ended;
  std::map<int, std::map<std::string, std::map<int64_t, double>>> synced;
  for (const std::string& t : traces) {
    for (auto it = std::sregex_iterator(t.begin(), t.end(), kEvent); it != std::sregex_iterator();
         ++it) {
      const std::string name = (*it)[1];
      const int actor = std::stoi((*it)[3]) / 8;
      const double ts_ms = std::stod((*it)[4]) / 1e3;
      const int64_t clock = std::stoll((*it)[5]);
      if (name == "iteration 0") {
        if (!begin.count(actor)) begin[actor] = ts_ms;
      } else if ((*it)[2].matched) {
        ended[actor].emplace(std::stoll((*it)[2]), ts_ms);
      } else {
        synced[actor][name].emplace(clock, ts_ms);
      }
    }
  }
  if (static_cast<int>(begin.size()) != num_workers) {
    p.why = fmt::format("traces hold the first iteration of {} of {} workers", begin.size(),
                        num_workers);
    return p;
  }
  auto T = [&](int w, int64_t v, double* out) {
    if (v == 0) {
      *out = begin[w];
      return true;
    }
    if (own_pace || synced[w].empty()) {
      auto it = ended[w].find(v - 1);
      if (it == ended[w].end()) return false;
      *out = it->second;
      return true;
    }
    double t = 0;
    for (const auto& [layer, clocks] : synced[w]) {
      // The first event at or past clock v-1 (a version may jump over a clock).
      auto it = clocks.lower_bound(v - 1);
      if (it == clocks.end()) return false;
      t = std::max(t, it->second);
    }
    *out = t;
    return true;
  };
  double span_begin = -1e300, span_end = -1e300;
  std::vector<double> samples;
  for (const auto& [w, b] : begin) {
    double t0 = 0, t1 = 0;
    if (!T(w, warmup, &t0) || !T(w, iterations, &t1)) {
      p.why = fmt::format("worker actor {} has no {} of iteration {}", w,
                          own_pace ? "end" : "sync", iterations - 1);
      return p;
    }
    span_begin = std::max(span_begin, t0);
    span_end = std::max(span_end, t1);
    for (int64_t c = warmup; c < iterations; ++c) {
      double a = 0, z = 0;
      if (T(w, c, &a) && T(w, c + 1, &z)) samples.push_back(z - a);
    }
  }
  const double n = static_cast<double>(iterations - warmup);
  p.mean_ms = (span_end - span_begin) / n;
  double mean = 0, var = 0;
  for (double s : samples) mean += s;
  mean /= static_cast<double>(samples.size());
  for (double s : samples) var += (s - mean) * (s - mean);
  p.std_ms = std::sqrt(var / static_cast<double>(samples.size()));
  p.ok = true;
  return p;
}

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

double LiveSpreadPct(const std::vector<double>& measured_ms) {
  if (measured_ms.size() < 2) return NAN;
  const auto [lo, hi] = std::minmax_element(measured_ms.begin(), measured_ms.end());
  return 100.0 * (*hi - *lo) / Median(measured_ms);
}

namespace {

// The network messages of a merged live trace between actors on different machines: when each
// was sent and delivered (ns, from the first send), by whom, to whom, its payload and clock.
struct LiveMessage {
  sim::SimJob::ReplayMessage sent;
  TimeNs delivered = 0;
  int64_t clock = 0;
};

std::vector<LiveMessage> LiveMessagesFromTrace(const std::string& trace,
                                               const core::JobLayout& layout) {
  static const std::regex kMessage(
      "\"ph\":\"X\",\"name\":\"[^\"]* -> (worker|shard|coordinator) ?([0-9]*)\","
      "\"cat\":\"network\",\"pid\":[0-9]+,\"tid\":([0-9]+),\"ts\":(-?[0-9.]+),"
      "\"dur\":([0-9.]+),\"args\":\\{\"clock\":(-?[0-9]+)(,\"bytes\":([0-9]+))?");
  std::vector<LiveMessage> out;
  for (auto it = std::sregex_iterator(trace.begin(), trace.end(), kMessage);
       it != std::sregex_iterator(); ++it) {
    LiveMessage m;
    try {
      const std::string kind = (*it)[1];
      const int index = (*it)[2].length() ? std::stoi((*it)[2]) : 0;
      const core::ActorId from = std::stoi((*it)[3]) / 8;
      if (from >= layout.num_actors() || index < 0) continue;
      const core::ActorId to =
          kind == "coordinator" ? core::JobLayout::coordinator()
          : kind == "worker"    ? (index < layout.num_workers ? layout.worker(index) : -1)
                                : (index < layout.num_servers ? layout.server(index) : -1);
      if (to < 0 || layout.SameMachine(from, to)) continue;
      m.sent.sent = std::llround(std::stod((*it)[4]) * 1e3);
      m.delivered = m.sent.sent + std::llround(std::stod((*it)[5]) * 1e3);
      m.sent.from = from;
      m.sent.to = to;
      m.sent.payload_bytes = (*it)[8].length() ? std::stoll((*it)[8]) : 0;
      m.clock = std::stoll((*it)[6]);
    } catch (const std::exception&) {
      continue;  // a number out of range: not one of the runtime's events
    }
    out.push_back(m);
  }
  // In send order (a connection's messages: then in delivery order, which is theirs).
  std::stable_sort(out.begin(), out.end(), [](const LiveMessage& a, const LiveMessage& b) {
    return a.sent.sent != b.sent.sent ? a.sent.sent < b.sent.sent : a.delivered < b.delivered;
  });
  const TimeNs t0 = out.empty() ? 0 : out.front().sent.sent;
  for (LiveMessage& m : out) {
    m.sent.sent -= t0;
    m.delivered -= t0;
  }
  return out;
}

// The scenario's network model on the live run's own traffic (sim::ReplayNetwork): each message
// sent when it was live; the error is that of the messages' summed time in flight, over those
// of clocks >= warmup. Writes every message to dir/net-replay.csv. NAN if there is none.
double NetworkReplayError(const config::ScenarioSpec& sim_scenario, const std::string& live_trace,
                          const std::string& dir) {
  const core::JobLayout layout =
      config::BuildLayout(sim_scenario);
  const std::vector<LiveMessage> live = LiveMessagesFromTrace(live_trace, layout);
  std::vector<sim::SimJob::ReplayMessage> sent;
  for (const LiveMessage& m : live) sent.push_back(m.sent);
  const std::vector<TimeNs> model = sim::ReplayNetwork(sim_scenario, sent);
  std::string csv = "sent_us,from,to,bytes,clock,live_us,model_us\n";
  double live_sum = 0, model_sum = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    const LiveMessage& m = live[i];
    if (model[i] < 0) continue;  // not delivered (cannot happen without drop_message)
    const double l = static_cast<double>(m.delivered - m.sent.sent) / 1e3;
    const double p = static_cast<double>(model[i] - m.sent.sent) / 1e3;
    csv += fmt::format("{:.3f},{},{},{},{},{:.3f},{:.3f}\n", static_cast<double>(m.sent.sent) / 1e3,
                       layout.ActorName(m.sent.from), layout.ActorName(m.sent.to),
                       m.sent.payload_bytes, m.clock, l, p);
    if (m.clock >= sim_scenario.warmup_iterations) {
      live_sum += l;
      model_sum += p;
    }
  }
  std::ofstream(dir + "/net-replay.csv", std::ios::binary) << csv;
  return live_sum > 0 ? 100.0 * (model_sum - live_sum) / live_sum : NAN;
}

// "N configurations, median |error| X%, max |error| Y%, K outside 8%" over absolute errors.
std::string ErrorSummary(const std::vector<double>& abs_errors) {
  const double max = abs_errors.empty() ? NAN : *std::max_element(abs_errors.begin(), abs_errors.end());
  const auto outside = std::count_if(abs_errors.begin(), abs_errors.end(), [](double e) { return e > 8; });
  return fmt::format("median |error| {:.2f}%, max |error| {:.2f}%, {} outside 8%", Median(abs_errors),
                     max, outside);
}

}  // namespace

int RunValidate(const ValidateOptions& o) {
  if (o.repeat < 1) throw ConfigError(fmt::format("error: --repeat must be >= 1, got {}", o.repeat));
  std::string base_file;
  std::vector<std::string> axes;
  const std::vector<Config> configs = Configurations(o, &base_file, &axes);
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec) throw ConfigError(o.work_dir + ": error: cannot create the work folder: " + ec.message());
  const bool runs = o.repeat > 1;

  // Predicted: the simulator's own trace, measured the same way as the live ones.
  std::vector<Pace> predicted(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    const config::ScenarioSpec& s = configs[i].scenario;
    sim::SimOptions so;
    so.baseline = false;
    so.record_trace = true;
    try {
      const sim::ScenarioResult r = sim::SimulateScenario(configs[i].sim_scenario, so);
      predicted[i] = IterationPaceFromTraces({r.chrome_trace}, s.workers, s.warmup_iterations,
                                             s.iterations, s.consistency != "bsp");
      const std::string dir = fmt::format("{}/config-{}", o.work_dir, i);
      fs::create_directories(dir, ec);
      std::ofstream(dir + "/sim.json", std::ios::binary) << r.chrome_trace;
    } catch (const ConfigError& e) {
      predicted[i] = Pace{false, e.what()};
    }
  }

  std::string csv = runs ? "run,index,name" : "index,name";
  for (const std::string& a : axes) csv += "," + CsvField(a);
  csv += ",workers,measured_ms,measured_std_ms,predicted_ms,predicted_std_ms,error_pct,"
         "network_error_pct\n";
  std::string json = "{\"configurations\":[";
  // errors[i]: the signed errors of configuration i, one per run that succeeded.
  std::vector<std::vector<double>> errors(configs.size());
  std::vector<std::vector<double>> net_errors(configs.size());  // network model, live traffic
  std::vector<std::vector<double>> measured(configs.size());    // live iteration times, per run
  std::vector<std::vector<double>> run_abs(static_cast<size_t>(o.repeat));
  int failures = 0;
  bool first_row = true;
  for (int run = 1; run <= o.repeat; ++run) {
    for (size_t i = 0; i < configs.size(); ++i) {
      const Config& c = configs[i];
      const config::ScenarioSpec& s = c.scenario;
      const Pace& pred = predicted[i];
      if (runs) {
        fmt::print(stderr, "validate run {}/{}, {}/{}: {}\n", run, o.repeat, i + 1, configs.size(), c.name);
      } else {
        fmt::print(stderr, "validate {}/{}: {}\n", i + 1, configs.size(), c.name);
      }
      const std::string dir = runs ? fmt::format("{}/config-{}/run-{}", o.work_dir, i, run)
                                   : fmt::format("{}/config-{}", o.work_dir, i);
      int rc = 0;
      // What the live run was: its input and --set, recorded beside it, checked by --reuse-live.
      std::string recorded = "input: " + fs::absolute(o.input).lexically_normal().string() + "\n";
      for (const std::string& ov : c.overrides) recorded += "set: " + ov + "\n";
      std::string reuse_why;
      if (!pred.ok) {
        rc = 2;  // the simulator could not run it: a live run would not be compared with anything
      } else if (o.reuse_live) {
        const std::string file = dir + "/live-run.txt";
        if (!fs::exists(file)) {
          rc = 2;
          reuse_why = fmt::format("{}: no live run recorded here; run validate without --reuse-live "
                                  "first (same input, --set, --repeat and --work-dir)", file);
        } else if (ReadText(file) != recorded) {
          rc = 2;
          reuse_why = fmt::format("{}: the live run recorded here was of another configuration "
                                  "(input or --set differ); rerun it without --reuse-live", file);
        }
      } else {
        try {
          // Measured: live, compute replayed.
          fs::create_directories(dir, ec);
          fs::remove_all(dir + "/trace", ec);
          rt::LaunchOptions lo;
          lo.scenario_file = base_file;
          lo.overrides = c.overrides;
          lo.log_dir = dir;
          lo.emulate = o.emulate;
          lo.netns_script = o.netns_script;
          lo.node_args = {"--compute", "replay", "--no-test", "--trace-dir", dir + "/trace"};
          fs::remove(dir + "/live-run.txt", ec);
          rc = rt::RunLaunch(lo);
          if (rc == 130) {
            fmt::print(stderr, "validate: interrupted\n");
            return 130;
          }
          if (rc == 0) std::ofstream(dir + "/live-run.txt", std::ios::binary) << recorded;
        } catch (const ConfigError& e) {
          // One configuration that cannot run does not stop the others.
          fmt::print(stderr, "validate: {}: {}\n", c.name, e.what());
          rc = 2;
        }
      }
      std::vector<std::string> traces, all;
      for (int w = 1; rc == 0 && w <= s.workers; ++w) {
        traces.push_back(ReadText(fmt::format("{}/trace/rank-{}.json", dir, w)));
      }
      // One live timeline beside the simulated one (dir/live.json, config-N/sim.json).
      for (int a = 0; rc == 0 && !o.reuse_live && a < 1 + s.workers + s.servers; ++a) {
        all.push_back(ReadText(fmt::format("{}/trace/rank-{}.json", dir, a)));
      }
      std::string merged, merge_error;
      if (rc == 0 && !o.reuse_live && core::MergeChromeTraces(all, &merged, &merge_error)) {
        std::ofstream(dir + "/live.json", std::ios::binary) << merged;
      }
      const Pace meas =
          rc == 0 ? IterationPaceFromTraces(traces, s.workers, s.warmup_iterations, s.iterations,
                                            s.consistency != "bsp")
                  : Pace{false, !pred.ok            ? pred.why
                                : !reuse_why.empty() ? reuse_why
                                                     : fmt::format("the live run failed (exit code {}); see {}", rc, dir)};
      std::string err_text, net_text;
      if (meas.ok && pred.ok) {
        const double err = 100.0 * (pred.mean_ms - meas.mean_ms) / meas.mean_ms;
        errors[i].push_back(err);
        measured[i].push_back(meas.mean_ms);
        run_abs[static_cast<size_t>(run - 1)].push_back(std::fabs(err));
        err_text = fmt::format("{:.2f}", err);
        const double net = NetworkReplayError(c.sim_scenario, ReadText(dir + "/live.json"), dir);
        if (std::isfinite(net)) {
          net_text = fmt::format("{:.2f}", net);
          net_errors[i].push_back(net);
        }
      } else {
        ++failures;
        fmt::print(stderr, "validate: {}: {}\n", c.name, !meas.ok ? meas.why : pred.why);
      }
      csv += runs ? fmt::format("{},{},{}", run, i, CsvField(s.name)) : fmt::format("{},{}", i, CsvField(s.name));
      for (const auto& [k, v] : c.values) csv += "," + CsvField(v);
      csv += fmt::format(",{},{:.3f},{:.3f},{:.3f},{:.3f},{},{}\n", s.workers, meas.mean_ms,
                         meas.std_ms, pred.mean_ms, pred.std_ms, err_text, net_text);
      json += fmt::format("{}{{{}\"index\":{},\"name\":\"{}\",\"workers\":{},\"measured_ms\":{:.3f},"
                          "\"measured_std_ms\":{:.3f},\"predicted_ms\":{:.3f},\"predicted_std_ms\":{:.3f},"
                          "\"error_pct\":{},\"network_error_pct\":{}}}",
                          first_row ? "" : ",", runs ? fmt::format("\"run\":{},", run) : "", i, s.name,
                          s.workers, meas.mean_ms, meas.std_ms, pred.mean_ms, pred.std_ms,
                          err_text.empty() ? "null" : err_text, net_text.empty() ? "null" : net_text);
      first_row = false;
      fmt::print(stderr,
                 "  measured {:.3f} ms (std {:.3f}), predicted {:.3f} ms: error {}%; network model "
                 "on the live traffic: {}%\n",
                 meas.mean_ms, meas.std_ms, pred.mean_ms, err_text.empty() ? "n/a" : err_text,
                 net_text.empty() ? "n/a" : net_text);
    }
  }
  // Per configuration, the median of its runs (the one error when there is one run).
  std::vector<double> abs_errors;
  std::vector<std::pair<double, size_t>> outside;  // (signed median error, configuration)
  for (size_t i = 0; i < errors.size(); ++i) {
    if (errors[i].empty()) continue;
    const double m = Median(errors[i]);
    abs_errors.push_back(std::fabs(m));
    if (std::fabs(m) > 8) outside.emplace_back(m, i);
  }
  std::sort(outside.begin(), outside.end(),
            [](const auto& a, const auto& b) { return std::fabs(a.first) > std::fabs(b.first); });
  const double median = Median(abs_errors);
  const double max = abs_errors.empty() ? NAN : *std::max_element(abs_errors.begin(), abs_errors.end());
  json += fmt::format("],\"runs\":{},\"median_abs_error_pct\":{:.3f},\"max_abs_error_pct\":{:.3f},"
                      "\"failed\":{}}}\n",
                      o.repeat, median, max, failures);
  std::string summary;
  if (runs) {
    for (size_t r = 0; r < run_abs.size(); ++r) {
      summary += fmt::format("validate: run {}: {} configurations, {}\n", r + 1, run_abs[r].size(),
                             ErrorSummary(run_abs[r]));
    }
  }
  summary += fmt::format("validate: {} configurations{}, {}{}\n", configs.size(),
                         runs ? fmt::format(" x {} runs, per configuration the median of its runs", o.repeat)
                              : std::string(),
                         ErrorSummary(abs_errors),
                         failures ? fmt::format(", {} failed", failures) : std::string());
  // The live system's own repeatability: configurations whose runs differ by more than the goal.
  if (runs) {
    std::vector<std::pair<double, size_t>> spread;
    for (size_t i = 0; i < measured.size(); ++i) {
      const double s = LiveSpreadPct(measured[i]);
      if (std::isfinite(s) && s > 8) spread.emplace_back(s, i);
    }
    summary += fmt::format("validate: live runs that differ among themselves by more than 8% "
                           "((max - min) / median): {} of {} configurations{}\n",
                           spread.size(), configs.size(),
                           spread.empty() ? std::string() : "; no single prediction is within 8% of all their runs");
  }
  // Where to look first: the configurations outside the goal, worst first.
  // With the network model's error on the same runs' own traffic: near zero, the simulated
  // schedule is what differs; far from zero, the network model.
  for (const auto& [err, i] : outside) {
    const double s = LiveSpreadPct(measured[i]);
    summary += fmt::format("validate: outside 8%: {:+.2f}% {} (config-{}){}{}\n", err, configs[i].name, i,
                           net_errors[i].empty()
                               ? std::string()
                               : fmt::format("; network model on its live traffic {:+.2f}%",
                                             Median(net_errors[i])),
                           std::isfinite(s) ? fmt::format("; its live runs spread {:.1f}%", s) : std::string());
  }
  if (o.csv.empty()) {
    std::cout << csv;
  } else {
    std::ofstream(o.csv, std::ios::binary) << csv;
  }
  if (!o.json.empty()) std::ofstream(o.json, std::ios::binary) << json;
  std::cerr << summary;
  return failures ? 1 : 0;
}

}  // namespace poseidon::app
