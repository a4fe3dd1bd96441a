// sim/compare.h: Poseidon against DDP, Horovod and the parameter servers on one scenario. Each
// row must be the `simulate` run of the scenario with the row's --set (same figures to the bit);
// a system the scenario cannot run keeps its row with the reason; the output does not depend on
// the thread count; bad input is a ConfigError.
#include "sim/compare.h"

#include <algorithm>
#include <stdexcept>

#include <gtest/gtest.h>

#include "config/scenario.h"

namespace poseidon::sim {
namespace {

const std::string kDemo = std::string(POSEIDON_SOURCE_DIR) + "/scenarios/demo.yaml";
// Small and quick: 4 machines of cifar10_quick, 4 iterations.
const std::vector<std::string> kSmall = {"cluster.machines=4", "iterations=4"};

std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const CompareRow& Row(const CompareResult& c, const std::string& id) {
  for (const CompareRow& r : c.rows) {
    if (r.system.id == id) return r;
  }
  throw std::logic_error("no row " + id);
}

TEST(Compare, EveryRowIsTheSimulateRunOfItsSet) {
  const CompareResult c = RunCompare(kDemo, kSmall, 2);
  ASSERT_EQ(c.rows.size(), 5u);
  const std::vector<std::string> ids = {"poseidon", "ddp", "horovod", "ps_papers", "ps_overlap"};
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(c.rows[i].system.id, ids[i]);
  const CompareRow& poseidon = Row(c, "poseidon");
  for (const CompareRow& row : c.rows) {
    SCOPED_TRACE(row.system.id);
    ASSERT_TRUE(row.ran) << row.reason;
    const ScenarioResult alone =
        SimulateScenario(config::LoadScenarioFile(kDemo, Plus(kSmall, row.overrides)), {});
    EXPECT_EQ(row.result.iteration_ms, alone.iteration_ms);
    EXPECT_EQ(row.result.throughput, alone.throughput);
    EXPECT_EQ(row.result.speedup, alone.speedup);
    EXPECT_EQ(row.result.compute_ms, alone.compute_ms);
    EXPECT_EQ(row.result.wait_ms, alone.wait_ms);
    EXPECT_EQ(row.result.communication_ms, alone.communication_ms);
    EXPECT_DOUBLE_EQ(row.poseidon_gain, poseidon.result.throughput / alone.throughput);
    EXPECT_EQ(row.result.single_node_iteration_ms, c.single_node_iteration_ms);
  }
  EXPECT_EQ(c.machines, 4);
  EXPECT_EQ(c.model, "cifar10_quick");
  // What each row runs, as simulate would be told.
  EXPECT_EQ(Row(c, "poseidon").overrides,
            (std::vector<std::string>{"protocol.dwbp=true", "protocol.scheme=auto",
                                      "protocol.placement_policy=balanced"}));
  EXPECT_EQ(Row(c, "ddp").overrides,
            (std::vector<std::string>{"protocol.baseline=ddp", "protocol.scheme=allreduce",
                                      "protocol.dwbp=true", "protocol.allreduce_algorithm=auto"}));
  EXPECT_NE(Row(c, "ddp").detail.find("NCCL's ring or tree all-reduce of buckets"),
            std::string::npos)
      << Row(c, "ddp").detail;
  EXPECT_EQ(Row(c, "ps_papers").overrides,
            (std::vector<std::string>{"protocol.dwbp=false", "protocol.scheme=ps",
                                      "protocol.placement_policy=round_robin"}));
  // Without overlap the whole-tensor server can only be slower than with balanced chunks and DWBP.
  EXPECT_GT(Row(c, "ps_papers").result.iteration_ms, Row(c, "ps_overlap").result.iteration_ms);
}

TEST(Compare, SspScenarioListsDdpAndHorovodWithTheReason) {
  const CompareResult c =
      RunCompare(kDemo, Plus(kSmall, {"protocol.consistency={model: ssp, staleness: 2}"}), 1);
  for (const std::string id : {"ddp", "horovod"}) {
    const CompareRow& row = Row(c, id);
    EXPECT_FALSE(row.ran);
    EXPECT_NE(row.reason.find("needs BSP, and the scenario's consistency is ssp (staleness 2)"),
              std::string::npos)
        << row.reason;
    EXPECT_EQ(row.poseidon_gain, 0);
  }
  for (const std::string id : {"poseidon", "ps_papers", "ps_overlap"}) {
    EXPECT_TRUE(Row(c, id).ran) << id << ": " << Row(c, id).reason;
  }
  const std::string table = FormatCompare(c, OutputFormat::kTable);
  EXPECT_NE(table.find("PyTorch DDP                    cannot run: DDP all-reduces every gradient "
                       "in lockstep: it needs BSP"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("Horovod                        cannot run: Horovod"), std::string::npos)
      << table;
  const std::string json = FormatCompare(c, OutputFormat::kJson);
  EXPECT_NE(json.find("\"system\":\"ddp\",\"label\":\"PyTorch DDP\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"ran\":false,\"reason\":\"DDP all-reduces"), std::string::npos) << json;
  const std::string csv = FormatCompare(c, OutputFormat::kCsv);
  EXPECT_NE(csv.find(",ddp,PyTorch DDP,,,,,,,,,,protocol.baseline=ddp protocol.scheme=allreduce "
                     "protocol.dwbp=true protocol.allreduce_algorithm=auto,\"DDP all-reduces"),
            std::string::npos)
      << csv;
}

// A scenario that itself runs a baseline (with its settings) compares too: the other systems
// drop its keys, DDP keeps them.
TEST(Compare, BaselineScenarioKeepsItsSettingsForItsOwnRowOnly) {
  const CompareResult c = RunCompare(
      kDemo, Plus(kSmall, {"protocol.baseline=ddp", "protocol.ddp.bucket_cap_mib=4"}), 2);
  for (const CompareRow& row : c.rows) EXPECT_TRUE(row.ran) << row.system.id << ": " << row.reason;
  EXPECT_EQ(
      Row(c, "poseidon").overrides,
      (std::vector<std::string>{"protocol.baseline=null", "protocol.ddp=null", "protocol.dwbp=true",
                                "protocol.scheme=auto", "protocol.placement_policy=balanced"}));
  EXPECT_EQ(Row(c, "horovod").overrides[0], "protocol.ddp=null");
  EXPECT_NE(Row(c, "ddp").detail.find("buckets of 4 MiB"), std::string::npos)
      << Row(c, "ddp").detail;
  // An algorithm the scenario names is the baselines' (NCCL_ALGO), and the others drop it.
  const CompareResult tree = RunCompare(
      kDemo, Plus(kSmall, {"protocol.baseline=ddp", "protocol.allreduce_algorithm=tree"}), 2);
  for (const CompareRow& row : tree.rows) {
    EXPECT_TRUE(row.ran) << row.system.id << ": " << row.reason;
    const bool names_auto =
        std::find(row.overrides.begin(), row.overrides.end(),
                  "protocol.allreduce_algorithm=auto") != row.overrides.end();
    const bool drops = std::find(row.overrides.begin(), row.overrides.end(),
                                 "protocol.allreduce_algorithm=null") != row.overrides.end();
    EXPECT_FALSE(names_auto) << row.system.id;
    EXPECT_EQ(drops, row.system.id != "ddp" && row.system.id != "horovod") << row.system.id;
  }
  EXPECT_NE(Row(tree, "horovod").detail.find("NCCL's tree all-reduce"), std::string::npos)
      << Row(tree, "horovod").detail;
}

// On machines of several devices DDP and Horovod run a process per device, whose copies inside a
// machine cross its interconnect; Poseidon one client per machine.
TEST(Compare, DdpAndHorovodRunAProcessPerDevice) {
  config::ScenarioSpec s = config::LoadScenarioFile(kDemo, kSmall);
  s.devices_per_machine = 8;
  s.client_per_device = false;
  const std::vector<std::string> tail = {"cluster.client=device",
                                         "cluster.local_copies=interconnect"};
  auto last_two = [](const std::vector<std::string>& o) {
    return std::vector<std::string>(o.end() - 2, o.end());
  };
  EXPECT_EQ(last_two(CompareOverrides("ddp", s)), tail);
  EXPECT_EQ(last_two(CompareOverrides("horovod", s)), tail);
  EXPECT_EQ(CompareOverrides("poseidon", s).back(), "protocol.placement_policy=balanced");
  s.client_per_device = true;
  EXPECT_EQ(CompareOverrides("poseidon", s).back(), "cluster.client=machine");
  EXPECT_EQ(CompareOverrides("ddp", s).back(), "cluster.local_copies=interconnect");
  s.local_copies_timed = true;
  EXPECT_EQ(last_two(CompareOverrides("poseidon", s)),
            (std::vector<std::string>{"cluster.client=machine", "cluster.local_copies=free"}));
  EXPECT_EQ(CompareOverrides("ddp", s).back(), "protocol.allreduce_algorithm=auto");
  EXPECT_THROW(CompareOverrides("nccl", s), std::invalid_argument);
}

TEST(Compare, OutputIsTheSameWhateverTheThreads) {
  const CompareResult one = RunCompare(kDemo, kSmall, 1);
  const CompareResult many = RunCompare(kDemo, kSmall, 5);
  for (OutputFormat f : {OutputFormat::kTable, OutputFormat::kCsv, OutputFormat::kJson}) {
    EXPECT_EQ(FormatCompare(one, f), FormatCompare(many, f));
  }
  const std::string table = FormatCompare(one, OutputFormat::kTable);
  EXPECT_NE(table.find("each row is: poseidon simulate " + kDemo +
                       " --set cluster.machines=4 --set iterations=4 --set ..."),
            std::string::npos)
      << table;
}

TEST(Compare, BadInputIsAConfigErrorNamingIt) {
  try {
    RunCompare("no-such-scenario.yaml", {}, 1);
    FAIL() << "no error";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-scenario.yaml: error: cannot read file"),
              std::string::npos)
        << e.what();
  }
  try {
    RunCompare(kDemo, {"cluster.machines"}, 1);
    FAIL() << "no error";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--set cluster.machines: error: expected KEY=VALUE"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace poseidon::sim
