// sim/reproduce.h: the 1-GPU calibration, the rows and summary of a small hand-made measurement
// file against direct simulations, skipped rows with their reasons, and located errors.
#include "sim/reproduce.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "config/scenario.h"
#include "config/yaml_reader.h"

namespace poseidon::sim {
namespace {

const char* kScenario = R"(schema_version: 1
name: tiny
model: cifar10_quick
batch_per_worker: 50
iterations: 3
warmup_iterations: 1
seed: 1
cluster:
  machines: 2
  device: k20
  network: {topology: star, bandwidth_gbps: 10, latency_us: 5}
protocol:
  dwbp: true
  scheme: ps
)";

const char* kHead = R"(schema_version: 1
sources:
  src: {title: "hand-made"}
setups:
  tiny:
    device: k20
    systems: {tf_ps: "parameter servers"}
    scenario: tiny.yaml
  later:
    scenario: "none yet"
measurements:
)";

std::string Row(const std::string& set, const std::string& setup, const std::string& system,
                const std::string& model, int machines, const std::string& figure) {
  return "  - {set: " + set + ", model: " + model + ", setup: " + setup + ", system: " + system +
         ", machines: " + std::to_string(machines) + ", gpus_per_machine: 1, gpus: " +
         std::to_string(machines) + ", batch_per_gpu: 50, precision: fp32, " + figure +
         ", source: src, ref: r, transcribed_from: table}\n";
}

class ReproduceFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("poseidon_reproduce_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream((dir_ / "tiny.yaml").string()) << kScenario;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& text) {
    const std::string path = (dir_ / "m.yaml").string();
    std::ofstream(path) << text;
    return path;
  }
  std::string Error(const std::string& text) {
    try {
      RunReproduce({Write(text)}, {}, 1);
    } catch (const config::ConfigError& e) {
      return e.what();
    }
    return "";
  }
  // `simulate tiny.yaml --set ...` with the given keys: the job's samples/s.
  double Direct(const std::vector<std::string>& keys) {
    const config::ScenarioSpec s = config::LoadScenarioFile((dir_ / "tiny.yaml").string(), keys);
    SimOptions o;
    o.baseline = false;
    return SimulateScenario(s, o).throughput;
  }
  std::filesystem::path dir_;
};

TEST_F(ReproduceFile, ComputeScaleSlowsComputeByItsFactor) {
  const std::vector<std::string> one = {"cluster.machines=1"};
  std::vector<std::string> two = one;
  two.push_back("cluster.compute_scale=2");
  // One machine, its shard local: the iteration is the compute (and the local update).
  const double ratio = Direct(one) / Direct(two);
  EXPECT_GT(ratio, 1.8);
  EXPECT_LE(ratio, 2.0 + 1e-9);
  // Absent and 1 are the same run.
  std::vector<std::string> unit = one;
  unit.push_back("cluster.compute_scale=1");
  EXPECT_EQ(Direct(one), Direct(unit));
}

TEST_F(ReproduceFile, CalibratesOneGpuAndPredictsTheRest) {
  const std::string text = std::string(kHead) +
                           Row("calibration", "tiny", "single_gpu", "cifar10_quick", 1,
                               "samples_per_s: 1000") +
                           Row("fit", "tiny", "tf_ps", "cifar10_quick", 2, "samples_per_s: 1900") +
                           Row("heldout", "tiny", "tf_ps", "cifar10_quick", 4,
                               "samples_per_s: 100000") +
                           Row("fit", "tiny", "tf_ps", "no_such_model", 2, "samples_per_s: 10") +
                           Row("heldout", "later", "single_gpu", "cifar10_quick", 2,
                               "samples_per_s: 10");
  const ReproduceResult r = RunReproduce({Write(text)}, {}, 2);
  ASSERT_EQ(r.rows.size(), 5u);
  const ReproduceRow& cal = r.rows[0];
  ASSERT_TRUE(cal.ran) << cal.reason;
  EXPECT_NEAR(cal.predicted, 1000, 1000 * 1e-6);
  EXPECT_NE(cal.compute_scale, 1.0);
  EXPECT_EQ(cal.m.line, 12);

  // The other rows: the setup scenario with the row's keys and the series' scale, nothing else.
  for (int i : {1, 2}) {
    const ReproduceRow& row = r.rows[static_cast<size_t>(i)];
    ASSERT_TRUE(row.ran) << row.reason;
    EXPECT_EQ(row.compute_scale, cal.compute_scale);
    const double expected = Direct(row.overrides);
    EXPECT_EQ(row.predicted, expected);
    EXPECT_DOUBLE_EQ(row.error_pct, 100 * (expected - row.m.published) / row.m.published);
    bool has_scale = false;
    for (const auto& k : row.overrides) has_scale |= k.rfind("cluster.compute_scale=", 0) == 0;
    EXPECT_TRUE(has_scale);
    // TensorFlow's parameter servers: every tensor a process receives costs it gRPC's CPU per
    // byte (kTensorFlowGrpcNsPerByte); without that key the same row runs faster.
    std::vector<std::string> free_rpc;
    for (const auto& k : row.overrides) {
      if (k.rfind("cluster.network.process_ns_per_byte=", 0) != 0) free_rpc.push_back(k);
    }
    ASSERT_EQ(free_rpc.size() + 1, row.overrides.size());
    EXPECT_GT(Direct(free_rpc), expected);
  }
  EXPECT_FALSE(r.rows[3].ran);
  EXPECT_NE(r.rows[3].reason.find("model 'no_such_model'"), std::string::npos) << r.rows[3].reason;
  EXPECT_FALSE(r.rows[4].ran);
  EXPECT_NE(r.rows[4].reason.find("setup 'later' has no scenario"), std::string::npos)
      << r.rows[4].reason;

  // Summary: one fit point, one held-out point (100000/s is far above: not optimistic).
  ASSERT_GE(r.summary.size(), 2u);
  EXPECT_EQ(r.summary[0].group, "fit");
  EXPECT_EQ(r.summary[0].points, 1);
  EXPECT_DOUBLE_EQ(r.summary[0].median_abs_pct, std::fabs(r.rows[1].error_pct));
  EXPECT_DOUBLE_EQ(r.summary[0].max_abs_pct, std::fabs(r.rows[1].error_pct));
  EXPECT_EQ(r.summary[0].optimistic, r.rows[1].predicted > 1900 ? 1 : 0);
  EXPECT_EQ(r.summary[1].group, "heldout");
  EXPECT_EQ(r.summary[1].points, 1);
  EXPECT_EQ(r.summary[1].optimistic, 0);
  EXPECT_EQ(r.summary.back().group, "system tf_ps");
  EXPECT_EQ(r.summary.back().points, 2);
  // Per setup on more than one machine, fit and held-out together.
  const auto setup = std::find_if(r.summary.begin(), r.summary.end(), [](const auto& g) {
    return g.group == "setup tiny, multi-machine";
  });
  ASSERT_NE(setup, r.summary.end());
  EXPECT_EQ(setup->points, 2);
  EXPECT_DOUBLE_EQ(setup->max_abs_pct,
                   std::max(std::fabs(r.rows[1].error_pct), std::fabs(r.rows[2].error_pct)));

  // Same bytes on one thread; the skipped rows are listed with their reasons.
  const std::string table = FormatReproduce(r, OutputFormat::kTable);
  EXPECT_EQ(table, FormatReproduce(RunReproduce({Write(text)}, {}, 1), OutputFormat::kTable));
  EXPECT_NE(table.find("Skipped rows (2)"), std::string::npos) << table;
  const std::string csv = FormatReproduce(r, OutputFormat::kCsv);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 6);
}

// A setup's `settings`: a matching row runs with their keys after the system's (and the run is
// that of `simulate` with them); a row of another model, precision or system does not get them.
TEST_F(ReproduceFile, SettingsApplyToTheRowsTheyName) {
  std::string head = kHead;
  const std::string at = "    scenario: tiny.yaml\n";
  head.replace(
      head.find(at), at.size(),
      at + "    settings:\n"
           "      - {models: [cifar10_quick], systems: [tf_ps], set: [protocol.dwbp=false], "
           "source: \"hand-made\"}\n"
           "      - {precisions: fp16, set: [cluster.servers=1], source: \"hand-made\"}\n");
  const std::string text =
      head + Row("calibration", "tiny", "single_gpu", "cifar10_quick", 1, "samples_per_s: 1000") +
      Row("fit", "tiny", "tf_ps", "cifar10_quick", 2, "samples_per_s: 1900");
  const ReproduceResult r = RunReproduce({Write(text)}, {}, 1);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_TRUE(r.rows[0].m.setting_keys.empty());  // single_gpu is not listed; fp32 is not fp16
  EXPECT_EQ(r.rows[1].m.setting_keys, std::vector<std::string>{"protocol.dwbp=false"});
  ASSERT_TRUE(r.rows[1].ran) << r.rows[1].reason;
  const auto& o = r.rows[1].overrides;
  EXPECT_NE(std::find(o.begin(), o.end(), "protocol.dwbp=false"), o.end());
  EXPECT_EQ(r.rows[1].predicted, Direct(o));
  // The setting moves the prediction: DWBP off is slower on this job.
  std::vector<std::string> without;
  for (const auto& k : o) {
    if (k != "protocol.dwbp=false") without.push_back(k);
  }
  EXPECT_GT(Direct(without), r.rows[1].predicted);
}

TEST_F(ReproduceFile, MalformedSettingsGiveOneLocatedLine) {
  const std::string row =
      Row("calibration", "tiny", "single_gpu", "cifar10_quick", 1, "samples_per_s: 1000");
  const std::string at = "    scenario: tiny.yaml\n";
  struct Case {
    std::string settings, what;
  };
  const std::vector<Case> cases = {
      {"    settings: {set: x}\n", "must be a list"},
      {"    settings:\n      - {set: [protocol.dwbp], source: s}\n", "is not KEY=VALUE"},
      {"    settings:\n      - {set: [a=b]}\n", "source"},
      {"    settings:\n      - {source: s}\n", "without 'set'"},
      {"    settings:\n      - {systems: [ddp_nccl], set: [a=b], source: s}\n",
       "system 'ddp_nccl' is not one of the setup's systems"},
      {"    settings:\n      - {precisions: [fp8], set: [a=b], source: s}\n", "precision 'fp8'"},
      {"    settings:\n      - {set: [a=b], source: s, when: x}\n", "unknown key 'when'"},
  };
  for (const Case& c : cases) {
    std::string head = kHead;
    head.replace(head.find(at), at.size(), at + c.settings);
    const std::string e = Error(head + row);
    EXPECT_NE(e.find("m.yaml:"), std::string::npos) << e;
    EXPECT_NE(e.find(c.what), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST_F(ReproduceFile, MalformedFilesGiveOneLocatedLine) {
  const std::string cal =
      Row("calibration", "tiny", "single_gpu", "cifar10_quick", 1, "samples_per_s: 1000");
  struct Case {
    std::string text, where, what;
  };
  const std::vector<Case> cases = {
      {std::string(kHead) + cal + Row("fit", "tiny", "tf_ps", "cifar10_quick", 2, "note: x"),
       "m.yaml:13:5: error:", "without a figure"},
      {std::string(kHead) + Row("fit", "tinny", "tf_ps", "cifar10_quick", 2, "speedup: 2"),
       "m.yaml:12:45: error:", "unknown setup 'tinny' (did you mean 'tiny'?)"},
      {std::string(kHead) + "  - {set: fit, model: [\n", "m.yaml:", "error"},
  };
  for (const Case& c : cases) {
    const std::string e = Error(c.text);
    EXPECT_NE(e.find(c.where), std::string::npos) << e;
    EXPECT_NE(e.find(c.what), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// The systems that move bytes through a CPU pay it per received byte: Horovod over MPI (by the
// row's transport: TCP's figure, or shared memory's under RDMA) and TensorFlow's gRPC; NCCL's
// systems do not.
TEST(SystemOverrides, CpuPathsPayPerReceivedByte) {
  auto cost = [](const std::string& system, const std::string& transport) {
    bool known = false;
    const std::vector<std::string> o = SystemOverrides(system, 4, transport, &known);
    EXPECT_TRUE(known) << system;
    const std::string key = "cluster.network.process_ns_per_byte=";
    for (const std::string& k : o) {
      if (k.rfind(key, 0) == 0) return std::stod(k.substr(key.size()));
    }
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(cost("horovod_mpi", "tcp"), kOpenMpiTcpNsPerByte);
  EXPECT_DOUBLE_EQ(cost("horovod_mpi", "rdma"), kOpenMpiShmNsPerByte);
  EXPECT_DOUBLE_EQ(cost("tf_ps", "tcp"), kTensorFlowGrpcNsPerByte);
  EXPECT_EQ(cost("horovod_nccl", "tcp"), 0);
  EXPECT_EQ(cost("ddp_nccl", "rdma"), 0);
  bool known = true;
  EXPECT_TRUE(SystemOverrides("no_such_system", 1, "", &known).empty());
  EXPECT_FALSE(known);
}

// The Poseidon papers' plain parameter server splits every blob over the shards (Bosen's rows, the
// ATC'17 prototype's chunks) and pushes after the backward pass: balanced, no DWBP, no SACP.
TEST(SystemOverrides, CaffePsSplitsBlobsAndWaitsForTheBackwardPass) {
  bool known = false;
  const std::vector<std::string> o = SystemOverrides("caffe_ps", 16, "tcp", &known);
  EXPECT_TRUE(known);
  auto has = [&o](const std::string& k) { return std::find(o.begin(), o.end(), k) != o.end(); };
  EXPECT_TRUE(has("protocol.placement_policy=balanced"));
  EXPECT_TRUE(has("protocol.dwbp=false"));
  EXPECT_TRUE(has("protocol.scheme=ps"));
  EXPECT_FALSE(has("protocol.placement_policy=round_robin"));
}

}  // namespace
}  // namespace poseidon::sim
