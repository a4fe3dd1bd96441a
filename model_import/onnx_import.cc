// model_import/onnx_import.cc: the public API of onnx_import.h (reading the file, checking that
// it is an ONNX model, the summary line) and the importer's first and last passes: Index
// (producers, consumers, initializers, constants, inferred shapes) and Run, which takes the model
// input, calls the passes of onnx_patterns.cc, onnx_map_node.cc and onnx_yaml_writer.cc, and checks
// that the YAML builds with exactly the ONNX weights' parameter count.
#include "model_import/onnx_import.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/model_loader.h"
#include "core/model.h"

#if defined(POSEIDON_WITH_ONNX)
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include "model_import/onnx_importer.h"
#endif

namespace poseidon::model_import {
namespace {

std::string Thousands(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return v < 0 ? "-" + s : s;
}

[[maybe_unused]] std::string Stem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

// A model name as the loader takes it: letters, digits, '_', '-', '.'.
[[maybe_unused]] std::string CleanName(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() ? "imported" : out;
}

}  // namespace

std::string ImportResult::Summary() const {
  const std::string whose =
      restored_batchnorm == 0
          ? std::string("the ONNX weights")
          : fmt::format(
                "the ONNX weights' {} and {} of {} BatchNorm{} restored after the convs "
                "the export folded {} into",
                Thousands(params - restored_params), Thousands(restored_params), restored_batchnorm,
                restored_batchnorm == 1 ? "" : "s", restored_batchnorm == 1 ? "it" : "them");
  std::string s =
      fmt::format("{} layers, {} parameters ({}; {} values of other initializers left out)",
                  layers, Thousands(params), whose, Thousands(other_values));
  if (!patterns.empty()) {
    std::vector<std::string> parts;
    for (const auto& [k, n] : patterns) parts.push_back(fmt::format("{} {}", n, k));
    std::string joined;
    for (size_t i = 0; i < parts.size(); ++i) joined += (i ? ", " : "") + parts[i];
    s += "; subgraphs matched: " + joined;
  }
  int total = 0;
  std::string joined;
  for (const auto& [k, n] : folded) {
    joined += fmt::format("{}{} {}", total ? ", " : "", n, k);
    total += n;
  }
  s += total ? fmt::format("; {} node{} folded away ({})", total, total == 1 ? "" : "s", joined)
             : std::string("; nothing folded");
  if (!approximated.empty()) {
    int n = 0;
    std::string as;
    for (const auto& [k, c] : approximated) {
      as += fmt::format("{}{} {}", n ? ", " : "", c, k);
      n += c;
    }
    s += fmt::format("; {} node{} imported as the nearest layer type ({})", n, n == 1 ? "" : "s",
                     as);
  }
  if (folded_position_tables) {
    s += fmt::format(
        "; {} position table{} folded by the export to the rows the sequence reads (a longer "
        "table's other rows are not in the file)",
        folded_position_tables, folded_position_tables == 1 ? "" : "s");
  }
  if (added_pass_through) {
    s += "; 1 pass-through layer 'input' added (the input feeds an add or concat directly)";
  }
  return s;
}

ImportResult ImportOnnxFile(const std::string& path, const ImportOptions& options) {
  const std::string shown = options.display_name.empty() ? path : options.display_name;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw ImportError(fmt::format("{}: error: no such file; check the path", shown));
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw ImportError(
        fmt::format("{}: error: is a folder, not an ONNX file; pass the .onnx file", shown));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  if (!in || !(buf << in.rdbuf())) {
    // An empty file leaves `buf` failed too: the parse below says it is not ONNX.
    if (!in) {
      throw ImportError(
          fmt::format("{}: error: cannot read the file; check its permissions", shown));
    }
  }
  return ImportOnnxBytes(buf.str(), shown, options);
}

#if !defined(POSEIDON_WITH_ONNX)

bool OnnxSupported() { return false; }

ImportResult ImportOnnxBytes(const std::string&, const std::string& file_name,
                             const ImportOptions&) {
  throw ImportError(fmt::format(
      "{}: error: this poseidon was built without ONNX support; install libonnx-dev and "
      "libprotobuf-dev (scripts/install-deps), then configure and build again",
      file_name));
}

#else

bool OnnxSupported() { return true; }

namespace detail {

void Importer::Index() {
  // The fewest inputs of the operators the importer reads; the matchers and MapNode index
  // inputs and outputs without looking again (a malformed file is refused here, not crashed on).
  static const std::map<std::string, int> kMinInputs = {{"Conv", 2},
                                                        {"BatchNormalization", 5},
                                                        {"Gemm", 2},
                                                        {"MatMul", 2},
                                                        {"Add", 2},
                                                        {"Sub", 2},
                                                        {"Mul", 2},
                                                        {"Div", 2},
                                                        {"Pow", 2},
                                                        {"Gather", 2},
                                                        {"Where", 3},
                                                        {"Sum", 1},
                                                        {"Concat", 1},
                                                        {"Softmax", 1},
                                                        {"Erf", 1},
                                                        {"ReduceMean", 1},
                                                        {"Sqrt", 1},
                                                        {"Relu", 1},
                                                        {"Tanh", 1},
                                                        {"Gelu", 1},
                                                        {"MaxPool", 1},
                                                        {"AveragePool", 1},
                                                        {"GlobalAveragePool", 1},
                                                        {"Pad", 1},
                                                        {"GlobalMaxPool", 1},
                                                        {"LayerNormalization", 1},
                                                        {"Shape", 1}};
  for (int i = 0; i < g_.node_size(); ++i) {
    const auto& n = N(i);
    auto it = kMinInputs.find(n.op_type());
    const int need = it == kMinInputs.end() ? 0 : it->second;
    if (n.input_size() < need || n.output_size() < 1) {
      Refuse(i,
             fmt::format("has {} inputs and {} outputs; the operator takes at least {} and 1",
                         n.input_size(), n.output_size(), need),
             "check the file (onnx.checker.check_model)");
    }
    // ONNX's shape inference (below) divides by these unchecked: a zero stride stops the
    // process. Windows are sizes in pixels: positive and far below 2^31; pads non-negative.
    static const std::set<std::string> kWindowed = {"Conv", "ConvTranspose", "MaxPool",
                                                    "AveragePool", "LpPool"};
    if (!kWindowed.count(n.op_type())) continue;
    for (const auto& at : n.attribute()) {
      const std::string& a = at.name();
      const bool window = a == "kernel_shape" || a == "strides" || a == "dilations";
      if (!window && a != "pads" && a != "group") continue;
      std::vector<int64_t> v(at.ints().begin(), at.ints().end());
      if (a == "group") v = {at.i()};
      for (int64_t x : v) {
        if (x < (window || a == "group" ? 1 : 0) || x >= (int64_t{1} << 31)) {
          Refuse(i, fmt::format("attribute '{}' holds {}", a, x),
                 "check the file (windows, strides, dilations and groups are positive, pads "
                 "are not negative)");
        }
      }
    }
  }
  for (const auto& t : g_.initializer()) {
    int64_t n = 1;
    for (int64_t d : t.dims()) {
      if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) {
        throw ImportError(
            fmt::format("{}: error: initializer '{}' has a negative or huge size; check the file",
                        file_, t.name()));
      }
      n *= d;
    }
  }
  for (const auto& t : g_.initializer()) {
    inits_[t.name()] = &t;
    constant_.insert(t.name());
  }
  for (const auto& o : g_.output()) outputs_.insert(o.name());
  for (int i = 0; i < g_.node_size(); ++i) {
    const auto& n = N(i);
    for (const auto& t : n.input()) {
      if (!t.empty()) consumers_[t].push_back(i);
    }
    for (const auto& t : n.output()) producer_[t] = i;
    // Constants: Constant nodes, Shape (shapes are static here), and anything computed from
    // constants only (the shape arithmetic PyTorch emits around Reshape and Slice, the Identity
    // copies of equal initializers). Their values are onnx_constants.cc's.
    bool all_const = true;
    for (const auto& t : n.input()) all_const = all_const && IsConst(t);
    if (n.op_type() == "Constant" || n.op_type() == "Shape" || all_const) {
      for (const auto& t : n.output()) constant_.insert(t);
    }
  }
  // Static shapes, for heads and reduction axes (ONNX's own shape inference).
  onnx::ModelProto inferred = model_;
  try {
    onnx::shape_inference::InferShapes(inferred);
  } catch (const std::exception&) {
    // Shapes are a help here, not a need: patterns fall back to the Reshape constants.
  }
  auto add = [this](const onnx::ValueInfoProto& vi) {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return;
    std::vector<int64_t> d;
    for (const auto& dim : vi.type().tensor_type().shape().dim()) {
      d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    }
    dims_[vi.name()] = d;
  };
  for (const auto& vi : inferred.graph().value_info()) add(vi);
  for (const auto& vi : inferred.graph().input()) add(vi);
  for (const auto& vi : inferred.graph().output()) add(vi);
}

ImportResult Importer::Run() {
  Index();
  // The one model input (older exporters list the initializers among the inputs too).
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& in : g_.input()) {
    if (!inits_.count(in.name())) inputs.push_back(&in);
  }
  if (inputs.size() != 1) {
    throw ImportError(fmt::format(
        "{}: error: the graph has {} inputs; the importer takes models with one input (images, "
        "a sequence or token ids); export with one input",
        file_, inputs.size()));
  }
  const auto& in = *inputs[0];
  input_name_ = in.name();
  std::vector<int64_t> d;
  for (const auto& dim : in.type().tensor_type().shape().dim()) {
    d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  }
  const int elem = in.type().tensor_type().elem_type();
  const bool ints = elem == onnx::TensorProto::INT64 || elem == onnx::TensorProto::INT32;
  auto known = [&d](size_t from) {
    for (size_t k = from; k < d.size(); ++k) {
      if (d[k] <= 0) return false;
    }
    return true;
  };
  int rank = 0;
  if (d.size() == 4 && !ints && known(1)) {
    input_yaml_ = fmt::format("{{channels: {}, height: {}, width: {}}}", d[1], d[2], d[3]);
    rank = 3;
  } else if (d.size() == 3 && !ints && known(1)) {
    input_yaml_ = fmt::format("{{shape: [{}, {}]}}", d[1], d[2]);
    rank = 2;
  } else if (d.size() == 2 && ints && known(1)) {
    input_yaml_ = fmt::format("{{tokens: {}}}", d[1]);
    rank = 1;
  } else if (d.size() == 2 && !ints && known(1)) {
    input_yaml_ = fmt::format("{{channels: {}, height: 1, width: 1}}", d[1]);
    rank = 3;
  } else {
    std::string s;
    for (size_t k = 0; k < d.size(); ++k)
      s += (k ? "x" : "") + (d[k] < 0 ? "?" : std::to_string(d[k]));
    throw ImportError(fmt::format(
        "{}: error: input '{}' has shape [{}] ({}); the importer takes images (N, C, H, W), "
        "sequences (N, S, D) or token ids (N, S) with every size but the batch fixed; export "
        "with fixed sizes",
        file_, in.name(), s, ints ? "integers" : "floats"));
  }
  vals_[input_name_] = Val{-1, rank};
  FindPatterns();
  for (const auto& p : patterns_) result_.patterns[p.kind]++;

  for (int i = 0; i < g_.node_size(); ++i) {
    const auto& n = N(i);
    const int pi = node_pattern_[static_cast<size_t>(i)];
    if (pi >= 0) {
      const Pattern& p = patterns_[static_cast<size_t>(pi)];
      if (i != p.last) continue;
      const Val v = Get(i, p.input);
      if (p.kind != "gelu" && v.rank != 2) {
        Refuse(i, fmt::format("a {} over something that is not a sequence (N, S, D)", p.kind),
               "the importer maps attention and layer norms on sequences");
      }
      for (const auto& w : p.params) Claim(i, w);
      // Named by the module: the scope of the node the pattern centres on, and its kind.
      std::string scope = N(p.scope_node).name();
      scope = scope.substr(0, scope.rfind('/') == std::string::npos ? 0 : scope.rfind('/')) + "/" +
              p.kind;
      const int l = Emit(i, p.kind, {v.layer}, p.keys, scope);
      vals_[p.output] = Val{l, v.rank};
      continue;
    }
    if (absorbed_.count(i)) continue;
    bool all_const = true;
    for (const auto& o : n.output()) all_const = all_const && IsConst(o);
    if (all_const && n.output_size() > 0) {
      continue;  // shape arithmetic and constants: folded at export time, nothing to run
    }
    MapNode(i);
  }
  if (g_.output_size() < 1 || !vals_.count(g_.output(0).name())) {
    throw ImportError(
        fmt::format("{}: error: the graph's output comes from no layer; check the "
                    "model exports a result",
                    file_));
  }
  if (layers_.empty()) {
    throw ImportError(
        fmt::format("{}: error: no layers to import (the graph only reshapes its "
                    "input); nothing to write",
                    file_));
  }
  // The weights' values, and the initializers they are (or are computed from).
  int64_t claimed = 0;
  std::set<std::string> weight_inits;
  for (const auto& [name, node] : claimed_) {
    claimed += ConstNumel(name);
    InitializersBehind(name, &weight_inits);
  }
  for (const auto& [name, t] : inits_) {
    if (!weight_inits.count(name)) result_.other_values += Numel(*t);
  }
  result_.restored_params = restored_params_;
  const std::string name = CleanName(options_.name.empty() ? Stem(file_) : options_.name);
  result_.yaml = WriteYaml(name);
  // The YAML must load and give exactly the ONNX weights' count.
  core::ModelSpec spec;
  try {
    spec = config::LoadModelText(result_.yaml, file_ + " (imported)");
    core::Model m = core::Model::Build(spec);
    result_.params = m.total_params();
    result_.layers = static_cast<int>(m.layers().size());
  } catch (const std::exception& e) {
    throw ImportError(
        fmt::format("{}: error: the imported model does not build: {}; report "
                    "this with the file",
                    file_, e.what()));
  }
  if (result_.params != claimed + restored_params_) {
    throw ImportError(fmt::format(
        "{}: error: the imported model has {} parameters but the ONNX weights it maps hold {} "
        "(and restored BatchNorms {}); report this with the file",
        file_, Thousands(result_.params), Thousands(claimed), Thousands(restored_params_)));
  }
  result_.onnx_nodes = g_.node_size();
  return result_;
}

}  // namespace detail

ImportResult ImportOnnxBytes(const std::string& bytes, const std::string& file_name,
                             const ImportOptions& options) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  onnx::ModelProto model;
  const std::string what_to_do = "pass a model saved by torch.onnx.export or onnx.save";
  if (bytes.empty()) {
    throw ImportError(
        fmt::format("{}: error: the file is empty, not an ONNX model; {}", file_name, what_to_do));
  }
  if (!model.ParseFromString(bytes)) {
    throw ImportError(fmt::format(
        "{}: error: not an ONNX model, or a truncated one ({} bytes that do not parse as an "
        "onnx.ModelProto); {}",
        file_name, bytes.size(), what_to_do));
  }
  if (model.ir_version() <= 0 || !model.has_graph() || model.graph().node_size() == 0 ||
      model.opset_import_size() == 0) {
    throw ImportError(fmt::format(
        "{}: error: not an ONNX model (it parses, but has no IR version, opset or graph "
        "nodes); {}",
        file_name, what_to_do));
  }
  for (const auto& op : model.opset_import()) {
    if (!op.domain().empty() && op.domain() != "ai.onnx") {
      for (const auto& n : model.graph().node()) {
        if (n.domain() == op.domain()) {
          throw ImportError(fmt::format(
              "{}: error: node '{}' ({}): an operator of domain '{}' (not standard ONNX); "
              "export with standard operators only",
              file_name, n.name(), n.op_type(), op.domain()));
        }
      }
    }
  }
  ImportOptions opt = options;
  return detail::Importer(model, file_name, opt).Run();
}

#endif  // POSEIDON_WITH_ONNX

}  // namespace poseidon::model_import
