#include "apps/poseidon/models_import_command.h"

#include <fstream>

#include <fmt/format.h>

#include "config/yaml_reader.h"
#include "model_import/onnx_import.h"

namespace poseidon::app {

int RunModelsImport(const std::string& onnx_path, const std::string& output,
                    const std::string& name, std::ostream& out) {
  model_import::ImportOptions options;
  options.name = name;
  const model_import::ImportResult r = model_import::ImportOnnxFile(onnx_path, options);
  {
    std::ofstream f(output, std::ios::binary);
    if (!f || !(f << r.yaml) || !f.flush()) {
      throw config::ConfigError(fmt::format(
          "{}: error: cannot write the model file; check the folder exists and is writable",
          output));
    }
  }
  out << fmt::format("imported {} -> {}: {}\n", onnx_path, output, r.Summary());
  return 0;
}

}  // namespace poseidon::app
