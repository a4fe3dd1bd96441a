// fuzz/model_fuzz.cc: the model loader (YAML text -> core::ModelSpec) and core::Model::Build.
//
// LoadModelText promises ConfigError for every malformed file (YAML syntax included) and
// Model::Build ModelError for every inconsistent graph; any other exception escapes and is a
// finding.
#include <string>

#include "config/model_loader.h"
#include "config/yaml_reader.h"
#include "core/model.h"
#include "fuzz/fuzz_targets.h"

namespace poseidon::fuzz {

int FuzzModel(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const core::ModelSpec spec = config::LoadModelText(text, "fuzz-model.yaml");
    const core::Model model = core::Model::Build(spec);
    (void)model;
  } catch (const config::ConfigError&) {
  } catch (const core::ModelError&) {
  }
  return 0;
}

}  // namespace poseidon::fuzz
