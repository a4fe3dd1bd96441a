// apps/poseidon/models_import_command.h: `poseidon models import MODEL.onnx -o model.yaml`.
//
//   RunModelsImport("resnet18_like.onnx", "models/resnet18_like.yaml", "", std::cout);
//
// Its own file (not models_command.cc) because the Python module compiles models_command.cc for
// `models list|show` and does not link the ONNX importer.
#pragma once

#include <ostream>
#include <string>

namespace poseidon::app {

// Imports an ONNX file (model_import/) and writes its model YAML to `output`; prints one summary
// line (layers, parameters, what was folded) to `out`. Throws model_import::ImportError with one
// located line ("FILE: error: node 'NAME' (OpType): why; what to do") when the file cannot be
// imported, config::ConfigError when the output cannot be written.
int RunModelsImport(const std::string& onnx_path, const std::string& output,
                    const std::string& name, std::ostream& out);

}  // namespace poseidon::app
