// config/model_loader.h: model files (scenarios/models/NAME.yaml) -> core::ModelSpec.
//
// The schema is documented in scenarios/models/README.md. Every layer's SourceLoc is filled from
// its YAML node, so that core::Model::Build can name file:line:column in its errors too.
//
//   std::string path = FindModelFile("alexnet", "scenarios/models");
//   core::ModelSpec spec = LoadModelFile(path);   // ConfigError on bad YAML or schema
//   core::Model m = core::Model::Build(spec);      // ModelError on inconsistent shapes
//
// Loading only reads and checks the file's form (keys, types, value ranges); shapes and the
// graph are checked by Model::Build. Loading also expands `repeat` blocks (N copies of a list of
// layers, with {i} and {prev} in names and bottoms; see scenarios/models/README.md): the
// ModelSpec holds the expanded layers, each with the location of its template in the file.
// Model::Build's warnings() name legal but doubtful choices (a pool without `round` whose shape
// depends on the rounding).
#pragma once

#include <string>
#include <vector>

#include "config/yaml_reader.h"
#include "core/model.h"

namespace poseidon::config {

// The only schema_version this build reads.
inline constexpr int64_t kModelSchemaVersion = 1;

// Reads a model file. Throws ConfigError ("FILE:LINE:COL: error: ...") on unreadable files, YAML
// syntax errors, missing or wrong schema_version, unknown keys, unknown layer kinds, values of
// the wrong type or range, bad repeat blocks (a count that is not a positive integer, an unknown
// placeholder, a layer name given twice once the blocks are expanded).
core::ModelSpec LoadModelFile(const std::string& path);
// Same, from text; `name` stands for the file name in messages (for tests and generated models).
core::ModelSpec LoadModelText(const std::string& yaml, const std::string& name);

// Runs a model of token ids or sequences at `tokens` tokens (its length; > 0). Returns false, and
// changes nothing, for a model that takes images.
bool SetSequenceLength(core::ModelSpec* spec, int64_t tokens);

// A path ending in ".yaml" is returned as is; otherwise `name_or_path` is a model name and the
// result is models_dir/NAME.yaml. An unknown name throws ConfigError listing the known models.
std::string FindModelFile(const std::string& name_or_path, const std::string& models_dir);
// Names (file stems) of the *.yaml files in models_dir, sorted. Empty if the folder is missing.
std::vector<std::string> ListModelNames(const std::string& models_dir);

}  // namespace poseidon::config
