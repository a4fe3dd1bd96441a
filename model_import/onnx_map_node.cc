// model_import/onnx_map_node.cc: one ONNX node (outside the patterns of onnx_patterns.cc) -> one
// layer of ours, or folded into its input, or refused with one line that names the node and what
// to do. Emit appends a layer (named after the node's module path; a pass-through layer first
// where the model input feeds an add or concat directly), Claim makes a constant tensor the weight
// of exactly one node (shared weights are refused; the Identity copies torch.onnx makes of equal
// tensors are tensors of their own), Linear maps a projection to `fc` or `linear`. Operators with
// no layer type of their own but a near one (ReLU6, HardSwish, HardSigmoid) are mapped to it with
// a note on the layer's line.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "model_import/onnx_importer.h"

namespace poseidon::model_import::detail {

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
           "export the model with untied weights (the schema ties only an LM head on a sequence "
           "to the token embedding, which the import recognises)");
  }
}

void Importer::Linear(int i, const std::string& x, const std::string& weight,
                      const std::string& bias, int64_t n_out, const std::string& out) {
  const Val in = Get(i, x);
  if (in.rank == 3 && N(i).op_type() == "MatMul") {
    Refuse(i, "a MatMul over the last axis of an image", "flatten the input first");
  }
  const bool seq = in.rank == 2;
  // An LM head tied to the token embedding: its weight is the embedding's blob, counted there.
  const int tie = seq ? TiedEmbedding(weight, n_out) : -1;
  if (tie < 0) Claim(i, weight);
  if (!bias.empty()) Claim(i, bias);
  std::vector<std::pair<std::string, std::string> > keys = {{"num_output", std::to_string(n_out)}};
  if (bias.empty()) keys.emplace_back("bias", "false");
  const int l = Emit(i, seq ? "linear" : "fc", {in.layer}, keys, N(i).name());
  layers_[static_cast<size_t>(l)].tie = tie;
  vals_[out] = Val{l, seq ? 2 : 1};
}

void Importer::MapNode(int i) {
  const auto& n = N(i);
  const std::string& op = n.op_type();
  const std::string todo_general =
      "the importer maps Conv, Gemm, MatMul, BatchNormalization, LayerNormalization, Relu, "
      "Clip(0, x), HardSwish, HardSigmoid, Gelu, Tanh, Softmax, MaxPool, AveragePool, "
      "GlobalAveragePool, Add, Mul, Concat, Gather (embedding, first token) and PyTorch's "
      "attention, LayerNorm and GELU subgraphs; change the model, or write its YAML by hand "
      "(scenarios/models/README.md)";
  const std::vector<std::string> dyn = Dynamic(i);
  auto one = [&]() -> const std::string& {
    if (dyn.size() != 1) Refuse(i, "expected one non-constant input", todo_general);
    return dyn[0];
  };
  // The window keys; a Conv's kernel defaults to its weight's (kh, kw > 0), a pool has none.
  auto window = [&](std::vector<std::pair<std::string, std::string> >* keys, int64_t kh,
                    int64_t kw) {
    std::vector<int64_t> k = Ints(n, "kernel_shape");
    if (k.empty() && kh > 0 && kw > 0) k = {kh, kw};
    if (k.size() != 2) Refuse(i, "only 2-D windows are imported", "use a 2-D operator");
    const auto s = Ints(n, "strides", {1, 1});
    auto pads = Ints(n, "pads", {0, 0, 0, 0});
    if (auto extra = pending_pads_.find(n.input(0));
        extra != pending_pads_.end() && pads.size() == 4) {
      const auto [h, w] = extra->second;  // a Pad before this node (onnx Pad, below)
      pads = {pads[0] + h, pads[1] + w, pads[2] + h, pads[3] + w};
    }
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
    const std::vector<int64_t> v = n.input_size() > 1
                                       ? IntsOf(n.input(1)).value_or(std::vector<int64_t>{-1})
                                       : Ints(n, "pads");
    if (std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; })) {
      Fold(i, one());
      return;
    }
    // F.avg_pool2d(x, k, s, padding) with count_include_pad (the default) exports as a zero Pad
    // of H and W and an AveragePool without pads: one pool with those pads here (a Conv reads a
    // zero Pad the same way).
    const std::string mode = Str(n, "mode");
    const ConstValue* value =
        n.input_size() > 2 && !n.input(2).empty() ? Evaluate(n.input(2)) : nullptr;
    const bool zero = (n.input_size() <= 2 || n.input(2).empty() ||
                       (value && value->size() == 1 && value->F(0) == 0)) &&
                      Float(n, "value").value_or(0.0f) == 0.0f;
    const int next = OnlyConsumer(n.output(0));
    const bool window_next = next >= 0 && !GraphOutput(n.output(0)) &&
                             (N(next).op_type() == "AveragePool" || N(next).op_type() == "Conv") &&
                             N(next).input(0) == n.output(0);
    if ((mode.empty() || mode == "constant") && zero && window_next && v.size() == 8 && v[0] == 0 &&
        v[1] == 0 && v[4] == 0 && v[5] == 0 && v[2] == v[6] && v[3] == v[7] && v[2] >= 0 &&
        v[3] >= 0) {
      pending_pads_[n.output(0)] = {v[2], v[3]};
      Fold(i, one());
      return;
    }
    Refuse(i,
           "padding that is not a zero padding of height and width, the same on both sides, "
           "read by one AveragePool or Conv, has no Poseidon layer",
           "pad inside the Conv or pool (its padding argument) instead");
  }
  if (op == "Conv") {
    const Val in = Get(i, one());
    need_image(in);
    const auto w = ConstDims(n.input(1));
    if (!w || w->size() != 4) {
      Refuse(i, "the weight is not a constant 4-D tensor", "export with constant weights");
    }
    std::vector<std::pair<std::string, std::string> > keys = {
        {"num_output", std::to_string((*w)[0])}};
    window(&keys, (*w)[2], (*w)[3]);
    const int64_t group = Int(n, "group").value_or(1);
    if (group != 1) keys.emplace_back("groups", std::to_string(group));
    Claim(i, n.input(1));
    const bool has_bias = n.input_size() > 2 && !n.input(2).empty();
    if (has_bias) {
      if (ConstNumel(n.input(2)) != (*w)[0]) {
        Refuse(i,
               fmt::format("the bias is not a constant of {} values (one per output channel)",
                           (*w)[0]),
               "export with constant weights");
      }
      Claim(i, n.input(2));
    }
    const bool folded_bn = FoldedBatchNorm(i);
    if (!has_bias || folded_bn) keys.emplace_back("bias", "false");
    const int conv = Emit(i, "conv", {in.layer}, keys, n.name());
    vals_[n.output(0)] = Val{conv, 3};
    if (folded_bn) {
      // The conv's bias is the norm's shift; the norm's scale went into the weight. Named after
      // the conv ("layer1.0.conv1_bn"): the module's name is not in the file.
      const std::string& name = n.name();
      const size_t slash = name.rfind('/');
      const std::string scope = slash == std::string::npos ? name : name.substr(0, slash);
      vals_[n.output(0)] =
          Val{Emit(i, "batchnorm", {conv}, {}, scope + "_bn/BatchNormalization"), 3};
      restored_params_ += (*w)[0];
      result_.restored_batchnorm++;
    }
    return;
  }
  if (op == "BatchNormalization") {
    const Val in = Get(i, one());
    need_image(in);
    for (int k = 1; k <= 2; ++k) {
      if (!ConstDims(n.input(k))) {
        Refuse(i, "its scale or shift is not a constant", "export with constant weights");
      }
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
    if (n.input_size() < 3 || !ConstDims(n.input(1)) || !ConstDims(n.input(2))) {
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
  // Element-wise activations without a type of their own: the nearest one (no parameters, the
  // same shape; the simulator prices element-wise layers by the bytes they move), noted on the
  // layer's line and in the summary. ReLU6 (Clip(0, 6)) is a relu capped at 6; HardSwish,
  // x * relu6(x + 3) / 6, is a gated identity like GELU, x * P(X <= x); HardSigmoid,
  // relu6(x + 3) / 6, a saturating curve like tanh.
  if (op == "Clip" || op == "HardSwish" || op == "HardSigmoid") {
    const Val in = Get(i, one());
    std::string type = op == "HardSwish" ? "gelu" : op == "HardSigmoid" ? "tanh" : "relu";
    std::string note;
    if (op == "Clip") {
      // Bounds: inputs 1 and 2 (opset 11 on, optional), or attributes before.
      auto bound = [&](int k, const char* attr) -> std::optional<double> {
        if (n.input_size() > k && !n.input(k).empty()) {
          const ConstValue* v = Evaluate(n.input(k));
          if (v == nullptr || v->size() != 1) return std::nullopt;
          return v->F(0);
        }
        if (auto f = Float(n, attr)) return *f;
        return k == 1 ? -HUGE_VAL : HUGE_VAL;
      };
      const auto lo = bound(1, "min"), hi = bound(2, "max");
      if (!lo || !hi || *lo != 0.0 || !(*hi > 0.0)) {
        Refuse(i,
               "a Clip that is not a relu (its lower bound is not 0, or a bound is not a constant)",
               todo_general);
      }
      if (*hi != HUGE_VAL) {
        note = fmt::format("ONNX Clip(0, {}) (ReLU6), imported as relu", *hi);
        result_.approximated["Clip as relu"]++;
      }
    } else {
      note = fmt::format("ONNX {}, imported as {}", op, type);
      result_.approximated[op + " as " + type]++;
    }
    const int l = Emit(i, type, {in.layer}, {}, n.name());
    layers_[static_cast<size_t>(l)].note = note;
    vals_[n.output(0)] = Val{l, in.rank};
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
    window(&keys, 0, 0);
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
    auto d = Dims(x);
    std::string table;
    int64_t rows = 0;
    if (in.rank == 2 && d && d->size() >= 2 &&
        PositionTable(c, (*d)[d->size() - 2], d->back(), &table, &rows)) {
      Claim(i, table);
      std::vector<std::pair<std::string, std::string> > keys;
      if (rows != (*d)[d->size() - 2]) keys.emplace_back("max_len", std::to_string(rows));
      const int l = Emit(i, "pos_embedding", {in.layer}, keys, n.name());
      vals_[n.output(0)] = Val{l, 2};
      // A table torch.onnx computed (the lookup folded) holds only the rows read: say so, the
      // module's nn.Embedding may be longer.
      if (model_.producer_name() == "pytorch" && !NamedParameter(table)) {
        layers_[static_cast<size_t>(l)].note = fmt::format(
            "the export folded the lookup into the {} rows read; a longer table's other rows "
            "are not in the file",
            rows);
        result_.folded_position_tables++;
      }
      return;
    }
    Refuse(i,
           "adds a constant tensor that is neither a MatMul's bias nor a position table (an "
           "[S, D] weight, or a lookup of positions 0 .. S-1 in one)",
           todo_general);
  }
  if (op == "Mul" && dyn.size() == 2) {
    // x * gate: two tensors of one shape, or an image and a per-channel gate [N, C, 1, 1]
    // (squeeze-and-excitation); the tensor scaled comes first in our layer.
    const auto da = Dims(dyn[0]), db = Dims(dyn[1]);
    auto gate_of = [](const std::vector<int64_t>& g, const std::vector<int64_t>& x) {
      return g.size() == 4 && x.size() == 4 && g[0] == x[0] && g[1] == x[1] && g[2] == 1 &&
             g[3] == 1;
    };
    const Val a = Get(i, dyn[0]), b = Get(i, dyn[1]);
    if (da && db && a.rank == b.rank && (*da == *db || gate_of(*db, *da))) {
      vals_[n.output(0)] = Val{Emit(i, "mul", {a.layer, b.layer}, {}, n.name()), a.rank};
      return;
    }
    if (da && db && a.rank == b.rank && gate_of(*da, *db)) {
      vals_[n.output(0)] = Val{Emit(i, "mul", {b.layer, a.layer}, {}, n.name()), b.rank};
      return;
    }
    Refuse(i,
           "a product of two tensors that neither have one shape nor are an image and a "
           "per-channel gate (N, C, 1, 1)",
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
  if (op == "Concat" && n.input_size() == 1 && dyn.size() == 1) {
    Fold(i, dyn[0]);  // torch.cat of one tensor (a DenseNet layer's first input): a copy
    return;
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
    const auto table = ConstDims(n.input(0));
    if (table && table->size() == 2 && !IsConst(n.input(1)) && Int(n, "axis").value_or(0) == 0) {
      const Val in = Get(i, n.input(1));
      if (in.rank != 1) Refuse(i, "an embedding of something other than token ids", todo_general);
      Claim(i, n.input(0));
      const int l = Emit(
          i, "embedding", {in.layer},
          {{"vocab", std::to_string((*table)[0])}, {"num_output", std::to_string((*table)[1])}},
          n.name());
      embeddings_[n.input(0)] = l;
      vals_[n.output(0)] = Val{l, 2};
      return;
    }
    // x[:, 0] of a sequence (N, S, D): the first token (BERT's pooler reads it).
    if (!IsConst(n.input(0)) && IsConst(n.input(1))) {
      const Val in = Get(i, n.input(0));
      const auto d = Dims(n.input(0));
      const ConstValue* at = Evaluate(n.input(1));
      const int64_t axis = Int(n, "axis").value_or(0);
      // Our sequences are [N, S, D] in the file (when shape inference could not tell, as
      // without constant folding, that holds still).
      if (in.rank == 2 && (!d || d->size() == 3) && (axis == 1 || axis == -2) && at != nullptr &&
          at->is_int && at->dims.empty() && at->ints[0] == 0) {
        vals_[n.output(0)] =
            Val{Emit(i, "token_pool", {in.layer}, {{"method", "first"}}, n.name()), 1};
        return;
      }
    }
    Refuse(i, "a Gather that is neither a lookup in an embedding table nor the first token",
           todo_general);
  }
  Refuse(i, "no Poseidon layer type for this operator", todo_general);
}

}  // namespace poseidon::model_import::detail
