// model_import/onnx_importer.h: the importer behind ImportOnnxBytes (onnx_import.h), internal
// to model_import. One Importer per ModelProto: Run indexes the graph (onnx_import.cc), finds the
// subgraphs that are one layer (onnx_patterns.cc), maps the other nodes to layers in order
// (onnx_map_node.cc) and writes the YAML (onnx_yaml_writer.cc); what a constant tensor is (its
// value, its shape, the initializer behind it) is onnx_constants.cc's. Built only with ONNX
// (POSEIDON_WITH_ONNX); not part of the library's interface. Thread-safety: an Importer is used
// by one thread, once.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "model_import/onnx_import.h"

namespace poseidon::model_import::detail {

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
  std::string note;  // a comment after the layer's line (an operator mapped to a nearby type)
  int tie = -1;      // a linear layer: the embedding layer whose table is its weight
};

// The value of a small constant tensor (shapes, indices, bounds), as Evaluate computes it:
// integers exactly (`ints`), floating-point values as doubles (`floats`), row-major.
struct ConstValue {
  std::vector<int64_t> dims;
  bool is_int = false;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  int64_t size() const { return static_cast<int64_t>(is_int ? ints.size() : floats.size()); }
  double F(int64_t k) const {
    return is_int ? static_cast<double>(ints[static_cast<size_t>(k)])
                  : floats[static_cast<size_t>(k)];
  }
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
  static int64_t Numel(const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  static int64_t Numel(const onnx::TensorProto& t) {
    return Numel(std::vector<int64_t>(t.dims().begin(), t.dims().end()));
  }

  // --- constants (onnx_constants.cc)
  // The value of constant tensor t when it is small (at most 2^20 values) and made by operators
  // the importer evaluates; nullptr otherwise. Memoized.
  const ConstValue* Evaluate(const std::string& t) const;
  // The integer values of t (Evaluate's), or nothing.
  std::optional<std::vector<int64_t> > IntsOf(const std::string& t) const;
  // The initializer behind t: t itself, or the initializer an Identity chain reads (torch.onnx
  // stores equal tensors once and gives each copy its name through an Identity node).
  const onnx::TensorProto* Source(const std::string& t) const;
  // The shape of constant tensor t (its initializer's, its value's or ONNX's shape inference's);
  // nothing when t is not constant or its shape is unknown. A weight is any such tensor.
  std::optional<std::vector<int64_t> > ConstDims(const std::string& t) const;
  int64_t ConstNumel(const std::string& t) const {
    const auto d = ConstDims(t);
    return d ? Numel(*d) : 0;
  }
  bool IsScalarConst(const std::string& t) const {
    const auto d = ConstDims(t);
    return d && Numel(*d) == 1;
  }
  // Whether t is a module parameter written under its own name: an initializer (or an Identity
  // copy of one) named by its module path, not a tensor torch.onnx computed ("onnx::Conv_12",
  // or a number in exports before PyTorch 1.13).
  bool NamedParameter(const std::string& t) const;
  // The initializers constant tensor t is computed from (t's own when it is one).
  void InitializersBehind(const std::string& t, std::set<std::string>* out) const;
  // Whether float initializers a [R, C] and b [C, R] hold the same values, a transposed (a[i][j]
  // == b[j][i], bit for bit).
  bool TransposedCopy(const onnx::TensorProto& a, const onnx::TensorProto& b) const;
  // Evaluate's steps: t at a depth of the constant subgraph (bounded: a malformed file may chain
  // or loop), and the value of node i's first output.
  const ConstValue* Eval(const std::string& t, int depth) const;
  std::optional<ConstValue> Compute(int i, int depth) const;
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
  std::optional<float> Float(const onnx::NodeProto& n, const std::string& a) const {
    for (const auto& at : n.attribute()) {
      if (at.name() == a) return at.f();
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
  // A pattern's nodes may fold into one layer only if nothing outside them reads what they make
  // but `out` (Shape nodes aside: shapes are static), and none of it is a graph output.
  bool Sealed(const std::set<int>& nodes, const std::string& out) const {
    for (int i : nodes) {
      for (const auto& o : N(i).output()) {
        if (o == out) continue;
        if (GraphOutput(o)) return false;
        for (int c : Consumers(o)) {
          if (!nodes.count(c) && N(c).op_type() != "Shape") return false;
        }
      }
    }
    return true;
  }
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
  // A MatMul/Gemm with a constant weight (and a bias Add after a MatMul): fills the weight
  // and bias names, output tensor and nodes; false if `i` is not one.
  bool Projection(int i, std::string* weight, std::string* bias, int64_t* n_out,
                  std::vector<int>* nodes, std::string* out) const;
  // Whether Conv node i is a Conv and the BatchNormalization after it that torch.onnx's eval
  // export fused into one (see onnx_patterns.cc).
  bool FoldedBatchNorm(int i) const;
  // The learned position table that constant c, added to a sequence of S tokens of width D,
  // reads: fills the weight to claim and its rows (>= S); false when c is not one.
  bool PositionTable(const std::string& c, int64_t s, int64_t d, std::string* table,
                     int64_t* rows) const;
  // The embedding layer whose table `weight` is, for a projection of n_out outputs (an LM head
  // tied to the token embedding): the table itself (Gemm transB), its Transpose, or the
  // transposed copy torch.onnx folds that into; -1 if none.
  int TiedEmbedding(const std::string& weight, int64_t n_out) const;

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
  mutable std::map<std::string, std::optional<ConstValue> > evaluated_;  // Evaluate's memo
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int> > consumers_;
  std::set<std::string> constant_;
  std::set<std::string> outputs_;
  std::map<std::string, std::vector<int64_t> > dims_;
  std::vector<int> node_pattern_;  // per node: index into patterns_ or -1
  std::vector<Pattern> patterns_;
  std::set<int> absorbed_;  // bias Adds fused into their MatMul
  std::map<std::string, Val> vals_;
  std::map<std::string, int> claimed_;     // weight (a constant tensor) -> claiming node
  std::map<std::string, int> embeddings_;  // embedding table -> its layer (for TiedEmbedding)
  // Padding of a Pad node folded into the AveragePool or Conv reading it: output -> {h, w}.
  std::map<std::string, std::pair<int64_t, int64_t> > pending_pads_;
  // Parameters of BatchNorms restored after convs (FoldedBatchNorm) that the file no longer
  // holds: the scale the export multiplied into the conv's weight, C per BatchNorm.
  int64_t restored_params_ = 0;
  std::vector<OutLayer> layers_;
  int input_pass_ = -1;  // the pass-through layer on the input, once one is needed
  std::string input_name_;
  std::string input_yaml_;
  ImportResult result_;
};

}  // namespace poseidon::model_import::detail
