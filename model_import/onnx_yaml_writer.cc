// model_import/onnx_yaml_writer.cc: the importer's layers -> the model YAML
// (scenarios/models/README.md's schema): unique layer names (the module path where it is one
// layer's, else the node name), a comment naming the file (its name, not its path: the YAML does
// not depend on where the file was), the input and one line per layer (with a comment where the
// layer's type is the nearest one to the operator's). Deterministic: the same layers give
// byte-identical text.
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "model_import/onnx_importer.h"

namespace poseidon::model_import::detail {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string Importer::WriteYaml(const std::string& name) {
  // Names: the module path (the node name's scope) where it is a single layer's, else the node
  // name; then unique.
  std::map<std::string, int> per_scope;
  for (const auto& l : layers_) per_scope[l.scope]++;
  std::set<std::string> used = {"data"};
  for (auto& l : layers_) {
    std::string base = per_scope[l.scope] == 1 && !l.scope.empty() ? l.scope : l.full;
    if (base.empty() || base == "data") base = l.type;
    std::string n = base;
    for (int k = 2; used.count(n); ++k) n = fmt::format("{}_{}", base, k);
    used.insert(n);
    l.name = n;
  }
  // The file's name, not its path: the YAML does not depend on where the file was.
  const std::string base = std::filesystem::path(file_).filename().string();
  std::string y;
  y += fmt::format(
      "# Imported by `poseidon models import` from {} (ONNX IR {}, opset {}, "
      "producer {} {}).\n",
      base, model_.ir_version(), model_.opset_import_size() ? model_.opset_import(0).version() : 0,
      model_.producer_name().empty() ? "unknown" : model_.producer_name(),
      model_.producer_version());
  y += "schema_version: 1\n";
  y += fmt::format("name: {}\n", Quote(name));
  y += fmt::format("description: {}\n", Quote(fmt::format("imported from {} (ONNX)", base)));
  y += fmt::format("input: {}\n", input_yaml_);
  y += "layers:\n";
  for (const auto& l : layers_) {
    std::string line = fmt::format("  - {{name: {}, type: {}", Quote(l.name), l.type);
    if (l.bottoms.size() == 1) {
      line += ", bottom: " +
              Quote(l.bottoms[0] < 0 ? "data" : layers_[static_cast<size_t>(l.bottoms[0])].name);
    } else {
      line += ", bottom: [";
      for (size_t k = 0; k < l.bottoms.size(); ++k) {
        line += (k ? ", " : "") +
                Quote(l.bottoms[k] < 0 ? "data" : layers_[static_cast<size_t>(l.bottoms[k])].name);
      }
      line += "]";
    }
    for (const auto& [k, v] : l.keys) line += fmt::format(", {}: {}", k, v);
    if (l.tie >= 0) line += ", tie: " + Quote(layers_[static_cast<size_t>(l.tie)].name);
    y += line + "}" + (l.note.empty() ? "" : "  # " + l.note) + "\n";
  }
  return y;
}

}  // namespace poseidon::model_import::detail
