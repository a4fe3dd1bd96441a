// cluster keys of machines with several devices (config/scenario.h): machines, devices_per_machine
// or devices, client, servers_per_machine, interconnect; each class of bad input gives one located
// message.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "config/interconnect_loader.h"
#include "config/job_config.h"
#include "config/scenario.h"

namespace poseidon::config {
namespace {

class Machines : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("poseidon_machines_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& cluster, const std::string& name = "s.yaml") {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << "schema_version: 1\nmodel: cifar10_quick\nbatch_per_worker: 50\n"
                           "cluster:\n"
                        << cluster << "  network: {bandwidth_gbps: 10}\n";
    return path;
  }
  std::string Error(const std::string& cluster) {
    try {
      LoadScenarioFile(Write(cluster));
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
};

TEST_F(Machines, OneDevicePerMachineIsTheDefaultAndWorkersNamesTheMachines) {
  const ScenarioSpec a = LoadScenarioFile(Write("  workers: 4\n  device: k20\n"));
  const ScenarioSpec b = LoadScenarioFile(Write("  machines: 4\n  device: k20\n"));
  for (const ScenarioSpec* s : {&a, &b}) {
    EXPECT_EQ(s->workers, 4);
    EXPECT_EQ(s->devices_per_machine, 1);
    EXPECT_FALSE(s->client_per_device);
    EXPECT_EQ(s->servers, 4);
    EXPECT_EQ(ProtocolWorkers(*s), 4);
  }
}

TEST_F(Machines, GpuMachinesNameTheirInterconnect) {
  const ScenarioSpec s = LoadScenarioFile(
      Write("  machines: 2\n  devices_per_machine: 8\n  device: v100\n"
            "  interconnect: dgx1_v100\n"));
  EXPECT_EQ(s.devices_per_machine, 8);
  EXPECT_EQ(s.interconnect.kind, InterconnectKind::kNvlink);
  EXPECT_DOUBLE_EQ(s.interconnect.link_Bps, 150e9);
  EXPECT_DOUBLE_EQ(s.interconnect.pcie_Bps, 12e9);
  EXPECT_EQ(s.interconnect.reduce_on, ReduceOn::kDevice);
  const core::Model model = BuildScenarioModel(s);
  const core::ProtocolConfig p = BuildProtocol(s, model, /*device_copies=*/true);
  EXPECT_EQ(p.devices_per_machine, 8);
  EXPECT_EQ(p.batch, 50 * 8);  // a machine's factors carry all its devices' rows
  const core::JobLayout layout = BuildLayout(s);
  EXPECT_EQ(layout.num_workers, 2);
  EXPECT_EQ(layout.num_machines, 2);

  // A mapping overrides a file's figures; `devices` counts them all.
  const ScenarioSpec t = LoadScenarioFile(
      Write("  machines: 2\n  devices: 16\n  device: v100\n"
            "  interconnect: {file: dgx1_v100, reduce_on: host, pcie_gbs: 10}\n"));
  EXPECT_EQ(t.devices_per_machine, 8);
  EXPECT_EQ(t.interconnect.reduce_on, ReduceOn::kHost);
  EXPECT_DOUBLE_EQ(t.interconnect.pcie_Bps, 10e9);
  EXPECT_DOUBLE_EQ(t.interconnect.link_Bps, 150e9);
}

TEST_F(Machines, CpuDevicesShareHostMemoryAtTheUpdateRate) {
  const std::string profile = "  profile: fmnist_mlp_cpu_b64\n";
  const std::string path = (dir_ / "cpu.yaml").string();
  std::ofstream(path) << "schema_version: 1\nmodel: fmnist_mlp\nbatch_per_worker: 64\n"
                         "cluster:\n  machines: 2\n  devices_per_machine: 3\n"
                      << profile << "  server_update_gbs: 7\n  network: {bandwidth_gbps: 1}\n";
  const ScenarioSpec s = LoadScenarioFile(path);
  EXPECT_EQ(s.interconnect.kind, InterconnectKind::kHost);
  EXPECT_DOUBLE_EQ(s.interconnect.host_memory_Bps, 7e9);
}

TEST_F(Machines, OneProcessPerDeviceMakesEachDeviceAWorker) {
  const ScenarioSpec s = LoadScenarioFile(
      Write("  machines: 3\n  devices_per_machine: 2\n  client: device\n  device: k20\n"));
  EXPECT_EQ(ProtocolWorkers(s), 6);
  EXPECT_EQ(DevicesPerWorker(s), 1);
  const core::JobLayout layout = BuildLayout(s);
  ASSERT_EQ(layout.num_workers, 6);
  EXPECT_EQ(layout.num_machines, 3);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(layout.machine_of[layout.worker(i)], i / 2);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(layout.machine_of[layout.server(j)], j);
}

TEST_F(Machines, ServersPerMachinePutsThatManyOnEveryMachine) {
  const ScenarioSpec s =
      LoadScenarioFile(Write("  machines: 3\n  servers_per_machine: 2\n  device: k20\n"));
  EXPECT_EQ(s.servers, 6);
  const core::JobLayout layout = BuildLayout(s);
  EXPECT_EQ(layout.num_machines, 3);
  for (int j = 0; j < 6; ++j) EXPECT_EQ(layout.machine_of[layout.server(j)], j % 3);
}

TEST_F(Machines, BadInputGetsOneLocatedLine) {
  struct Case {
    std::string cluster, expect;
  };
  const std::vector<Case> cases = {
      {"  machines: 2\n  devices_per_machine: 0\n  device: k20\n",
       "s.yaml:6:24: error: 'devices_per_machine' must be a positive integer, got 0"},
      {"  machines: 5\n  devices: 12\n  device: k20\n",
       "s.yaml:6:12: error: 12 devices do not divide over 5 machines"},
      {"  machines: 2\n  workers: 2\n  device: k20\n",
       "error: give 'machines' or its older name 'workers', not both"},
      {"  machines: 4\n  servers: 6\n  device: k20\n",
       "s.yaml:6:12: error: 6 co-located shards on 4 worker machines: more shards than machines"},
      {"  machines: 4\n  servers_per_machine: 2\n  placement: dedicated\n  device: k20\n",
       "s.yaml:6:24: error: 'servers_per_machine' places shards on the worker machines"},
      {"  machines: 2\n  devices_per_machine: 4\n  device: v100\n",
       "s.yaml:6:24: error: 4 GPUs per machine need 'interconnect'"},
      {"  machines: 2\n  devices_per_machine: 4\n  device: k20\n"
       "  interconnect: {kind: nvlink, link_gbs: 300, pcie_gbs: 6}\n",
       "s.yaml:8:42: error: link_gbs 300 is faster than the device's memory (208 GB/s"},
      {"  machines: 2\n  devices_per_machine: 4\n  device: k20\n  interconnect: {kind: host}\n",
       "s.yaml:8:17: error: GPU devices are joined by kind: nvlink or kind: pcie"},
      {"  machines: 2\n  devices_per_machine: 4\n  device: k20\n"
       "  interconnect: {kind: pcie, link_gbs: 10}\n",
       "s.yaml:8:40: error: 'link_gbs' (device-to-device links) applies to kind: nvlink only"},
      {"  machines: 2\n  devices_per_machine: 4\n  device: k20\n  interconnect: nvswitch\n",
       "s.yaml:8:17: error: unknown interconnect 'nvswitch'"},
      {"  machines: 2\n  devices_per_machine: 4\n  device: k20\n  client: process\n",
       "s.yaml:8:11: error: unknown client 'process'; known: machine, device"},
  };
  for (const Case& c : cases) {
    const std::string e = Error(c.cluster);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "got: " << e << "\nwanted: " << c.expect;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// `machines` replaced `workers`; a file gives either. A --set of either name replaces the file's
// under either name; a file with both, or --set of both, is an error.
TEST_F(Machines, SetOfEitherNameReplacesTheFilesUnderEither) {
  const std::string older = Write("  workers: 4\n  device: k20\n", "older.yaml");
  const std::string newer = Write("  machines: 4\n  device: k20\n", "newer.yaml");
  for (const std::string& file : {older, newer}) {
    for (const char* set : {"cluster.machines=6", "cluster.workers=6"}) {
      const ScenarioSpec s = LoadScenarioFile(file, {set});
      EXPECT_EQ(s.workers, 6) << file << " --set " << set;
      EXPECT_EQ(s.servers, 6) << file << " --set " << set;  // the default follows the machines
    }
    // One name set twice: the last wins, as for any key.
    EXPECT_EQ(LoadScenarioFile(file, {"cluster.workers=2", "cluster.workers=3"}).workers, 3);
    // A whole cluster mapping set replaces what earlier --set gave under it.
    EXPECT_EQ(LoadScenarioFile(file, {"cluster.workers=2",
                                      "cluster={machines: 5, device: k20, "
                                      "network: {bandwidth_gbps: 10}}",
                                      "cluster.machines=7"})
                  .workers,
              7);
  }
}

TEST_F(Machines, BothNamesInTheFileOrInTwoSetsIsAnError) {
  const std::string both = Write("  machines: 2\n  workers: 2\n  device: k20\n");
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {}, {"cluster.machines=3"}, {"cluster.workers=3"}}) {
    try {
      LoadScenarioFile(both, sets);
      ADD_FAILURE() << "no error with " << sets.size() << " --set";
    } catch (const ConfigError& e) {
      // Located where the file gives today's name (line 5, the value's column).
      EXPECT_NE(std::string(e.what()).find(
                    "s.yaml:5:13: error: give 'machines' or its older name 'workers', not both"),
                std::string::npos)
          << e.what();
    }
  }
  const std::string older = Write("  workers: 4\n  device: k20\n");
  for (const auto& [first, second] : std::vector<std::pair<std::string, std::string>>{
           {"cluster.machines=3", "cluster.workers=5"},
           {"cluster.workers=3", "cluster.machines=5"}}) {
    try {
      LoadScenarioFile(older, {first, "protocol.dwbp=false", second});
      ADD_FAILURE() << "no error for --set " << first << " --set " << second;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                "--set " + second + ": error: give 'machines' or its older name 'workers', not "
                "both (--set " + first + " gave it)");
    }
  }
}

// A sweep's values are set as --set is: either name varies a base that says either; both names
// in one point is an error at the sweep's own line.
TEST_F(Machines, SweepsVaryEitherName) {
  const std::string older = Write("  workers: 4\n  device: k20\n", "older.yaml");
  const std::string newer = Write("  machines: 4\n  device: k20\n", "newer.yaml");
  const std::string sweep = (dir_ / "sw.yaml").string();
  for (const std::string& base : {older, newer}) {
    for (const char* key : {"cluster.machines", "cluster.workers"}) {
      std::ofstream(sweep) << "schema_version: 1\nbase: " << base << "\nvary:\n  " << key
                           << ": [1, 3]\n";
      const SweepSpec sw = LoadSweepFile(sweep);
      ASSERT_EQ(sw.points.size(), 2u);
      EXPECT_EQ(sw.points[0].scenario.workers, 1) << base << " " << key;
      EXPECT_EQ(sw.points[1].scenario.workers, 3) << base << " " << key;
    }
  }
  std::ofstream(sweep) << "schema_version: 1\nbase: " << older << "\nvary:\n"
                       << "  variant:\n    - {name: A, set: {cluster.machines: 2}}\n"
                       << "  cluster.workers: [1, 3]\n";
  try {
    LoadSweepFile(sweep);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  sweep + ":6:21: error: 'cluster.machines' and 'cluster.workers' in one point: "
                          "give 'machines' or its older name 'workers', not both"),
              std::string::npos)
        << e.what();
  }
}

TEST(InterconnectFile, NeedsASourceAndAKind) {
  auto error = [](const std::string& text) {
    try {
      ParseInterconnectYaml(text, "i.yaml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("schema_version: 1\nname: x\nkind: pcie\npcie_gbs: 12\n")
                .find("i.yaml:1:1: error: interconnect file has no 'source'"),
            std::string::npos);
  EXPECT_NE(error("schema_version: 1\nname: x\nsource: s\npcie_gbs: 12\n")
                .find("interconnect file has no 'kind'"),
            std::string::npos);
  EXPECT_NE(error("schema_version: 1\nname: x\nsource: s\nkind: nvlink\n")
                .find("an nvlink interconnect needs 'link_gbs'"),
            std::string::npos);
  EXPECT_NE(error("schema_version: 1\nname: x\nsource: s\nkind: host\nreduce_on: device\n")
                .find("i.yaml:5:12: error: kind: host devices are threads of one process"),
            std::string::npos);
  const std::string vendor =
      error("schema_version: 1\nname: x\nsource: s\nkind: pcie\ncpu_vendor: arm\n");
  EXPECT_NE(vendor.find("i.yaml:5:13: error:"), std::string::npos) << vendor;
  EXPECT_NE(vendor.find("cpu_vendor"), std::string::npos) << vendor;
  EXPECT_EQ(ParseInterconnectYaml("schema_version: 1\nname: x\nsource: s\nkind: pcie\n"
                                  "cpu_vendor: amd\n", "i.yaml")
                .cpu_vendor,
            CpuVendor::kAmd);
}

// Every shipped interconnect file loads, says where its figures come from, and fits the devices
// it is meant for.
TEST(InterconnectFile, ShippedFilesLoad) {
  const std::string dir = std::string(POSEIDON_SOURCE_DIR) + "/scenarios/interconnects";
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    ++files;
    const InterconnectSpec s = LoadInterconnectFile(e.path().string());
    EXPECT_EQ(s.name, e.path().stem().string());
    EXPECT_FALSE(s.source.empty());
    EXPECT_GT(s.pcie_Bps, 0) << s.name;
    EXPECT_GT(s.host_memory_Bps, 0) << s.name;
  }
  EXPECT_GE(files, 4);
}

}  // namespace
}  // namespace poseidon::config
