#include "validation/testbed_keys.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "calibration/provenance.h"
#include "config/compute_loader.h"
#include "config/network_loader.h"
#include "config/yaml_reader.h"
#include "real_runtime/launch.h"
#include "real_runtime/loopback_push.h"
#include "real_runtime/wakeup_cpu.h"
#include "sim/text_escape.h"
#include "validation/host_load.h"
#include "validation/summary.h"

namespace poseidon::validation {
namespace {

using config::ConfigError;

constexpr int kSchemaVersion = 1;

bool SameRate(double a, double b) { return std::fabs(a - b) <= 1e-6 * std::max(a, b); }

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Interrupt + softirq ticks of /proc/stat so far.
int64_t KernelTicks() {
  HostSample s;
  std::string error;
  if (!ParseProcStat(ReadText("/proc/stat"), &s, &error)) {
    throw ConfigError("/proc/stat: error: " + error + "; the kernel CPU is measured from it");
  }
  return s.cpu.irq + s.cpu.softirq;
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

// The CPU keys of a testbed keys file: all three (host_kernel_ns_per_byte one figure per rate).
void ReadCpuKeys(config::MapReader& r, const std::string& file, TestbedKeys* k) {
  k->host_message_us = r.PositiveNumber("host_message_us");
  k->host_ns_per_byte = r.NonNegativeNumber("host_ns_per_byte", 0);
  if (!r.Has("host_ns_per_byte")) {
    r.Fail("testbed keys file has no 'host_ns_per_byte' (the process CPU per payload byte); "
           "measure it with 'poseidon validate --testbed-keys measure'");
  }
  const YAML::Node rates = r.Node("host_kernel_ns_per_byte");
  if (!rates.IsSequence() || rates.size() == 0) {
    config::FailAt(rates, file,
                   "'host_kernel_ns_per_byte' must be a list of {bandwidth_gbps: G, ns_per_byte: N}, "
                   "one per link rate, e.g. '- {bandwidth_gbps: 1, ns_per_byte: 0.54}'");
  }
  for (const YAML::Node& n : rates) {
    config::MapReader e(n, file, "host_kernel_ns_per_byte entry");
    const double gbps = e.PositiveNumber("bandwidth_gbps");
    const double ns = e.NonNegativeNumber("ns_per_byte", 0);
    if (!e.Has("ns_per_byte")) e.Fail("entry has no 'ns_per_byte'");
    e.Finish();
    for (const auto& [g, _] : k->kernel_ns_per_byte) {
      if (SameRate(g, gbps)) {
        config::FailAt(n, file, fmt::format("a second figure for {:g} Gbit/s; give one per rate", gbps));
      }
    }
    k->kernel_ns_per_byte[gbps] = ns;
  }
}

TestbedKeys ReadKeys(const config::YamlFile& f) {
  const std::string& file = f.path();
  config::MapReader r(f.root(), file, "testbed keys file");
  const int64_t version = r.Int("schema_version");
  if (version != kSchemaVersion) {
    r.FailKey("schema_version", fmt::format("testbed keys file schema_version {} is not supported; "
                                            "this build reads version {}",
                                            version, kSchemaVersion));
  }
  TestbedKeys k;
  if (r.Has("host_wakeup_cpu_us")) k.host_wakeup_cpu_us = r.PositiveNumber("host_wakeup_cpu_us");
  if (r.Has("host_wakeup_us")) k.host_wakeup_us = r.PositiveNumber("host_wakeup_us");
  if (r.Has("host_handoff_us")) k.host_handoff_us = r.PositiveNumber("host_handoff_us");
  // A file of latencies alone ('--testbed-keys latencies') has none of the CPU keys; one that has
  // any of them has all three.
  const bool latencies_only = !r.Has("host_message_us") && !r.Has("host_ns_per_byte") &&
                              !r.Has("host_kernel_ns_per_byte") &&
                              (k.host_wakeup_us > 0 || k.host_handoff_us > 0);
  if (!latencies_only) ReadCpuKeys(r, file, &k);
  const YAML::Node meas = r.OptionalNode("measurements");
  if (meas.IsDefined() && !meas.IsNull()) {
    k.measurements = config::ReadStringMap(meas, file, "measurements");
  }
  if (!r.Has("provenance")) {
    r.Fail("testbed keys file has no 'provenance'; say where the figures were measured (cpu, "
           "cores, kernel, date), as 'poseidon validate --testbed-keys measure' writes it");
  }
  k.provenance = config::ReadStringMap(r.Node("provenance"), file, "provenance");
  r.Finish();
  return k;
}

std::string Fixed(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }

std::string Identity(const HostIdentity& h) {
  if (h.cpu.empty()) return "a machine not named";
  return fmt::format("{}, {} cores{}", h.cpu, h.cores, h.kernel.empty() ? "" : ", " + h.kernel);
}

bool SameKind(const HostIdentity& a, const HostIdentity& b) {
  return !a.cpu.empty() && a.cpu == b.cpu && a.cores == b.cores;
}

int ParseCores(const std::string& s) {
  try {
    return std::stoi(s);
  } catch (const std::exception&) {
    return 0;
  }
}

std::string Get(const std::map<std::string, std::string>& m, const std::string& key) {
  const auto it = m.find(key);
  return it == m.end() ? "" : it->second;
}

std::string LatencyText(const std::vector<double>& v) {
  if (v.empty()) return "no samples";
  return fmt::format("mean {:.1f} us, median {:.1f} us ({} samples)", Mean(v), Median(v), v.size());
}

}  // namespace

HostIdentity ThisHost() {
  HostIdentity h;
  h.cpu = calibration::CpuModelName();
  h.cores = calibration::LogicalCores();
  utsname u{};
  if (uname(&u) == 0) h.kernel = fmt::format("{} {}", u.sysname, u.release);
  return h;
}

double LinkGbps(const config::NetworkSpec& network) { return network.host_bandwidth_Bps * 8 / 1e9; }

TestbedKeys LoadTestbedKeys(const std::string& path) {
  return ReadKeys(config::YamlFile::Load(path));
}

TestbedKeys ParseTestbedKeys(const std::string& text, const std::string& name) {
  return ReadKeys(config::YamlFile::Parse(text, name));
}

void WriteTestbedKeys(const TestbedKeys& k, std::ostream& out) {
  using config::YamlScalarNumber;
  using config::YamlScalarString;
  out << "# The emulated testbed's keys, measured on one host. Format: validation/testbed_keys.h.\n"
      << "schema_version: " << kSchemaVersion << "\n";
  if (k.HasCpuKeys()) {
    out << "host_message_us: " << YamlScalarNumber(k.host_message_us) << "\n"
        << "host_ns_per_byte: " << YamlScalarNumber(k.host_ns_per_byte) << "\n"
        << "host_kernel_ns_per_byte:\n";
    for (const auto& [gbps, ns] : k.kernel_ns_per_byte) {
      out << "  - {bandwidth_gbps: " << YamlScalarNumber(gbps)
          << ", ns_per_byte: " << YamlScalarNumber(ns) << "}\n";
    }
  }
  if (k.host_wakeup_cpu_us > 0) {
    out << "host_wakeup_cpu_us: " << YamlScalarNumber(k.host_wakeup_cpu_us) << "\n";
  }
  if (k.host_wakeup_us > 0) out << "host_wakeup_us: " << YamlScalarNumber(k.host_wakeup_us) << "\n";
  if (k.host_handoff_us > 0) {
    out << "host_handoff_us: " << YamlScalarNumber(k.host_handoff_us) << "\n";
  }
  if (!k.measurements.empty()) {
    out << "measurements:\n";
    for (const auto& [key, v] : k.measurements) {
      out << "  " << YamlScalarString(key) << ": " << YamlScalarString(v) << "\n";
    }
  }
  out << "provenance:" << (k.provenance.empty() ? " {}" : "") << "\n";
  for (const auto& [key, v] : k.provenance) {
    out << "  " << YamlScalarString(key) << ": " << YamlScalarString(v) << "\n";
  }
}

namespace {

// The three CPU keys' --set lines (TestbedKeyOverrides).
std::vector<std::string> CpuKeyOverrides(const TestbedKeys& k, const config::NetworkSpec& network,
                                         const std::string& source) {
  const double gbps = LinkGbps(network);
  const double* kernel = nullptr;
  std::string rates;
  for (const auto& [g, ns] : k.kernel_ns_per_byte) {
    if (SameRate(g, gbps)) kernel = &ns;
    rates += fmt::format("{}{:g}", rates.empty() ? "" : ", ", g);
  }
  if (kernel == nullptr) {
    throw ConfigError(fmt::format(
        "{}: error: no host_kernel_ns_per_byte for links of {:g} Gbit/s (the file has {} Gbit/s); "
        "measure this host at that rate with 'poseidon validate --testbed-keys measure'",
        source, gbps, rates));
  }
  return {
      fmt::format("cluster.network.host_message_us={}",
                  config::YamlScalarNumber(k.host_message_us)),
      fmt::format("cluster.network.host_ns_per_byte={}",
                  config::YamlScalarNumber(k.host_ns_per_byte)),
      fmt::format("cluster.network.host_kernel_ns_per_byte={}", config::YamlScalarNumber(*kernel))};
}

}  // namespace

std::vector<std::string> TestbedKeyOverrides(const TestbedKeys& k,
                                             const config::NetworkSpec& network,
                                             const std::string& source) {
  std::vector<std::string> sets;
  if (k.HasCpuKeys()) sets = CpuKeyOverrides(k, network, source);
  // The wake-up's CPU belongs to the wake-ups the network charges; a network without them keeps
  // none.
  if (k.host_wakeup_cpu_us > 0 && network.host_wakeup_ns > 0) {
    sets.push_back(fmt::format("cluster.network.host_wakeup_cpu_us={}",
                               config::YamlScalarNumber(k.host_wakeup_cpu_us)));
  }
  // So do the latencies: measured on this host, they replace the ones a network charges.
  if (k.host_wakeup_us > 0 && network.host_wakeup_ns > 0) {
    sets.push_back(fmt::format("cluster.network.host_wakeup_us={}",
                               config::YamlScalarNumber(k.host_wakeup_us)));
  }
  if (k.host_handoff_us > 0 && network.host_handoff_ns > 0) {
    sets.push_back(fmt::format("cluster.network.host_handoff_us={}",
                               config::YamlScalarNumber(k.host_handoff_us)));
  }
  return sets;
}

std::pair<double, double> FitMessageCpu(const std::vector<MessageCpuPoint>& points) {
  // Minimise sum ((c + b x_i) / t_i - 1)^2: weighted least squares with weights 1 / t_i^2.
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  for (const MessageCpuPoint& p : points) {
    if (!(p.us_per_message > 0)) throw std::invalid_argument("a message CPU figure must be > 0");
    const double w = 1.0 / (p.us_per_message * p.us_per_message);
    const double x = static_cast<double>(p.bytes);
    s00 += w;
    s01 += w * x;
    s11 += w * x * x;
    r0 += w * p.us_per_message;
    r1 += w * x * p.us_per_message;
  }
  const double det = s00 * s11 - s01 * s01;
  if (points.size() < 2 || !(std::fabs(det) > 1e-12 * s00 * s11)) {
    throw std::invalid_argument("the fit needs at least two messages of different sizes");
  }
  const double c = (r0 * s11 - r1 * s01) / det;
  const double b = (s00 * r1 - s01 * r0) / det;
  return {c, b * 1e3};  // b is us per byte
}

std::vector<MessageCpuPoint> MeasureMessageCpu(int reps, int64_t round_bytes) {
  rt::TransportOptions o;
  o.job_id = "testbed-keys";
  o.secret = "testbed-keys-measurement-secret-0123456789";
  o.logger = std::make_shared<spdlog::logger>("testbed-keys",
                                              std::make_shared<spdlog::sinks::null_sink_mt>());
  std::vector<MessageCpuPoint> out;
  for (const int64_t bytes : {int64_t{256}, int64_t{4096}, int64_t{65536}, int64_t{1} << 20}) {
    rt::LoopbackPush pair(o, static_cast<size_t>(bytes) / sizeof(float));
    const int n = static_cast<int>(std::max<int64_t>(4000, round_bytes / bytes));
    pair.Push(n);  // warm: connection, buffers, pools
    std::vector<double> us;
    for (int r = 0; r < std::max(1, reps); ++r) {
      const double c0 = rt::ProcessCpuSeconds();
      pair.Push(n);
      us.push_back(1e6 * (rt::ProcessCpuSeconds() - c0) / n);
    }
    out.push_back({bytes, Median(us)});
  }
  return out;
}

double MeasureKernelNsPerByte(double gbps, const std::string& netns_script, const std::string& exe,
                              int reps, std::vector<std::string>* evidence,
                              const MeasureProgress& progress) {
  // 20 s of traffic at the rate, within 64 MiB .. 512 MiB (jiffies are 10 ms: a slow link's
  // figure is coarse); 1 MiB for the setup. Messages of 1 MiB, as scripts/host-cpu-check moves.
  const int64_t big = std::clamp<int64_t>(static_cast<int64_t>(gbps * 1e9 / 8 * 20) >> 20,
                                          64, 512) << 20;
  const int64_t small = int64_t{1} << 20;
  const std::string rate = fmt::format("{}kbit", static_cast<int64_t>(gbps * 1e6));
  auto transfer = [&](int64_t bytes) {
    const std::string common = fmt::format("--mib {} --message-kib 1024", bytes >> 20);
    const int64_t before = KernelTicks();
    rt::Capture({"/bin/bash", netns_script, "-n", "2", "--rate", rate, "--cmd",
                 fmt::format("{} transport-goodput --listen 7000 {}", exe, common), "--cmd",
                 fmt::format("{} transport-goodput --connect 10.77.0.1:7000 {}", exe, common)},
                fmt::format("moving {} MiB between two emulated machines at {:g} Gbit/s ({} -n 2 "
                            "--rate {})",
                            bytes >> 20, gbps, netns_script, rate));
    return KernelTicks() - before;
  };
  const double tick_s = 1.0 / static_cast<double>(TicksPerSecond());
  std::vector<double> per_byte;
  for (int r = 0; r < std::max(1, reps); ++r) {
    if (progress) progress(fmt::format("kernel CPU at {:g} Gbit/s, run {} of {}", gbps, r + 1, reps));
    const int64_t base = transfer(small);
    const int64_t full = transfer(big);
    const double ns = 1e9 * tick_s * static_cast<double>(full - base) /
                      static_cast<double>(big - small);
    per_byte.push_back(std::max(0.0, ns));
    evidence->push_back(fmt::format("{} MiB: {} ticks, 1 MiB: {} ticks -> {:.3f} ns/B", big >> 20,
                                    full, base, ns));
  }
  return Median(per_byte);
}

double MeasureWakeupCpuUs(int reps, int64_t rounds, std::vector<std::string>* evidence) {
  rt::MeasureWakeupCpu(std::max<int64_t>(1, rounds / 4));  // warm: threads, allocator
  std::vector<double> us;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const rt::WakeupCpu w = rt::MeasureWakeupCpu(rounds);
    us.push_back(w.us_per_wakeup);
    evidence->push_back(fmt::format("{} rounds: {:.3f} s CPU over {:.3f} s -> {:.2f} us", w.rounds,
                                    w.cpu_s, w.wall_s, w.us_per_wakeup));
  }
  return Median(us);
}

std::string LatencyRoundsWarning(const std::string& what, const std::vector<double>& rounds_us) {
  if (rounds_us.size() < 2) return "";
  const auto [lo, hi] = std::minmax_element(rounds_us.begin(), rounds_us.end());
  if (!(*hi > 2 * *lo && *hi - *lo > 10)) return "";
  std::vector<std::string> figures;
  for (double v : rounds_us) figures.push_back(fmt::format("{:.1f}", v));
  const std::string last = figures.back();
  figures.pop_back();
  return fmt::format(
      "the {}'s rounds disagree ({} and {} us, more than twice apart): the host placed the threads "
      "differently from round to round, and the key, their median, can take the other mode in "
      "another measurement (docs/validation.md, \"Held-out set 43\"); the live runs' own {}s "
      "are printed beside it",
      what, fmt::join(figures, ", "), last, what);
}

std::pair<double, double> MeasureHostLatencyUs(int reps, int64_t rounds,
                                               std::vector<std::string>* evidence,
                                               std::vector<std::string>* warnings) {
  std::vector<double> wake, handoff;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const rt::HostLatency l = rt::MeasureHostLatency(rounds);
    wake.push_back(Median(l.wakeup_us));
    handoff.push_back(Median(l.handoff_us));
    evidence->push_back(fmt::format(
        "{} rounds each: wake-up median {:.1f} us (mean {:.1f}), hand-off median {:.1f} us "
        "(mean {:.1f})",
        l.wakeup_us.size(), wake.back(), Mean(l.wakeup_us), handoff.back(), Mean(l.handoff_us)));
  }
  if (warnings) {
    for (const auto& [what, figures] :
         {std::pair{"wake-up", &wake}, std::pair{"hand-off", &handoff}}) {
      const std::string w = LatencyRoundsWarning(what, *figures);
      if (!w.empty()) warnings->push_back(w);
    }
  }
  return {Median(wake), Median(handoff)};
}

namespace {

constexpr const char* kLatencyMethod =
    "the wake-up and hand-off latencies of a replayed compute task's threads (a protocol thread "
    "and a compute stream), one round at a time on an otherwise idle host (medians)";

void MeasureLatencyKeys(const MeasureProgress& progress, TestbedKeys* k) {
  if (progress) progress("wake-up and hand-off latencies of a replayed compute task's threads");
  std::vector<std::string> latency, warnings;
  const auto [wake_us, handoff_us] = MeasureHostLatencyUs(3, 4000, &latency, &warnings);
  if (!warnings.empty())
    k->measurements["latency_warning"] = fmt::format("{}", fmt::join(warnings, "; "));
  k->host_wakeup_us = std::max(wake_us, 1e-3);
  k->host_handoff_us = std::max(handoff_us, 1e-3);
  k->measurements["latency"] = fmt::format(
      "a replayed task's wake-up (timer sleep of 200 us to its end, post back) and hand-off (a "
      "task whose end has passed, handed over and posted back), the rounds' medians (median of "
      "{}): {}",
      latency.size(), fmt::join(latency, "; "));
}

void AddProvenance(const std::string& command, const std::string& method, TestbedKeys* k) {
  k->provenance = calibration::CollectProvenance(command);
  k->provenance["kernel"] = ThisHost().kernel;
  k->provenance["method"] = method;
}

}  // namespace

TestbedKeys MeasureTestbedLatencies(const std::string& command, const MeasureProgress& progress) {
  TestbedKeys k;
  MeasureLatencyKeys(progress, &k);
  AddProvenance(command, std::string("validation/testbed_keys.h: ") + kLatencyMethod, &k);
  return k;
}

TestbedKeys MeasureTestbedKeys(const std::vector<double>& rates_gbps,
                               const std::string& netns_script, const std::string& exe,
                               const std::string& command, const MeasureProgress& progress) {
  TestbedKeys k;
  // The latencies first, while nothing of this measurement has run on the host yet.
  MeasureLatencyKeys(progress, &k);
  if (progress) progress("process CPU per message of the live transport over loopback");
  const std::vector<MessageCpuPoint> points = MeasureMessageCpu();
  const auto [c, b] = FitMessageCpu(points);
  k.host_message_us = std::max(c, 1e-3);
  k.host_ns_per_byte = std::max(b, 0.0);
  std::string msg, fit;
  for (const MessageCpuPoint& p : points) {
    msg += fmt::format("{}{} B {:.2f} us", msg.empty() ? "" : ", ", p.bytes, p.us_per_message);
    fit += fmt::format("{}{:+.1f}%", fit.empty() ? "" : ", ",
                       100 * ((k.host_message_us + k.host_ns_per_byte * 1e-3 * static_cast<double>(p.bytes)) /
                                  p.us_per_message - 1));
  }
  k.measurements["message_cpu"] =
      fmt::format("process CPU per message (median of 3 rounds): {}; fit relative error {}", msg, fit);
  for (double g : rates_gbps) {
    std::vector<std::string> evidence;
    k.kernel_ns_per_byte[g] = MeasureKernelNsPerByte(g, netns_script, exe, 3, &evidence, progress);
    k.measurements[fmt::format("kernel_cpu_{:g}_gbps", g)] =
        fmt::format("interrupt + softirq ticks of /proc/stat (median of {}): {}", evidence.size(),
                    fmt::join(evidence, "; "));
  }
  if (progress) progress("process CPU per wake-up of a replayed compute task");
  std::vector<std::string> wake;
  k.host_wakeup_cpu_us = std::max(MeasureWakeupCpuUs(3, 4000, &wake), 1e-3);
  k.measurements["wakeup_cpu"] = fmt::format(
      "process CPU per wake-up, rounds of hand-over, timer sleep (100 us) and post back, three "
      "wake-ups each (median of {}): {}",
      wake.size(), fmt::join(wake, "; "));
  AddProvenance(
      command,
      std::string("validation/testbed_keys.h: the live transport's process CPU per message over "
                  "loopback (256 B .. 1 MiB) fitted as c + b x bytes on relative error; the "
                  "kernel's interrupt + softirq CPU per byte between two emulated machines at "
                  "each rate (a large transfer minus 1 MiB); the process CPU per wake-up of a "
                  "replayed compute task's hand-over, timer sleep and post back; ") +
          kLatencyMethod,
      &k);
  return k;
}

void AddHostLatencies(const std::vector<TraceRecord>& events, int64_t warmup_clock,
                      HostLatencySamples* out) {
  std::map<int64_t, std::string> lane_names;                  // tid -> "worker 0 compute"
  std::map<std::string, std::vector<core::TimeNs>> arrivals;  // "worker 0" -> deliveries
  std::map<int64_t, std::vector<const TraceRecord*>> lanes;  // by tid
  for (const TraceRecord& e : events) {
    if (e.kind == TraceRecordKind::kMetadata && e.name == "thread_name")
      lane_names[e.tid] = e.label;
    if (e.kind == TraceRecordKind::kMessage && !e.peer_role.empty()) {
      arrivals[fmt::format("{} {}", e.peer_role, e.peer_index)].push_back(e.ts + e.dur);
    }
    if (e.kind != TraceRecordKind::kTask || e.thread.lane != core::kLaneCompute) continue;
    if (e.clock < warmup_clock) continue;
    lanes[e.tid].push_back(&e);
  }
  for (auto& [_, times] : arrivals) std::sort(times.begin(), times.end());
  // The lane's process as messages name their receiver: "worker 0" of "worker 0 compute", and
  // "coordinator 0" for the coordinator's lanes.
  auto process_of = [&](int64_t tid) {
    const auto it = lane_names.find(tid);
    if (it == lane_names.end()) return std::string();
    std::istringstream words(it->second);
    std::string role, index;
    words >> role >> index;
    if (role == "coordinator") return std::string("coordinator 0");
    return role + " " + index;
  };
  static const std::vector<core::TimeNs> kNone;
  for (auto& [tid, tasks] : lanes) {
    std::stable_sort(tasks.begin(), tasks.end(),
                     [](const TraceRecord* x, const TraceRecord* y) { return x->ts < y->ts; });
    const auto found = arrivals.find(process_of(tid));
    const std::vector<core::TimeNs>& delivered = found == arrivals.end() ? kNone : found->second;
    // Whether no message reached the process in (from, to].
    auto quiet = [&](core::TimeNs from, core::TimeNs to) {
      const auto first = std::upper_bound(delivered.begin(), delivered.end(), from);
      return first == delivered.end() || *first > to;
    };
    for (size_t i = 0; i + 2 < tasks.size(); ++i) {
      const TraceRecord& a = *tasks[i];
      const TraceRecord& b = *tasks[i + 1];
      const TraceRecord& c = *tasks[i + 2];
      const core::TimeNs seen_a = a.ts + a.dur, seen_b = b.ts + b.dur;
      if (!(b.ts < seen_a && c.ts < seen_b)) continue;  // b or c not handed over early
      const core::TimeNs end_b = c.ts;
      if (end_b > seen_a) {
        const double us = static_cast<double>(seen_b - end_b) / 1e3;
        out->wakeup_us.push_back(us);
        if (quiet(end_b, seen_b)) out->wakeup_quiet_us.push_back(us);
      } else {
        const double us = static_cast<double>(seen_b - seen_a) / 1e3;
        out->handoff_us.push_back(us);
        if (quiet(seen_a, seen_b)) out->handoff_quiet_us.push_back(us);
      }
    }
  }
}

bool KeysUsed(const config::ScenarioSpec& s, const std::string& keys_file, const TestbedKeys* keys,
              TestbedKeysUsed* out) {
  const config::NetworkSpec& n = s.network;
  if (n.host_cores <= 0) return false;
  TestbedKeysUsed u;
  u.network = s.network_file.empty() ? "the scenario's network" : s.network_file;
  u.gbps = LinkGbps(n);
  u.message_us = n.host_message_ns / 1e3;
  u.ns_per_byte = n.host_ns_per_byte;
  u.kernel_ns_per_byte = n.host_kernel_ns_per_byte;
  u.wakeup_us = n.host_wakeup_ns / 1e3;
  u.handoff_us = n.host_handoff_ns / 1e3;
  u.wakeup_cpu_us = n.host_wakeup_cpu_ns / 1e3;
  std::map<std::string, std::string> prov;
  std::string prefix;
  if (keys != nullptr && !keys->HasCpuKeys() && !s.network_file.empty()) {
    // Latencies alone: the CPU keys, which the machine named below is about, are the file's.
    prov = config::LoadNetworkFile(s.network_file).provenance;
    prefix = prov.count("host_keys_cpu") ? "host_keys_" : "";
  }
  if (keys != nullptr) {
    if (keys->HasCpuKeys()) prov = keys->provenance;
    const bool latencies = keys->host_wakeup_us > 0 && keys->host_handoff_us > 0;
    u.source =
        !keys->HasCpuKeys()
            ? fmt::format(
                  "{} (wake-up and hand-off latency; message, kernel and wake-up CPU from "
                  "{})",
                  keys_file, u.network)
        : keys->host_wakeup_cpu_us > 0 && latencies
            ? fmt::format("{} (message, kernel and wake-up CPU, wake-up and hand-off latency)",
                          keys_file)
        : keys->host_wakeup_cpu_us > 0
            ? fmt::format(
                  "{} (message, kernel and wake-up CPU; wake-up and hand-off "
                  "latency from {})",
                  keys_file, u.network)
            : fmt::format("{} (message and kernel CPU; wake-up, its CPU and hand-off from {})",
                          keys_file, u.network);
  } else if (!s.network_file.empty()) {
    prov = config::LoadNetworkFile(s.network_file).provenance;
    // The host keys may have been measured apart from the link (host_keys_*); else the link's.
    prefix = prov.count("host_keys_cpu") ? "host_keys_" : "";
    u.source = s.network_file;
  } else {
    u.source = "the scenario's network (no file, no provenance)";
  }
  u.measured_on.cpu = Get(prov, prefix + "cpu");
  u.measured_on.cores = ParseCores(Get(prov, prefix + "cores"));
  u.measured_on.kernel = Get(prov, prefix + "kernel");
  u.measured_date = Get(prov, prefix + "date");
  if (keys != nullptr && keys->host_handoff_us > 0) {
    const auto w = keys->measurements.find("latency_warning");
    if (w != keys->measurements.end()) u.latency_warning = w->second;
  }
  *out = std::move(u);
  return true;
}

std::string TestbedKeysText(const std::vector<TestbedKeysEntry>& entries, const HostIdentity& here) {
  if (entries.empty()) return "";
  std::string t = "\nTestbed keys (what the simulator charged for the emulated hosts):\n";
  for (const TestbedKeysEntry& e : entries) {
    const TestbedKeysUsed& u = e.used;
    t += fmt::format("  {:g} Gbit/s, {} configuration{}: {}\n", u.gbps, e.configurations,
                     e.configurations == 1 ? "" : "s", u.source);
    t += fmt::format("    measured on {}{}\n", Identity(u.measured_on),
                     u.measured_date.empty() ? "" : ", " + u.measured_date);
    t += fmt::format(
        "    host_message_us {}, host_ns_per_byte {}, host_kernel_ns_per_byte {}, "
        "host_wakeup_us {}, host_handoff_us {}{}\n",
        Fixed(u.message_us, 2), Fixed(u.ns_per_byte, 3), Fixed(u.kernel_ns_per_byte, 3),
        Fixed(u.wakeup_us, 1), Fixed(u.handoff_us, 1),
        u.wakeup_cpu_us > 0 ? ", host_wakeup_cpu_us " + Fixed(u.wakeup_cpu_us, 1) : "");
    if (!u.latency_warning.empty()) t += fmt::format("    measured: {}\n", u.latency_warning);
    t += fmt::format("    the live runs: wake-up {}; hand-off {}\n", LatencyText(e.live.wakeup_us),
                     LatencyText(e.live.handoff_us));
    t += fmt::format("      no message reaching the process meanwhile: wake-up {}; hand-off {}\n",
                     LatencyText(e.live.wakeup_quiet_us), LatencyText(e.live.handoff_quiet_us));
  }
  t += fmt::format("  this host: {}\n", Identity(here));
  bool all_same = true;
  for (const TestbedKeysEntry& e : entries) all_same = all_same && SameKind(e.used.measured_on, here);
  if (!all_same) {
    t += "  Some keys were measured on another kind of machine (or one not named): the CPU keys "
         "may not carry (docs/validation.md, \"On another machine\"); 'poseidon validate "
         "--testbed-keys measure' measures them here before predicting.\n";
  }
  return t;
}

std::string TestbedKeysJson(const std::vector<TestbedKeysEntry>& entries, const HostIdentity& here) {
  auto num = [](double v) { return std::isfinite(v) ? fmt::format("{:.3f}", v) : std::string("null"); };
  std::string j = "[";
  for (size_t i = 0; i < entries.size(); ++i) {
    const TestbedKeysEntry& e = entries[i];
    const TestbedKeysUsed& u = e.used;
    j += fmt::format(
        "{}{{\"network\":{},\"bandwidth_gbps\":{:g},\"configurations\":{},\"source\":{},"
        "\"measured_on\":{{\"cpu\":{},\"cores\":{},\"kernel\":{},\"date\":{}}},\"same_kind_as_this_"
        "host\":{},"
        "\"host_message_us\":{},\"host_ns_per_byte\":{},\"host_kernel_ns_per_byte\":{},"
        "\"host_wakeup_us\":{},\"host_handoff_us\":{},\"host_wakeup_cpu_us\":{},\"live_wakeup_mean_"
        "us\":{},"
        "\"live_wakeup_samples\":{},\"live_handoff_mean_us\":{},\"live_handoff_samples\":{},"
        "\"live_wakeup_quiet_mean_us\":{},\"live_wakeup_quiet_samples\":{},"
        "\"live_handoff_quiet_mean_us\":{},\"live_handoff_quiet_samples\":{},"
        "\"latency_warning\":{}}}",
        i ? "," : "", sim::JsonQuoted(u.network), u.gbps, e.configurations,
        sim::JsonQuoted(u.source), sim::JsonQuoted(u.measured_on.cpu), u.measured_on.cores,
        sim::JsonQuoted(u.measured_on.kernel), sim::JsonQuoted(u.measured_date),
        SameKind(u.measured_on, here) ? "true" : "false", num(u.message_us), num(u.ns_per_byte),
        num(u.kernel_ns_per_byte), num(u.wakeup_us), num(u.handoff_us), num(u.wakeup_cpu_us),
        num(Mean(e.live.wakeup_us)), e.live.wakeup_us.size(), num(Mean(e.live.handoff_us)),
        e.live.handoff_us.size(), num(Mean(e.live.wakeup_quiet_us)), e.live.wakeup_quiet_us.size(),
        num(Mean(e.live.handoff_quiet_us)), e.live.handoff_quiet_us.size(),
        u.latency_warning.empty() ? std::string("null") : sim::JsonQuoted(u.latency_warning));
  }
  return j + "]";
}

}  // namespace poseidon::validation
