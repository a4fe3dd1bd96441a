#include "model_import/onnx_import.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "config/model_loader.h"
#include "core/model.h"

#if defined(POSEIDON_WITH_ONNX)
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
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
  std::string s = fmt::format(
      "{} layers, {} parameters (the ONNX weights; {} values of other "
      "initializers left out)",
      layers, Thousands(params), Thousands(other_values));
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

namespace {

// Our rank of a value: 3 an image [C, H, W], 2 a sequence [S, D], 1 token ids or a vector.
struct Val {
  int layer = -1;  // index into the emitted layers; -1 the model input
  int rank = 0;
};

struct OutLayer {
  std::string scope;  // "encoder.layers.0.self_attn" (the node name without its last part)
  std::string full;   // "encoder.layers.0.self_attn.MatMul"
  std::string type;
  std::vector<int> bottoms;                                // layer indices; -1 the input
  std::vector<std::pair<std::string, std::string> > keys;  // in output order
  std::string name;                                        // resolved at the end
};

// A matched subgraph that becomes one layer (attention, layernorm, gelu).
struct Pattern {
  std::string kind;
  std::set<int> nodes;
  int last = -1;  // the node producing `output`
  std::string input, output;
  std::vector<std::string> params;  // initializers that are its weights
  std::vector<std::pair<std::string, std::string> > keys;
  int scope_node = -1;  // node whose name gives the layer's scope
};

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string file, ImportOptions options)
      : model_(model), g_(model.graph()), file_(std::move(file)), options_(std::move(options)) {}

  ImportResult Run();

 private:
  // --- graph helpers
  const onnx::NodeProto& N(int i) const { return g_.node(i); }
  int Producer(const std::string& t) const {
    auto it = producer_.find(t);
    return it == producer_.end() ? -1 : it->second;
  }
  const std::vector<int>& Consumers(const std::string& t) const {
    static const std::vector<int> kNone;
    auto it = consumers_.find(t);
    return it == consumers_.end() ? kNone : it->second;
  }
  bool IsConst(const std::string& t) const { return t.empty() || constant_.count(t) > 0; }
  const onnx::TensorProto* Init(const std::string& t) const {
    auto it = inits_.find(t);
    return it == inits_.end() ? nullptr : it->second;
  }
  // An initializer or a Constant node's value.
  const onnx::TensorProto* ConstTensor(const std::string& t) const {
    if (const auto* p = Init(t)) return p;
    auto it = const_values_.find(t);
    return it == const_values_.end() ? nullptr : it->second;
  }
  static int64_t Numel(const onnx::TensorProto& t) {
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    return n;
  }
  bool IsScalarConst(const std::string& t) const {
    const auto* p = ConstTensor(t);
    return p != nullptr && Numel(*p) == 1;
  }
  std::vector<int64_t> IntValues(const onnx::TensorProto& t) const;
  std::vector<int64_t> Ints(const onnx::NodeProto& n, const std::string& a,
                            std::vector<int64_t> def = {}) const {
    for (const auto& at : n.attribute()) {
      if (at.name() == a) return {at.ints().begin(), at.ints().end()};
    }
    return def;
  }
  std::optional<int64_t> Int(const onnx::NodeProto& n, const std::string& a) const {
    for (const auto& at : n.attribute()) {
      if (at.name() == a) return at.i();
    }
    return std::nullopt;
  }
  std::string Str(const onnx::NodeProto& n, const std::string& a) const {
    for (const auto& at : n.attribute()) {
      if (at.name() == a) return at.s();
    }
    return "";
  }
  // The inputs of node i that are not constants.
  std::vector<std::string> Dynamic(int i) const {
    std::vector<std::string> v;
    for (const auto& t : N(i).input()) {
      if (!IsConst(t)) v.push_back(t);
    }
    return v;
  }
  // The only consumer of t that is not a Shape node, or -1.
  int OnlyConsumer(const std::string& t) const {
    int found = -1;
    for (int c : Consumers(t)) {
      if (N(c).op_type() == "Shape") continue;
      if (found >= 0) return -1;
      found = c;
    }
    return found;
  }
  bool GraphOutput(const std::string& t) const { return outputs_.count(t) > 0; }
  std::optional<std::vector<int64_t> > Dims(const std::string& t) const {
    auto it = dims_.find(t);
    if (it == dims_.end()) return std::nullopt;
    return it->second;
  }

  [[noreturn]] void Refuse(int i, const std::string& why, const std::string& todo) const {
    throw ImportError(fmt::format("{}: error: node '{}' ({}): {}; {}", file_, NodeName(i),
                                  N(i).op_type(), why, todo));
  }
  std::string NodeName(int i) const {
    return N(i).name().empty() ? fmt::format("#{}", i) : N(i).name();
  }

  // --- passes
  void Index();
  void FindPatterns();
  bool MatchAttention(int softmax, Pattern* p);
  bool MatchLayerNorm(int reduce, Pattern* p);
  bool MatchGelu(int erf, Pattern* p);
  // Follows t back through layout and scaling ops to the projection that made it; returns the
  // projection's last node (its bias Add, its Gemm or MatMul) or -1. Nodes passed go to `set`.
  int BackToProjection(std::string t, std::set<int>* set) const;
  // A MatMul/Gemm with an initializer weight (and a bias Add after a MatMul): fills the weight
  // and bias names, output tensor and nodes; false if `i` is not one.
  bool Projection(int i, std::string* weight, std::string* bias, int64_t* n_out,
                  std::vector<int>* nodes, std::string* out) const;

  Val Get(int node, const std::string& t) const {
    auto it = vals_.find(t);
    if (it == vals_.end()) {
      Refuse(node,
             fmt::format("its input '{}' comes from no layer the importer made (an "
                         "unsupported subgraph feeds it)",
                         t),
             "simplify the model around it, or write the model file by hand "
             "(scenarios/models/README.md)");
    }
    return it->second;
  }
  int Emit(int node, const std::string& type, std::vector<int> bottoms,
           std::vector<std::pair<std::string, std::string> > keys, const std::string& scope_from);
  void Claim(int node, const std::string& init);
  void Fold(int i, const std::string& from) {
    vals_[N(i).output(0)] = Get(i, from);
    result_.folded[N(i).op_type()]++;
  }
  void MapNode(int i);
  void Linear(int i, const std::string& x, const std::string& weight, const std::string& bias,
              int64_t n_out, const std::string& out);
  std::string WriteYaml(const std::string& name);

  const onnx::ModelProto& model_;
  const onnx::GraphProto& g_;
  std::string file_;
  ImportOptions options_;

  std::map<std::string, const onnx::TensorProto*> inits_;
  std::map<std::string, const onnx::TensorProto*> const_values_;
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int> > consumers_;
  std::set<std::string> constant_;
  std::set<std::string> outputs_;
  std::map<std::string, std::vector<int64_t> > dims_;
  std::vector<int> node_pattern_;  // per node: index into patterns_ or -1
  std::vector<Pattern> patterns_;
  std::set<int> absorbed_;  // bias Adds fused into their MatMul
  std::map<std::string, Val> vals_;
  std::map<std::string, int> claimed_;  // initializer -> claiming node
  std::vector<OutLayer> layers_;
  int input_pass_ = -1;  // the pass-through layer on the input, once one is needed
  std::string input_name_;
  std::string input_yaml_;
  ImportResult result_;
};

std::vector<int64_t> Importer::IntValues(const onnx::TensorProto& t) const {
  std::vector<int64_t> v;
  const int64_t n = Numel(t);
  if (t.data_type() == onnx::TensorProto::INT64) {
    if (!t.raw_data().empty() && static_cast<int64_t>(t.raw_data().size()) == 8 * n) {
      v.resize(static_cast<size_t>(n));
      std::memcpy(v.data(), t.raw_data().data(), static_cast<size_t>(8 * n));
    } else {
      v.assign(t.int64_data().begin(), t.int64_data().end());
    }
  } else if (t.data_type() == onnx::TensorProto::INT32) {
    if (!t.raw_data().empty() && static_cast<int64_t>(t.raw_data().size()) == 4 * n) {
      for (int64_t k = 0; k < n; ++k) {
        int32_t x;
        std::memcpy(&x, t.raw_data().data() + 4 * k, 4);
        v.push_back(x);
      }
    } else {
      v.assign(t.int32_data().begin(), t.int32_data().end());
    }
  }
  return v;
}

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
    // constants only (the shape arithmetic PyTorch emits around Reshape and Slice).
    bool all_const = true;
    for (const auto& t : n.input()) all_const = all_const && IsConst(t);
    if (n.op_type() == "Constant") {
      for (const auto& at : n.attribute()) {
        if (at.name() == "value" && n.output_size() == 1) const_values_[n.output(0)] = &at.t();
      }
    }
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

bool Importer::Projection(int i, std::string* weight, std::string* bias, int64_t* n_out,
                          std::vector<int>* nodes, std::string* out) const {
  if (i < 0) return false;
  const auto& n = N(i);
  bias->clear();
  nodes->clear();
  if (n.op_type() == "Gemm" && n.input_size() >= 2 && !IsConst(n.input(0))) {
    const auto* w = Init(n.input(1));
    if (w == nullptr || w->dims_size() != 2 || Int(n, "transA").value_or(0) != 0) return false;
    *weight = n.input(1);
    *n_out = Int(n, "transB").value_or(0) ? w->dims(0) : w->dims(1);
    if (n.input_size() >= 3 && !n.input(2).empty()) {
      if (Init(n.input(2)) == nullptr) return false;
      *bias = n.input(2);
    }
    nodes->push_back(i);
    *out = n.output(0);
    return true;
  }
  if (n.op_type() == "MatMul" && !IsConst(n.input(0))) {
    const auto* w = Init(n.input(1));
    if (w == nullptr || w->dims_size() != 2) return false;
    *weight = n.input(1);
    *n_out = w->dims(1);
    nodes->push_back(i);
    *out = n.output(0);
    // A bias: the MatMul's only consumer an Add of a 1-D initializer of N values.
    const auto& cons = Consumers(n.output(0));
    if (cons.size() == 1 && N(cons[0]).op_type() == "Add" && !GraphOutput(n.output(0))) {
      const auto& a = N(cons[0]);
      const std::string other = a.input(0) == n.output(0) ? a.input(1) : a.input(0);
      const auto* b = Init(other);
      if (b != nullptr && b->dims_size() == 1 && b->dims(0) == *n_out) {
        *bias = other;
        nodes->push_back(cons[0]);
        *out = a.output(0);
      }
    }
    return true;
  }
  // Reached from a bias Add backwards.
  if (n.op_type() == "Add") {
    for (int k = 0; k < 2 && k < n.input_size(); ++k) {
      const int p = Producer(n.input(k));
      if (p >= 0 && N(p).op_type() == "MatMul") {
        std::string w, b, o;
        int64_t no = 0;
        std::vector<int> nd;
        if (Projection(p, &w, &b, &no, &nd, &o) && o == n.output(0)) {
          *weight = w, *bias = b, *n_out = no, *nodes = nd, *out = o;
          return true;
        }
      }
    }
  }
  return false;
}

int Importer::BackToProjection(std::string t, std::set<int>* set) const {
  static const std::set<std::string> kLayout = {"Reshape", "Transpose", "Squeeze", "Unsqueeze",
                                                "Slice",   "Gather",    "Split",   "Div",
                                                "Mul",     "Identity"};
  for (int steps = 0; steps < 32; ++steps) {
    const int p = Producer(t);
    if (p < 0) return -1;
    std::string w, b, o;
    int64_t n_out = 0;
    std::vector<int> nodes;
    if (Projection(p, &w, &b, &n_out, &nodes, &o) && o == t) return p;
    const std::vector<std::string> dyn = Dynamic(p);
    if (!kLayout.count(N(p).op_type()) || dyn.size() != 1) return -1;
    set->insert(p);
    t = dyn[0];
  }
  return -1;
}

bool Importer::MatchAttention(int softmax, Pattern* p) {
  std::set<int> set = {softmax};
  bool masked = false;
  // Back from the softmax to the scores Q K^T, through the scale and the mask.
  std::string t = N(softmax).input(0);
  int scores = -1;
  for (int steps = 0; steps < 8; ++steps) {
    const int q = Producer(t);
    if (q < 0) return false;
    const auto& op = N(q).op_type();
    const std::vector<std::string> dyn = Dynamic(q);
    if (op == "MatMul" && dyn.size() == 2) {
      scores = q;
      break;
    }
    if ((op == "Add" || op == "Mul" || op == "Div" || op == "Where") && dyn.size() == 1) {
      if (op == "Add" || op == "Where") masked = true;
      set.insert(q);
      t = dyn[0];
      continue;
    }
    return false;
  }
  if (scores < 0) return false;
  set.insert(scores);
  // Forward: the probabilities times V.
  const int context = OnlyConsumer(N(softmax).output(0));
  if (context < 0 || N(context).op_type() != "MatMul" ||
      N(context).input(0) != N(softmax).output(0) || IsConst(N(context).input(1))) {
    return false;
  }
  set.insert(context);
  const int pq = BackToProjection(N(scores).input(0), &set);
  const int pk = BackToProjection(N(scores).input(1), &set);
  const int pv = BackToProjection(N(context).input(1), &set);
  if (pq < 0 || pk < 0 || pv < 0) return false;
  // The in-projections (one packed, or three), all on the same input.
  std::vector<std::string> params;
  std::string x;
  bool bias = false, no_bias = false;
  int64_t in_values = 0;
  for (int pr : std::set<int>{pq, pk, pv}) {
    std::string w, b, o;
    int64_t n_out = 0;
    std::vector<int> nodes;
    Projection(pr, &w, &b, &n_out, &nodes, &o);
    const std::string xin = N(nodes[0]).input(0);
    if (!x.empty() && xin != x) return false;  // cross-attention: not ours
    x = xin;
    params.push_back(w);
    in_values += Numel(*Init(w));
    if (!b.empty()) {
      params.push_back(b);
      in_values += Numel(*Init(b));
    }
    (b.empty() ? no_bias : bias) = true;
    set.insert(nodes.begin(), nodes.end());
  }
  // Forward from the context through layout ops to the out-projection.
  static const std::set<std::string> kLayout = {"Reshape", "Transpose", "Squeeze", "Unsqueeze",
                                                "Identity"};
  t = N(context).output(0);
  int out_proj = -1;
  for (int steps = 0; steps < 8; ++steps) {
    const int c = OnlyConsumer(t);
    if (c < 0 || GraphOutput(t)) return false;
    std::string w, b, o;
    int64_t n_out = 0;
    std::vector<int> nodes;
    if (Projection(c, &w, &b, &n_out, &nodes, &o) && N(c).input(0) == t) {
      out_proj = c;
      const int64_t d = n_out;
      params.push_back(w);
      if (!b.empty()) params.push_back(b);
      (b.empty() ? no_bias : bias) = true;
      set.insert(nodes.begin(), nodes.end());
      p->output = o;
      const int64_t expect = 3 * d * d + (b.empty() ? 0 : 3 * d);
      if (Numel(*Init(w)) != d * d || in_values != expect) return false;
      // Heads: D over the per-head width of Q at the scores (shape inference, else the last
      // Reshape on Q's path).
      int64_t head_dim = -1;
      if (auto qd = Dims(N(scores).input(0)); qd && !qd->empty()) head_dim = qd->back();
      // Without inferred shapes: the last size of the first Reshape back along Q's path.
      for (std::string q = N(scores).input(0); head_dim <= 0;) {
        const int r = Producer(q);
        if (r < 0 || !set.count(r) || Dynamic(r).size() != 1) break;
        if (N(r).op_type() == "Reshape" && N(r).input_size() > 1) {
          const auto* shape = ConstTensor(N(r).input(1));
          const std::vector<int64_t> v = shape ? IntValues(*shape) : std::vector<int64_t>{};
          if (!v.empty() && v.back() > 0) head_dim = v.back();
          break;
        }
        q = Dynamic(r)[0];
      }
      if (head_dim <= 0) return false;
      if (d % head_dim != 0) return false;
      p->keys = {{"heads", std::to_string(d / head_dim)}};
      if (masked) p->keys.emplace_back("causal", "true");
      if (bias && no_bias) {
        Refuse(c, "attention with biases on some projections but not others",
               "use bias on all four projections or on none");
      }
      if (!bias) p->keys.emplace_back("bias", "false");
      break;
    }
    if (!kLayout.count(N(c).op_type())) return false;
    set.insert(c);
    t = N(c).output(0);
  }
  if (out_proj < 0) return false;
  // Nothing outside may read what is inside (Shape nodes aside: shapes are static).
  for (int i : set) {
    for (const auto& o : N(i).output()) {
      if (o == p->output) continue;
      if (GraphOutput(o)) return false;
      for (int c : Consumers(o)) {
        if (!set.count(c) && N(c).op_type() != "Shape") return false;
      }
    }
  }
  p->kind = "attention";
  p->nodes = set;
  p->input = x;
  p->params = params;
  p->scope_node = softmax;
  return true;
}

bool Importer::MatchLayerNorm(int reduce, Pattern* p) {
  // mean = ReduceMean(x); d = x - mean; var = ReduceMean(d^2); y = d / sqrt(var + eps);
  // y * gamma + beta (nn.LayerNorm before opset 17).
  const auto& rm = N(reduce);
  const std::string x = rm.input(0);
  const auto axes = Ints(rm, "axes");
  if (axes != std::vector<int64_t>{-1}) {
    auto d = Dims(x);
    if (!d || axes != std::vector<int64_t>{static_cast<int64_t>(d->size()) - 1}) return false;
  }
  int sub = -1;
  for (int c : Consumers(rm.output(0))) {
    if (N(c).op_type() == "Sub" && N(c).input(0) == x && N(c).input(1) == rm.output(0)) sub = c;
  }
  if (sub < 0 || Consumers(rm.output(0)).size() != 1) return false;
  const std::string d = N(sub).output(0);
  int pow = -1, div = -1;
  for (int c : Consumers(d)) {
    if (N(c).op_type() == "Pow" && N(c).input(0) == d && IsScalarConst(N(c).input(1))) pow = c;
    if (N(c).op_type() == "Div" && N(c).input(0) == d) div = c;
  }
  if (pow < 0 || div < 0 || Consumers(d).size() != 2) return false;
  auto next = [this](int i, const char* op) {
    const int c = OnlyConsumer(N(i).output(0));
    return c >= 0 && N(c).op_type() == op && Consumers(N(i).output(0)).size() == 1 ? c : -1;
  };
  const int rm2 = next(pow, "ReduceMean");
  const int add_eps = rm2 < 0 ? -1 : next(rm2, "Add");
  const int sqrt = add_eps < 0 ? -1 : next(add_eps, "Sqrt");
  if (sqrt < 0 || N(div).input(1) != N(sqrt).output(0)) return false;
  if (!IsScalarConst(N(add_eps).input(0)) && !IsScalarConst(N(add_eps).input(1))) return false;
  const int mul = next(div, "Mul");
  const int add_b = mul < 0 ? -1 : next(mul, "Add");
  if (add_b < 0) return false;
  auto other = [this](int i, const std::string& mine) {
    return N(i).input(0) == mine ? N(i).input(1) : N(i).input(0);
  };
  const std::string gamma = other(mul, N(div).output(0));
  const std::string beta = other(add_b, N(mul).output(0));
  if (Init(gamma) == nullptr || Init(beta) == nullptr) return false;
  p->kind = "layernorm";
  p->nodes = {reduce, sub, pow, rm2, add_eps, sqrt, div, mul, add_b};
  p->input = x;
  p->output = N(add_b).output(0);
  p->params = {gamma, beta};
  p->scope_node = reduce;
  return true;
}

bool Importer::MatchGelu(int erf, Pattern* p) {
  // y = x * 0.5 * (1 + erf(x / sqrt(2))), in either order of the products (nn.GELU, opset < 20).
  const int scale = Producer(N(erf).input(0));
  if (scale < 0 || (N(scale).op_type() != "Div" && N(scale).op_type() != "Mul")) return false;
  const std::vector<std::string> dyn = Dynamic(scale);
  if (dyn.size() != 1) return false;
  const std::string x = dyn[0];
  const int add = OnlyConsumer(N(erf).output(0));
  if (add < 0 || N(add).op_type() != "Add" || Dynamic(add).size() != 1) return false;
  const int mul = OnlyConsumer(N(add).output(0));
  if (mul < 0 || N(mul).op_type() != "Mul") return false;
  std::set<int> set = {scale, erf, add, mul};
  const std::string m_other =
      N(mul).input(0) == N(add).output(0) ? N(mul).input(1) : N(mul).input(0);
  std::string out = N(mul).output(0);
  if (m_other == x) {
    // x * (1 + erf) then * 0.5.
    const int half = OnlyConsumer(out);
    if (half >= 0 && N(half).op_type() == "Mul" && Dynamic(half).size() == 1) {
      set.insert(half);
      out = N(half).output(0);
    }
  } else {
    // (x * 0.5) * (1 + erf).
    const int half = Producer(m_other);
    if (half < 0 || N(half).op_type() != "Mul" || Dynamic(half) != std::vector<std::string>{x}) {
      return false;
    }
    set.insert(half);
  }
  for (int i : set) {
    for (const auto& o : N(i).output()) {
      if (o == out) continue;
      for (int c : Consumers(o)) {
        if (!set.count(c)) return false;
      }
    }
  }
  p->kind = "gelu";
  p->nodes = set;
  p->input = x;
  p->output = out;
  p->scope_node = erf;
  return true;
}

void Importer::FindPatterns() {
  node_pattern_.assign(static_cast<size_t>(g_.node_size()), -1);
  auto take = [this](Pattern p) {
    for (int i : p.nodes) {
      if (node_pattern_[static_cast<size_t>(i)] >= 0) return;  // overlaps one already found
    }
    p.last = *p.nodes.rbegin();
    for (int i : p.nodes)
      node_pattern_[static_cast<size_t>(i)] = static_cast<int>(patterns_.size());
    patterns_.push_back(std::move(p));
  };
  for (int i = 0; i < g_.node_size(); ++i) {
    const std::string& op = N(i).op_type();
    Pattern p;
    if (op == "Softmax" && MatchAttention(i, &p)) take(std::move(p));
  }
  for (int i = 0; i < g_.node_size(); ++i) {
    const std::string& op = N(i).op_type();
    Pattern p;
    if (node_pattern_[static_cast<size_t>(i)] >= 0) continue;
    if (op == "ReduceMean" && MatchLayerNorm(i, &p)) take(std::move(p));
    if (op == "Erf" && MatchGelu(i, &p)) take(std::move(p));
  }
}

int Importer::Emit(int node, const std::string& type, std::vector<int> bottoms,
                   std::vector<std::pair<std::string, std::string> > keys,
                   const std::string& scope_from) {
  // Our schema lets the model input be only a layer's only bottom; where it feeds an add or a
  // concat directly (a residual on the input), a pass-through layer (dropout, ratio 0) comes first.
  if (bottoms.size() > 1 && std::count(bottoms.begin(), bottoms.end(), -1) > 0) {
    if (input_pass_ < 0) {
      OutLayer pass;
      pass.full = pass.scope = "input";
      pass.type = "dropout";
      pass.bottoms = {-1};
      pass.keys = {{"ratio", "0"}};
      layers_.push_back(std::move(pass));
      input_pass_ = static_cast<int>(layers_.size()) - 1;
      result_.added_pass_through = 1;
    }
    std::replace(bottoms.begin(), bottoms.end(), -1, input_pass_);
  }
  OutLayer l;
  std::string full = scope_from;
  if (full.empty()) full = fmt::format("{}_{}", N(node).op_type(), node);
  // PyTorch names nodes "/blocks/blocks.0/conv1/Conv": the module path, each part repeating its
  // parent's; "blocks.0.conv1.Conv" here.
  std::vector<std::string> parts;
  for (size_t at = 0; at <= full.size();) {
    const size_t slash = std::min(full.find('/', at), full.size());
    std::string part = full.substr(at, slash - at);
    if (!part.empty()) {
      if (!parts.empty() && part.rfind(parts.back() + ".", 0) == 0) parts.pop_back();
      parts.push_back(part);
    }
    at = slash + 1;
  }
  full.clear();
  for (size_t k = 0; k < parts.size(); ++k) full += (k ? "." : "") + parts[k];
  for (char& c : full) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
    if (c == '/')
      c = '.';
    else if (!ok)
      c = '_';
  }
  l.full = full;
  const size_t dot = full.rfind('.');
  l.scope = dot == std::string::npos ? full : full.substr(0, dot);
  l.type = type;
  l.bottoms = std::move(bottoms);
  l.keys = std::move(keys);
  layers_.push_back(std::move(l));
  return static_cast<int>(layers_.size()) - 1;
}

void Importer::Claim(int node, const std::string& init) {
  auto [it, fresh] = claimed_.emplace(init, node);
  if (!fresh) {
    Refuse(node,
           fmt::format("its weight '{}' is also the weight of node '{}' (shared weights)", init,
                       NodeName(it->second)),
           "export the model with untied weights (a tied LM head: write `tie:` in the YAML by "
           "hand)");
  }
}

void Importer::Linear(int i, const std::string& x, const std::string& weight,
                      const std::string& bias, int64_t n_out, const std::string& out) {
  const Val in = Get(i, x);
  if (in.rank == 3 && N(i).op_type() == "MatMul") {
    Refuse(i, "a MatMul over the last axis of an image", "flatten the input first");
  }
  Claim(i, weight);
  if (!bias.empty()) Claim(i, bias);
  const bool seq = in.rank == 2;
  std::vector<std::pair<std::string, std::string> > keys = {{"num_output", std::to_string(n_out)}};
  if (bias.empty()) keys.emplace_back("bias", "false");
  const int l = Emit(i, seq ? "linear" : "fc", {in.layer}, keys, N(i).name());
  vals_[out] = Val{l, seq ? 2 : 1};
}

void Importer::MapNode(int i) {
  const auto& n = N(i);
  const std::string& op = n.op_type();
  const std::string todo_general =
      "the importer maps Conv, Gemm, MatMul, BatchNormalization, LayerNormalization, Relu, Gelu, "
      "Tanh, Softmax, MaxPool, AveragePool, GlobalAveragePool, Add, Concat, Gather (embedding) "
      "and PyTorch's attention, LayerNorm and GELU subgraphs; change the model, or write its "
      "YAML by hand (scenarios/models/README.md)";
  const std::vector<std::string> dyn = Dynamic(i);
  auto one = [&]() -> const std::string& {
    if (dyn.size() != 1) Refuse(i, "expected one non-constant input", todo_general);
    return dyn[0];
  };
  auto window = [&](std::vector<std::pair<std::string, std::string> >* keys,
                    const onnx::TensorProto* w) {
    std::vector<int64_t> k = Ints(n, "kernel_shape");
    if (k.empty() && w != nullptr && w->dims_size() == 4) k = {w->dims(2), w->dims(3)};
    if (k.size() != 2) Refuse(i, "only 2-D windows are imported", "use a 2-D operator");
    const auto s = Ints(n, "strides", {1, 1});
    const auto pads = Ints(n, "pads", {0, 0, 0, 0});
    const auto dil = Ints(n, "dilations", {1, 1});
    const std::string ap = Str(n, "auto_pad");
    if (!ap.empty() && ap != "NOTSET" && ap != "VALID") {
      Refuse(i, fmt::format("auto_pad {} is not imported", ap), "export with explicit pads");
    }
    if (dil != std::vector<int64_t>{1, 1}) {
      Refuse(i, "dilated windows have no Poseidon layer", "use dilation 1");
    }
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
      Refuse(i, "asymmetric padding has no Poseidon layer", "pad the same on both sides");
    }
    auto put = [&](const char* key, int64_t a, int64_t b, int64_t def) {
      if (a == b) {
        if (a != def) keys->emplace_back(key, std::to_string(a));
      } else {
        keys->emplace_back(std::string(key) + "_h", std::to_string(a));
        keys->emplace_back(std::string(key) + "_w", std::to_string(b));
      }
    };
    put("kernel", k[0], k[1], -1);
    put("stride", s[0], s[1], 1);
    put("pad", pads[0], pads[1], 0);
  };
  auto need_image = [&](const Val& v) {
    if (v.rank != 3) {
      Refuse(i, "expects an image (N, C, H, W) but its input is not one here",
             "the importer maps this operator on images only");
    }
  };

  if (op == "Identity" || op == "Dropout" || op == "Flatten" || op == "Reshape" ||
      op == "Squeeze" || op == "Unsqueeze" || op == "Transpose" || op == "Cast") {
    Fold(i, one());
    // An image flattened to (N, C*H*W) is a vector from here on (an fc's input; the fc
    // flattens it itself).
    const auto out = Dims(n.output(0));
    Val& v = vals_[n.output(0)];
    if (v.rank == 3 && (op == "Flatten" || (out && out->size() == 2))) v.rank = 1;
    return;
  }
  if (op == "Pad") {
    const auto* pads = n.input_size() > 1 ? ConstTensor(n.input(1)) : nullptr;
    std::vector<int64_t> v = pads ? IntValues(*pads) : Ints(n, "pads");
    if (std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; })) {
      Fold(i, one());
      return;
    }
    Refuse(i, "padding outside a Conv or pool has no Poseidon layer",
           "fold the padding into the next Conv or pool's pads");
  }
  if (op == "Conv") {
    const Val in = Get(i, one());
    need_image(in);
    const auto* w = Init(n.input(1));
    if (w == nullptr || w->dims_size() != 4) {
      Refuse(i, "the weight is not a 4-D initializer", "export with constant weights");
    }
    std::vector<std::pair<std::string, std::string> > keys = {
        {"num_output", std::to_string(w->dims(0))}};
    window(&keys, w);
    const int64_t group = Int(n, "group").value_or(1);
    if (group != 1) keys.emplace_back("groups", std::to_string(group));
    Claim(i, n.input(1));
    if (n.input_size() > 2 && !n.input(2).empty()) {
      if (Init(n.input(2)) == nullptr) Refuse(i, "the bias is not an initializer", "fold it");
      Claim(i, n.input(2));
    } else {
      keys.emplace_back("bias", "false");
    }
    vals_[n.output(0)] = Val{Emit(i, "conv", {in.layer}, keys, n.name()), 3};
    return;
  }
  if (op == "BatchNormalization") {
    const Val in = Get(i, one());
    need_image(in);
    for (int k = 1; k <= 2; ++k) {
      if (Init(n.input(k)) == nullptr) Refuse(i, "scale or bias is not an initializer", "fold it");
      Claim(i, n.input(k));
    }
    vals_[n.output(0)] = Val{Emit(i, "batchnorm", {in.layer}, {}, n.name()), 3};
    return;
  }
  if (op == "LayerNormalization") {
    const Val in = Get(i, one());
    if (Int(n, "axis").value_or(-1) != -1 && in.rank != 2) {
      Refuse(i, "normalizes over more than the last axis", "normalize over the last axis");
    }
    if (n.input_size() < 3 || Init(n.input(1)) == nullptr || Init(n.input(2)) == nullptr) {
      Refuse(i, "a layer norm without a learned scale and bias has no Poseidon layer",
             "use elementwise_affine=True");
    }
    Claim(i, n.input(1));
    Claim(i, n.input(2));
    vals_[n.output(0)] = Val{Emit(i, "layernorm", {in.layer}, {}, n.name()), in.rank};
    return;
  }
  if (op == "Relu" || op == "Tanh" || op == "Gelu" || op == "Softmax") {
    const Val in = Get(i, one());
    std::string type = op == "Relu"   ? "relu"
                       : op == "Tanh" ? "tanh"
                       : op == "Gelu" ? "gelu"
                                      : "softmax";
    vals_[n.output(0)] = Val{Emit(i, type, {in.layer}, {}, n.name()), in.rank};
    return;
  }
  if (op == "MaxPool" || op == "AveragePool") {
    const Val in = Get(i, one());
    need_image(in);
    if (n.output_size() > 1 && !n.output(1).empty()) {
      Refuse(i, "pool indices are not imported", "export without return_indices");
    }
    std::vector<std::pair<std::string, std::string> > keys = {
        {"method", op == "MaxPool" ? "max" : "avg"}};
    window(&keys, nullptr);
    keys.emplace_back("round", Int(n, "ceil_mode").value_or(0) ? "ceil" : "floor");
    vals_[n.output(0)] = Val{Emit(i, "pool", {in.layer}, keys, n.name()), 3};
    return;
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    const Val in = Get(i, one());
    need_image(in);
    vals_[n.output(0)] =
        Val{Emit(i, "pool", {in.layer},
                 {{"method", op == "GlobalMaxPool" ? "max" : "avg"}, {"global", "true"}}, n.name()),
            3};
    return;
  }
  if (op == "ReduceMean") {
    const Val in = Get(i, one());
    const auto axes = Ints(n, "axes");
    auto d = Dims(n.input(0));
    const int64_t r = d ? static_cast<int64_t>(d->size()) : -1;
    bool last = false;
    for (int64_t a : axes) last = last || a == -1 || a == r - 1;
    if (in.rank == 2 && axes.size() == 1 && !last) {
      vals_[n.output(0)] =
          Val{Emit(i, "token_pool", {in.layer}, {{"method", "mean"}}, n.name()), 1};
      return;
    }
    if (in.rank == 3 && axes.size() == 2 && r == 4 &&
        std::set<int64_t>(axes.begin(), axes.end()) == std::set<int64_t>{2, 3}) {
      vals_[n.output(0)] =
          Val{Emit(i, "pool", {in.layer}, {{"method", "avg"}, {"global", "true"}}, n.name()), 3};
      return;
    }
    Refuse(i, "a mean that is neither over the tokens of a sequence nor a global pool",
           todo_general);
  }
  if (op == "Add" || op == "Sum") {
    if (dyn.size() >= 2) {
      std::vector<int> bottoms;
      int rank = 0;
      for (const auto& t : dyn) {
        const Val v = Get(i, t);
        bottoms.push_back(v.layer);
        rank = v.rank;
      }
      vals_[n.output(0)] = Val{Emit(i, "add", bottoms, {}, n.name()), rank};
      return;
    }
    const std::string& x = one();
    const std::string c = n.input(0) == x ? n.input(1) : n.input(0);
    if (IsScalarConst(c)) {
      Fold(i, x);
      return;
    }
    const Val in = Get(i, x);
    const auto* table = Init(c);
    auto d = Dims(x);
    if (table != nullptr && in.rank == 2 && d && d->size() >= 2 && table->dims_size() >= 2 &&
        Numel(*table) == (*d)[d->size() - 2] * d->back() &&
        table->dims(table->dims_size() - 1) == d->back()) {
      Claim(i, c);
      vals_[n.output(0)] = Val{Emit(i, "pos_embedding", {in.layer}, {}, n.name()), 2};
      return;
    }
    Refuse(i, "adds a constant tensor that is neither a MatMul's bias nor a positional table",
           todo_general);
  }
  if (op == "Mul" || op == "Div" || op == "Sub") {
    if (dyn.size() == 1 && IsScalarConst(n.input(0) == dyn[0] ? n.input(1) : n.input(0))) {
      Fold(i, dyn[0]);  // scaling by a constant: no parameters, negligible cost
      return;
    }
    Refuse(i, "an element-wise product or quotient outside the patterns the importer knows",
           todo_general);
  }
  if (op == "Concat") {
    std::vector<int> bottoms;
    for (const auto& t : dyn) {
      const Val v = Get(i, t);
      need_image(v);
      bottoms.push_back(v.layer);
    }
    if (dyn.size() != static_cast<size_t>(n.input_size())) {
      Refuse(i, "concatenates a constant tensor", "concatenate layer outputs only");
    }
    if (Int(n, "axis").value_or(1) != 1) {
      Refuse(i, "concatenates along an axis other than the channels", "concatenate on axis 1");
    }
    vals_[n.output(0)] = Val{Emit(i, "concat", bottoms, {}, n.name()), 3};
    return;
  }
  if (op == "Gemm" || op == "MatMul") {
    std::string w, b, o;
    int64_t n_out = 0;
    std::vector<int> nodes;
    if (!Projection(i, &w, &b, &n_out, &nodes, &o)) {
      Refuse(i,
             "a product of two activations outside an attention pattern (or a weight that "
             "is not an initializer)",
             todo_general);
    }
    for (size_t k = 1; k < nodes.size(); ++k) absorbed_.insert(nodes[k]);
    Linear(i, n.input(0), w, b, n_out, o);
    return;
  }
  if (op == "Gather") {
    const auto* table = Init(n.input(0));
    if (table != nullptr && table->dims_size() == 2 && !IsConst(n.input(1)) &&
        Int(n, "axis").value_or(0) == 0) {
      const Val in = Get(i, n.input(1));
      if (in.rank != 1) Refuse(i, "an embedding of something other than token ids", todo_general);
      Claim(i, n.input(0));
      vals_[n.output(0)] = Val{Emit(i, "embedding", {in.layer},
                                    {{"vocab", std::to_string(table->dims(0))},
                                     {"num_output", std::to_string(table->dims(1))}},
                                    n.name()),
                               2};
      return;
    }
    Refuse(i, "a Gather that is not a lookup in an embedding table", todo_general);
  }
  Refuse(i, "no Poseidon layer type for this operator", todo_general);
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

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
    y += line + "}\n";
  }
  return y;
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
  int64_t claimed = 0;
  for (const auto& [name, node] : claimed_) claimed += Numel(*Init(name));
  for (const auto& [name, t] : inits_) {
    if (!claimed_.count(name)) result_.other_values += Numel(*t);
  }
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
  if (result_.params != claimed) {
    throw ImportError(fmt::format(
        "{}: error: the imported model has {} parameters but the ONNX weights it maps hold {}; "
        "report this with the file",
        file_, Thousands(result_.params), Thousands(claimed)));
  }
  result_.onnx_nodes = g_.node_size();
  return result_;
}

}  // namespace

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
  return Importer(model, file_name, opt).Run();
}

#endif  // POSEIDON_WITH_ONNX

}  // namespace poseidon::model_import
