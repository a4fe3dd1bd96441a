// The protocols in the simulator: orderings the design promises, and bytes against closed forms.
#include <gtest/gtest.h>

#include "config/scenario.h"
#include "sim/simulation.h"

namespace poseidon::sim {
namespace {

const std::string kSrc = POSEIDON_SOURCE_DIR;

double IterationMs(std::vector<std::string> sets) {
  config::ScenarioSpec s = config::LoadScenarioFile(kSrc + "/tests/golden/small.yaml", sets);
  SimOptions o;
  o.baseline = false;
  ScenarioResult r = SimulateScenario(s, o);
  EXPECT_FALSE(r.deadlocked) << r.deadlock_report;
  return r.iteration_ms;
}

struct Case {
  const char* model;
  int batch;
  int workers;
  double gbps;
};

// Compute and communication both significant in each case (1 and 10 GbE).
const Case kCases[] = {{"cifar10_quick", 50, 8, 1},  {"cifar10_quick", 50, 8, 10},
                       {"alexnet", 64, 4, 1},        {"alexnet", 64, 4, 10},
                       {"googlenet", 16, 4, 1},      {"fmnist_mlp", 256, 8, 1}};

std::vector<std::string> Base(const Case& c) {
  return {"model=" + std::string(c.model), "batch_per_worker=" + std::to_string(c.batch),
          "cluster.workers=" + std::to_string(c.workers),
          "cluster.network.bandwidth_gbps=" + std::to_string(c.gbps), "iterations=6",
          "warmup_iterations=1"};
}

std::vector<std::string> With(std::vector<std::string> v, std::vector<std::string> more) {
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

TEST(ProtocolSim, DwbpLowersIterationTimeAndNeverRaisesIt) {
  int strictly_lower = 0;
  for (const Case& c : kCases) {
    const double off = IterationMs(With(Base(c), {"protocol.dwbp=false"}));
    const double on = IterationMs(Base(c));
    EXPECT_LE(on, off * (1 + 1e-9)) << c.model << " " << c.gbps << " GbE";
    strictly_lower += on < off * 0.99;
  }
  EXPECT_GE(strictly_lower, 4);
}

TEST(ProtocolSim, PerLayerGatingAndPrioritiesNeverRaiseIt) {
  for (const Case& c : kCases) {
    const double all = IterationMs(Base(c));
    const double per_layer = IterationMs(With(Base(c), {"protocol.gate=per_layer"}));
    const double prio = IterationMs(
        With(Base(c), {"protocol.gate=per_layer", "protocol.priority_window_kib=2048"}));
    EXPECT_LE(per_layer, all * (1 + 1e-9)) << c.model << " " << c.gbps << " GbE";
    EXPECT_LE(prio, per_layer * (1 + 1e-9)) << c.model << " " << c.gbps << " GbE";
  }
}

TEST(ProtocolSim, SspBeatsBspWithAStraggler) {
  for (const Case& c : {Case{"alexnet", 64, 4, 4}, Case{"cifar10_quick", 50, 8, 2}}) {
    auto base = With(Base(c), {"stragglers=[{worker: 1, slowdown: 1.5}]", "iterations=12"});
    const double bsp = IterationMs(base);
    for (int s : {1, 2}) {
      const double ssp = IterationMs(With(
          base, {"protocol.consistency={model: ssp, staleness: " + std::to_string(s) + "}"}));
      EXPECT_LT(ssp, bsp) << c.model << " s=" << s;
    }
  }
}

// Bytes on the network per iteration equal the closed forms (plus 40-byte headers): a single
// FC-heavy model, co-located, P workers.
TEST(ProtocolSim, NetworkBytesMatchTheSchemes) {
  const int P = 4;
  const int K = 32;
  config::ScenarioSpec s = config::LoadScenarioFile(
      kSrc + "/tests/golden/small.yaml",
      {"model=fmnist_mlp", "batch_per_worker=" + std::to_string(K),
       "cluster.workers=" + std::to_string(P), "iterations=3", "warmup_iterations=0"});
  core::Model m = BuildScenarioModel(s);
  int64_t fc_weight_sf = 0, params = 0;
  for (const auto& l : m.layers()) {
    if (l.kind == core::LayerKind::kFc) fc_weight_sf += K * (l.fc_in + l.fc_out) * 4;
    params += l.params * 4;
  }
  auto gb = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), {"model=fmnist_mlp", "batch_per_worker=" + std::to_string(K),
                               "cluster.workers=" + std::to_string(P), "iterations=3",
                               "warmup_iterations=0"});
    ScenarioResult r = SimulateScenario(
        config::LoadScenarioFile(kSrc + "/tests/golden/small.yaml", sets), {false, false});
    return r.network_gb_per_iteration * 1e9;
  };
  // PS, co-located: each worker sends (P-1)/P of every blob and receives as much back (the local
  // shard's share stays on the machine): 2 S (P-1) over all P workers... summed over machines:
  // pushes P * S (P-1)/P, pulls the same.
  EXPECT_NEAR(gb({"protocol.scheme=ps"}), 2.0 * P * params * (P - 1) / P, 0.01 * params);
  // All-reduce: every worker sends 2(P-1)/P of the model.
  EXPECT_NEAR(gb({"protocol.scheme=allreduce"}), 2.0 * P * params * (P - 1) / P, 0.01 * params);
  // SFB: each worker sends its factors to P-1 peers; the biases still go by PS.
  int64_t bias = 0;
  for (const auto& l : m.layers()) {
    if (l.kind == core::LayerKind::kFc) bias += (l.params - l.fc_in * l.fc_out) * 4;
  }
  EXPECT_NEAR(gb({"protocol.scheme=sfb"}),
              static_cast<double>(P) * (P - 1) * fc_weight_sf + 2.0 * P * bias * (P - 1) / P,
              1e-3 * static_cast<double>(P * (P - 1) * fc_weight_sf));
}

// protocol.gradient_wire fp16 / bf16: the network carries 2 bytes per gradient value (pushes,
// factors, ring steps) and 4 per parameter value sent back, and the iteration is no slower.
TEST(ProtocolSim, A16BitGradientWireHalvesTheGradientBytes) {
  const int P = 4;
  const std::vector<std::string> base = {"model=fmnist_mlp", "batch_per_worker=32",
                                         "cluster.workers=" + std::to_string(P),
                                         "cluster.network.bandwidth_gbps=1", "iterations=3",
                                         "warmup_iterations=0"};
  auto run = [&](const std::string& scheme, const std::string& wire) {
    return SimulateScenario(
        config::LoadScenarioFile(kSrc + "/tests/golden/small.yaml",
                                 With(base, {"protocol.scheme=" + scheme,
                                             "protocol.gradient_wire=" + wire})),
        {false, false});
  };
  for (const char* wire : {"fp16", "bf16"}) {
    for (const char* scheme : {"ps", "sfb", "allreduce"}) {
      const ScenarioResult full = run(scheme, "fp32");
      const ScenarioResult half = run(scheme, wire);
      const double f = full.network_gb_per_iteration, h = half.network_gb_per_iteration;
      // PS: pushes halve, pulls do not (3/4 of the bytes); all-reduce: everything halves; SFB:
      // the factors halve, the biases' pulls (a few KiB) do not.
      const double want = std::string(scheme) == "ps" ? 0.75 : 0.5;
      EXPECT_NEAR(h / f, want, 0.002) << scheme << " " << wire;
      EXPECT_LE(half.iteration_ms, full.iteration_ms * (1 + 1e-9)) << scheme << " " << wire;
    }
  }
}

}  // namespace
}  // namespace poseidon::sim
