// tests/sim/transformer_sim_test.cc: the simulator runs the transformer models. A BERT-base
// scenario simulates, and gives the same output twice; GPT-2's tied LM head moves no bytes of
// its own; the cudnn compute model prices a linear layer as one GEMM over batch x tokens rows and
// attention as its projections plus batched score and context GEMMs.
#include <string>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "config/scenario.h"
#include "config/specs.h"
#include "core/model.h"
#include "cost/compute_model.h"
#include "cost/gpu_kernel_model.h"
#include "cost/sacp_timing.h"
#include "sim/simulation.h"

namespace poseidon::sim {
namespace {

const std::string kRoot = POSEIDON_SOURCE_DIR;

config::ScenarioSpec Bert() {
  return config::LoadScenarioFile(kRoot + "/scenarios/experiments/bert_base_4w.yaml");
}

TEST(TransformerSimTest, BertBaseSimulatesDeterministically) {
  const config::ScenarioSpec s = Bert();
  ASSERT_EQ(s.model.name, "bert_base");
  const std::string a = FormatResult(SimulateScenario(s, SimOptions{}), OutputFormat::kJson);
  const std::string b = FormatResult(SimulateScenario(s, SimOptions{}), OutputFormat::kJson);
  EXPECT_EQ(a, b);
  EXPECT_NE(a.find("bert_base"), std::string::npos);
  const std::string t = FormatResult(SimulateScenario(s, SimOptions{}), OutputFormat::kTable);
  EXPECT_EQ(t, FormatResult(SimulateScenario(s, SimOptions{}), OutputFormat::kTable));
}

TEST(TransformerSimTest, Gpt2AndVitSimulate) {
  for (const char* name : {"gpt2_small", "fmnist_vit", "vit_b16"}) {
    SCOPED_TRACE(name);
    config::ScenarioSpec s = Bert();
    s.model_file = kRoot + "/scenarios/models/" + name + ".yaml";
    s.model = config::LoadModelFile(s.model_file);
    const std::string a = FormatResult(SimulateScenario(s, SimOptions{}), OutputFormat::kJson);
    EXPECT_EQ(a, FormatResult(SimulateScenario(s, SimOptions{}), OutputFormat::kJson));
    EXPECT_NE(a.find(name), std::string::npos);
  }
}

config::DeviceSpec Device() {
  config::DeviceSpec d;
  d.name = "p";
  d.peak_flops = 10e12;
  d.memory_bandwidth_Bps = 500e9;
  d.sm_count = 28;
  d.architecture = config::GpuArchitecture::kPascal;
  return d;
}

TEST(TransformerSimTest, ALinearLayerIsOneGemmOverBatchTimesTokens) {
  const core::Model m = core::Model::Build(
      config::LoadModelFile(kRoot + "/scenarios/models/bert_base.yaml"));
  const core::Layer& fc1 = *m.FindLayer("l0_fc1");  // 768 -> 3072 on 128 tokens
  const config::DeviceSpec d = Device();
  const config::KernelModelParams p = cost::FittedKernelParams();
  const cost::LayerCost c = cost::CudnnLayerCost(fc1, 4, d, p);
  // Forward: (4 x 128) x 768 by 768 x 3072, plus the bias; backward: weight and data gradients.
  EXPECT_GE(c.fwd.ns, cost::GemmNs(4 * 128, 3072, 768, d, p));
  EXPECT_LT(c.fwd.ns, 1.2 * cost::GemmNs(4 * 128, 3072, 768, d, p));
  EXPECT_GE(c.bwd.ns, cost::GemmNs(3072, 768, 4 * 128, d, p) + cost::GemmNs(4 * 128, 768, 3072, d, p));
  // Attention costs more than its four projections (the score and context matmuls).
  const core::Layer& attn = *m.FindLayer("l0_attn");
  const cost::LayerCost ca = cost::CudnnLayerCost(attn, 4, d, p);
  EXPECT_GT(ca.fwd.ns, 4 * cost::GemmNs(4 * 128, 768, 768, d, p));
  EXPECT_GT(ca.bwd.ns, ca.fwd.ns);
  // ... and the score and context matmuls are one batched launch each over 4 x 12 heads, not 48
  // launches each: the forward stays below the projections plus 48 score GEMMs alone.
  EXPECT_LT(ca.fwd.ns, 4 * cost::GemmNs(4 * 128, 768, 768, d, p) + 48 * cost::GemmNs(128, 128, 64, d, p));
}

// SACP's time model rebuilds one peer's factors of a linear layer from K = batch x tokens rows, as
// the simulator's rebuild task and the live worker do, not from K = batch (128 times too few rows for
// BERT-base); an fc layer's K stays the batch.
TEST(TransformerSimTest, SacpTimesALinearLayersRebuildWithBatchTimesTokensRows) {
  const config::ScenarioSpec s = Bert();
  const core::Model m = core::Model::Build(config::LoadModelFile(s.model_file));
  const cost::ComputeModel c = cost::BuildComputeModel(s, m);
  const core::SacpTiming t = cost::SacpTimingFor(s, m, c);
  const core::Layer& fc1 = *m.FindLayer("l0_fc1");
  ASSERT_EQ(fc1.fc_rows, 128);
  const double want = static_cast<double>(c.SfbRebuildNs(fc1.id, s.batch_per_worker * 128)) * 1e-9;
  EXPECT_DOUBLE_EQ(t.sfb_rebuild_s[static_cast<size_t>(fc1.id)], want);
  EXPECT_GT(want, 3 * static_cast<double>(c.SfbRebuildNs(fc1.id, s.batch_per_worker)) * 1e-9);
}

}  // namespace
}  // namespace poseidon::sim
