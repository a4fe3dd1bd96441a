// apps/poseidon/models_command.h: `poseidon models list` and `poseidon models show NAME`.
//
//   RunModelsList("scenarios/models", std::cout);
//   RunModelsShow("googlenet", "scenarios/models", {"aux"}, std::cout);
//
// Both return the process exit status (0) and throw config::ConfigError or core::ModelError on
// bad input; main() prints the message and exits with an error status.
#pragma once

#include <ostream>
#include <set>
#include <string>

namespace poseidon::app {

// One row per model file in models_dir: name, layers, parameters, forward MACs per image,
// description. A file that does not load is reported by the exception it throws.
int RunModelsList(const std::string& models_dir, std::ostream& out);

// Per-layer table of one model (a name in models_dir or a path to a .yaml file): id, name, type,
// output shape CxHxW, parameters, MACs per image, activation bytes; then the totals. Layers of
// the groups in without_groups are left out (e.g. {"aux"}).
int RunModelsShow(const std::string& name_or_path, const std::string& models_dir,
                  const std::set<std::string>& without_groups, std::ostream& out);

}  // namespace poseidon::app
