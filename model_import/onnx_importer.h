// model_import/onnx_importer.h: the importer behind ImportOnnxBytes (onnx_import.h), internal
// to model_import. One Importer per ModelProto: Run indexes the graph (onnx_import.cc), finds the
// subgraphs that are one layer (onnx_patterns.cc), maps the other nodes to layers in order
// (onnx_map_node.cc) and writes the YAML (onnx_yaml_writer.cc). Built only with ONNX
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

}  // namespace poseidon::model_import::detail
