// Scenario and sweep files: good ones load; each class of bad input gives one located message.
#include "config/scenario.h"

#include "config/job_config.h"
#include "config/model_loader.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace poseidon::config {
namespace {

const std::string kSrc = POSEIDON_SOURCE_DIR;

// Writes `text` as a scenario next to the built-in ones (so names resolve) and loads it.
const char* kGood = R"(schema_version: 1
model: cifar10_quick
batch_per_worker: 50
cluster:
  workers: 4
  device: k20
  network:
    bandwidth_gbps: 10
)";

class ScenarioFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("poseidon_scenario_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& text) {
    std::string path = (dir_ / "s.yaml").string();
    std::ofstream(path) << text;
    return path;
  }
  // The message of the ConfigError that loading `text` throws ("" if none).
  std::string Error(const std::string& text, const std::vector<std::string>& sets = {}) {
    try {
      LoadScenarioFile(Write(text), sets);
    } catch (const ConfigError& e) {
      return e.what();
    } catch (const core::ModelError& e) {
      return e.what();
    }
    return "";
  }
  // kGood with `cluster.KEY: VALUE` appended refuses each of `bad` in one line at that key.
  void ExpectClusterKeyRefused(const std::string& key, std::initializer_list<const char*> bad) {
    for (const char* value : bad) {
      const std::string e = Error(std::string(kGood) + "  " + key + ": " + value + "\n");
      EXPECT_NE(e.find("s.yaml:9:"), std::string::npos) << e;
      EXPECT_NE(e.find(key), std::string::npos) << e;
      EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
  }
  std::filesystem::path dir_;
};

// cluster.compute_scale: 1 exactly when absent; a factor > 0 when given; <= 0 is one located line.
TEST_F(ScenarioFile, ComputeScaleDefaultsToOneAndRejectsNonPositive) {
  EXPECT_EQ(LoadScenarioFile(Write(kGood)).compute_scale, 1.0);
  const std::string scaled = std::string(kGood) + "  compute_scale: 1.75\n";
  EXPECT_EQ(LoadScenarioFile(Write(scaled)).compute_scale, 1.75);
  ExpectClusterKeyRefused("compute_scale", {"0", "-2"});
}

// cluster.input_samples_per_s: 0 (no limit) when absent; a rate >= 0 when given; a negative one, or
// one that is not a number, is one located line.
TEST_F(ScenarioFile, InputPipelineRateDefaultsToNoLimit) {
  EXPECT_EQ(LoadScenarioFile(Write(kGood)).input_samples_per_s, 0.0);
  const std::string fed = std::string(kGood) + "  input_samples_per_s: 2800\n";
  EXPECT_EQ(LoadScenarioFile(Write(fed)).input_samples_per_s, 2800.0);
  ExpectClusterKeyRefused("input_samples_per_s", {"-1", "fast"});
}

TEST_F(ScenarioFile, GoodScenarioLoadsWithDefaults) {
  ScenarioSpec s = LoadScenarioFile(Write(kGood));
  EXPECT_EQ(s.workers, 4);
  EXPECT_EQ(s.servers, 4);
  EXPECT_EQ(s.placement, ServerPlacement::kColocated);
  EXPECT_EQ(s.model.name, "cifar10_quick");
  ASSERT_TRUE(s.device.has_value());
  EXPECT_DOUBLE_EQ(s.network.host_bandwidth_Bps, 10e9 / 8);
  EXPECT_EQ(s.network.latency_ns, 5000);
  EXPECT_EQ(s.network.connections, ConnectionKind::kMachinePair);
  EXPECT_TRUE(s.dwbp);
  EXPECT_EQ(s.chunk_bytes, 512 * 1024);
}

TEST_F(ScenarioFile, ShippedScenariosLoad) {
  for (const char* f : {"/scenarios/demo.yaml", "/tests/golden/small.yaml"}) {
    EXPECT_NO_THROW(LoadScenarioFile(kSrc + f)) << f;
  }
}

// A scenario far larger than any real one (here 17 MiB of comments) is refused before it is read
// or parsed, naming the file and the override; POSEIDON_MAX_FILE_MIB raises the limit.
TEST_F(ScenarioFile, OversizedFileIsRefusedBeforeParsing) {
  std::string text = kGood;
  text += "# " + std::string(17u << 20, 'x') + "\n";
  const std::string path = Write(text);
  const std::string err = Error(text);
  EXPECT_NE(err.find(path + ": error: " + std::to_string(text.size()) +
                     " bytes, more than the 16 MiB a scenario, model, device or profile file may "
                     "have; is it the right file? (POSEIDON_MAX_FILE_MIB=N raises the limit)"),
            std::string::npos)
      << err.substr(0, 300);
  ::setenv("POSEIDON_MAX_FILE_MIB", "32", 1);
  EXPECT_EQ(Error(text), "");
  ::setenv("POSEIDON_MAX_FILE_MIB", "lots", 1);
  EXPECT_NE(Error(kGood).find("POSEIDON_MAX_FILE_MIB='lots' is not a size in MiB"),
            std::string::npos);
  ::unsetenv("POSEIDON_MAX_FILE_MIB");
}

TEST_F(ScenarioFile, SyntaxErrorNamesLineAndColumn) {
  std::string e = Error("schema_version: 1\nmodel: [cifar10_quick\nbatch_per_worker: 5\n");
  EXPECT_NE(e.find("s.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("YAML syntax"), std::string::npos) << e;
}

TEST_F(ScenarioFile, UnknownKeySuggestsTheUnitKey) {
  std::string text = kGood;
  text.replace(text.find("bandwidth_gbps"), 14, "bandwidth");
  std::string e = Error(text);
  EXPECT_NE(e.find("s.yaml:8:5: error: unknown key 'bandwidth'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'bandwidth_gbps'"), std::string::npos) << e;
}

TEST_F(ScenarioFile, MissingRequiredField) {
  std::string text = kGood;
  text.erase(text.find("batch_per_worker: 50\n"), 21);
  std::string e = Error(text);
  EXPECT_NE(e.find("s.yaml:1:1: error: scenario is missing required key 'batch_per_worker'"),
            std::string::npos)
      << e;
}

TEST_F(ScenarioFile, MistypedValue) {
  std::string text = kGood;
  text.replace(text.find("workers: 4"), 10, "workers: four");
  std::string e = Error(text);
  EXPECT_NE(e.find("s.yaml:5:12: error: workers: expected an integer, got 'four'"),
            std::string::npos)
      << e;
}

TEST_F(ScenarioFile, ValueWithUnitsInTheValue) {
  std::string text = kGood;
  text.replace(text.find("bandwidth_gbps: 10"), 18, "bandwidth_gbps: 10Gbps");
  std::string e = Error(text);
  EXPECT_NE(e.find("s.yaml:8:21: error: bandwidth_gbps: expected a number, got '10Gbps'"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("units go in the key name"), std::string::npos) << e;
}

TEST_F(ScenarioFile, NonPositiveValue) {
  std::string text = kGood;
  text.replace(text.find("workers: 4"), 10, "workers: 0");
  EXPECT_NE(Error(text).find("'workers' must be a positive integer"), std::string::npos);
}

TEST_F(ScenarioFile, UnknownModelListsKnownOnes) {
  std::string text = kGood;
  text.replace(text.find("cifar10_quick"), 13, "alexnt");
  std::string e = Error(text);
  EXPECT_NE(e.find("s.yaml:2:8: error: unknown model 'alexnt' (did you mean 'alexnet'?)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("vgg16"), std::string::npos) << e;
}

// Found by fuzz/scenario_fuzz (fuzz/regressions/scenario_fuzz/model_name_too_long): a model name
// longer than the file system's NAME_MAX made std::filesystem throw filesystem_error out of the
// parser instead of the ConfigError every bad scenario gets.
TEST_F(ScenarioFile, OverlongModelNameIsAnUnknownModel) {
  std::string text = kGood;
  text.replace(text.find("cifar10_quick"), 13, std::string(300, 'm'));
  EXPECT_NE(Error(text).find("s.yaml:2:8: error: unknown model 'mmmm"), std::string::npos);
}

TEST_F(ScenarioFile, UnknownChoiceListsChoices) {
  std::string text = std::string(kGood) + "    topology: ring\n";
  std::string e = Error(text);
  EXPECT_NE(e.find("unknown topology 'ring'"), std::string::npos) << e;
  EXPECT_NE(e.find("star, leaf_spine"), std::string::npos) << e;
}

// protocol.gradient_wire: fp32 by default; fp16 and bf16 by name, in the file or by --set; an
// unknown format is one located line listing the known ones; a misspelt key gets a suggestion;
// a 16-bit wire with an fp64 model is refused at the key.
TEST_F(ScenarioFile, GradientWire) {
  EXPECT_EQ(LoadScenarioFile(Write(kGood)).gradient_wire, "fp32");
  for (const char* w : {"fp32", "fp16", "bf16"}) {
    ScenarioSpec s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  gradient_wire: " + w + "\n"));
    EXPECT_EQ(s.gradient_wire, w);
    EXPECT_EQ(LoadScenarioFile(Write(kGood), {std::string("protocol.gradient_wire=") + w}).gradient_wire, w);
  }
  std::string e = Error(std::string(kGood) + "protocol:\n  dwbp: true\n  gradient_wire: fp8\n");
  EXPECT_NE(e.find("s.yaml:11:18: error: unknown gradient_wire 'fp8'"), std::string::npos) << e;
  EXPECT_NE(e.find("known: fp32, fp16, bf16"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;  // one line
  e = Error(std::string(kGood) + "protocol:\n  gradient_wires: fp16\n");
  EXPECT_NE(e.find("s.yaml:10:3: error: unknown key 'gradient_wires'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'gradient_wire'"), std::string::npos) << e;
  try {
    LoadScenarioFile(Write(kGood), {"protocol.gradient_wire=half"});
    FAIL() << "no error";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("unknown gradient_wire 'half'"), std::string::npos)
        << err.what();
  }
  // fp64 values cannot go as 16-bit ones.
  std::ofstream(dir_ / "m64.yaml")
      << "schema_version: 1\nname: m64\ninput: {channels: 1, height: 4, width: 4}\n"
         "num_classes: 2\nvalue_words: 2\nlayers:\n  - {name: fc1, type: fc, num_output: 2}\n"
         "  - {name: loss, type: softmax_loss}\n";
  std::string text = kGood;
  text.replace(text.find("model: cifar10_quick"), 20, "model: " + (dir_ / "m64.yaml").string());
  EXPECT_EQ(Error(text + "protocol:\n  gradient_wire: fp32\n"), "");
  e = Error(text + "protocol:\n  gradient_wire: bf16\n");
  EXPECT_NE(e.find("s.yaml:10:18: error: gradient_wire bf16 sends gradients as 16-bit values, "
                   "which needs an fp32 model, but model 'm64' holds fp64 values"),
            std::string::npos)
      << e;
  // The core's config; a model the workers bring (model: torch) is checked when it arrives.
  ScenarioSpec s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  gradient_wire: fp16\n"));
  EXPECT_EQ(BuildProtocol(s, BuildScenarioModel(s), false).gradient_wire, core::WireFormat::kFp16);
  s.model = LoadModelFile((dir_ / "m64.yaml").string());
  try {
    BuildProtocol(s, BuildScenarioModel(s), false);
    FAIL() << "no error";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("s.yaml:10:3: error: protocol.gradient_wire fp16"),
              std::string::npos)
        << err.what();
  }
}

// protocol.baseline (core/collectives.h): ddp and horovod with the systems' defaults, their
// settings by key; bad input is one located line each: an unknown baseline, a bucket size of 0,
// a fusion threshold below the model's smallest gradient tensor, a scheme beside a baseline.
TEST_F(ScenarioFile, Baselines) {
  ScenarioSpec s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  baseline: ddp\n"));
  core::ProtocolConfig p = BuildProtocol(s, BuildScenarioModel(s), false);
  EXPECT_EQ(p.baseline.kind, core::Baseline::kDdp);
  EXPECT_EQ(p.baseline.bucket_cap_bytes, 25 << 20);
  EXPECT_EQ(p.baseline.first_bucket_bytes, 1 << 20);
  const core::Model cifar = BuildScenarioModel(s);
  for (int l : cifar.param_layers()) EXPECT_EQ(p.SchemeOf(l), core::Scheme::kAllreduce);
  s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  baseline: ddp\n  ddp: "
                             "{bucket_cap_mib: 0.5, first_bucket_mib: 0.25}\n"));
  p = BuildProtocol(s, BuildScenarioModel(s), false);
  EXPECT_EQ(p.baseline.bucket_cap_bytes, 512 << 10);
  EXPECT_EQ(p.baseline.first_bucket_bytes, 256 << 10);
  s = LoadScenarioFile(Write(kGood), {"protocol.baseline=horovod", "protocol.horovod.cycle_ms=5"});
  p = BuildProtocol(s, BuildScenarioModel(s), false);
  EXPECT_EQ(p.baseline.kind, core::Baseline::kHorovod);
  EXPECT_EQ(p.baseline.fusion_threshold_bytes, int64_t{128} << 20);
  EXPECT_EQ(p.baseline.cycle_ns, 5'000'000);
  EXPECT_EQ(BuildProtocol(LoadScenarioFile(Write(kGood)), BuildScenarioModel(s), false).baseline.kind,
            core::Baseline::kNone);
  // A null baseline is none, as an absent one (`poseidon compare` turns a baseline's scenario
  // into Poseidon's with --set protocol.baseline=null --set protocol.ddp=null).
  s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  baseline: ddp\n  ddp: "
                             "{bucket_cap_mib: 4}\n"),
                       {"protocol.baseline=null", "protocol.ddp=null"});
  EXPECT_EQ(s.baseline, "");
  EXPECT_EQ(BuildProtocol(s, BuildScenarioModel(s), false).baseline.kind, core::Baseline::kNone);

  auto one_line = [](const std::string& e, const std::string& want) {
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  one_line(Error(std::string(kGood) + "protocol:\n  baseline: nccl\n"),
           "s.yaml:10:13: error: unknown baseline 'nccl'; known: ddp, horovod");
  one_line(Error(std::string(kGood) + "protocol:\n  baseline: ddp\n  ddp:\n    bucket_cap_mib: 0\n"),
           "s.yaml:12:21: error: bucket_cap_mib must be > 0, got 0");
  one_line(Error(std::string(kGood) + "protocol:\n  baseline: ddp\n  ddp: {first_bucket_mib: 0}\n"),
           "error: first_bucket_mib must be > 0, got 0");
  one_line(Error(std::string(kGood) + "protocol:\n  scheme: auto\n  baseline: ddp\n"),
           "s.yaml:10:11: error: baseline ddp all-reduces every layer's gradient, so "
           "protocol.scheme auto does not apply");
  one_line(Error(std::string(kGood) + "protocol:\n  horovod: {cycle_ms: 2}\n"),
           "error: protocol.horovod sets baseline horovod's parameters, but the scenario runs no "
           "baseline");
  EXPECT_EQ(Error(std::string(kGood) + "protocol:\n  scheme: allreduce\n  baseline: ddp\n"), "");
  // cifar10_quick's smallest gradient tensor is ip2's bias: 10 values, 40 bytes. The threshold
  // is checked against the built model (BuildProtocol), at the key.
  s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  baseline: horovod\n  horovod:\n"
                             "    fusion_threshold_mib: 0.00003\n"));
  try {
    BuildProtocol(s, BuildScenarioModel(s), false);
    FAIL() << "no error";
  } catch (const ConfigError& err) {
    one_line(err.what(), "s.yaml:12:27: error: protocol.horovod.fusion_threshold_mib 3e-05 (31 "
                         "bytes) is below the smallest gradient tensor of model 'cifar10_quick' "
                         "(ip2.bias, 40 bytes)");
  }
  s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  baseline: horovod\n  horovod:\n"
                             "    fusion_threshold_mib: 0.00004\n"));
  EXPECT_EQ(BuildProtocol(s, BuildScenarioModel(s), false).baseline.fusion_threshold_bytes, 42);

  // protocol.allreduce_algorithm: ring by default, tree on 2+ machines of a baseline.
  s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  baseline: ddp\n"));
  EXPECT_EQ(BuildProtocol(s, BuildScenarioModel(s), false).baseline.algorithm,
            core::AllreduceAlgorithm::kRing);
  s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  baseline: horovod\n"
                             "  allreduce_algorithm: tree\n"));
  EXPECT_EQ(BuildProtocol(s, BuildScenarioModel(s), false).baseline.algorithm,
            core::AllreduceAlgorithm::kTree);
  one_line(Error(std::string(kGood) + "protocol:\n  baseline: ddp\n  allreduce_algorithm: "
                                      "halving\n"),
           "s.yaml:11:24: error: unknown allreduce_algorithm 'halving'; known: ring, tree, "
           "auto");
  // auto: NCCL's own choice, on one machine too (where it is always the ring).
  s = LoadScenarioFile(Write(std::string(kGood) + "protocol:\n  baseline: ddp\n"
                             "  allreduce_algorithm: auto\n"),
                       {"cluster.machines=1"});
  EXPECT_EQ(BuildProtocol(s, BuildScenarioModel(s), false).baseline.algorithm,
            core::AllreduceAlgorithm::kAuto);
  one_line(Error(std::string(kGood) + "protocol:\n  allreduce_algorithm: tree\n"),
           "s.yaml:10:24: error: protocol.allreduce_algorithm chooses how a baseline's "
           "collectives all-reduce (NCCL_ALGO), but the scenario runs no baseline");
  const std::string one_machine =
      Error(std::string(kGood) + "protocol:\n  baseline: ddp\n  allreduce_algorithm: tree\n",
            {"cluster.machines=1"});
  one_line(one_machine, "s.yaml:11:24: error: allreduce_algorithm: tree joins machines by NCCL's "
                        "double binary tree, but the cluster has 1 machine");
}

// What NCCL's tuning model reads of a cluster (BuildNcclTopology): the job's processes and
// machines, the NIC, the interconnect (NVLink, else PCIe) and the device's generation.
TEST(NcclTopologyOf, ReadsTheClusterAsNcclsSearchWould) {
  const std::string dir = std::string(POSEIDON_SOURCE_DIR) + "/scenarios/experiments/";
  ScenarioSpec s = LoadScenarioFile(dir + "hybrid_v100_25g.yaml",
                                    {"cluster.client=device", "cluster.machines=4"});
  core::NcclTopology t = BuildNcclTopology(s);
  EXPECT_EQ(t.ranks, 32);
  EXPECT_EQ(t.nodes, 4);
  EXPECT_DOUBLE_EQ(t.net_GBps, 25.0 / 8);
  EXPECT_TRUE(t.intra_nvlink);
  EXPECT_DOUBLE_EQ(t.intra_GBps, 150);  // dgx1_v100.yaml: six NVLink 2 links of 25 GB/s
  EXPECT_EQ(t.generation, core::NcclGeneration::kVolta);
  EXPECT_DOUBLE_EQ(t.net_overhead_us, 1);  // two Xeon E5-2698 v4
  s = LoadScenarioFile(dir + "hybrid_h100_400g.yaml", {"cluster.client=device"});
  t = BuildNcclTopology(s);
  EXPECT_EQ(t.generation, core::NcclGeneration::kHopper);
  EXPECT_DOUBLE_EQ(t.net_GBps, 50);
  // A DGX A100's two AMD EPYC 7742: NCCL's network post overhead is 2 us there.
  s = LoadScenarioFile(dir + "hybrid_a100_100g.yaml", {"cluster.client=device"});
  t = BuildNcclTopology(s);
  EXPECT_EQ(t.generation, core::NcclGeneration::kAmpere);
  EXPECT_DOUBLE_EQ(t.net_overhead_us, 2);
  // One process per machine: the NIC is the only path.
  s = LoadScenarioFile(dir + "ddp_v100_25g.yaml");
  t = BuildNcclTopology(s);
  EXPECT_EQ(t.ranks, 8);
  EXPECT_EQ(t.nodes, 8);
  EXPECT_DOUBLE_EQ(t.intra_GBps, t.net_GBps);
}

// cluster.local_copies: interconnect times the copies between the processes of one machine's
// devices; it needs client: device and several devices (one located line otherwise), and then the
// interconnect is resolved as for the three-level hybrid (a GPU machine must name it).
TEST_F(ScenarioFile, LocalCopies) {
  const std::string gpus = R"(schema_version: 1
model: resnet50
batch_per_worker: 32
cluster:
  machines: 2
  devices_per_machine: 4
  device: v100
  network:
    bandwidth_gbps: 25
)";
  ScenarioSpec s = LoadScenarioFile(Write(gpus + "  client: device\n  interconnect: dgx1_v100\n"));
  EXPECT_FALSE(s.local_copies_timed);
  s = LoadScenarioFile(Write(gpus + "  client: device\n  interconnect: dgx1_v100\n"
                                    "  local_copies: interconnect\n"));
  EXPECT_TRUE(s.local_copies_timed);
  EXPECT_GT(s.interconnect.pcie_Bps, 0);  // resolved from the device as for client: machine
  std::string e = Error(gpus + "  interconnect: dgx1_v100\n  local_copies: interconnect\n");
  EXPECT_NE(e.find("s.yaml:11:17: error: 'local_copies: interconnect' times the messages between "
                   "the processes of one machine's devices: it needs client: device"),
            std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  e = Error(gpus + "  client: device\n  local_copies: interconnect\n");
  EXPECT_NE(e.find("GPUs per machine need 'interconnect'"), std::string::npos) << e;
  e = Error(gpus + "  client: device\n  interconnect: dgx1_v100\n  local_copies: nvlink\n");
  EXPECT_NE(e.find("s.yaml:12:"), std::string::npos) << e;
  EXPECT_NE(e.find("free, interconnect"), std::string::npos) << e;
}

TEST_F(ScenarioFile, ConnectionsChoice) {
  ScenarioSpec s = LoadScenarioFile(Write(std::string(kGood) + "    connections: process_pair\n"));
  EXPECT_EQ(s.network.connections, ConnectionKind::kProcessPair);
  std::string e = Error(std::string(kGood) + "    connections: per_socket\n");
  EXPECT_NE(e.find("s.yaml:9:"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown connections 'per_socket'"), std::string::npos) << e;
  EXPECT_NE(e.find("machine_pair, process_pair"), std::string::npos) << e;
}

TEST_F(ScenarioFile, MissingDeviceAndProfile) {
  std::string text = kGood;
  text.erase(text.find("  device: k20\n"), 14);
  EXPECT_NE(Error(text).find("cluster needs a 'device'"), std::string::npos);
}

TEST_F(ScenarioFile, ComputeModelAndCudnnVersionOverrideTheDevice) {
  auto with = [](const std::string& lines) {
    std::string text = kGood;
    text.insert(text.find("  network:"), lines);
    return text;
  };
  ScenarioSpec s = LoadScenarioFile(Write(with("  compute_model: roofline\n  cudnn_version: \"2.0\"\n")));
  EXPECT_EQ(s.device->compute_model, DeviceComputeModel::kRoofline);
  EXPECT_EQ(s.device->cudnn_version, 20);
  EXPECT_EQ(LoadScenarioFile(Write(kGood)).device->compute_model, DeviceComputeModel::kCudnn);
  std::string e = Error(with("  cudnn_version: R2\n"));
  EXPECT_NE(e.find("s.yaml:7:18: error: cudnn_version 'R2' is not MAJOR.MINOR"), std::string::npos)
      << e;
  e = Error(with("  compute_model: exact\n"));
  EXPECT_NE(e.find("s.yaml:7:18: error: unknown compute_model 'exact'"), std::string::npos) << e;
}

// cluster.precision picks the framework compute model; a precision the device cannot run, a
// precision with another compute model, and an unknown one are each one located line.
TEST_F(ScenarioFile, PrecisionPicksTheFrameworkModelAndIsCheckedAgainstTheDevice) {
  auto on = [](const std::string& device, const std::string& lines) {
    std::string text = kGood;
    text.replace(text.find("device: k20"), 11, "device: " + device);
    text.insert(text.find("  network:"), lines);
    return text;
  };
  ScenarioSpec s = LoadScenarioFile(Write(on("a100", "  precision: bf16\n  optimizer: adamw\n")));
  EXPECT_EQ(s.device->compute_model, DeviceComputeModel::kFramework);
  EXPECT_EQ(s.device->precision, Precision::kBf16);
  EXPECT_EQ(s.device->optimizer, OptimizerKind::kAdam);
  // RMSprop with momentum is Adam's pass (28 bytes a parameter; config/specs.h).
  EXPECT_EQ(LoadScenarioFile(Write(on("a100", "  precision: tf32\n  optimizer: rmsprop\n")))
                .device->optimizer,
            OptimizerKind::kAdam);
  // No new key: the device's own model, as before.
  EXPECT_EQ(LoadScenarioFile(Write(on("a100", ""))).device->compute_model,
            DeviceComputeModel::kCudnn);
  std::string e = Error(on("v100", "  precision: bf16\n"));
  EXPECT_NE(e.find("s.yaml:7:14: error: device 'v100' cannot run precision bf16: its file gives "
                   "tensor cores for fp16 only"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("v100.yaml"), std::string::npos) << e;
  e = Error(on("gtx1080ti", "  precision: tf32\n"));
  EXPECT_NE(e.find("s.yaml:7:14: error: device 'gtx1080ti' cannot run precision tf32: its file "
                   "gives no tensor-core figure (tensor_tflops)"),
            std::string::npos)
      << e;
  e = Error(on("a100", "  precision: fp8\n"));
  EXPECT_NE(e.find("s.yaml:7:14: error: unknown precision 'fp8'"), std::string::npos) << e;
  e = Error(on("a100", "  compute_model: roofline\n  precision: tf32\n"));
  EXPECT_NE(e.find("'precision' is priced by the framework compute model, but this scenario "
                   "names 'compute_model: roofline'"),
            std::string::npos)
      << e;
  e = Error(on("a100", "  optimizer: adagrad\n"));
  EXPECT_NE(e.find("s.yaml:7:14: error: unknown optimizer 'adagrad'"), std::string::npos) << e;
}

// kGood on an H100, with `lines` added to its cluster.
std::string OnH100(const std::string& lines) {
  std::string text = kGood;
  text.replace(text.find("device: k20"), 11, "device: h100");
  text.insert(text.find("  network:"), lines);
  return text;
}

// cluster.memory_format: the CNN activations' layout the framework model prices (nchw default).
TEST_F(ScenarioFile, MemoryFormatIsTheFrameworkModelsLayout) {
  const auto on = OnH100;
  ScenarioSpec s = LoadScenarioFile(Write(on("  precision: bf16\n  memory_format: nhwc\n")));
  EXPECT_EQ(s.device->memory_format, config::MemoryFormat::kNhwc);
  EXPECT_EQ(LoadScenarioFile(Write(on("  precision: bf16\n"))).device->memory_format,
            config::MemoryFormat::kNchw);
  // Alone it picks the framework model too (at fp32).
  s = LoadScenarioFile(Write(on("  memory_format: nhwc\n")));
  EXPECT_EQ(s.device->compute_model, DeviceComputeModel::kFramework);
  std::string e = Error(on("  memory_format: nhcw\n"));
  EXPECT_NE(e.find("s.yaml:7:18: error: unknown memory_format 'nhcw'"), std::string::npos) << e;
  e = Error(on("  compute_model: roofline\n  memory_format: nhwc\n"));
  EXPECT_NE(e.find("'memory_format' is priced by the framework compute model"),
            std::string::npos)
      << e;
}

// cluster.batchnorm_fusion: what the framework fuses into batch norm (none by default).
TEST_F(ScenarioFile, BatchNormFusionIsTheFrameworkModels) {
  const auto on = OnH100;
  ScenarioSpec s = LoadScenarioFile(
      Write(on("  precision: fp16\n  memory_format: nhwc\n  batchnorm_fusion: bn_add_relu\n")));
  EXPECT_EQ(s.device->batchnorm_fusion, config::BatchNormFusion::kBnAddRelu);
  EXPECT_EQ(LoadScenarioFile(Write(on("  precision: fp16\n"))).device->batchnorm_fusion,
            config::BatchNormFusion::kNone);
  s = LoadScenarioFile(Write(on("  batchnorm_fusion: bn_relu\n")));
  EXPECT_EQ(s.device->compute_model, DeviceComputeModel::kFramework);
  EXPECT_EQ(s.device->batchnorm_fusion, config::BatchNormFusion::kBnRelu);
  std::string e = Error(on("  batchnorm_fusion: bn_gelu\n"));
  EXPECT_NE(e.find("s.yaml:7:21: error: unknown batchnorm_fusion 'bn_gelu'"), std::string::npos)
      << e;
  e = Error(on("  compute_model: cudnn\n  batchnorm_fusion: bn_relu\n"));
  EXPECT_NE(e.find("'batchnorm_fusion' is priced by the framework compute model"),
            std::string::npos)
      << e;
}

// cluster.cuda_version: the CUDA release of the framework's libraries (a current one by default).
TEST_F(ScenarioFile, CudaVersionIsTheFrameworkModels) {
  const auto on = OnH100;
  ScenarioSpec s = LoadScenarioFile(Write(on("  precision: fp16\n  cuda_version: \"11.8\"\n")));
  EXPECT_EQ(s.device->cuda_version, 118);
  EXPECT_EQ(LoadScenarioFile(Write(on("  precision: fp16\n"))).device->cuda_version, 0);
  s = LoadScenarioFile(Write(on("  cuda_version: \"12.4\"\n")));
  EXPECT_EQ(s.device->compute_model, DeviceComputeModel::kFramework);
  std::string e = Error(on("  cuda_version: \"11.x\"\n"));
  EXPECT_NE(e.find("s.yaml:7:17: error: cuda_version '11.x' is not a CUDA release"),
            std::string::npos)
      << e;
  // An H100 under CUDA 11.2: Hopper needs 11.8.
  e = Error(on("  precision: bf16\n  cuda_version: \"11.2\"\n"));
  EXPECT_NE(e.find("device 'h100' needs CUDA 11.8 or later, but cuda_version is 11.2"),
            std::string::npos)
      << e;
  e = Error(on("  compute_model: cudnn\n  cuda_version: \"11.8\"\n"));
  EXPECT_NE(e.find("'cuda_version' is priced by the framework compute model"), std::string::npos)
      << e;
}

TEST_F(ScenarioFile, UnreadableFile) {
  try {
    LoadScenarioFile((dir_ / "missing.yaml").string());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.yaml: error: cannot read file"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ScenarioFile, MissingSchemaVersion) {
  std::string text = kGood;
  text.erase(0, text.find('\n') + 1);
  EXPECT_NE(Error(text).find("no schema_version"), std::string::npos);
}

TEST(Sweep, ExpandsCartesianProductInOrder) {
  SweepSpec sw = LoadSweepFile(kSrc + "/tests/golden/small_sweep.yaml");
  ASSERT_EQ(sw.points.size(), 6u);
  EXPECT_EQ(sw.points[0].scenario.workers, 1);
  EXPECT_EQ(sw.points[2].scenario.workers, 1);
  EXPECT_EQ(sw.points[3].scenario.workers, 2);
  EXPECT_DOUBLE_EQ(sw.points[4].scenario.network.host_bandwidth_Bps, 10e9 / 8);
  EXPECT_EQ(sw.points[5].values[1].second, "40");
}

// Two bundle axes cross: `variant` and any other axis whose values are all {name, set} bundles;
// the CSV column of each holds its names. Mixing bundles and plain values in one axis is refused.
TEST(Sweep, BundleAxesCross) {
  auto dir = std::filesystem::temp_directory_path() /
             ("poseidon_sweep_bundles_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string head = "schema_version: 1\nbase: " + kSrc + "/tests/golden/small.yaml\nvary:\n";
  std::ofstream(dir / "sw.yaml")
      << head
      << "  workload:\n    - {name: small, set: {batch_per_worker: 8}}\n"
         "    - {name: large, set: {batch_per_worker: 32}}\n"
         "  variant:\n    - {name: PS, set: {protocol.scheme: ps}}\n"
         "    - {name: ring, set: {protocol.scheme: allreduce}}\n";
  const SweepSpec sw = LoadSweepFile((dir / "sw.yaml").string());
  ASSERT_EQ(sw.points.size(), 4u);
  EXPECT_EQ(sw.points[3].values[0], std::make_pair(std::string("workload"), std::string("large")));
  EXPECT_EQ(sw.points[3].values[1], std::make_pair(std::string("variant"), std::string("ring")));
  EXPECT_EQ(sw.points[3].scenario.batch_per_worker, 32);
  EXPECT_EQ(sw.points[3].scenario.scheme, "allreduce");
  EXPECT_EQ(sw.points[1].scenario.batch_per_worker, 8);
  std::ofstream(dir / "sw.yaml") << head
                                 << "  workload:\n    - {name: small, set: {batch_per_worker: 8}}\n"
                                    "    - 4\n";
  try {
    LoadSweepFile((dir / "sw.yaml").string());
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sw.yaml:5:5: error: 'workload' mixes {name, set} "
                                         "bundles and plain values"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Sweep, BadPointNamesThePoint) {
  auto dir = std::filesystem::temp_directory_path() /
             ("poseidon_sweep_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "sw.yaml") << "schema_version: 1\nbase: " << kSrc
                                 << "/tests/golden/small.yaml\nvary:\n  cluster.workerz: [1, 2]\n";
  try {
    LoadSweepFile((dir / "sw.yaml").string());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unknown key 'workerz'"), std::string::npos) << m;
    EXPECT_NE(m.find("point 0: cluster.workerz=1"), std::string::npos) << m;
  }
  std::filesystem::remove_all(dir);
}

// A bad value in an axis or a variant is the sweep's own text: its file, line and column; a base
// that cannot be read is named at the sweep's 'base' line.
TEST(Sweep, ErrorsInTheSweepsOwnValuesNameTheSweepFile) {
  auto dir = std::filesystem::temp_directory_path() /
             ("poseidon_sweep_file_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string sw = (dir / "sw.yaml").string();
  auto error = [&](const std::string& text) {
    std::ofstream(sw) << text;
    try {
      LoadSweepFile(sw);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head = "schema_version: 1\nbase: " + kSrc + "/tests/golden/small.yaml\nvary:\n";
  std::string m = error(head + "  cluster.workers: [2, banana]\n");
  EXPECT_NE(m.find(sw + ":4:24: error: workers: expected an integer, got 'banana'"), std::string::npos) << m;
  EXPECT_NE(m.find("point 1: cluster.workers=banana"), std::string::npos) << m;
  m = error(head + "  variant:\n    - {name: A, set: {protocol.scheme: ps}}\n"
                   "    - {name: B, set: {protocol.scheme: bogus}}\n");
  EXPECT_NE(m.find(sw + ":6:40: error: unknown scheme 'bogus'"), std::string::npos) << m;
  // An error in the base itself still names the base.
  m = error(head + "  cluster.workerz: [1]\n");
  EXPECT_NE(m.find("small.yaml:"), std::string::npos) << m;
  EXPECT_EQ(m.find(sw + ":"), std::string::npos) << m;
  m = error("schema_version: 1\nname: t\nbase: nowhere.yaml\nvary:\n  cluster.workers: [1]\n");
  EXPECT_NE(m.find(sw + ":3:7: error: base 'nowhere.yaml' (" + (dir / "nowhere.yaml").string() +
                   "): cannot read file"),
            std::string::npos)
      << m;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace poseidon::config

namespace poseidon::config {
namespace {

// Overrides (--set) must not cost the rest of the file its line and column numbers.
TEST_F(ScenarioFile, OverridesKeepLocationsOfOtherKeys) {
  std::string text = kGood;
  text.replace(text.find("bandwidth_gbps"), 14, "bandwidth");
  const std::string path = Write(text);
  try {
    LoadScenarioFile(path, {"cluster.workers=8"});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("s.yaml:8:5: error: unknown key 'bandwidth'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace poseidon::config
