// Tests of config/compute_loader.h: shipped device files, device lookup by name, profile round
// trips and located errors for bad input.
#include "config/compute_loader.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace poseidon::config {
namespace {

namespace fs = std::filesystem;

const std::string kDevicesDir = std::string(POSEIDON_SOURCE_DIR) + "/scenarios/devices";

TEST(DeviceFilesTest, EveryShippedDeviceFileLoads) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(kDevicesDir)) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    DeviceSpec d = LoadDeviceFile(e.path().string());
    EXPECT_EQ(d.name, e.path().stem().string()) << "name must equal the file's stem";
    EXPECT_GT(d.peak_flops, 1e12);
    EXPECT_GT(d.memory_bandwidth_Bps, 1e11);
    EXPECT_GT(d.compute_efficiency, 0);
    EXPECT_LE(d.compute_efficiency, 1);
    EXPECT_GT(d.memory_efficiency, 0);
    EXPECT_LE(d.memory_efficiency, 1);
    EXPECT_GT(d.pcie_bandwidth_Bps, 0);
    EXPECT_FALSE(d.description.empty());
    EXPECT_FALSE(d.source.empty());
    EXPECT_EQ(d.loc.file, e.path().string());
    names.insert(d.name);
  }
  for (const char* n : {"k20", "titanx", "v100", "a100", "h100", "h200"}) {
    EXPECT_TRUE(names.count(n)) << "missing scenarios/devices/" << n << ".yaml";
  }
}

TEST(DeviceFilesTest, K20HasTheDatasheetFigures) {
  DeviceSpec d = LoadDeviceFile(FindDeviceFile("k20", kDevicesDir));
  EXPECT_DOUBLE_EQ(d.peak_flops, 3.52e12);
  EXPECT_DOUBLE_EQ(d.memory_bandwidth_Bps, 208e9);
  EXPECT_DOUBLE_EQ(d.pcie_bandwidth_Bps, 6e9);
  EXPECT_DOUBLE_EQ(d.compute_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(d.memory_efficiency, 0.7);
  EXPECT_EQ(d.kernel_launch_ns, 5000);
  EXPECT_EQ(d.sm_count, 13);
  EXPECT_EQ(d.architecture, GpuArchitecture::kKepler);
}

TEST(FindDeviceFileTest, NameOrPath) {
  EXPECT_EQ(FindDeviceFile("h200", kDevicesDir), kDevicesDir + "/h200.yaml");
  std::string path = kDevicesDir + "/v100.yaml";
  EXPECT_EQ(FindDeviceFile(path, "/nonexistent"), path);
}

TEST(FindDeviceFileTest, UnknownNameListsKnownDevices) {
  core::SourceLoc where{"scenario.yaml", 7, 11};
  try {
    FindDeviceFile("k2", kDevicesDir, where);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("scenario.yaml:7:11: error: unknown device 'k2'", 0), 0u) << msg;
    EXPECT_NE(msg.find("did you mean 'k20'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("a100, a100_40gb, a100_pcie, a40, a5000, a6000, b200, gh200, gtx1080, "
                       "gtx1080ti, h100, h100_pcie, h200, k20, k40, k80"),
              std::string::npos)
        << msg;
  }
  EXPECT_THROW(FindDeviceFile("missing/dev.yaml", kDevicesDir), ConfigError);
}

// ---- profiles ------------------------------------------------------------------------------

ProfileSpec SampleProfile() {
  ProfileSpec p;
  p.model = "alexnet";
  p.batch = 256;
  p.device = "NVIDIA H200: 141 GB, \"SXM\"";
  p.backend = "cuda";
  p.update_ms_per_mb = 0.123456789;
  p.pcie_bandwidth_Bps = 25e9;
  p.provenance = {{"date", "2025-01-01"},
                  {"command", "poseidon calibrate --model alexnet # quick"},
                  {"commit", "0123abc"},
                  {"on", "yes"},
                  {"note", "line one\nline two\ttab, \\ backslash, unicode \xc3\xa9"}};
  LayerTiming conv;
  conv.fwd_ms = 1.0 / 3.0;
  conv.bwd_ms = 2e-7;
  conv.fwd_p10_ms = 0.3;
  conv.fwd_p90_ms = 0.4;
  conv.bwd_p10_ms = 0;
  conv.bwd_p90_ms = 1e-6;
  p.layers["conv1"] = conv;
  p.layers["relu1"] = {0.1, 0.2};
  p.layers["fc8"] = {12345.678, 0};
  p.layers["inception_3a/1x1"] = {0.5, 1};
  p.layer_order = {"conv1", "relu1", "fc8"};  // inception_3a/1x1 follows by name
  return p;
}

void ExpectSameTiming(const LayerTiming& a, const LayerTiming& b) {
  EXPECT_EQ(a.fwd_ms, b.fwd_ms);
  EXPECT_EQ(a.bwd_ms, b.bwd_ms);
  EXPECT_EQ(a.fwd_p10_ms, b.fwd_p10_ms);
  EXPECT_EQ(a.fwd_p90_ms, b.fwd_p90_ms);
  EXPECT_EQ(a.bwd_p10_ms, b.bwd_p10_ms);
  EXPECT_EQ(a.bwd_p90_ms, b.bwd_p90_ms);
}

TEST(ProfileYamlTest, WriteThenReadRoundTrips) {
  ProfileSpec p = SampleProfile();
  std::ostringstream out;
  WriteProfileYaml(p, out);
  ProfileSpec q = ParseProfileYaml(out.str(), "written.yaml");
  EXPECT_EQ(q.model, p.model);
  EXPECT_EQ(q.batch, p.batch);
  EXPECT_EQ(q.device, p.device);
  EXPECT_EQ(q.backend, p.backend);
  EXPECT_EQ(q.update_ms_per_mb, p.update_ms_per_mb);
  EXPECT_DOUBLE_EQ(q.pcie_bandwidth_Bps, p.pcie_bandwidth_Bps);
  EXPECT_EQ(q.provenance, p.provenance);
  ASSERT_EQ(q.layers.size(), p.layers.size());
  for (const auto& [name, t] : p.layers) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(q.layers.count(name));
    ExpectSameTiming(q.layers.at(name), t);
  }
  EXPECT_EQ(q.layer_order, (std::vector<std::string>{"conv1", "relu1", "fc8", "inception_3a/1x1"}));
  // Deterministic: writing what was read gives the same text.
  std::ostringstream again;
  WriteProfileYaml(q, again);
  EXPECT_EQ(again.str(), out.str());
}

TEST(ProfileYamlTest, OptionalKeysAreLeftOutWhenUnset) {
  ProfileSpec p;
  p.model = "m";
  p.batch = 1;
  p.device = "cpu";
  p.backend = "cpu";
  p.layers["a"] = {1, 2};
  std::ostringstream out;
  WriteProfileYaml(p, out);
  const std::string text = out.str();
  EXPECT_EQ(text.find("update_ms_per_mb"), std::string::npos) << text;
  EXPECT_EQ(text.find("pcie_gbs"), std::string::npos) << text;
  EXPECT_EQ(text.find("p10"), std::string::npos) << text;
  EXPECT_NE(text.find("  - {name: a, fwd_ms: 1, bwd_ms: 2}\n"), std::string::npos) << text;
  ProfileSpec q = ParseProfileYaml(text, "min.yaml");
  EXPECT_EQ(q.update_ms_per_mb, 0);
  EXPECT_EQ(q.pcie_bandwidth_Bps, 0);
  EXPECT_FALSE(q.layers.at("a").fwd_p10_ms.has_value());
}

TEST(ProfileYamlTest, LoadsFromAFileWithLocations) {
  const std::string file = std::string(POSEIDON_SOURCE_DIR) + "/tests/data/profiles/tiny_b64.yaml";
  ProfileSpec p = LoadProfileFile(file);
  EXPECT_EQ(p.model, "tiny");
  EXPECT_EQ(p.batch, 64);
  EXPECT_EQ(p.backend, "synthetic");
  EXPECT_EQ(p.layer_order.size(), 5u);
  EXPECT_EQ(p.layers.at("conv1").loc.file, file);
  EXPECT_EQ(p.layers.at("conv1").loc.line, 13);
  EXPECT_EQ(p.layers.at("conv1").fwd_p90_ms, 1.3);
}

// ---- bad input -----------------------------------------------------------------------------

constexpr const char* kGoodDevice =
    "schema_version: 1\n"           // 1
    "name: dev\n"                   // 2
    "description: a test device\n"  // 3
    "peak_tflops: 1\n"              // 4
    "memory_bandwidth_gbs: 100\n"   // 5
    "compute_efficiency: 0.5\n"     // 6
    "memory_efficiency: 0.7\n"      // 7
    "pcie_gbs: 6\n"                 // 8
    "launch_overhead_us: 5\n"       // 9
    "source: test\n"                // 10
    "sm_count: 20\n"                // 11
    "architecture: pascal\n";       // 12

constexpr const char* kGoodProfile =
    "schema_version: 1\n"                        // 1
    "model: tiny\n"                              // 2
    "batch: 64\n"                                // 3
    "device: test\n"                             // 4
    "backend: synthetic\n"                       // 5
    "provenance: {note: test}\n"                 // 6
    "layers:\n"                                  // 7
    "  - {name: conv1, fwd_ms: 1, bwd_ms: 2}\n"  // 8
    "  - {name: fc1, fwd_ms: 3, bwd_ms: 4}\n";   // 9

// Replaces the first occurrence of `from` in `text` by `to`.
std::string Edit(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

struct BadCase {
  std::string label;
  std::string text;
  std::string where;  // expected "LINE:COL"
  std::string says;   // expected part of the message
};

template <typename Parse>
void ExpectLocatedError(const BadCase& c, Parse parse) {
  SCOPED_TRACE(c.label);
  try {
    parse(c.text, "bad.yaml");
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.yaml:" + c.where + ": error: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(DeviceYamlTest, GoodTextParses) {
  DeviceSpec d = ParseDeviceYaml(kGoodDevice, "good.yaml");
  EXPECT_EQ(d.name, "dev");
  EXPECT_DOUBLE_EQ(d.peak_flops, 1e12);
  EXPECT_DOUBLE_EQ(d.memory_bandwidth_Bps, 100e9);
  EXPECT_EQ(d.kernel_launch_ns, 5000);
  EXPECT_EQ(d.sm_count, 20);
  EXPECT_EQ(d.architecture, GpuArchitecture::kPascal);
  EXPECT_EQ(d.compute_model, DeviceComputeModel::kCudnn);  // the default
  EXPECT_EQ(d.cudnn_version, 0);                            // a current release
}

TEST(DeviceYamlTest, RooflineNeedsNoKernelFiguresAndOverridesAreRead) {
  const std::string roofline = Edit(Edit(Edit(kGoodDevice, "sm_count: 20\n", ""),
                                         "architecture: pascal\n", ""),
                                    "source: test", "source: test\ncompute_model: roofline");
  DeviceSpec d = ParseDeviceYaml(roofline, "good.yaml");
  EXPECT_EQ(d.compute_model, DeviceComputeModel::kRoofline);
  DeviceSpec o = ParseDeviceYaml(
      Edit(kGoodDevice, "source: test",
           "source: test\nkernel_model: {launch_us: 3, winograd_gain: 2}\ncudnn_version: \"5.1\""),
      "good.yaml");
  EXPECT_EQ(o.kernel_model.size(), 2u);
  EXPECT_DOUBLE_EQ(o.kernel_model.at("launch_us"), 3);
  EXPECT_EQ(o.cudnn_version, 51);
}

TEST(DeviceYamlTest, TensorCoreFiguresParseAndSayWhatADeviceCanRun) {
  DeviceSpec d = ParseDeviceYaml(
      Edit(Edit(kGoodDevice, "architecture: pascal", "architecture: ampere"), "source: test",
           "source: test\ntensor_tflops: {tf32: 156, fp16: 312, bf16: 312, fp8: 624}\n"
           "tensor_source: \"datasheet, dense\"\nboost_clock_mhz: 1410\nbase_clock_mhz: 1065\n"
           "l2_cache_mb: 40\nmemory_gb: 80\ncompute_model: framework\n"
           "framework_model: {dispatch_us: 9}"),
      "good.yaml");
  EXPECT_EQ(d.compute_model, DeviceComputeModel::kFramework);
  EXPECT_DOUBLE_EQ(d.tensor_flops.at(Precision::kTf32), 156e12);
  EXPECT_DOUBLE_EQ(d.tensor_flops.at(Precision::kBf16), 312e12);
  EXPECT_EQ(d.tensor_flops.size(), 3u);  // fp8 is recorded, not priced
  EXPECT_DOUBLE_EQ(d.l2_cache_bytes, 40e6);
  EXPECT_DOUBLE_EQ(d.framework_model.at("dispatch_us"), 9);
  EXPECT_EQ(PrecisionUnsupported(d, Precision::kBf16), "");
  // A Volta-like device: fp16 tensor cores only.
  DeviceSpec v = ParseDeviceYaml(
      Edit(kGoodDevice, "source: test",
           "source: test\ntensor_tflops: {fp16: 125}\ntensor_source: \"datasheet\""),
      "volta.yaml");
  EXPECT_EQ(PrecisionUnsupported(v, Precision::kFp16), "");
  const std::string why = PrecisionUnsupported(v, Precision::kBf16);
  EXPECT_NE(why.find("device 'dev' cannot run precision bf16"), std::string::npos) << why;
  EXPECT_NE(why.find("tensor cores for fp16 only"), std::string::npos) << why;
  // Without any tensor-core figure: tf32 is refused; fp16 runs as fp16 storage (pseudo-half).
  DeviceSpec p = ParseDeviceYaml(kGoodDevice, "pascal.yaml");
  EXPECT_NE(PrecisionUnsupported(p, Precision::kTf32).find("no tensor-core figure"),
            std::string::npos);
  EXPECT_EQ(PrecisionUnsupported(p, Precision::kFp16), "");
}

TEST(DeviceYamlTest, CudnnVersionsParse) {
  EXPECT_EQ(ParseMajorMinor("5.1.05"), 51);
  EXPECT_EQ(ParseMajorMinor("4"), 40);
  EXPECT_EQ(ParseMajorMinor("8.9"), 89);
  EXPECT_EQ(ParseMajorMinor("five"), 0);
  EXPECT_EQ(ParseMajorMinor("5.x"), 0);
  EXPECT_EQ(ParseMajorMinor(""), 0);
}

TEST(DeviceYamlTest, BadInputIsLocated) {
  const std::string g = kGoodDevice;
  const std::vector<BadCase> cases = {
      {"missing schema_version", Edit(g, "schema_version: 1\n", ""), "1:1", "schema_version"},
      {"unsupported schema_version", Edit(g, "schema_version: 1", "schema_version: 2"), "1:17",
       "unsupported schema_version 2"},
      {"unknown key", Edit(g, "peak_tflops: 1", "peak_tflops: 1\npeak_tflop: 2"), "5:1",
       "unknown key 'peak_tflop'"},
      {"unit-less key", Edit(g, "pcie_gbs: 6", "pcie: 6"), "8:1", "did you mean 'pcie_gbs'"},
      {"non-number", Edit(g, "peak_tflops: 1", "peak_tflops: fast"), "4:14", "expected a number"},
      {"number with unit", Edit(g, "memory_bandwidth_gbs: 100", "memory_bandwidth_gbs: 100GB/s"),
       "5:23", "expected a number"},
      {"negative pcie", Edit(g, "pcie_gbs: 6", "pcie_gbs: -1"), "8:11", "must not be negative"},
      {"zero peak", Edit(g, "peak_tflops: 1", "peak_tflops: 0"), "4:14", "greater than 0"},
      {"efficiency above 1", Edit(g, "compute_efficiency: 0.5", "compute_efficiency: 1.5"), "6:21",
       "(0, 1]"},
      {"missing source", Edit(g, "source: test\n", ""), "1:1", "has no 'source'"},
      {"missing sm_count", Edit(g, "sm_count: 20\n", ""), "1:1", "has no 'sm_count'"},
      {"missing architecture", Edit(g, "architecture: pascal\n", ""), "1:1",
       "has no 'architecture'"},
      {"unknown architecture", Edit(g, "architecture: pascal", "architecture: pascl"), "12:15",
       "did you mean 'pascal'"},
      {"unknown compute model", Edit(g, "source: test", "source: test\ncompute_model: cudn"),
       "11:16", "unknown compute_model 'cudn'"},
      {"kernel_model out of range",
       Edit(g, "source: test", "source: test\nkernel_model: {gemm_efficiency: 1.5}"), "11:33",
       "(0, 1]"},
      {"kernel_model unknown key",
       Edit(g, "source: test", "source: test\nkernel_model: {gemm_eficiency: 0.5}"), "11:16",
       "unknown key 'gemm_eficiency'"},
      {"bad cudnn_version", Edit(g, "source: test", "source: test\ncudnn_version: five"), "11:16",
       "is not MAJOR.MINOR"},
      {"missing key", Edit(g, "peak_tflops: 1\n", ""), "1:1", "missing required key 'peak_tflops'"},
      {"tensor_tflops without its source",
       Edit(g, "source: test", "source: test\ntensor_tflops: {fp16: 125}"), "11:16",
       "needs 'tensor_source'"},
      {"unknown tensor precision",
       Edit(g, "source: test", "source: test\ntensor_tflops: {fp61: 125}\ntensor_source: x"),
       "11:17", "unknown key 'fp61'"},
      {"unknown framework constant",
       Edit(g, "source: test", "source: test\nframework_model: {dispatch: 5}"), "11:19",
       "unknown key 'dispatch'"},
      {"framework model without the boost clock",
       Edit(g, "source: test", "source: test\ncompute_model: framework"), "1:1",
       "has no 'boost_clock_mhz'"},
      {"syntax", Edit(g, "name: dev", "name: [dev"), "", "YAML syntax"},
  };
  for (BadCase c : cases) {
    if (c.label == "syntax") {
      // The parser's position for an unclosed flow sequence is at the end; only check the shape.
      try {
        ParseDeviceYaml(c.text, "bad.yaml");
        ADD_FAILURE() << "expected a ConfigError";
      } catch (const ConfigError& e) {
        EXPECT_TRUE(std::regex_search(std::string(e.what()),
                                      std::regex("^bad\\.yaml:[0-9]+:[0-9]+: error: YAML syntax")))
            << e.what();
      }
      continue;
    }
    ExpectLocatedError(c, ParseDeviceYaml);
  }
}

TEST(ProfileYamlTest, BadInputIsLocated) {
  const std::string g = kGoodProfile;
  const std::vector<BadCase> cases = {
      {"missing schema_version", Edit(g, "schema_version: 1\n", ""), "1:1",
       "add 'schema_version: 1'"},
      {"unsupported schema_version", Edit(g, "schema_version: 1", "schema_version: 3"), "1:17",
       "unsupported schema_version 3"},
      {"unknown top-level key", Edit(g, "batch: 64", "batch: 64\nbatch_size: 64"), "4:1",
       "unknown key 'batch_size'"},
      {"unknown layer key", Edit(g, "bwd_ms: 4}", "bwd_ms: 4, fwd_us: 3}"), "9:39",
       "unknown key 'fwd_us' in layer 'fc1'"},
      {"negative time", Edit(g, "fwd_ms: 3", "fwd_ms: -3"), "9:25", "must not be negative"},
      {"non-number time", Edit(g, "fwd_ms: 3", "fwd_ms: 3ms"), "9:25", "expected a number"},
      {"unit-less layer key", Edit(g, "fwd_ms: 3", "fwd: 3"), "9:17", "did you mean 'fwd_ms'"},
      {"missing bwd_ms", Edit(g, ", bwd_ms: 4}", "}"), "9:5", "missing required key 'bwd_ms'"},
      {"duplicate layer", Edit(g, "name: fc1", "name: conv1"), "9:12",
       "listed twice (first at line 8)"},
      {"p90 below p10", Edit(g, "bwd_ms: 4}", "bwd_ms: 4, bwd_p10_ms: 5, bwd_p90_ms: 3}"), "9:66",
       "smaller than 'bwd_p10_ms'"},
      {"zero batch", Edit(g, "batch: 64", "batch: 0"), "3:8", "positive integer"},
      {"unknown backend", Edit(g, "backend: synthetic", "backend: cuda11"), "5:10",
       "did you mean 'cuda'"},
      {"nested provenance", Edit(g, "{note: test}", "{note: {a: b}}"), "6:20", "expected a string"},
      {"layers as a mapping",
       Edit(g, "  - {name: conv1, fwd_ms: 1, bwd_ms: 2}\n  - ",
            "  conv1: {fwd_ms: 1, bwd_ms: 2}\n  fc1: "),
       "8:3", "must be a list"},
      {"missing layers",
       Edit(g,
            "layers:\n  - {name: conv1, fwd_ms: 1, bwd_ms: 2}\n  - {name: "
            "fc1, fwd_ms: 3, bwd_ms: 4}\n",
            ""),
       "1:1", "missing required key 'layers'"},
  };
  for (const BadCase& c : cases) ExpectLocatedError(c, ParseProfileYaml);
}

TEST(ProfileYamlTest, UnreadableFileNamesThePath) {
  try {
    LoadProfileFile("/nonexistent/profile.yaml");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/profile.yaml"), std::string::npos);
  }
}

TEST(ProfileYamlTest, ErrorsFromAFileOnDiskCarryItsPath) {
  fs::path dir = fs::path(testing::TempDir()) / "compute_loader_test";
  fs::create_directories(dir);
  fs::path file = dir / "neg.yaml";
  {
    std::ofstream out(file);
    out << Edit(kGoodProfile, "bwd_ms: 2", "bwd_ms: -2");
  }
  try {
    LoadProfileFile(file.string());
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(file.string() + ":8:", 0), 0u) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace poseidon::config
