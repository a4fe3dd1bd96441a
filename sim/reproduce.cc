#include "sim/reproduce.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "sim/parallel.h"
#include "sim/text_escape.h"

namespace poseidon::sim {

namespace {

namespace fs = std::filesystem;
using config::ConfigError;

// As config's FindData looks a model name up: models/NAME.yaml in the scenario's folder or one
// above it, then the built-in data folder.
bool ModelExists(const std::string& scenario, const std::string& model) {
  std::error_code ec;
  fs::path dir = fs::absolute(fs::path(scenario), ec).parent_path();
  for (int depth = 0; depth < 8 && !dir.empty(); ++depth) {
    if (fs::is_regular_file(dir / "models" / (model + ".yaml"), ec)) return true;
    if (dir == dir.parent_path()) break;
    dir = dir.parent_path();
  }
  return fs::is_regular_file(fs::path(config::DefaultDataDir()) / "models" / (model + ".yaml"),
                             ec);
}


// The series of a row: (file, setup, model, precision, batch_per_gpu, variant).
using SeriesKey = std::tuple<std::string, std::string, std::string, std::string, int64_t,
                             std::string>;
SeriesKey KeyOf(const MeasurementRow& m) {
  return {m.file, m.setup, m.model, m.precision, m.batch_per_gpu, m.variant};
}

std::string Exact(double v) { return fmt::format("{:.17g}", v); }

// The row's keys without the compute scale.
std::vector<std::string> RowOverrides(const MeasurementRow& m, bool with_precision) {
  std::vector<std::string> o = {
      fmt::format("cluster.machines={}", m.machines),
      fmt::format("cluster.devices_per_machine={}", m.gpus_per_machine),
      "model=" + m.model,
      fmt::format("batch_per_worker={}", m.batch_per_gpu),
  };
  if (with_precision) o.push_back("cluster.precision=" + m.precision);
  bool known = false;
  const std::vector<std::string> sys =
      SystemOverrides(m.system, m.gpus_per_machine, m.transport, &known);
  o.insert(o.end(), sys.begin(), sys.end());
  const bool ps = m.system == "tf_ps" || m.system == "tf_ps_vars_cpu" || m.system == "caffe_ps" ||
                  config::IsCalibrationSystem(m.system);
  if (m.servers > 0 && ps) o.push_back(fmt::format("cluster.servers={}", m.servers));
  // How the benchmark's own code configured the system (the setup's matching `settings`).
  o.insert(o.end(), m.setting_keys.begin(), m.setting_keys.end());
  return o;
}

struct Prepared {
  bool ok = false;
  std::string reason;
  std::vector<std::string> keys;  // row keys (with precision where it loads)
};

// Loads the row's scenario once to find out whether it runs, and with which keys.
Prepared Prepare(const MeasurementRow& m, const std::vector<std::string>& user) {
  Prepared p;
  if (m.scenario.empty()) {
    p.reason = "setup '" + m.setup + "' has no scenario (" + m.no_scenario + ")";
    return p;
  }
  if (!ModelExists(m.scenario, m.model)) {
    p.reason = "model '" + m.model + "' is not in scenarios/models";
    return p;
  }
  auto load = [&](bool with_precision, std::string* why) {
    std::vector<std::string> all = RowOverrides(m, with_precision);
    all.insert(all.end(), user.begin(), user.end());
    try {
      (void)config::LoadScenarioFile(m.scenario, all);
      return true;
    } catch (const ConfigError& e) {
      *why = e.what();
    } catch (const core::ModelError& e) {
      *why = e.what();
    }
    return false;
  };
  std::string why;
  if (load(true, &why)) {
    p.ok = true;
    p.keys = RowOverrides(m, true);
    return p;
  }
  std::string why_plain;
  if (m.precision == "fp32" && load(false, &why_plain)) {
    p.ok = true;  // the device has no framework figures: the scenario's own (fp32) compute model
    p.keys = RowOverrides(m, false);
    return p;
  }
  p.reason = "the scenario refuses the row: " + (why_plain.empty() ? why : why_plain);
  return p;
}

// Simulated samples/s of `m` with keys + compute scale + user keys; throws on failure.
double Simulate(const MeasurementRow& m, const std::vector<std::string>& keys, double scale,
                const std::vector<std::string>& user, std::vector<std::string>* used) {
  std::vector<std::string> all = keys;
  if (scale != 1.0) all.push_back("cluster.compute_scale=" + Exact(scale));
  all.insert(all.end(), user.begin(), user.end());
  if (used) *used = all;
  const config::ScenarioSpec s = config::LoadScenarioFile(m.scenario, all);
  SimOptions opts;
  opts.baseline = false;
  const ScenarioResult r = SimulateScenario(s, opts);
  if (r.deadlocked) throw std::runtime_error("the simulation deadlocked");
  if (!(r.throughput > 0)) throw std::runtime_error("the simulation reports no throughput");
  return r.throughput;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::vector<std::string> SystemOverrides(const std::string& system, int devices_per_machine,
                                         const std::string& transport, bool* known) {
  *known = true;
  if (system == "ddp_nccl" || system == "horovod_nccl" || system == "horovod_mpi") {
    std::vector<std::string> o = {system == "ddp_nccl" ? "protocol.baseline=ddp"
                                                       : "protocol.baseline=horovod"};
    if (devices_per_machine > 1) {
      o.push_back("cluster.client=device");
      o.push_back("cluster.local_copies=interconnect");
    }
    if (system == "horovod_mpi") {
      // Horovod's "allreduce on CPU": MPI_Allreduce of host copies, Open MPI's ring moving and
      // summing every received byte on the CPU (scripts/mpi-cpu-check): over TCP, or, over RDMA,
      // the copies and sums without a network stack (shared memory's figure).
      o.push_back(fmt::format("cluster.network.process_ns_per_byte={}",
                              transport == "rdma" ? kOpenMpiShmNsPerByte : kOpenMpiTcpNsPerByte));
    }
    return o;
  }
  if (system == "tf_ps" || system == "tf_ps_vars_cpu") {
    // TensorFlow 1.x moves every tensor between its processes through gRPC's RecvTensor, which
    // deserialises and copies it on one thread: 0.9 GB/s from a worker into a parameter server's
    // variable where the same process moved 20.2 GB/s (tensorflow/tensorflow#6116, comment of
    // 2016-12-09, Xeon E5-2630 v3), i.e. 1 / 0.9 GB/s on the receiving process per byte.
    return {"protocol.baseline=null", "protocol.scheme=ps", "protocol.placement_policy=by_size",
            fmt::format("cluster.network.process_ns_per_byte={}", kTensorFlowGrpcNsPerByte)};
  }
  if (system == "caffe_ps") {
    // The Poseidon papers' own parameter server without DWBP and SACP: every blob split over the
    // shards (the 2015 Bosen code cuts a blob into num_rows_per_table rows, 256 in its ImageNet
    // scripts, placed row by row over the servers; the ATC'17 prototype into 512 KiB chunks,
    // reference/poseidon.md section 1), pushed after the whole backward pass (section 2).
    return {"protocol.baseline=null", "protocol.dwbp=false", "protocol.scheme=ps",
            "protocol.placement_policy=balanced"};
  }
  if (config::IsCalibrationSystem(system) || system.rfind("poseidon", 0) == 0) return {};
  *known = false;
  return {};
}

std::vector<ReproduceSummary> SummarizeReproduce(const std::vector<ReproduceRow>& rows) {
  std::vector<std::pair<std::string, std::function<bool(const MeasurementRow&)>>> groups = {
      {"fit", [](const MeasurementRow& m) { return m.set == "fit"; }},
      {"heldout", [](const MeasurementRow& m) { return m.set == "heldout"; }},
      {"fit, multi-machine", [](const MeasurementRow& m) { return m.set == "fit" && m.machines > 1; }},
      {"heldout, multi-machine",
       [](const MeasurementRow& m) { return m.set == "heldout" && m.machines > 1; }},
  };
  // The names of `field` among the rows that ran, are not calibration rows and have at least
  // `machines` machines, sorted.
  auto names = [&rows](std::string MeasurementRow::*field, int machines) {
    std::vector<std::string> v;
    for (const ReproduceRow& r : rows) {
      if (r.ran && r.m.set != "calibration" && r.m.machines >= machines &&
          std::find(v.begin(), v.end(), r.m.*field) == v.end()) {
        v.push_back(r.m.*field);
      }
    }
    std::sort(v.begin(), v.end());
    return v;
  };
  // Per setup, fit and held-out together, on more than one machine: where the misses are.
  for (const std::string& s : names(&MeasurementRow::setup, 2)) {
    groups.emplace_back("setup " + s + ", multi-machine", [s](const MeasurementRow& m) {
      return m.setup == s && m.machines > 1;
    });
  }
  for (const std::string& s : names(&MeasurementRow::system, 1)) {
    groups.emplace_back("system " + s, [s](const MeasurementRow& m) { return m.system == s; });
  }
  std::vector<ReproduceSummary> out;
  for (const auto& [name, in] : groups) {
    ReproduceSummary g;
    g.group = name;
    std::vector<double> abs;
    for (const ReproduceRow& r : rows) {
      if (!r.ran || r.m.set == "calibration" || !in(r.m)) continue;
      abs.push_back(std::fabs(r.error_pct));
      g.max_abs_pct = std::max(g.max_abs_pct, std::fabs(r.error_pct));
      if (r.predicted > r.m.published) ++g.optimistic;
    }
    g.points = static_cast<int>(abs.size());
    g.median_abs_pct = Median(abs);
    out.push_back(g);
  }
  return out;
}

ReproduceResult RunReproduce(const std::vector<std::string>& files,
                             const std::vector<std::string>& overrides, int threads) {
  ReproduceResult res;
  res.files = files;
  res.overrides = overrides;
  for (const std::string& f : files) {
    for (MeasurementRow& m : config::LoadClusterMeasurementFile(f)) {
      bool mapped = false;
      (void)SystemOverrides(m.system, 1, m.transport, &mapped);
      if (!mapped) {
        config::FailAt(m.system_loc, fmt::format("system '{}' has no simulator keys "
                                                 "(sim/reproduce.h SystemOverrides lists the "
                                                 "known ones)",
                                                 m.system));
      }
      res.rows.push_back({std::move(m)});
    }
  }
  const int n = static_cast<int>(res.rows.size());
  std::vector<Prepared> prep(static_cast<size_t>(n));
  ParallelFor(n, threads, [&](int i) {
    prep[static_cast<size_t>(i)] = Prepare(res.rows[static_cast<size_t>(i)].m, overrides);
  });

  // Series and their calibration rows.
  std::map<SeriesKey, int> calibration;  // series -> row index
  for (int i = 0; i < n; ++i) {
    const MeasurementRow& m = res.rows[static_cast<size_t>(i)].m;
    if (m.set == "calibration") calibration[KeyOf(m)] = i;
  }
  std::vector<int> cal_rows;
  for (const auto& [_, i] : calibration) cal_rows.push_back(i);
  // Series state after calibration: scale, the 1-GPU simulated throughput (for speedups).
  struct Cal {
    bool ok = false;
    std::string reason;
    double scale = 1;
    double throughput = 0;
  };
  std::map<int, Cal> cal;
  for (int i : cal_rows) cal[i] = Cal{};
  ParallelFor(static_cast<int>(cal_rows.size()), threads, [&](int k) {
    const int i = cal_rows[static_cast<size_t>(k)];
    ReproduceRow& row = res.rows[static_cast<size_t>(i)];
    Cal& c = cal.at(i);
    const Prepared& p = prep[static_cast<size_t>(i)];
    if (!p.ok) {
      c.reason = "its calibration row (line " + std::to_string(row.m.line) + ") cannot run: " + p.reason;
      row.reason = p.reason;
      return;
    }
    try {
      double scale = 1;
      double thr = Simulate(row.m, p.keys, scale, overrides, &row.overrides);
      if (!row.m.is_speedup) {
        // Throughput is close to 1 / scale: a few fixed-point steps reach the published figure.
        for (int step = 0; step < 8 && std::fabs(thr / row.m.published - 1) > 1e-7; ++step) {
          scale *= thr / row.m.published;
          thr = Simulate(row.m, p.keys, scale, overrides, &row.overrides);
        }
      }
      c.ok = true;
      c.scale = scale;
      c.throughput = thr;
      row.ran = true;
      row.compute_scale = scale;
      row.predicted = row.m.is_speedup ? 1.0 : thr;
      row.error_pct = 100 * (row.predicted - row.m.published) / row.m.published;
    } catch (const std::exception& e) {
      c.reason = "its calibration row (line " + std::to_string(row.m.line) + ") failed: " + e.what();
      row.reason = std::string("the simulation failed: ") + e.what();
    }
  });

  std::vector<int> others;
  for (int i = 0; i < n; ++i) {
    if (res.rows[static_cast<size_t>(i)].m.set != "calibration") others.push_back(i);
  }
  ParallelFor(static_cast<int>(others.size()), threads, [&](int k) {
    const int i = others[static_cast<size_t>(k)];
    ReproduceRow& row = res.rows[static_cast<size_t>(i)];
    const Prepared& p = prep[static_cast<size_t>(i)];
    if (!p.ok) {
      row.reason = p.reason;
      return;
    }
    const auto ci = calibration.find(KeyOf(row.m));
    if (ci == calibration.end()) {
      row.reason = "its series has no calibration row";
      return;
    }
    const Cal& c = cal.at(ci->second);
    if (!c.ok) {
      row.reason = "the series is not calibrated: " + c.reason;
      return;
    }
    if (row.m.is_speedup != res.rows[static_cast<size_t>(ci->second)].m.is_speedup) {
      row.reason = "its figure is not of the same kind as its calibration row's";
      return;
    }
    try {
      const double thr = Simulate(row.m, p.keys, c.scale, overrides, &row.overrides);
      row.ran = true;
      row.compute_scale = c.scale;
      row.predicted = row.m.is_speedup ? thr / c.throughput : thr;
      row.error_pct = 100 * (row.predicted - row.m.published) / row.m.published;
    } catch (const std::exception& e) {
      row.reason = std::string("the simulation failed: ") + e.what();
    }
  });
  res.summary = SummarizeReproduce(res.rows);
  return res;
}

namespace {

std::string Figure(const ReproduceRow& r, double v) {
  return r.m.is_speedup ? fmt::format("{:.2f}x", v) : fmt::format("{:.1f}", v);
}

std::string OneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

std::string FormatReproduce(const ReproduceResult& r, OutputFormat format) {
  std::string o;
  if (format == OutputFormat::kCsv) {
    o = "file,line,set,source,setup,system,transport,model,precision,batch_per_gpu,variant,"
        "machines,gpus_per_machine,gpus,figure,published,predicted,error_pct,compute_scale,"
        "status,reason\n";
    for (const ReproduceRow& x : r.rows) {
      const MeasurementRow& m = x.m;
      o += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},", CsvField(m.file), m.line,
                       m.set, CsvField(m.source), CsvField(m.setup), CsvField(m.system),
                       CsvField(m.transport), CsvField(m.model), m.precision, m.batch_per_gpu,
                       CsvField(m.variant), m.machines, m.gpus_per_machine, m.gpus,
                       m.is_speedup ? "speedup" : "samples_per_s", Exact(m.published));
      if (x.ran) {
        o += fmt::format("{:.6f},{:.4f},{:.9f},ran,\n", x.predicted, x.error_pct, x.compute_scale);
      } else {
        o += ",,,skipped," + CsvField(OneLine(x.reason)) + "\n";
      }
    }
    return o;
  }
  o += "poseidon reproduce";
  for (const auto& f : r.files) o += " " + f;
  for (const auto& s : r.overrides) o += " --set " + s;
  o += "\n\nPer row (error = (predicted - published) / published; compute scale = the series' "
       "calibrated 1-GPU factor)\n";
  o += fmt::format("{:<11} {:<20} {:<16} {:<5} {:<16} {:<5} {:>5} {:>10} {:>10} {:>8} {:>8}\n",
                   "set", "source", "system", "tr", "model", "prec", "GPUs", "published",
                   "predicted", "error%", "scale");
  for (const ReproduceRow& x : r.rows) {
    if (!x.ran) continue;
    const MeasurementRow& m = x.m;
    o += fmt::format("{:<11} {:<20} {:<16} {:<5} {:<16} {:<5} {:>5} {:>10} {:>10} {:>+8.1f} {:>8.4f}\n",
                     m.set, m.source, m.system, m.transport.empty() ? "-" : m.transport,
                     m.model + (m.batch_per_gpu ? fmt::format("/{}", m.batch_per_gpu) : ""),
                     m.precision, m.gpus, Figure(x, m.published), Figure(x, x.predicted),
                     x.error_pct, x.compute_scale);
  }
  int skipped = 0;
  for (const ReproduceRow& x : r.rows) skipped += x.ran ? 0 : 1;
  if (skipped > 0) {
    o += fmt::format("\nSkipped rows ({}):\n", skipped);
    for (const ReproduceRow& x : r.rows) {
      if (x.ran) continue;
      o += fmt::format("  {}:{}: {} {} {} GPUs: {}\n", x.m.file, x.m.line, x.m.set, x.m.model,
                       x.m.gpus, OneLine(x.reason));
    }
  }
  o += "\nSummary (rows that ran, calibration rows left out; optimistic = predicts more than "
       "measured)\n";
  size_t width = 28;  // the group column: as wide as the longest name
  for (const ReproduceSummary& g : r.summary) width = std::max(width, g.group.size());
  o += fmt::format("{:<{}} {:>6} {:>12} {:>10} {:>11}\n", "group", width, "points",
                   "median |err|", "max |err|", "optimistic");
  for (const ReproduceSummary& g : r.summary) {
    o += fmt::format("{:<{}} {:>6} {:>11.1f}% {:>9.1f}% {:>6}/{:<4}\n", g.group, width, g.points,
                     g.median_abs_pct, g.max_abs_pct, g.optimistic, g.points);
  }
  return o;
}

}  // namespace poseidon::sim
