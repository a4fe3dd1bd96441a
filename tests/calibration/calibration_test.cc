// tests/calibration/calibration_test.cc: profiles and network files written by calibration load
// in the simulator (provenance filled); loop (a) on a tiny model with a generous bound; the TCP
// probe and the transfer check over loopback; the emulated-link script and a fast loop (b) on it
// (root only: skipped with a message otherwise).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "calibration/compute_profiler.h"
#include "calibration/loop.h"
#include "calibration/net_probe.h"
#include "calibration/stats.h"
#include "config/compute_loader.h"
#include "config/model_loader.h"
#include "config/network_loader.h"
#include "config/scenario.h"
#include "core/model.h"

namespace poseidon::calibration {
namespace {

namespace fs = std::filesystem;

std::string Root() { return POSEIDON_SOURCE_DIR; }

core::Model LoadModel(const std::string& name) {
  return core::Model::Build(config::LoadModelFile(Root() + "/scenarios/models/" + name + ".yaml"));
}

fs::path TempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("poseidon_cal_" + name + "_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

kernels::Backend HostBackend() {
#ifdef POSEIDON_HAVE_DNNL
  return kernels::Backend::kCpu;
#else
  return kernels::Backend::kReference;
#endif
}

std::string RunCapture(const std::string& cmd, int* status) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  int rc = pclose(f);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

TEST(ComputeProfiler, ProfileHasEveryLayerProvenanceAndLoadsInTheSimulator) {
  core::Model m = LoadModel("fmnist_mlp");
  ComputeProfileOptions o;
  o.batch = 16;
  o.backend = HostBackend();
  o.repetitions = 3;
  o.warmup = 1;
  o.command = "calibration_test";
  int calls = 0;
  config::ProfileSpec p = MeasureComputeProfile(m, "fmnist_mlp", o,
                                                [&](const std::string&, int, int) { ++calls; });
  EXPECT_GT(calls, 3);
  std::ostringstream text;
  config::WriteProfileYaml(p, text);
  config::ProfileSpec back = config::ParseProfileYaml(text.str(), "written.yaml");
  ASSERT_EQ(back.layers.size(), m.layers().size());
  for (const char* key : {"date", "command", "commit", "cpu", "cores", "label"}) {
    ASSERT_TRUE(back.provenance.count(key)) << key;
    EXPECT_FALSE(back.provenance.at(key).empty()) << key;
  }
  EXPECT_EQ(back.provenance.at("label"), "CPU profile");
  EXPECT_GT(back.update_ms_per_mb, 0);
  double total = 0;
  for (const core::Layer& l : m.layers()) {
    const config::LayerTiming& t = back.layers.at(l.name);
    total += t.fwd_ms + t.bwd_ms;
    ASSERT_TRUE(t.fwd_p10_ms && t.fwd_p90_ms);
    // fwd_ms is a mean over the interquartile iterations (compute_profiler.h), so it need not
    // lie between this layer's own p10 and p90; it is positive and the spread is ordered.
    EXPECT_LE(*t.fwd_p10_ms, *t.fwd_p90_ms);
    EXPECT_GT(t.fwd_ms, 0);
    EXPECT_EQ(t.sfb_rebuild_ms.has_value(), l.kind == core::LayerKind::kFc) << l.name;
  }
  EXPECT_GT(total, 0);

  fs::path dir = TempDir("profile");
  const std::string file = (dir / "p.yaml").string();
  std::ofstream(file) << text.str();
  const double predicted = PredictOneNodeIterationMs(
      Root() + "/scenarios/models/fmnist_mlp.yaml", file, 16);
  // One worker replays at least its own forward and backward passes.
  EXPECT_GE(predicted, total * 0.999);
  fs::remove_all(dir);
}

TEST(ComputeProfiler, BadOptionsAreRejected) {
  core::Model m = LoadModel("fmnist_mlp");
  ComputeProfileOptions o;
  o.backend = kernels::Backend::kReference;
  o.repetitions = 0;
  EXPECT_THROW(MeasureComputeProfile(m, "x", o, nullptr), std::invalid_argument);
}

// Loop (a) on fmnist_mlp, batch 16, the reference backend (single-threaded plain loops).
ProfileAndIterations LoopA(const core::Model& m, int repetitions, int warmup) {
  ComputeProfileOptions o;
  o.batch = 16;
  o.backend = kernels::Backend::kReference;
  o.repetitions = repetitions;
  o.warmup = warmup;
  return MeasureProfileAndIterations(m, "fmnist_mlp", o, nullptr);
}

// Loop (a) measures a profile and whole iterations in one run: what holds however busy the
// machine is (how close they agree is CalibrationLoopTiming's, label timing).
TEST(CalibrationLoop, ProfileAndWholeIterationsComeFromOneRun) {
  core::Model m = LoadModel("fmnist_mlp");
  ProfileAndIterations r = LoopA(m, 4, 1);
  ASSERT_EQ(r.whole_iteration_ms.size(), 4u);
  for (double ms : r.whole_iteration_ms) EXPECT_GT(ms, 0.0);
  EXPECT_EQ(r.profile.layers.size(), m.layers().size());
  EXPECT_EQ(r.profile.batch, 16);
  EXPECT_GT(r.profile.update_ms_per_mb, 0.0);
}

// Loop (a), fast subset, label timing (outside the default suite: its outcome depends on what
// else the machine runs; ctest --test-dir build -L timing on a quiet machine): the reference
// backend (single-threaded plain loops), medians on both sides, and a generous bound; the 5%
// claim is checked by scripts/calibration-loop and recorded in docs/calibration.md. A profile
// timed without the optimizer step between iterations (the bug this guards against) predicted
// fc layers ~30% fast.
TEST(CalibrationLoopTiming, OneNodeIterationPredictedWithinAGenerousBound) {
  core::Model m = LoadModel("fmnist_mlp");
  ProfileAndIterations r = LoopA(m, 15, 3);
  ASSERT_EQ(r.whole_iteration_ms.size(), 15u);
  fs::path dir = TempDir("loopa");
  const std::string file = (dir / "p.yaml").string();
  {
    std::ofstream out(file);
    config::WriteProfileYaml(r.profile, out);
  }
  const double measured = Summarize(r.whole_iteration_ms).median;
  const double predicted =
      PredictOneNodeIterationMs(Root() + "/scenarios/models/fmnist_mlp.yaml", file, 16);
  EXPECT_NEAR(predicted / measured, 1.0, 0.25) << "measured " << measured << " ms, predicted "
                                              << predicted << " ms";
  fs::remove_all(dir);
}

// A scenario of the MLP on 2 workers whose network is `{file: link, KEYS}`, the network file
// `link.yaml` holding `network_yaml`, loaded from a temporary data folder.
config::ScenarioSpec LoadWithNetworkFile(const std::string& network_yaml, const std::string& keys) {
  fs::path dir = TempDir("netfile");
  fs::create_directories(dir / "networks");
  std::ofstream(dir / "networks" / "link.yaml") << network_yaml;
  const std::string scen = (dir / "s.yaml").string();
  std::ofstream(scen) << "schema_version: 1\nmodel: fmnist_mlp\nbatch_per_worker: 8\n"
                         "cluster:\n  workers: 2\n  device: k20\n"
                         "  network: {file: link" << keys << "}\n";
  config::ScenarioSpec s = config::LoadScenarioFile(scen);
  fs::remove_all(dir);
  return s;
}

TEST(NetworkFile, RoundTripsAndAScenarioReadsIt) {
  config::NetworkFileSpec f;
  f.network.host_bandwidth_Bps = 1e9 / 8;
  f.network.latency_ns = 31500;
  f.network.efficiency = 0.94;
  f.network.per_message_overhead_ns = 12000;
  f.network.connections = config::ConnectionKind::kProcessPair;
  f.network.fairness_alpha = 1.06;
  f.network.ack_path_weight = 0.35;
  f.network.burst_bytes = 32768;
  f.network.sender_queue_bytes = 16384;
  f.network.model = config::NetworkModelKind::kQueue;
  f.network.queue_limit_bytes = 1250000;
  f.network.host_cores = 2;
  f.network.host_message_ns = 7400;
  f.network.host_ns_per_byte = 1.037;
  f.network.host_wakeup_ns = 95000;
  f.network.host_handoff_ns = 9500;
  f.network.host_wakeup_cpu_ns = 13100;
  f.network.host_kernel_ns_per_byte = 0.75;
  f.network.host_byte_cpu = config::HostByteCpu::kStreamed;
  f.network.host_tag_ns_per_byte = 0.0997;
  f.network.host_reads_hold_receiver = true;
  f.provenance = {{"date", "2026-11-29T10:00:00Z"}, {"command", "poseidon calibrate-net x"}};
  f.measurements = {{"rtt_us", "median 63"}};
  std::ostringstream text;
  config::WriteNetworkYaml(f, text);
  config::NetworkFileSpec back = config::ParseNetworkYaml(text.str(), "n.yaml");
  EXPECT_DOUBLE_EQ(back.network.host_bandwidth_Bps, 1e9 / 8);
  EXPECT_EQ(back.network.latency_ns, 31500);
  EXPECT_DOUBLE_EQ(back.network.efficiency, 0.94);
  EXPECT_EQ(back.network.per_message_overhead_ns, 12000);
  EXPECT_EQ(back.network.connections, config::ConnectionKind::kProcessPair);
  EXPECT_DOUBLE_EQ(back.network.fairness_alpha, 1.06);
  EXPECT_DOUBLE_EQ(back.network.ack_path_weight, 0.35);
  EXPECT_EQ(back.network.burst_bytes, 32768);
  EXPECT_EQ(back.network.sender_queue_bytes, 16384);
  EXPECT_EQ(back.network.model, config::NetworkModelKind::kQueue);
  EXPECT_EQ(back.network.queue_limit_bytes, 1250000);
  EXPECT_EQ(back.network.host_cores, 2);
  EXPECT_DOUBLE_EQ(back.network.host_message_ns, 7400);
  EXPECT_DOUBLE_EQ(back.network.host_ns_per_byte, 1.037);
  EXPECT_DOUBLE_EQ(back.network.host_wakeup_ns, 95000);
  EXPECT_DOUBLE_EQ(back.network.host_handoff_ns, 9500);
  EXPECT_DOUBLE_EQ(back.network.host_wakeup_cpu_ns, 13100);
  EXPECT_DOUBLE_EQ(back.network.host_kernel_ns_per_byte, 0.75);
  EXPECT_EQ(back.network.host_byte_cpu, config::HostByteCpu::kStreamed);
  EXPECT_DOUBLE_EQ(back.network.host_tag_ns_per_byte, 0.0997);
  EXPECT_TRUE(back.network.host_reads_hold_receiver);
  EXPECT_EQ(back.provenance, f.provenance);
  EXPECT_EQ(back.measurements, f.measurements);

  config::ScenarioSpec s = LoadWithNetworkFile(text.str(), ", latency_us: 40, fairness_alpha: 0");
  EXPECT_DOUBLE_EQ(s.network.efficiency, 0.94);
  // The file's sharing keys carry over; the scenario's win.
  EXPECT_EQ(s.network.connections, config::ConnectionKind::kProcessPair);
  EXPECT_EQ(s.network.burst_bytes, 32768);
  EXPECT_EQ(s.network.sender_queue_bytes, 16384);
  EXPECT_EQ(s.network.model, config::NetworkModelKind::kQueue);
  EXPECT_EQ(s.network.queue_limit_bytes, 1250000);
  EXPECT_DOUBLE_EQ(s.network.fairness_alpha, 0);
  EXPECT_DOUBLE_EQ(s.network.ack_path_weight, 0.35);
  EXPECT_EQ(s.network.per_message_overhead_ns, 12000);
  EXPECT_EQ(s.network.latency_ns, 40000);  // the scenario's key wins
  EXPECT_EQ(fs::path(s.network_file).filename(), "link.yaml");
}

std::string NetworkFileError(const std::string& text, const std::string& name);

// A 100 Mbit/s network file of `model`, dated: what the key tests below write and read back.
config::NetworkFileSpec KeyTestFile(config::NetworkModelKind model) {
  config::NetworkFileSpec f;
  f.network.host_bandwidth_Bps = 1e8 / 8;
  f.network.model = model;
  f.provenance = {{"date", "2026-12-05"}};
  return f;
}

std::string WrittenYaml(const config::NetworkFileSpec& f) {
  std::ostringstream text;
  config::WriteNetworkYaml(f, text);
  return text.str();
}

// congested_flow_weight: written and read back below 1; 1 (an equal split, the default) is not
// written, so old files stay byte-identical. A value outside (0, 1], or the key with the flow
// model, is one located line.
TEST(NetworkFile, CongestedFlowWeightRoundTripsAndBadValuesAreLocated) {
  config::NetworkFileSpec f = KeyTestFile(config::NetworkModelKind::kAuto);
  f.network.queue_limit_bytes = 1250000;
  for (const double c : {0.61, 1.0}) {
    f.network.congested_flow_weight = c;
    const std::string text = WrittenYaml(f);
    EXPECT_EQ(text.find("congested_flow_weight: 0.61") != std::string::npos, c < 1) << text;
    EXPECT_EQ(text.find("congested_flow_weight") != std::string::npos, c < 1) << text;
    EXPECT_DOUBLE_EQ(config::ParseNetworkYaml(text, "n.yaml").network.congested_flow_weight, c);
  }
  const std::string head = "schema_version: 1\nbandwidth_gbps: 1\nlatency_us: 5\nefficiency: 1\n";
  for (const std::string bad :
       {"model: queue\ncongested_flow_weight: 0", "model: auto\ncongested_flow_weight: 1.2"}) {
    const std::string err = NetworkFileError(head + bad + "\nprovenance: {a: b}\n", "cw.yaml");
    EXPECT_NE(err.find("cw.yaml:6:"), std::string::npos) << err;
    EXPECT_NE(err.find("must be in (0, 1]"), std::string::npos) << err;
  }
  const std::string err =
      NetworkFileError(head + "congested_flow_weight: 0.6\nprovenance: {a: b}\n", "cwf.yaml");
  EXPECT_NE(err.find("cwf.yaml:5:"), std::string::npos) << err;
  EXPECT_NE(err.find("applies to models queue and auto only (this network's model is flow)"),
            std::string::npos)
      << err;
}

// A byte key of a network file set to `value`, then to 0: written ("name: value") and read back
// when set, not written at all at 0 (old files stay byte-identical).
void ExpectWrittenOnlyWhenSet(config::NetworkFileSpec f, int64_t config::NetworkSpec::*key,
                              const std::string& name, int64_t value) {
  for (const int64_t v : {value, int64_t{0}}) {
    f.network.*key = v;
    const std::string text = WrittenYaml(f);
    EXPECT_EQ(text.find(name + ": " + std::to_string(value)) != std::string::npos, v > 0) << text;
    EXPECT_EQ(text.find(name) != std::string::npos, v > 0) << text;
    EXPECT_EQ(config::ParseNetworkYaml(text, "n.yaml").network.*key, v);
  }
}

// segment_bytes (Reno's losses) and send_buffer_bytes: written and read back when set, not
// written at 0 (old files stay byte-identical); without initial_window_bytes (no windows to halve
// or cap), or negative, one located line.
TEST(NetworkFile, SegmentAndSendBufferBytesRoundTripAndBadValuesAreLocated) {
  config::NetworkFileSpec f = KeyTestFile(config::NetworkModelKind::kQueue);
  f.network.initial_window_bytes = 14480;
  ExpectWrittenOnlyWhenSet(f, &config::NetworkSpec::segment_bytes, "segment_bytes", 1448);
  const std::string head =
      "schema_version: 1\nbandwidth_gbps: 1\nlatency_us: 5\nefficiency: 1\nmodel: queue\n";
  std::string err = NetworkFileError(head + "segment_bytes: 1448\nprovenance: {a: b}\n", "sg.yaml");
  EXPECT_NE(err.find("sg.yaml:6:"), std::string::npos) << err;
  EXPECT_NE(err.find("set 'initial_window_bytes'"), std::string::npos) << err;
  err = NetworkFileError(
      head + "initial_window_bytes: 14480\nsegment_bytes: -3\nprovenance: {a: b}\n", "sn.yaml");
  EXPECT_NE(err.find("sn.yaml:7:"), std::string::npos) << err;
  // send_buffer_bytes the same way.
  f.network.send_buffer_bytes = 2600000;
  const std::string text = WrittenYaml(f);
  EXPECT_NE(text.find("send_buffer_bytes: 2600000"), std::string::npos) << text;
  EXPECT_EQ(config::ParseNetworkYaml(text, "n.yaml").network.send_buffer_bytes, 2600000);
  err = NetworkFileError(head + "send_buffer_bytes: 2600000\nprovenance: {a: b}\n", "sb.yaml");
  EXPECT_NE(err.find("sb.yaml:6:"), std::string::npos) << err;
  EXPECT_NE(err.find("set 'initial_window_bytes'"), std::string::npos) << err;
}

// loss_packet_bytes (losses drawn a packet at a time): written and read back when set, not written
// at 0 (old files stay byte-identical); without segment_bytes (no losses to draw), or negative,
// one located line.
TEST(NetworkFile, LossPacketBytesRoundTripsAndBadValuesAreLocated) {
  config::NetworkFileSpec f = KeyTestFile(config::NetworkModelKind::kQueue);
  f.network.initial_window_bytes = 14480;
  f.network.segment_bytes = 1448;
  ExpectWrittenOnlyWhenSet(f, &config::NetworkSpec::loss_packet_bytes, "loss_packet_bytes", 16384);
  const std::string head =
      "schema_version: 1\nbandwidth_gbps: 1\nlatency_us: 5\nefficiency: 1\n"
      "model: queue\ninitial_window_bytes: 14480\n";
  std::string err =
      NetworkFileError(head + "loss_packet_bytes: 16384\nprovenance: {a: b}\n", "lp.yaml");
  EXPECT_NE(err.find("lp.yaml:7:"), std::string::npos) << err;
  EXPECT_NE(err.find("set 'segment_bytes'"), std::string::npos) << err;
  err = NetworkFileError(head + "segment_bytes: 1448\nloss_packet_bytes: -1\nprovenance: {a: b}\n",
                         "ln.yaml");
  EXPECT_NE(err.find("ln.yaml:8:"), std::string::npos) << err;
}

// initial_window_bytes: written and read back when set; 0 (no windows, the default) is not
// written, so old files stay byte-identical. A negative value, or the key with the flow model, is
// one located line.
TEST(NetworkFile, InitialWindowRoundTripsAndBadValuesAreLocated) {
  config::NetworkFileSpec f = KeyTestFile(config::NetworkModelKind::kAuto);
  for (const int64_t w : {int64_t{14480}, int64_t{0}}) {
    f.network.initial_window_bytes = w;
    const std::string text = WrittenYaml(f);
    EXPECT_EQ(text.find("initial_window_bytes: 14480") != std::string::npos, w > 0) << text;
    EXPECT_EQ(text.find("initial_window_bytes") != std::string::npos, w > 0) << text;
    EXPECT_EQ(config::ParseNetworkYaml(text, "n.yaml").network.initial_window_bytes, w);
  }
  const std::string head = "schema_version: 1\nbandwidth_gbps: 1\nlatency_us: 5\nefficiency: 1\n";
  std::string err = NetworkFileError(
      head + "model: queue\ninitial_window_bytes: -1\nprovenance: {a: b}\n", "iw.yaml");
  EXPECT_NE(err.find("iw.yaml:6:"), std::string::npos) << err;
  err = NetworkFileError(head + "initial_window_bytes: 14480\nprovenance: {a: b}\n", "iwf.yaml");
  EXPECT_NE(err.find("iwf.yaml:5:"), std::string::npos) << err;
  EXPECT_NE(err.find("applies to models queue and auto only (this network's model is flow)"),
            std::string::npos)
      << err;
}

// auto_flow_message_bytes: written and read back with model auto; a scenario that takes the file
// and chooses another model keeps the file's value unused (it is refused only where given).
TEST(NetworkFile, AutoFlowMessageBytesRoundTripsAndAnotherModelMayOverride) {
  config::NetworkFileSpec f;
  f.network.host_bandwidth_Bps = 1e8 / 8;
  f.network.model = config::NetworkModelKind::kAuto;
  f.network.queue_limit_bytes = 1250000;
  f.network.auto_flow_message_bytes = 65536;
  f.provenance = {{"date", "2026-12-04"}};
  std::ostringstream text;
  config::WriteNetworkYaml(f, text);
  EXPECT_NE(text.str().find("auto_flow_message_bytes: 65536"), std::string::npos) << text.str();
  EXPECT_EQ(config::ParseNetworkYaml(text.str(), "n.yaml").network.auto_flow_message_bytes, 65536);
  f.network.auto_flow_message_bytes = 0;  // off: not written, old files unchanged
  std::ostringstream off;
  config::WriteNetworkYaml(f, off);
  EXPECT_EQ(off.str().find("auto_flow_message_bytes"), std::string::npos) << off.str();
  // 0 (off) is accepted with any model, so that `--sim-set ...=0` can turn it off everywhere.
  EXPECT_EQ(NetworkFileError("schema_version: 1\nmodel: queue\nbandwidth_gbps: 1\nlatency_us: 5\n"
                             "efficiency: 1\nauto_flow_message_bytes: 0\nprovenance: {a: b}\n",
                             "zero.yaml"),
            "");

  EXPECT_EQ(LoadWithNetworkFile(text.str(), ", model: flow").network.model,
            config::NetworkModelKind::kFlow);
}

// connection_gbps: written and read back; 0 (no cap) is not written, so old files stay as they were.
TEST(NetworkFile, ConnectionCapRoundTrips) {
  config::NetworkFileSpec f;
  f.network.host_bandwidth_Bps = 25e9 / 8;
  f.network.connection_Bps = 5e9 / 8;
  f.provenance = {{"source", "EC2 User Guide"}};
  std::ostringstream text;
  config::WriteNetworkYaml(f, text);
  EXPECT_NE(text.str().find("connection_gbps: 5\n"), std::string::npos) << text.str();
  EXPECT_DOUBLE_EQ(config::ParseNetworkYaml(text.str(), "n.yaml").network.connection_Bps, 5e9 / 8);
  f.network.connection_Bps = 0;
  std::ostringstream off;
  config::WriteNetworkYaml(f, off);
  EXPECT_EQ(off.str().find("connection_gbps"), std::string::npos) << off.str();
}

// process_ns_per_byte: written and read back; 0 (free) is not written.
TEST(NetworkFile, ProcessCpuPerByteRoundTrips) {
  config::NetworkFileSpec f;
  f.network.host_bandwidth_Bps = 40e9 / 8;
  f.network.process_ns_per_byte = 1.111;
  f.provenance = {{"source", "tensorflow/tensorflow#6116"}};
  std::ostringstream text;
  config::WriteNetworkYaml(f, text);
  EXPECT_NE(text.str().find("process_ns_per_byte: 1.111\n"), std::string::npos) << text.str();
  EXPECT_DOUBLE_EQ(config::ParseNetworkYaml(text.str(), "n.yaml").network.process_ns_per_byte,
                   1.111);
  f.network.process_ns_per_byte = 0;
  std::ostringstream off;
  config::WriteNetworkYaml(f, off);
  EXPECT_EQ(off.str().find("process_ns_per_byte"), std::string::npos) << off.str();
}

// The error ParseNetworkYaml(text, name) throws, or "" if it accepts the text.
std::string NetworkFileError(const std::string& text, const std::string& name) {
  try {
    config::ParseNetworkYaml(text, name);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(NetworkFile, BadInputIsLocated) {
  const std::string head = "schema_version: 1\nbandwidth_gbps: 1\nlatency_us: 5\n";
  const struct {
    std::string body, name, where, what;
  } cases[] = {
      {"efficiency: 1.5\nprovenance: {a: b}\n", "bad.yaml", "bad.yaml:4:", "efficiency"},
      {"efficiency: 1\n", "noprov.yaml", "noprov.yaml", "provenance"},
      {"efficiency: 1\nburst_bytes: -1\nprovenance: {a: b}\n", "neg.yaml",
       "neg.yaml:5:", "burst_bytes"},
      {"efficiency: 1\nfairness_alpha: 51\nprovenance: {a: b}\n", "alpha.yaml",
       "alpha.yaml:5:", "at most 50"},
      {"efficiency: 1\nack_path_weight: 4.5\nprovenance: {a: b}\n", "ack.yaml",
       "ack.yaml:5:", "at most 4"},
      {"efficiency: 1\nack_path_weight: -0.1\nprovenance: {a: b}\n", "ackneg.yaml",
       "ackneg.yaml:5:", "ack_path_weight"},
      {"efficiency: 1\nconnections: per_rack\nprovenance: {a: b}\n", "conn.yaml",
       "conn.yaml:5:", "process_pair"},
      {"efficiency: 1\nqueue_limit_bytes: -5\nprovenance: {a: b}\n", "qlim.yaml",
       "qlim.yaml:5:", "queue_limit_bytes"},
      {"model: fifo\nefficiency: 1\nprovenance: {a: b}\n", "model.yaml", "model.yaml:4:", "queue"},
      {"efficiency: 1\nhost_message_us: 7\nprovenance: {a: b}\n", "host.yaml",
       "host.yaml:5:", "needs 'host_cores'"},
      {"efficiency: 1\nhost_cores: 2\nhost_ns_per_byte: -1\nprovenance: {a: b}\n", "hb.yaml",
       "hb.yaml:6:", "host_ns_per_byte"},
      {"efficiency: 1\nhost_wakeup_us: 90\nprovenance: {a: b}\n", "wake.yaml",
       "wake.yaml:5:", "needs 'host_cores'"},
      {"efficiency: 1\nhost_kernel_ns_per_byte: 1\nprovenance: {a: b}\n", "kern.yaml",
       "kern.yaml:5:", "needs 'host_cores'"},
      {"efficiency: 1\nhost_cores: 2\nhost_wakeup_cpu_us: 13\nprovenance: {a: b}\n", "wcpu.yaml",
       "wcpu.yaml:6:", "add 'host_wakeup_us'"},
      {"efficiency: 1\nhost_cores: 2\nhost_byte_cpu: sometimes\nprovenance: {a: b}\n", "bcpu.yaml",
       "bcpu.yaml:6:", "streamed"},
      {"efficiency: 1\nhost_byte_cpu: streamed\nprovenance: {a: b}\n", "bcore.yaml",
       "bcore.yaml:5:", "needs 'host_cores'"},
      {"efficiency: 1\nhost_tag_ns_per_byte: 0.1\nprovenance: {a: b}\n", "tag.yaml",
       "tag.yaml:5:", "needs 'host_cores'"},
      {"efficiency: 1\nhost_cores: 2\nhost_tag_ns_per_byte: -0.1\nprovenance: {a: b}\n",
       "tagneg.yaml", "tagneg.yaml:6:", "host_tag_ns_per_byte"},
      {"model: auto\nefficiency: 1\nauto_flow_message_bytes: -1\nprovenance: {a: b}\n",
       "afneg.yaml", "afneg.yaml:6:", "auto_flow_message_bytes"},
      {"model: flow\nefficiency: 1\nauto_flow_message_bytes: 65536\nprovenance: {a: b}\n",
       "afflow.yaml",
       "afflow.yaml:6:", "applies to model auto only (this network's model is flow)"},
      {"efficiency: 1\nconnection_gbps: -5\nprovenance: {a: b}\n", "capneg.yaml",
       "capneg.yaml:5:", "connection_gbps"},
      {"model: queue\nefficiency: 1\nconnection_gbps: 5\nprovenance: {a: b}\n", "capq.yaml",
       "capq.yaml:6:", "flow model only (this network's model is queue)"},
      {"efficiency: 1\nprocess_ns_per_byte: -1\nprovenance: {a: b}\n", "pneg.yaml",
       "pneg.yaml:5:", "process_ns_per_byte"},
      {"efficiency: 1\nhost_cores: 2\nprocess_ns_per_byte: 1\nprovenance: {a: b}\n", "pboth.yaml",
       "pboth.yaml:6:", "give one of them"},
      // host_write_share: a share below 1 of a per-byte CPU, spent writing into a send buffer.
      {"efficiency: 1\nhost_cores: 2\nhost_ns_per_byte: 1\nhost_write_share: 0.4\n"
       "provenance: {a: b}\n",
       "wnobuf.yaml", "wnobuf.yaml:7:", "'send_buffer_bytes'"},
      {"model: queue\nefficiency: 1\ninitial_window_bytes: 14480\nsend_buffer_bytes: 2600000\n"
       "host_cores: 2\nhost_ns_per_byte: 1\nhost_write_share: 1\nprovenance: {a: b}\n",
       "wone.yaml", "wone.yaml:10:", "below 1"},
      {"model: queue\nefficiency: 1\ninitial_window_bytes: 14480\nsend_buffer_bytes: 2600000\n"
       "host_cores: 2\nhost_write_share: 0.4\nprovenance: {a: b}\n",
       "wnocpu.yaml", "wnocpu.yaml:9:", "'host_ns_per_byte'"},
      {"efficiency: 1\nhost_cores: 2\nhost_ns_per_byte: 1\nhost_write_share: -0.1\n"
       "provenance: {a: b}\n",
       "wneg.yaml", "wneg.yaml:7:", "host_write_share"},
      // host_reads_hold_receiver: where streamed bytes are read, so only with streamed ones.
      {"efficiency: 1\nhost_cores: 2\nhost_reads_hold_receiver: true\nprovenance: {a: b}\n",
       "hold.yaml", "hold.yaml:6:", "needs 'host_byte_cpu: streamed'"},
      {"efficiency: 1\nhost_cores: 2\nhost_byte_cpu: streamed\nhost_reads_hold_receiver: 3\n"
       "provenance: {a: b}\n",
       "holdnum.yaml", "holdnum.yaml:7:", "host_reads_hold_receiver"},
  };
  for (const auto& c : cases) {
    const std::string err = NetworkFileError(head + c.body, c.name);
    EXPECT_NE(err.find(c.where), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(c.what), std::string::npos) << c.name << ": " << err;
  }
  fs::path dir = TempDir("netmissing");
  const std::string scen = (dir / "s.yaml").string();
  std::ofstream(scen) << "schema_version: 1\nmodel: fmnist_mlp\nbatch_per_worker: 8\n"
                         "cluster:\n  workers: 2\n  device: k20\n"
                         "  network: {file: nope.yaml}\n";
  try {
    config::LoadScenarioFile(scen);
    FAIL() << "no error";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("s.yaml:7:"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Predict, SinkAndTransferFollowTheAlphaBetaFormula) {
  config::NetworkSpec n;
  n.host_bandwidth_Bps = 1e9 / 8;
  n.latency_ns = 30000;
  n.efficiency = 0.9;
  n.per_message_overhead_ns = 10000;
  const double beta = n.host_bandwidth_Bps * n.efficiency;  // payload bytes/s
  const int64_t s = 1 << 20;
  // Sink: payload+header flow, then a header flow back.
  const double sink = 2 * (30e-6 + 10e-6) + (s + 48) / beta;
  EXPECT_NEAR(PredictSinkMs(n, s), sink * 1e3, 1e-5);
  // k senders into one receiver share its link: k go headers (24 B) share the receiver's uplink,
  // then k*S bytes share its downlink.
  for (int k : {1, 2, 4}) {
    const double t = 2 * (30e-6 + 10e-6) + 24.0 * k / beta + static_cast<double>(k) * s / beta;
    EXPECT_NEAR(PredictTransferMs(n, k, s), t * 1e3, 1e-5) << k;
  }
}

TEST(NetProbe, LoopbackProbeWritesALoadableNetworkFile) {
  ProbeServer server(ParseHostPort("127.0.0.1:0", "127.0.0.1"));
  // A jthread: if the probe throws, it quits the --once server and the thread is joined, and the
  // test fails with the probe's message instead of aborting.
  std::jthread t([&] { server.Serve(/*once=*/true, nullptr); });
  ProbeOptions o;
  // Up to 4 MiB, so the bandwidth is fitted over 1 and 4 MiB: below that, a loopback message's time
  // is mostly scheduling, and on a busy machine its median need not grow with the size.
  o.max_size = 4 * 1024 * 1024;
  o.seconds_per_size = 0.01;
  o.pings = 20;
  o.streams = {1, 2};
  o.stream_bytes = 256 * 1024;
  ProbeResult r = ProbeNetwork({"127.0.0.1", server.port()}, o, "calibration_test", nullptr);
  t.join();
  ASSERT_EQ(r.sizes.size(), 6u);  // 4K, 16K, 64K, 256K, 1M, 4M
  EXPECT_GT(r.rtt_us, 0);
  EXPECT_GT(r.beta_Bps, 0);
  ASSERT_EQ(r.streams_gbps.size(), 2u);
  std::ostringstream text;
  config::WriteNetworkYaml(r.network, text);
  config::NetworkFileSpec back = config::ParseNetworkYaml(text.str(), "probe.yaml");
  EXPECT_DOUBLE_EQ(back.network.efficiency, 1.0);  // no line rate given
  EXPECT_GT(back.network.host_bandwidth_Bps, 0);
  for (const char* key : {"date", "command", "commit", "host", "peer", "tcp"}) {
    EXPECT_TRUE(back.provenance.count(key)) << key;
  }
}

TEST(NetProbe, AFailedProbeEndsAOnceServer) {
  ProbeServer server(ParseHostPort("127.0.0.1:0", "127.0.0.1"));
  std::jthread t([&] { server.Serve(/*once=*/true, nullptr); });
  ProbeOptions o;
  o.min_size = o.max_size = 4096;  // one size: no bandwidth can be fitted
  o.pings = 2;
  try {
    ProbeNetwork({"127.0.0.1", server.port()}, o, "calibration_test", nullptr);
    FAIL() << "no error";
  } catch (const ProbeError& e) {
    EXPECT_NE(std::string(e.what()).find("do not grow with the size"), std::string::npos)
        << e.what();
  }
  t.join();  // returns only if the probe told the server to quit
}

TEST(NetProbe, TransferCheckOverLoopback) {
  ProbeServer server(ParseHostPort("127.0.0.1:0", "127.0.0.1"));
  const int port = server.port();
  std::thread a([port] { RunTransferSender({"127.0.0.1", port}, 10); });
  std::thread b([port] { RunTransferSender({"127.0.0.1", port}, 10); });
  auto cases = RunTransferReceiver(server, 2, {1, 2}, {64 * 1024}, 2, nullptr);
  a.join();
  b.join();
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[1].senders, 2);
  for (const auto& c : cases) {
    EXPECT_EQ(c.samples_ms.size(), 2u);
    EXPECT_GT(c.measured_ms, 0);
  }
}

TEST(NetProbe, ErrorsNameThePeer) {
  EXPECT_THROW(ParseHostPort("host:99999", "x"), ProbeError);
  int port = 0;
  {
    ProbeServer s(ParseHostPort("127.0.0.1:0", "127.0.0.1"));
    port = s.port();
  }  // closed: nothing listens there now
  try {
    ProbeOptions o;
    o.connect_timeout_s = 0.2;
    ProbeNetwork({"127.0.0.1", port}, o, "x", nullptr);
    FAIL() << "no error";
  } catch (const ProbeError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
}

// --- emulated links (root) --------------------------------------------------------------------

bool CanUseNamespaces(std::string* why) {
  if (geteuid() != 0) {
    *why = "not root: network namespaces need CAP_NET_ADMIN";
    return false;
  }
  int st = 0;
  RunCapture("ip netns add pnprobe$$ >/dev/null 2>&1 && ip netns del pnprobe$$", &st);
  if (st != 0) {
    *why = "`ip netns add` fails here";
    return false;
  }
  return true;
}

std::string Leftovers(const std::string& prefix) {
  int st = 0;
  return RunCapture("ip netns list | grep " + prefix + "; ip -o link | grep " + prefix +
                        "; tc qdisc show | grep " + prefix,
                    &st);
}

// Checked before anything is created (no root needed).
TEST(NetnsRun, BadBurstIsRejectedWithAClearError) {
  int st = 0;
  std::string out =
      RunCapture(Root() + "/scripts/netns-run --rate 1gbit --burst 12q -- true 2>&1", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("--burst '12q'"), std::string::npos) << out;
}

TEST(NetnsRun, UnknownCongestionControlIsRejectedWithAClearError) {
  int st = 0;
  const std::string out =
      RunCapture(Root() + "/scripts/netns-run -n 1 --cc nosuch -- true 2>&1", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("--cc 'nosuch' is not available in this kernel (available: "), std::string::npos)
      << out;
}

TEST(NetnsRun, BadGsoIsRejectedWithAClearError) {
  int st = 0;
  std::string out = RunCapture(Root() + "/scripts/netns-run --gso 100 -- true 2>&1", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("--gso must be 1500..65536 bytes"), std::string::npos) << out;
}

// The hosts: GSO packets and TCP small queues as netns-run's defaults and options set them, in
// the machine namespaces (the switch namespace runs no TCP), and the burst derived from the GSO.
TEST(NetnsRun, HostsGetTheirGsoSizeAndTcpSmallQueues) {
  std::string why;
  if (!CanUseNamespaces(&why)) GTEST_SKIP() << why;
  const std::string show =
      "'echo tsq=$(sysctl -n net.ipv4.tcp_limit_output_bytes) "
      "gso=$(ip -d link show eth0 | grep -o \"gso_max_size [0-9]*\" | cut -d\" \" -f2) "
      "cc=$(sysctl -n net.ipv4.tcp_congestion_control) "
      "idle=$(sysctl -n net.ipv4.tcp_slow_start_after_idle)'";
  int st = 0;
  std::string out = RunCapture(Root() + "/scripts/netns-run -n 1 --rate 1gbit -- bash -c " +
                                   show + " 2>&1",
                               &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("tsq=16384 gso=16384 cc=reno idle=0"), std::string::npos) << out;
  EXPECT_NE(out.find("tbf rate 1gbit burst 62500 "), std::string::npos) << out;  // rate x 0.5 ms
  // Another congestion control: the host's own default, which a namespace may always choose.
  std::string host_cc;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control"), host_cc);
  ASSERT_FALSE(host_cc.empty());
  out = RunCapture(Root() + "/scripts/netns-run -n 1 --rate 100mbit --gso 64k --tsq 1m --cc " +
                       host_cc + " -- bash -c " + show + " 2>&1",
                   &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("tsq=1048576 gso=65536 cc=" + host_cc + " idle=0"), std::string::npos) << out;
  EXPECT_NE(out.find("tbf rate 100mbit burst 131072 "), std::string::npos) << out;  // 2 x GSO
}

TEST(NetnsRun, CleansUpWhenACommandFails) {
  std::string why;
  if (!CanUseNamespaces(&why)) GTEST_SKIP() << why;
  const std::string prefix = "pnt" + std::to_string(getpid() % 100000);
  int st = 0;
  std::string out = RunCapture(Root() + "/scripts/netns-run --prefix " + prefix +
                                   " --rate 100mbit --cmd 'tc qdisc show dev eth0; exit 7' "
                                   "--cmd 'echo addr=$NETNS_ADDR' 2>&1",
                               &st);
  EXPECT_EQ(st, 7) << out;
  EXPECT_NE(out.find("addr=10.77.0.2"), std::string::npos) << out;
  EXPECT_NE(out.find("tbf"), std::string::npos) << out;
  EXPECT_EQ(Leftovers(prefix), "");
}

TEST(NetnsRun, CleansUpOnTerm) {
  std::string why;
  if (!CanUseNamespaces(&why)) GTEST_SKIP() << why;
  const std::string prefix = "pnu" + std::to_string(getpid() % 100000);
  int st = 0;
  // The script is terminated as soon as its namespaces exist.
  std::string out = RunCapture(
      "(" + Root() + "/scripts/netns-run --prefix " + prefix + " -n 2 -- sleep 60 & p=$!; "
      "for i in $(seq 100); do ip netns list | grep -q " + prefix + "-1 && break; sleep 0.1; done; "
      "kill -TERM $p; wait $p; echo rc=$?) 2>&1",
      &st);
  EXPECT_NE(out.find("rc=143"), std::string::npos) << out;
  EXPECT_EQ(Leftovers(prefix), "");
}

// Ctrl-C in a terminal sends INT to the foreground process group: the script's group (its
// commands run in sessions of their own and are killed by its cleanup). `set -m` gives the
// background job its own process group, as a terminal's foreground job has, and keeps INT
// deliverable (without job control a background command starts with INT ignored).
TEST(NetnsRun, CleansUpOnIntToItsProcessGroup) {
  std::string why;
  if (!CanUseNamespaces(&why)) GTEST_SKIP() << why;
  const std::string prefix = "pnv" + std::to_string(getpid() % 100000);
  int st = 0;
  std::string out = RunCapture(
      "bash -c 'set -m; " + Root() + "/scripts/netns-run --prefix " + prefix +
          " -n 2 --rate 1gbit -- sleep 60 & p=$!; "
          "for i in $(seq 100); do ip netns list | grep -q " + prefix +
          "-1 && tc -n " + prefix + "-sw qdisc show | grep -q tbf && break; sleep 0.1; done; "
          "kill -INT -- -$p; wait $p; echo rc=$?' 2>&1",
      &st);
  EXPECT_NE(out.find("rc=130"), std::string::npos) << out;
  EXPECT_EQ(Leftovers(prefix), "");
}

// Loop (b), fast subset: calibrate a 100 Mbit/s emulated link (keeping the shipped file's
// sharing keys), then 1 and 2 senders into one receiver, predicted with the calibrated file.
struct LoopB {
  config::NetworkFileSpec file;  // what calibrate-net wrote
  struct Row {
    int senders = 0;
    int64_t bytes = 0;
    double measured_ms = 0, predicted_ms = 0;
  };
  std::vector<Row> rows;  // the transfer check's table
  double worst = -1;      // its "worst |error|" line
  std::string out;        // both commands' output
};

// Runs both halves in namespaces; false (with a failure recorded) when a command fails.
bool RunLoopB(LoopB* r) {
  const std::string bin = POSEIDON_BIN;
  fs::path dir = TempDir("loopb");
  const std::string net = (dir / "net.yaml").string();
  int st = 0;
  // The server and the receiver wait for their peers: bounded, so that a peer that fails to
  // start fails the test instead of hanging it.
  r->out = RunCapture(
      Root() + "/scripts/netns-run --rate 100mbit --cmd 'timeout 120 " + bin +
          " calibrate-net --listen 7070 --once' --cmd '" + bin +
          " calibrate-net --connect 10.77.0.1:7070 --line-rate-gbps 0.1 --max-size 4194304 "
          "--seconds-per-size 0.2 --streams 1 --sharing-from " + Root() +
          "/scenarios/networks/emulated_100mbit.yaml -o " + net + "' 2>&1",
      &st);
  if (st != 0) {
    ADD_FAILURE() << r->out;
    return false;
  }
  r->file = config::LoadNetworkFile(net);
  r->out += RunCapture(Root() + "/scripts/netns-run -n 3 --rate 100mbit --cmd 'timeout 120 " +
                           bin + " calibrate-net --receive 7071 --senders 2 --sizes 1048576 "
                           "--reps 3 --network " + net + "' -- " + bin +
                           " calibrate-net --send 10.77.0.1:7071 2>&1",
                       &st);
  fs::remove_all(dir);
  if (st != 0) {
    ADD_FAILURE() << r->out;
    return false;
  }
  std::istringstream in(r->out);
  std::string line;
  const std::regex row(R"(^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+[-+][0-9.]+%$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, row)) {
      r->rows.push_back(
          {std::stoi(m[1]), std::stoll(m[2]), std::stod(m[3]), std::stod(m[4])});
    }
    if (line.rfind("worst |error|: ", 0) == 0) r->worst = std::stod(line.substr(15));
  }
  return true;
}

// What holds however busy the machine is: the keys calibrate-net does not measure come from
// --sharing-from and say so; the table prices each row with the calibrated file; no transfer
// beats the shaped link (k x S bytes through one 100 Mbit/s downlink, less tbf's one burst).
// How close the prediction is to the measurement is NetnsRunTiming's (label timing).
TEST(NetnsRun, CalibratedLinkPricesTransfersWithTheCalibratedFile) {
  std::string why;
  if (!CanUseNamespaces(&why)) GTEST_SKIP() << why;
  if (!fs::exists(POSEIDON_BIN)) GTEST_SKIP() << "poseidon binary not built at " << POSEIDON_BIN;
  LoopB r;
  if (!RunLoopB(&r)) return;
  const config::NetworkFileSpec& f = r.file;
  EXPECT_GT(f.network.efficiency, 0.0);
  EXPECT_LE(f.network.efficiency, 1.05);  // a shaped link delivers at most its rate
  const config::NetworkSpec shipped =
      config::LoadNetworkFile(Root() + "/scenarios/networks/emulated_100mbit.yaml").network;
  EXPECT_EQ(f.network.connections, shipped.connections);
  EXPECT_DOUBLE_EQ(f.network.fairness_alpha, shipped.fairness_alpha);
  EXPECT_DOUBLE_EQ(f.network.ack_path_weight, shipped.ack_path_weight);
  EXPECT_EQ(f.network.burst_bytes, shipped.burst_bytes);
  EXPECT_EQ(f.network.sender_queue_bytes, shipped.sender_queue_bytes);
  EXPECT_EQ(f.network.queue_limit_bytes, shipped.queue_limit_bytes);
  EXPECT_DOUBLE_EQ(f.network.congested_flow_weight, shipped.congested_flow_weight);
  EXPECT_LT(f.network.congested_flow_weight, 1);
  EXPECT_EQ(f.network.initial_window_bytes, shipped.initial_window_bytes);
  EXPECT_GT(f.network.initial_window_bytes, 0);
  EXPECT_EQ(f.network.segment_bytes, shipped.segment_bytes);
  EXPECT_GT(f.network.segment_bytes, 0);
  EXPECT_EQ(f.network.send_buffer_bytes, shipped.send_buffer_bytes);
  EXPECT_GT(f.network.send_buffer_bytes, 0);
  EXPECT_EQ(f.network.loss_packet_bytes, shipped.loss_packet_bytes);
  EXPECT_GT(f.network.loss_packet_bytes, 0);
  EXPECT_EQ(f.network.model, shipped.model);
  // The file's model, not the flow model calibrate-net writes by itself.
  EXPECT_EQ(f.network.model, config::NetworkModelKind::kQueue);
  EXPECT_EQ(f.network.host_cores, shipped.host_cores);
  EXPECT_DOUBLE_EQ(f.network.host_ns_per_byte, shipped.host_ns_per_byte);
  EXPECT_DOUBLE_EQ(f.network.host_wakeup_ns, shipped.host_wakeup_ns);
  EXPECT_DOUBLE_EQ(f.network.host_wakeup_cpu_ns, shipped.host_wakeup_cpu_ns);
  EXPECT_DOUBLE_EQ(f.network.host_kernel_ns_per_byte, shipped.host_kernel_ns_per_byte);
  EXPECT_EQ(f.network.host_byte_cpu, shipped.host_byte_cpu);
  EXPECT_DOUBLE_EQ(f.network.host_tag_ns_per_byte, shipped.host_tag_ns_per_byte);
  EXPECT_GT(f.network.host_wakeup_ns, 0);
  ASSERT_TRUE(f.provenance.count("sharing"));
  EXPECT_NE(f.provenance.at("sharing").find("emulated_100mbit.yaml"), std::string::npos);
  ASSERT_EQ(r.rows.size(), 2u) << r.out;
  constexpr double kBurstBytes = 32768;  // netns-run's tbf burst (its first output line)
  ASSERT_NE(r.out.find("burst 32768"), std::string::npos) << r.out;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const LoopB::Row& row = r.rows[i];
    EXPECT_EQ(row.senders, static_cast<int>(i) + 1) << r.out;
    EXPECT_EQ(row.bytes, 1048576) << r.out;
    EXPECT_NEAR(row.predicted_ms, PredictTransferMs(f.network, row.senders, row.bytes), 1e-3)
        << r.out;
    const double floor_ms = (row.senders * static_cast<double>(row.bytes) - kBurstBytes) * 8 /
                            100e6 * 1e3;
    EXPECT_GT(row.measured_ms, floor_ms) << "faster than the shaped link: " << r.out;
  }
  EXPECT_GE(r.worst, 0.0) << r.out;
}

// Label timing (outside the default suite: its outcome depends on what else the machine runs):
// the same loop, the prediction within 10% of the measurement (the full check, 5%, is
// scripts/calibration-loop's). Run it on a quiet machine: ctest --test-dir build -L timing.
TEST(NetnsRunTiming, CalibratedLinkPredictsTransfersWithinTenPercent) {
  std::string why;
  if (!CanUseNamespaces(&why)) GTEST_SKIP() << why;
  if (!fs::exists(POSEIDON_BIN)) GTEST_SKIP() << "poseidon binary not built at " << POSEIDON_BIN;
  LoopB r;
  if (!RunLoopB(&r)) return;
  EXPECT_GT(r.file.network.efficiency, 0.8);
  ASSERT_EQ(r.rows.size(), 2u) << r.out;
  EXPECT_GE(r.worst, 0.0) << r.out;
  EXPECT_LT(r.worst, 10.0) << r.out;
}

}  // namespace
}  // namespace poseidon::calibration

namespace poseidon::calibration {
namespace {

// `gpu-model compare` reads a measured profile and prices every layer with the cudnn model;
// `gpu-model show` and `check` print their tables; a profile missing a layer gets one line.
TEST(GpuModelCommand, CompareShowAndCheckRun) {
  const std::string bin = POSEIDON_BIN;
  if (!fs::exists(bin)) GTEST_SKIP() << "poseidon binary not built at " << bin;
  int st = 0;
  std::string out = RunCapture(bin + " gpu-model compare " + Root() +
                                   "/scenarios/profiles/fmnist_cnn_cpu_b64.yaml --device v100 2>&1",
                               &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("against the cudnn model for v100"), std::string::npos) << out;
  EXPECT_NE(out.find("total: forward"), std::string::npos) << out;
  out = RunCapture(bin + " gpu-model show resnet50 --device h100 --batch 32 2>&1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("winograd"), std::string::npos) << out;
  out = RunCapture(bin + " gpu-model check --set heldout 2>&1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("heldout  rows 23  fwd+bwd"), std::string::npos) << out;
  // The framework model's whole-iteration rows are reported too, per precision.
  EXPECT_NE(out.find("framework compute model against the whole-iteration rows"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("heldout tf32"), std::string::npos) << out;
  EXPECT_EQ(out.find("fit      all precisions"), std::string::npos) << "--set heldout: " << out;
  // Each row's layout, and the summary per layout: the H200 set's half-precision CNNs in both.
  out = RunCapture(bin + " gpu-model check --compute-model framework " + Root() +
                       "/scenarios/devices/measurements/measured/h200_pytorch_2026-12-04.yaml 2>&1",
                   &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("heldout +resnet50 +h200 +bf16 +nhwc +256 ")))
      << out;
  EXPECT_NE(out.find("per set, precision and layout"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("heldout bf16 nhwc +4 rows")))
      << out;
  // A precision: the framework model, per layer, with the optimizer step and the iteration.
  out = RunCapture(bin + " gpu-model show bert_large --device h100 --batch 64 --precision bf16 "
                         "--optimizer adamw 2>&1",
                   &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("framework compute model, precision bf16"), std::string::npos) << out;
  EXPECT_NE(out.find("optimizer step (adam)"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("l0_fc1 +linear +gemm tc ")))
      << "the per-layer choice: " << out;
  // The GPU's kernel time by kind, which analysis/profile_vs_model.py reads.
  EXPECT_TRUE(std::regex_search(out, std::regex("\nGPU kernels: GEMMs and convolutions [0-9.]+ "
                                                "ms, the rest [0-9.]+ ms, optimizer step [0-9.]+ "
                                                "ms\n")))
      << out;
  // --tokens: a transformer at another length; an image model refuses it.
  const std::string at512 = RunCapture(bin +
                                           " gpu-model show bert_large --device h100 --batch 64 "
                                           "--precision bf16 --tokens 512 2>&1",
                                       &st);
  EXPECT_EQ(st, 0) << at512;
  EXPECT_NE(at512, out);
  out = RunCapture(bin + " gpu-model show resnet50 --device h100 --batch 8 --tokens 12 2>&1", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("--tokens applies to a model of token ids or sequences; 'resnet50' takes "
                     "images"),
            std::string::npos)
      << out;
  // ResNet-50's first convolution has 3 input channels: not aligned for tensor cores.
  out = RunCapture(bin + " gpu-model show resnet50 --device a100 --batch 64 --precision fp16 2>&1",
                   &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("conv1 +conv +implicit_gemm cuda ")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("res2a_branch2b +conv +implicit_gemm tc ")))
      << out;
  out = RunCapture(bin + " gpu-model show bert_large --device v100 --batch 8 --precision bf16 2>&1",
                   &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("v100.yaml: error: device 'v100' cannot run precision bf16"),
            std::string::npos)
      << out;
  // --cuda-version: cuBLAS 10 runs Transformer-XL's 267,735-word output GEMM on CUDA cores; a
  // current release on tensor cores. A release older than the device, or no release, is refused.
  const std::string txl =
      " gpu-model show transformer_xl_base --device v100 --batch 40 "
      "--precision fp16";
  out = RunCapture(bin + txl + " --cuda-version 10.2 2>&1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("precision fp16, nchw, CUDA 10.2"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\\n[a-z_]+ +linear +gemm cuda "))) << out;
  out = RunCapture(bin + txl + " 2>&1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_FALSE(std::regex_search(out, std::regex("\\n[a-z_]+ +linear +gemm cuda "))) << out;
  out = RunCapture(bin +
                       " gpu-model show resnet50 --device h100 --batch 8 --precision bf16 "
                       "--cuda-version 11.2 2>&1",
                   &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("h100.yaml: error: device 'h100' needs CUDA 11.8 or later, but cuda_version "
                     "is 11.2"),
            std::string::npos)
      << out;
  out = RunCapture(bin + txl + " --cuda-version ten 2>&1", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("--cuda-version 'ten' is not a CUDA release"), std::string::npos) << out;
  fs::path dir = TempDir("gpucmp");
  const std::string bad = (dir / "p.yaml").string();
  std::ofstream(bad) << "schema_version: 1\nmodel: fmnist_cnn\nbatch: 64\ndevice: x\n"
                        "backend: synthetic\nprovenance: {note: test}\n"
                        "layers:\n  - {name: conv1, fwd_ms: 1, bwd_ms: 1}\n";
  out = RunCapture(bin + " gpu-model compare " + bad + " --device v100 2>&1", &st);
  EXPECT_EQ(st, 2) << out;
  EXPECT_NE(out.find("has no times for layer"), std::string::npos) << out;
}

}  // namespace
}  // namespace poseidon::calibration
