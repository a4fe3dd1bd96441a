// tests/sim/model_forms_test.cc: the simulator sees a model, not the way its file is written.
// ResNet-152 in repeat form (scenarios/models/resnet152.yaml) and written out
// (tests/data/models/resnet152_generated.yaml, scripts/gen_models.py) give byte-identical
// simulator output for the ATC'17 scenario; a pool without `round` only adds a warning line.
#include <string>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "config/scenario.h"
#include "sim/simulation.h"

namespace poseidon::sim {
namespace {

const std::string kRoot = POSEIDON_SOURCE_DIR;

std::string Simulated(const config::ScenarioSpec& s, OutputFormat format) {
  return FormatResult(SimulateScenario(s, SimOptions{}), format);
}

TEST(ModelFormsTest, ResNet152RepeatFormSimulatesAsTheGeneratedFile) {
  config::ScenarioSpec s =
      config::LoadScenarioFile(kRoot + "/scenarios/experiments/atc17_resnet152.yaml");
  ASSERT_EQ(s.model.name, "resnet152");
  config::ScenarioSpec generated = s;
  generated.model_file = kRoot + "/tests/data/models/resnet152_generated.yaml";
  generated.model = config::LoadModelFile(generated.model_file);
  ASSERT_LT(generated.model.layers.size(), 600u);
  for (OutputFormat f : {OutputFormat::kJson, OutputFormat::kTable}) {
    const std::string got = Simulated(s, f);
    EXPECT_EQ(got, Simulated(generated, f));
    EXPECT_NE(got.find("resnet152"), std::string::npos);
    EXPECT_EQ(got.find("warning: layer"), std::string::npos) << got;
  }
}

TEST(ModelFormsTest, APoolWithoutRoundAddsAWarningAndChangesNothingElse) {
  config::ScenarioSpec s = config::LoadScenarioFile(kRoot + "/scenarios/demo.yaml");
  ASSERT_EQ(s.model.name, "cifar10_quick");
  config::ScenarioSpec implicit = s;
  int pools = 0;
  for (auto& l : implicit.model.layers) {
    if (l.kind == core::LayerKind::kPool) l.round_given = false, ++pools;
  }
  ASSERT_EQ(pools, 3);
  const ScenarioResult a = SimulateScenario(s, SimOptions{});
  ScenarioResult b = SimulateScenario(implicit, SimOptions{});
  ASSERT_EQ(b.warnings.size(), a.warnings.size() + 3);
  EXPECT_NE(b.warnings[0].find("cifar10_quick.yaml:"), std::string::npos) << b.warnings[0];
  EXPECT_NE(b.warnings[0].find(": warning: layer 'pool1' (pool): 'round' not given"),
            std::string::npos)
      << b.warnings[0];
  b.warnings.erase(b.warnings.begin(), b.warnings.begin() + 3);
  EXPECT_EQ(FormatResult(a, OutputFormat::kJson), FormatResult(b, OutputFormat::kJson));
}

}  // namespace
}  // namespace poseidon::sim
