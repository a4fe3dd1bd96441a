// model_import/onnx_patterns.cc: the subgraphs that become one layer. PyTorch 1.13 writes
// nn.MultiheadAttention as in-projection MatMul + Add, Slice / Reshape / Transpose per head,
// scaled Q K^T, an optional mask, Softmax, P V and an out-projection (`attention`), nn.LayerNorm
// before opset 17 as ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul, Add (`layernorm`)
// and nn.GELU as its Erf form (`gelu`). FindPatterns marks their nodes before MapNode runs; a
// node belongs to at most one pattern. Projection (a MatMul or Gemm on a constant weight, with
// its bias Add) is here too: the matchers find projections with it, and MapNode maps them. So are
// two conventions of torch.onnx that MapNode asks about: the BatchNorm its eval export folds into
// the conv before it (FoldedBatchNorm), and the lookup of a learned position table
// (PositionTable).
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model_import/onnx_importer.h"

namespace poseidon::model_import::detail {

bool Importer::Projection(int i, std::string* weight, std::string* bias, int64_t* n_out,
                          std::vector<int>* nodes, std::string* out) const {
  if (i < 0) return false;
  const auto& n = N(i);
  bias->clear();
  nodes->clear();
  if (n.op_type() == "Gemm" && n.input_size() >= 2 && !IsConst(n.input(0))) {
    const auto w = ConstDims(n.input(1));
    if (!w || w->size() != 2 || Int(n, "transA").value_or(0) != 0) return false;
    *weight = n.input(1);
    *n_out = Int(n, "transB").value_or(0) ? (*w)[0] : (*w)[1];
    if (n.input_size() >= 3 && !n.input(2).empty()) {
      if (ConstNumel(n.input(2)) != *n_out) return false;
      *bias = n.input(2);
    }
    nodes->push_back(i);
    *out = n.output(0);
    return true;
  }
  if (n.op_type() == "MatMul" && !IsConst(n.input(0))) {
    const auto w = ConstDims(n.input(1));
    if (!w || w->size() != 2) return false;
    *weight = n.input(1);
    *n_out = (*w)[1];
    nodes->push_back(i);
    *out = n.output(0);
    // A bias: the MatMul's only consumer an Add of a 1-D constant of N values.
    const auto& cons = Consumers(n.output(0));
    if (cons.size() == 1 && N(cons[0]).op_type() == "Add" && !GraphOutput(n.output(0))) {
      const auto& a = N(cons[0]);
      const std::string other = a.input(0) == n.output(0) ? a.input(1) : a.input(0);
      const auto b = ConstDims(other);
      if (b && *b == std::vector<int64_t>{*n_out}) {
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
  // Forward: the probabilities (after a Dropout in a training export) times V.
  std::string probs = N(softmax).output(0);
  int context = OnlyConsumer(probs);
  if (context >= 0 && N(context).op_type() == "Dropout" && !GraphOutput(probs)) {
    set.insert(context);
    probs = N(context).output(0);
    context = OnlyConsumer(probs);
  }
  if (context < 0 || N(context).op_type() != "MatMul" || N(context).input(0) != probs ||
      IsConst(N(context).input(1))) {
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
    in_values += ConstNumel(w);
    if (!b.empty()) {
      params.push_back(b);
      in_values += ConstNumel(b);
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
      if (ConstNumel(w) != d * d || in_values != expect) return false;
      // Heads: D over the per-head width of Q at the scores (shape inference, else the last
      // Reshape on Q's path).
      int64_t head_dim = -1;
      if (auto qd = Dims(N(scores).input(0)); qd && !qd->empty()) head_dim = qd->back();
      // Without inferred shapes: the last size of the first Reshape back along Q's path.
      for (std::string q = N(scores).input(0); head_dim <= 0;) {
        const int r = Producer(q);
        if (r < 0 || !set.count(r) || Dynamic(r).size() != 1) break;
        if (N(r).op_type() == "Reshape" && N(r).input_size() > 1) {
          const std::vector<int64_t> v = IntsOf(N(r).input(1)).value_or(std::vector<int64_t>{});
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
  if (!Sealed(set, p->output)) return false;
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
  if (!ConstDims(gamma) || !ConstDims(beta)) return false;
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
  if (!Sealed(set, out)) return false;
  p->kind = "gelu";
  p->nodes = set;
  p->input = x;
  p->output = out;
  p->scope_node = erf;
  return true;
}

bool Importer::FoldedBatchNorm(int i) const {
  // torch.onnx writes a parameter it uses as it is under its module path
  // ("layer1.0.conv1.weight"), and a tensor it computed under "onnx::Conv_12" (a number before
  // PyTorch 1.13). Its eval export (the default, TrainingMode.EVAL) fuses Conv + BatchNorm into
  // one Conv whose weight (W scaled by the norm) and bias (the norm's shift) it computed; a conv
  // of the module keeps its named weight, and a conv without a bias that no BatchNorm follows
  // has no bias. So a Conv whose weight and bias are both computed ones was a Conv and a
  // BatchNorm. (A conv that had a bias of its own before the BatchNorm cannot be told: the
  // export merged it into the shift.) Files of other exporters are taken as they are.
  const auto& n = N(i);
  if (model_.producer_name() != "pytorch" || n.input_size() < 3 || n.input(2).empty()) {
    return false;
  }
  return !NamedParameter(n.input(1)) && !NamedParameter(n.input(2));
}

bool Importer::PositionTable(const std::string& c, int64_t s, int64_t d, std::string* table,
                             int64_t* rows) const {
  // nn.Embedding(L, D)(torch.arange(S)) exports as Gather(table, positions); torch.onnx folds it
  // into an [S, D] initializer where it can, and a broadcast adds Unsqueeze / Expand on the way.
  static const std::set<std::string> kLayout = {"Unsqueeze", "Reshape", "Expand", "Squeeze",
                                                "Cast"};
  std::string t = c;
  for (int steps = 0; steps < 8; ++steps) {
    // A table folded by the export: [S, D] values under leading 1s.
    if (const auto dims = ConstDims(t); dims && Source(t) != nullptr) {
      const size_t r = dims->size();
      const bool leading_ones = r >= 2 && Numel(*dims) == (*dims)[r - 2] * (*dims)[r - 1];
      if (!leading_ones || (*dims)[r - 2] != s || (*dims)[r - 1] != d) return false;
      *table = t;
      *rows = s;
      return true;
    }
    const int p = Producer(t);
    if (p < 0) return false;
    const auto& n = N(p);
    if (n.op_type() == "Gather" && Int(n, "axis").value_or(0) == 0) {
      // A lookup left in the graph: positions 0 .. S-1 (per row, when broadcast over a batch).
      const auto w = ConstDims(n.input(0));
      const ConstValue* at = Evaluate(n.input(1));
      if (!w || w->size() != 2 || (*w)[1] != d || (*w)[0] < s || at == nullptr || !at->is_int ||
          at->dims.empty() || at->dims.back() != s) {
        return false;
      }
      for (int64_t k = 0; k < at->size(); ++k) {
        if (at->ints[static_cast<size_t>(k)] != k % s) return false;
      }
      *table = n.input(0);
      *rows = (*w)[0];
      return true;
    }
    if (!kLayout.count(n.op_type()) || n.input_size() < 1) return false;
    t = n.input(0);
  }
  return false;
}

int Importer::TiedEmbedding(const std::string& weight, int64_t n_out) const {
  // A tied LM head (lm_head.weight = wte.weight) reads the table [V, D] as it is (Gemm transB),
  // through a Transpose, or, once torch.onnx has folded that Transpose, as a new initializer
  // [D, V] of the same values. An untied head of fresh random values is never one.
  const onnx::TensorProto* w = Source(weight);
  const int t = Producer(weight);
  const bool transposed = t >= 0 && N(t).op_type() == "Transpose" && N(t).input_size() == 1 &&
                          Ints(N(t), "perm", {1, 0}) == std::vector<int64_t>{1, 0};
  for (const auto& [table, layer] : embeddings_) {
    const onnx::TensorProto* e = Source(table);
    if (e == nullptr || e->dims_size() != 2 || e->dims(0) != n_out) continue;
    if ((w != nullptr && w == e) || (transposed && Source(N(t).input(0)) == e) ||
        (w != nullptr && TransposedCopy(*w, *e))) {
      return layer;
    }
  }
  return -1;
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

}  // namespace poseidon::model_import::detail
