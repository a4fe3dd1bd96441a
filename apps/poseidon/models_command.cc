#include "apps/poseidon/models_command.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (moved here in fmt 11)

#include "config/model_loader.h"
#include "core/model.h"

#include "apps/poseidon/format.h"

namespace poseidon::app {
namespace {

// 1583000000 -> "1.583 G" (decimal prefixes, for operation counts).
std::string Si(int64_t v) {
  const double x = static_cast<double>(v);
  if (x >= 1e9) return fmt::format("{:.3f} G", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.3f} M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.3f} k", x / 1e3);
  return fmt::format("{}", v);
}

// Bytes with binary prefixes: "11.2 MiB".
std::string Bytes(int64_t v) {
  const double x = static_cast<double>(v);
  if (x >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", x / (1024.0 * 1024 * 1024));
  if (x >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", x / (1024.0 * 1024));
  if (x >= 1024.0) return fmt::format("{:.2f} KiB", x / 1024.0);
  return fmt::format("{} B", v);
}

std::string ShapeStr(const core::Shape& s) { return s.ToString(); }

}  // namespace

int RunModelsList(const std::string& models_dir, std::ostream& out) {
  std::vector<std::string> names = config::ListModelNames(models_dir);
  if (names.empty()) {
    throw config::ConfigError(fmt::format(
        "{}: error: no model files (*.yaml) found; pass --models-dir or run from the repository "
        "root",
        models_dir));
  }
  size_t w = 4;
  for (const auto& n : names) w = std::max(w, n.size());
  out << fmt::format("{:<{}}  {:>6}  {:>13}  {:>11}  {}\n", "name", w, "layers", "parameters",
                     "MACs/image", "description");
  for (const auto& n : names) {
    core::ModelSpec spec = config::LoadModelFile(config::FindModelFile(n, models_dir));
    core::Model m = core::Model::Build(spec);
    out << fmt::format("{:<{}}  {:>6}  {:>13}  {:>11}  {}\n", n, w, m.layers().size(),
                       Thousands(m.total_params()), Si(m.forward_macs()), spec.description);
  }
  return 0;
}

int RunModelsShow(const std::string& name_or_path, const std::string& models_dir,
                  const std::set<std::string>& without_groups, std::ostream& out) {
  const std::string path = config::FindModelFile(name_or_path, models_dir);
  core::ModelSpec spec = config::LoadModelFile(path);
  core::BuildOptions options;
  options.without_groups = without_groups;
  core::Model m = core::Model::Build(spec, options);
  // Warnings go to stderr, so that the table on stdout stays what scripts read.
  for (const std::string& w : m.warnings()) std::cerr << w << "\n";

  size_t nw = 4;
  for (const auto& l : m.layers()) nw = std::max(nw, l.name.size());
  const core::Shape in = m.input_shape();
  out << fmt::format("model {} ({}): {}\n", m.name(), path, spec.description);
  // An image CxHxW, a sequence SxD, or "S tokens".
  const std::string in_str = in.rank == 1 ? fmt::format("{} tokens", in.w) : ShapeStr(in);
  out << fmt::format("input {}, {} classes{}\n", in_str, spec.num_classes,
                     without_groups.empty()
                         ? ""
                         : fmt::format(", without groups: {}", fmt::join(without_groups, ", ")));
  out << fmt::format("{:>4}  {:<{}}  {:<12}  {:>14}  {:>12}  {:>15}  {:>13}\n", "id", "name", nw,
                     "type", "output CxHxW", "params", "MACs/image", "act. bytes");
  for (const auto& l : m.layers()) {
    out << fmt::format("{:>4}  {:<{}}  {:<12}  {:>14}  {:>12}  {:>15}  {:>13}\n", l.id, l.name, nw,
                       core::LayerKindName(l.kind), ShapeStr(l.out), Thousands(l.params),
                       Thousands(l.fwd_macs), Thousands(l.out_bytes));
  }
  auto total = [&out](const char* label, const std::string& value) {
    out << fmt::format("{:<21}{}\n", label, value);
  };
  total("layers:", std::to_string(m.layers().size()));
  total("parameters:",
        fmt::format("{} ({} fp32)", Thousands(m.total_params()), Bytes(m.total_params() * 4)));
  total("forward MACs/image:",
        fmt::format("{} ({})", Thousands(m.forward_macs()), Si(m.forward_macs())));
  total("forward FLOPs/image:",
        fmt::format("{} ({})", Thousands(m.forward_flops()), Si(m.forward_flops())));
  total("activations/image:",
        fmt::format("{} ({})", Thousands(m.activation_bytes()), Bytes(m.activation_bytes())));
  return 0;
}

}  // namespace poseidon::app
