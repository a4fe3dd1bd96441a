// apps/poseidon/calibrate_command.cc: the calibration subcommands.
#include "apps/poseidon/calibrate_command.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "apps/poseidon/cli_checks.h"
#include "calibration/compute_profiler.h"
#include "calibration/loop.h"
#include "calibration/net_probe.h"
#include "calibration/provenance.h"
#include "calibration/stats.h"
#include "config/compute_loader.h"
#include "config/model_loader.h"
#include "config/network_loader.h"
#include "config/yaml_reader.h"
#include "core/model.h"
#include "kernels/kernel.h"

namespace poseidon::app {

using config::ConfigError;

struct CalibrateCommands {
  const std::string* data_dir = nullptr;
  CLI::App* calibrate = nullptr;
  CLI::App* check = nullptr;
  CLI::App* net = nullptr;
  // calibrate / calibrate-check
  std::string model = "fmnist_mlp";
  int64_t batch = 0;
  std::string backend = "cpu";
  int repetitions = 20;
  int warmup = 3;
  uint64_t seed = 1;
  std::string output;
  bool loop_check = false;
  std::string profile;
  int iterations = 20;
  // calibrate-net
  std::string listen, connect, receive, send;
  bool once = false;
  double line_rate_gbps = 0;
  int64_t min_size = 4096, max_size = 64 << 20;
  double seconds_per_size = 0.5;
  std::vector<int> streams = {1, 2, 4, 8};
  int senders = 1;
  std::vector<int> concurrency;
  std::vector<int64_t> sizes = {64 << 10, 1 << 20, 8 << 20};
  int reps = 5;
  std::string network;
  std::string sharing_from;
  double connect_timeout_s = 30;
};

namespace {

void WriteText(const std::string& path, const std::string& text) {
  if (path.empty()) {
    std::cout << text;
    return;
  }
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text) || !out.flush()) {
    throw ConfigError(fmt::format("{}: error: cannot write file; check the folder exists and is "
                                  "writable",
                                  path));
  }
  std::cerr << "wrote " << path << "\n";
}

kernels::Backend ParseBackend(const std::string& name) {
  kernels::Backend b;
  if (!kernels::BackendFromName(name, &b)) {
    throw ConfigError(fmt::format("error: --backend: unknown backend '{}'; known: reference, cpu, "
                                  "cuda",
                                  name));
  }
  return b;
}

// Progress on stderr: one updating line on a terminal, a line per 10% otherwise.
calibration::ProgressFn StderrProgress(const std::string& what) {
  const bool tty = isatty(fileno(stderr));
  return [what, tty](const std::string& phase, int done, int total) {
    if (tty) {
      std::cerr << fmt::format("\r{}: {} {}/{}   ", what, phase, done, total);
      if (done == total) std::cerr << "\n";
      std::cerr << std::flush;
    } else if (done == total || done % std::max(1, total / 10) == 0) {
      std::cerr << fmt::format("{}: {} {}/{}\n", what, phase, done, total);
    }
  };
}

// One loop (a) table row (with the header). Measured: the interquartile mean of the whole
// iterations (the profile's layer times are means over its interquartile iterations; see
// calibration/compute_profiler.h), their median and p10/p90 for the spread.
void PrintLoopRow(const std::string& model, int64_t batch, kernels::Backend backend,
                  const std::vector<double>& measured, double predicted) {
  calibration::Summary s = calibration::Summarize(measured);
  const double iqm = calibration::InterquartileMean(measured);
  const double err = 100.0 * (predicted - iqm) / iqm;
  std::cout << fmt::format("{:<14} {:>5} {:>7} {:>12} {:>28} {:>13} {:>8}\n", "model", "batch",
                           "backend", "measured_ms", "(median; p10, p90)", "predicted_ms",
                           "error");
  std::cout << fmt::format("{:<14} {:>5} {:>7} {:>12.3f} {:>28} {:>13.3f} {:>+7.2f}%\n", model,
                           batch, kernels::BackendName(backend), iqm,
                           fmt::format("({:.3f}; {:.3f}, {:.3f})", s.median, s.p10, s.p90),
                           predicted, err);
}

int RunCalibrate(const CalibrateCommands& c, const std::string& command) {
  if (c.loop_check && c.output.empty()) {
    throw ConfigError("error: calibrate --check needs -o FILE (the simulator reads the profile "
                      "from it)");
  }
  const std::string path = config::FindModelFile(c.model, *c.data_dir + "/models");
  core::Model m = core::Model::Build(config::LoadModelFile(path));
  calibration::ComputeProfileOptions o;
  o.batch = c.batch > 0 ? c.batch : 64;
  o.backend = ParseBackend(c.backend);
  o.repetitions = c.repetitions;
  o.warmup = c.warmup;
  o.seed = c.seed;
  o.command = command;
  const std::string name = m.name().empty() ? c.model : m.name();
  auto progress = StderrProgress(fmt::format("calibrate {} batch {}", c.model, o.batch));
  std::ostringstream text;
  if (!c.loop_check) {
    config::WriteProfileYaml(calibration::MeasureComputeProfile(m, name, o, progress), text);
    WriteText(c.output, text.str());
    return 0;
  }
  calibration::ProfileAndIterations r =
      calibration::MeasureProfileAndIterations(m, name, o, progress);
  config::WriteProfileYaml(r.profile, text);
  WriteText(c.output, text.str());
  PrintLoopRow(name, o.batch, o.backend, r.whole_iteration_ms,
               calibration::PredictOneNodeIterationMs(path, c.output, o.batch));
  return 0;
}

int RunCheck(const CalibrateCommands& c) {
  if (c.profile.empty()) throw ConfigError("error: calibrate-check needs --profile FILE");
  config::ProfileSpec p = config::LoadProfileFile(c.profile);
  const std::string model_name = c.model == "fmnist_mlp" && !p.model.empty() ? p.model : c.model;
  const std::string path = config::FindModelFile(model_name, *c.data_dir + "/models");
  core::Model m = core::Model::Build(config::LoadModelFile(path));
  calibration::ComputeProfileOptions o;
  o.batch = c.batch > 0 ? c.batch : p.batch;
  o.backend = ParseBackend(c.backend.empty() ? p.backend : c.backend);
  o.warmup = c.warmup;
  o.seed = c.seed;
  std::vector<double> t = calibration::MeasureTrainingIterations(m, o, c.iterations);
  PrintLoopRow(model_name, o.batch, o.backend, t,
               calibration::PredictOneNodeIterationMs(path, c.profile, o.batch));
  return 0;
}

int RunNet(const CalibrateCommands& c, const std::string& command) {
  const int modes = !c.listen.empty() + !c.connect.empty() + !c.receive.empty() + !c.send.empty();
  if (modes != 1) {
    throw ConfigError("error: calibrate-net needs exactly one of --listen PORT (probe server), "
                      "--connect HOST:PORT (probe client), --receive PORT (transfer check "
                      "receiver), --send HOST:PORT (transfer check sender)");
  }
  auto log = [](const std::string& s) { std::cerr << "calibrate-net: " << s << "\n"; };
  if (!c.listen.empty()) {
    calibration::ProbeServer server(calibration::ParseHostPort(c.listen, "0.0.0.0"));
    std::cerr << fmt::format("calibrate-net: listening on port {}{}\n", server.port(),
                             c.once ? " (until the client is done)" : "");
    server.Serve(c.once, log);
    return 0;
  }
  if (!c.connect.empty()) {
    calibration::ProbeOptions o;
    o.min_size = c.min_size;
    o.max_size = c.max_size;
    o.seconds_per_size = c.seconds_per_size;
    o.streams = c.streams;
    o.line_rate_gbps = c.line_rate_gbps;
    if (o.min_size <= 0 || o.max_size < o.min_size) {
      throw ConfigError("error: --min-size must be > 0 and <= --max-size");
    }
    // Read before probing, so that a bad file is reported before minutes of measuring.
    std::optional<config::NetworkSpec> sharing;
    if (!c.sharing_from.empty()) sharing = config::LoadNetworkFile(c.sharing_from).network;
    calibration::ProbeResult r =
        calibration::ProbeNetwork(calibration::ParseHostPort(c.connect, "127.0.0.1"), o, command, log);
    std::cerr << fmt::format("calibrate-net: {:>10} {:>12} {:>13} {:>8}\n", "bytes", "measured_ms",
                             "predicted_ms", "error");
    for (const auto& p : r.sizes) {
      std::cerr << fmt::format("calibrate-net: {:>10} {:>12.4f} {:>13.4f} {:>+7.2f}%\n", p.bytes,
                               p.median_ms, p.predicted_ms,
                               100.0 * (p.predicted_ms - p.median_ms) / p.median_ms);
    }
    if (sharing) {
      // Only the link figures are measured here; how messages share links (docs/validation.md,
      // "The emulated cluster's network model") and the emulated hosts' CPU and latencies, which
      // other tools measure, come from the file being replaced.
      config::NetworkSpec& n = r.network.network;
      const config::NetworkSpec measured = n;
      n = *sharing;
      n.host_bandwidth_Bps = measured.host_bandwidth_Bps;
      n.latency_ns = measured.latency_ns;
      n.efficiency = measured.efficiency;
      n.per_message_overhead_ns = measured.per_message_overhead_ns;
      n.loc = measured.loc;
      r.network.provenance["sharing"] = fmt::format(
          "model, connections, fairness_alpha, ack_path_weight, burst_bytes, "
          "sender_queue_bytes, queue_limit_bytes, congested_flow_weight, "
          "initial_window_bytes, segment_bytes, send_buffer_bytes, loss_packet_bytes and the "
          "host_* keys copied from {} (not measured by calibrate-net)",
          c.sharing_from);
    }
    std::ostringstream text;
    config::WriteNetworkYaml(r.network, text);
    WriteText(c.output, text.str());
    return 0;
  }
  if (!c.send.empty()) {
    calibration::RunTransferSender(calibration::ParseHostPort(c.send, "127.0.0.1"),
                                   c.connect_timeout_s);
    return 0;
  }
  // --receive
  std::optional<config::NetworkFileSpec> net;
  if (!c.network.empty()) net = config::LoadNetworkFile(c.network);
  std::vector<int> conc = c.concurrency;
  if (conc.empty()) {
    for (int k = 1; k <= c.senders; k *= 2) conc.push_back(k);
  }
  calibration::ProbeServer server(calibration::ParseHostPort(c.receive, "0.0.0.0"));
  std::cerr << fmt::format("calibrate-net: waiting for {} sender(s) on port {}\n", c.senders,
                           server.port());
  auto cases = calibration::RunTransferReceiver(server, c.senders, conc, c.sizes, c.reps, log);
  if (net) {
    std::cout << fmt::format("{:>8} {:>10} {:>13} {:>13} {:>8}\n", "senders", "bytes",
                             "measured_ms", "predicted_ms", "error");
  } else {  // no model to predict with: the aggregate goodput instead (the tbf sweep reads it)
    std::cout << fmt::format("{:>8} {:>10} {:>13} {:>14}\n", "senders", "bytes", "measured_ms",
                             "goodput_mbit");
  }
  double worst = 0;
  for (auto& tc : cases) {
    if (net) {
      tc.predicted_ms = calibration::PredictTransferMs(net->network, tc.senders, tc.bytes);
      const double err = 100.0 * (tc.predicted_ms - tc.measured_ms) / tc.measured_ms;
      worst = std::max(worst, std::abs(err));
      std::cout << fmt::format("{:>8} {:>10} {:>13.3f} {:>13.3f} {:>+7.2f}%\n", tc.senders,
                               tc.bytes, tc.measured_ms, tc.predicted_ms, err);
    } else {
      std::cout << fmt::format("{:>8} {:>10} {:>13.3f} {:>14.1f}\n", tc.senders, tc.bytes,
                               tc.measured_ms,
                               8.0 * tc.senders * static_cast<double>(tc.bytes) /
                                   (tc.measured_ms * 1e3));
    }
  }
  if (net) std::cout << fmt::format("worst |error|: {:.2f}%\n", worst);
  return 0;
}

}  // namespace

std::shared_ptr<CalibrateCommands> AddCalibrateCommands(CLI::App& app, const std::string* data_dir) {
  auto c = std::make_shared<CalibrateCommands>();
  c->data_dir = data_dir;
  CLI::App* cal = app.add_subcommand(
      "calibrate", "measure per-layer forward/backward times; write a profile YAML");
  c->calibrate = cal;
  cal->add_option("--model", c->model, "model name or .yaml path")->capture_default_str();
  cal->add_option("--batch", c->batch, "images per pass (default 64)")->check(AtLeast(1));
  cal->add_option("--backend", c->backend, "reference | cpu | cuda")->capture_default_str();
  cal->add_option("--repetitions", c->repetitions, "timed iterations")
      ->capture_default_str()->check(AtLeast(1));
  cal->add_option("--warmup", c->warmup, "untimed iterations first")
      ->capture_default_str()->check(AtLeast(0));
  cal->add_option("--seed", c->seed)->capture_default_str();
  cal->add_option("-o,--output", c->output, "profile YAML file (default: stdout)");
  cal->add_flag("--check", c->loop_check,
                "loop (a): also time one whole training iteration after each profiled one and "
                "print it against the simulator's prediction from the written profile (needs -o)");

  CLI::App* chk = app.add_subcommand(
      "calibrate-check",
      "loop (a): a measured 1-node training iteration against the simulator's from a profile");
  c->check = chk;
  chk->add_option("--profile", c->profile, "profile YAML file")->required();
  chk->add_option("--model", c->model, "model (default: the profile's)");
  chk->add_option("--batch", c->batch, "batch (default: the profile's)")->check(AtLeast(1));
  chk->add_option("--backend", c->backend, "backend (default cpu)")->capture_default_str();
  chk->add_option("--iterations", c->iterations, "timed training iterations")
      ->capture_default_str()->check(AtLeast(1));
  chk->add_option("--warmup", c->warmup)->capture_default_str()->check(AtLeast(0));

  CLI::App* net = app.add_subcommand(
      "calibrate-net", "measure a TCP link (server and client sides); write a network YAML");
  c->net = net;
  net->add_option("--listen", c->listen, "[HOST:]PORT: run the probe server");
  net->add_flag("--once", c->once, "server: exit when the client is done");
  net->add_option("--connect", c->connect, "HOST:PORT: run the probe client against a server");
  net->add_option("--line-rate-gbps", c->line_rate_gbps,
                  "client: the link's nominal rate (e.g. the tbf rate); sets efficiency")
      ->check(NumberAtLeast(0));
  net->add_option("--min-size", c->min_size, "client: smallest message, bytes")->capture_default_str();
  net->add_option("--max-size", c->max_size, "client: largest message, bytes")->capture_default_str();
  net->add_option("--seconds-per-size", c->seconds_per_size, "client: time spent per size")
      ->capture_default_str()->check(NumberAtLeast(0, /*strict=*/true));
  net->add_option("--streams", c->streams, "client: concurrent connections to test")
      ->delimiter(',')->capture_default_str();
  net->add_option("-o,--output", c->output, "client: network YAML file (default: stdout)");
  net->add_option(
      "--sharing-from", c->sharing_from,
      "client: copy model, connections, fairness_alpha, ack_path_weight, "
      "burst_bytes, sender_queue_bytes, queue_limit_bytes, congested_flow_weight, "
      "initial_window_bytes, segment_bytes, send_buffer_bytes, loss_packet_bytes and the "
      "host_* keys (host CPU and latencies) from this network file (calibrate-net does not "
      "measure them)");
  net->add_option("--receive", c->receive, "[HOST:]PORT: transfer-check receiver");
  net->add_option("--senders", c->senders, "receiver: senders that will connect")
      ->capture_default_str()->check(AtLeast(1));
  net->add_option("--concurrency", c->concurrency, "receiver: senders per case (default 1,2,4..)")
      ->delimiter(',');
  net->add_option("--sizes", c->sizes, "receiver: bytes per sender per case")
      ->delimiter(',')->capture_default_str();
  net->add_option("--reps", c->reps, "receiver: timed repetitions per case")
      ->capture_default_str()->check(AtLeast(1));
  net->add_option("--network", c->network, "receiver: network YAML to predict the cases with");
  net->add_option("--send", c->send, "HOST:PORT: transfer-check sender");
  net->add_option("--connect-timeout", c->connect_timeout_s, "sender: seconds to retry connecting")
      ->capture_default_str();
  return c;
}

int RunCalibrateCommands(const CalibrateCommands& c, int argc, const char* const* argv) {
  const std::string command = calibration::JoinCommandLine(argc, argv);
  if (c.calibrate->parsed()) return RunCalibrate(c, command);
  if (c.check->parsed()) return RunCheck(c);
  if (c.net->parsed()) return RunNet(c, command);
  return -1;
}

}  // namespace poseidon::app
