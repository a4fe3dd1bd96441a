// fuzz/scenario_fuzz.cc: the scenario parser (config::ParseScenario) on YAML text.
//
// YAML::Load's ParserException is the YAML library's clean refusal; ParseScenario promises
// ConfigError (file:line:column) for every schema problem, and the model it loads may be
// refused with ModelError. Any other exception escapes and is a finding. The document is named
// as if it lay in scenarios/, so that names such as `model: alexnet` or `device: k20` resolve to
// the shipped files (read from disk, read-only).
#include <yaml-cpp/yaml.h>

#include <string>

#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "core/model.h"
#include "fuzz/fuzz_targets.h"

namespace poseidon::fuzz {

int FuzzScenario(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException&) {
    return 0;
  }
  try {
    const config::ScenarioSpec spec =
        config::ParseScenario(root, POSEIDON_SOURCE_DIR "/scenarios/fuzz-input.yaml");
    (void)spec;
  } catch (const config::ConfigError&) {
  } catch (const core::ModelError&) {
  }
  return 0;
}

}  // namespace poseidon::fuzz
