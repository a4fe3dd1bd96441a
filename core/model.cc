// core/model.cc: the layer registry and Model::Build (DAG, shapes, parameters, MACs, bytes).
//
// Shape rules are Caffe's, so that the shipped models reproduce the published sizes:
//   conv     out = floor((H + 2p - k) / s) + 1
//   pooling  out = ceil((H + 2p - k) / s) + 1, minus one when pad > 0 and the last window would
//            start inside the padding ((out - 1) * s >= H + p); global pooling gives 1x1.
//            With `round: floor` (PyTorch's default): out = floor((H + 2p - k) / s) + 1.
//   fc       flattens its input: M = c * h * w
// Transformer layers (rank-2 sequences [S, D]; see Shape in model.h and
// scenarios/models/README.md): linear is a GEMM over the last dimension, attention its four
// projections plus the score and context matmuls, the others element-wise or table lookups.
#include "core/model.h"

#include "core/names.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <boost/graph/topological_sort.hpp>

namespace poseidon::core {
namespace {

struct KindName {
  LayerKind kind;
  const char* name;
};

// The registry: one row per kind. Order is the order error messages list the kinds in.
constexpr KindName kKinds[] = {
    {LayerKind::kConv, "conv"},
    {LayerKind::kPool, "pool"},
    {LayerKind::kRelu, "relu"},
    {LayerKind::kLrn, "lrn"},
    {LayerKind::kFc, "fc"},
    {LayerKind::kDropout, "dropout"},
    {LayerKind::kConcat, "concat"},
    {LayerKind::kSoftmaxLoss, "softmax_loss"},
    {LayerKind::kBatchNorm, "batchnorm"},
    {LayerKind::kAdd, "add"},
    {LayerKind::kEmbedding, "embedding"},
    {LayerKind::kPosEmbedding, "pos_embedding"},
    {LayerKind::kLayerNorm, "layernorm"},
    {LayerKind::kLinear, "linear"},
    {LayerKind::kAttention, "attention"},
    {LayerKind::kGelu, "gelu"},
    {LayerKind::kTanh, "tanh"},
    {LayerKind::kSoftmax, "softmax"},
    {LayerKind::kPatchEmbed, "patch_embed"},
    {LayerKind::kClsToken, "cls_token"},
    {LayerKind::kTokenPool, "token_pool"},
    {LayerKind::kMul, "mul"},
    {LayerKind::kModule, "module"},
};

constexpr int64_t kBytesPerValue = 4;  // fp32
const char* const kInputName = "data";

std::string Str(int64_t v) { return std::to_string(v); }
std::string HxW(int64_t h, int64_t w) { return Str(h) + "x" + Str(w); }
std::string ShapeStr(const Shape& s) { return s.ToString(); }
Shape Seq(int64_t s, int64_t d) { return {1, s, d, 2}; }
Shape Vec(int64_t d) { return {1, 1, d, 1}; }

[[noreturn]] void FailLayer(const LayerSpec& l, const std::string& msg) {
  throw ModelError(l.loc.ToString() + ": error: layer '" + l.name + "' (" + LayerKindName(l.kind) +
                   "): " + msg);
}

[[noreturn]] void FailModel(const ModelSpec& spec, const std::string& msg) {
  throw ModelError(spec.loc.ToString() + ": error: model '" + spec.name + "': " + msg);
}

ParamBlob MakeBlob(const std::string& name, std::vector<int64_t> dims) {
  ParamBlob b;
  b.name = name;
  b.count = 1;
  for (int64_t d : dims) b.count *= d;
  b.dims = std::move(dims);
  return b;
}

void RequireBottoms(const LayerSpec& l, size_t n, size_t min, size_t max) {
  if (n >= min && n <= max) return;
  std::string want = min == max ? Str(static_cast<int64_t>(min))
                                : "at least " + Str(static_cast<int64_t>(min));
  FailLayer(l, "takes " + want + " input" + (min == 1 && max == 1 ? "" : "s") + ", got " +
                   Str(static_cast<int64_t>(n)) + "; fix its 'bottom' list");
}

// Window geometry shared by conv and pool: checks and the padded input size.
void CheckWindow(const LayerSpec& l, const Shape& in, int64_t kh, int64_t kw) {
  if (kh <= 0 || kw <= 0) {
    FailLayer(l, "kernel must be positive, got " + HxW(kh, kw) + "; set 'kernel'");
  }
  if (l.stride_h <= 0 || l.stride_w <= 0) {
    FailLayer(l, "stride must be positive, got " + HxW(l.stride_h, l.stride_w) + "; set 'stride'");
  }
  if (l.pad_h < 0 || l.pad_w < 0) {
    FailLayer(l, "pad must not be negative, got " + HxW(l.pad_h, l.pad_w) + "; set 'pad'");
  }
  if (kh > in.h + 2 * l.pad_h || kw > in.w + 2 * l.pad_w) {
    FailLayer(l, "kernel " + HxW(kh, kw) + " is larger than the padded input " +
                     HxW(in.h + 2 * l.pad_h, in.w + 2 * l.pad_w) + " (input " + ShapeStr(in) +
                     ", pad " + HxW(l.pad_h, l.pad_w) +
                     "); use a smaller kernel, more padding, or remove a downsampling layer before it");
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// "'conv1' gives 64x56x56" (or "the model input 'data' is ...") for shape messages.
std::string Gives(const LayerSpec& l, size_t i, const Shape& s) {
  const std::string& b = l.bottoms.at(i);
  return (b == kInputName ? std::string("the model input 'data' is ") : "'" + b + "' gives ") +
         ShapeStr(s);
}

// Layers that take one input of a given rank: 3 (an image [C, H, W]) or 2 (a sequence [S, D]).
void RequireRank(const LayerSpec& l, const Shape& x, int rank) {
  if (x.rank == rank) return;
  const char* want = rank == 3 ? "an image [C, H, W]" : rank == 2 ? "a token sequence [S, D]"
                                                                   : "a vector [D]";
  FailLayer(l, std::string("expects ") + want + ", but its input " + Gives(l, 0, x) +
                   "; check the layer before it (or the model's 'input')");
}

// Fills out, blobs, macs and flops of one layer from its input shapes; appends to `warnings`;
// `built` are the layers before it (for `tie`).
void InferLayer(Layer& layer, const std::vector<Layer>& built, std::vector<std::string>* warnings) {
  const LayerSpec& l = layer.spec;
  const std::vector<Shape>& in = layer.in_shapes;
  switch (l.kind) {
    case LayerKind::kConv: {
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 3);
      const Shape& x = in[0];
      if (l.num_output <= 0) {
        FailLayer(l, "num_output must be positive, got " + Str(l.num_output) + "; set 'num_output'");
      }
      if (l.groups <= 0) FailLayer(l, "groups must be positive, got " + Str(l.groups));
      if (x.c % l.groups != 0) {
        FailLayer(l, "input channels " + Str(x.c) + " are not divisible by groups " +
                         Str(l.groups) + "; change 'groups' or the channels of the layer before it");
      }
      if (l.num_output % l.groups != 0) {
        FailLayer(l, "num_output " + Str(l.num_output) + " is not divisible by groups " +
                         Str(l.groups) + "; change 'num_output' or 'groups'");
      }
      CheckWindow(l, x, l.kernel_h, l.kernel_w);
      layer.out = {l.num_output, (x.h + 2 * l.pad_h - l.kernel_h) / l.stride_h + 1,
                   (x.w + 2 * l.pad_w - l.kernel_w) / l.stride_w + 1};
      const int64_t in_per_group = x.c / l.groups;
      layer.blobs.push_back(
          MakeBlob(l.name + ".weight", {l.num_output, in_per_group, l.kernel_h, l.kernel_w}));
      if (l.bias) layer.blobs.push_back(MakeBlob(l.name + ".bias", {l.num_output}));
      layer.fwd_macs = layer.out.count() * in_per_group * l.kernel_h * l.kernel_w;
      layer.fwd_flops = 2 * layer.fwd_macs + (l.bias ? layer.out.count() : 0);
      break;
    }
    case LayerKind::kPool: {
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 3);
      const Shape& x = in[0];
      int64_t kh = l.kernel_h, kw = l.kernel_w;
      if (l.global_pool) {
        kh = x.h;
        kw = x.w;
        layer.out = {x.c, 1, 1};
      } else {
        CheckWindow(l, x, kh, kw);
        if (l.pad_h >= kh || l.pad_w >= kw) {
          FailLayer(l, "pad " + HxW(l.pad_h, l.pad_w) + " must be smaller than the kernel " +
                           HxW(kh, kw) + "; reduce 'pad'");
        }
        auto out_hw = [&](PoolRound round) {
          return std::pair{PoolOutSize(x.h, kh, l.stride_h, l.pad_h, round),
                           PoolOutSize(x.w, kw, l.stride_w, l.pad_w, round)};
        };
        const auto [oh, ow] = out_hw(l.pool_round);
        layer.out = {x.c, oh, ow};
        if (!l.round_given) {
          const auto [fh, fw] = out_hw(PoolRound::kFloor);
          if (fh != oh || fw != ow) {
            warnings->push_back(l.loc.ToString() + ": warning: layer '" + l.name +
                                "' (pool): 'round' not given: ceil (the default, Caffe's) gives " +
                                HxW(oh, ow) + ", floor (PyTorch's default) would give " +
                                HxW(fh, fw) + "; write 'round: ceil' or 'round: floor' to say "
                                              "which");
          }
        }
      }
      // One compare or add per window element.
      layer.fwd_flops = layer.out.count() * kh * kw;
      break;
    }
    case LayerKind::kRelu:
      RequireBottoms(l, in.size(), 1, 1);
      layer.out = in[0];
      layer.fwd_flops = layer.out.count();
      break;
    case LayerKind::kLrn:
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 3);
      if (l.local_size <= 0 || l.local_size % 2 == 0) {
        FailLayer(l, "local_size must be a positive odd number, got " + Str(l.local_size) +
                         "; set 'local_size' (Caffe's default is 5)");
      }
      layer.out = in[0];
      // Square, windowed sum (local_size adds), scale and offset, power, multiply.
      layer.fwd_flops = layer.out.count() * (l.local_size + 5);
      break;
    case LayerKind::kFc: {
      RequireBottoms(l, in.size(), 1, 1);
      if (l.num_output <= 0) {
        FailLayer(l, "num_output must be positive, got " + Str(l.num_output) + "; set 'num_output'");
      }
      const int64_t m = in[0].count();
      layer.fc_in = m;
      layer.fc_out = l.num_output;
      layer.out = {l.num_output, 1, 1};
      layer.blobs.push_back(MakeBlob(l.name + ".weight", {l.num_output, m}));
      if (l.bias) layer.blobs.push_back(MakeBlob(l.name + ".bias", {l.num_output}));
      layer.fwd_macs = m * l.num_output;
      layer.fwd_flops = 2 * layer.fwd_macs + (l.bias ? l.num_output : 0);
      break;
    }
    case LayerKind::kDropout:
      RequireBottoms(l, in.size(), 1, 1);
      if (!(l.dropout_ratio >= 0.0 && l.dropout_ratio < 1.0)) {
        FailLayer(l, "ratio must be in [0, 1), got " + std::to_string(l.dropout_ratio) +
                         "; set 'ratio'");
      }
      layer.out = in[0];
      layer.fwd_flops = layer.out.count();  // multiply by the scaled mask
      break;
    case LayerKind::kConcat: {
      RequireBottoms(l, in.size(), 1, SIZE_MAX);
      for (const Shape& x : in) RequireRank(l, x, 3);
      Shape out = in[0];
      for (size_t i = 1; i < in.size(); ++i) {
        if (in[i].h != out.h || in[i].w != out.w) {
          FailLayer(l, "inputs must have the same height and width to be concatenated along "
                       "channels, but '" + l.bottoms[0] + "' is " + ShapeStr(in[0]) + " and '" +
                           l.bottoms[i] + "' is " + ShapeStr(in[i]) +
                           "; check the strides and padding of the branches");
        }
        out.c += in[i].c;
      }
      layer.out = out;
      break;  // a copy, no arithmetic
    }
    case LayerKind::kSoftmaxLoss:
      RequireBottoms(l, in.size(), 1, 1);
      layer.out = in[0];
      layer.fwd_flops = 3 * layer.out.count();  // max-subtract/exp, sum, divide
      break;
    case LayerKind::kBatchNorm:
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 3);
      layer.out = in[0];
      if (l.bn_affine) {
        layer.blobs.push_back(MakeBlob(l.name + ".scale", {in[0].c}));
        layer.blobs.push_back(MakeBlob(l.name + ".shift", {in[0].c}));
      }
      // Normalize (subtract, multiply) and, if affine, scale and shift.
      layer.fwd_flops = layer.out.count() * (l.bn_affine ? 4 : 2);
      break;
    case LayerKind::kAdd:
      RequireBottoms(l, in.size(), 2, SIZE_MAX);
      for (size_t i = 1; i < in.size(); ++i) {
        if (!(in[i] == in[0])) {
          FailLayer(l, "inputs must have the same shape to be added, but '" + l.bottoms[0] +
                           "' is " + ShapeStr(in[0]) + " and '" + l.bottoms[i] + "' is " +
                           ShapeStr(in[i]) + "; add a projection (1x1 conv) on the shortcut");
        }
      }
      layer.out = in[0];
      layer.fwd_flops = layer.out.count() * static_cast<int64_t>(in.size() - 1);
      break;
    case LayerKind::kEmbedding: {
      // On token ids [S]: a lookup giving [S, num_output]. On a sequence [S, num_output]: a
      // lookup by side ids of the same length (BERT's token types) added to it.
      RequireBottoms(l, in.size(), 1, 1);
      const Shape& x = in[0];
      if (l.vocab <= 0 || l.num_output <= 0) {
        FailLayer(l, "vocab and num_output must be positive, got " + Str(l.vocab) + " and " +
                         Str(l.num_output) + "; set 'vocab' and 'num_output'");
      }
      if (x.rank == 1) {
        layer.out = Seq(x.w, l.num_output);
      } else if (x.rank == 2 && x.w == l.num_output) {
        layer.out = x;
        layer.fwd_flops = x.count();  // the add
      } else {
        FailLayer(l, "expects token ids [S] (a lookup) or a sequence [S, " + Str(l.num_output) +
                         "] (a lookup added to it), but its input " + Gives(l, 0, x) +
                         "; check 'num_output' or the layer before it");
      }
      layer.blobs.push_back(MakeBlob(l.name + ".weight", {l.vocab, l.num_output}));
      break;  // a gather: no arithmetic
    }
    case LayerKind::kPosEmbedding: {
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 2);
      const Shape& x = in[0];
      const int64_t rows = l.max_len == 0 ? x.h : l.max_len;
      if (rows < x.h) {
        FailLayer(l, "max_len " + Str(rows) + " is shorter than the sequence: its input " +
                         Gives(l, 0, x) + "; raise 'max_len' or shorten the input");
      }
      layer.out = x;
      layer.blobs.push_back(MakeBlob(l.name + ".weight", {rows, x.w}));
      layer.fwd_flops = x.count();  // the add
      break;
    }
    case LayerKind::kLayerNorm: {
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 2);
      layer.out = in[0];
      layer.blobs.push_back(MakeBlob(l.name + ".gamma", {in[0].w}));
      layer.blobs.push_back(MakeBlob(l.name + ".beta", {in[0].w}));
      // Per value: mean (add), subtract, square and add (variance), normalize, scale, shift.
      layer.fwd_flops = 7 * in[0].count();
      break;
    }
    case LayerKind::kLinear: {
      // Over the last dimension of an input of any rank: a GEMM of (rows x D) by (D x N).
      RequireBottoms(l, in.size(), 1, 1);
      const Shape& x = in[0];
      if (l.num_output <= 0) {
        FailLayer(l, "num_output must be positive, got " + Str(l.num_output) + "; set 'num_output'");
      }
      layer.out = x;
      layer.out.w = l.num_output;
      const int64_t rows = x.count() / x.w;
      layer.fc_in = x.w;
      layer.fc_out = l.num_output;
      layer.fc_rows = rows;
      if (!l.tie.empty()) {
        const Layer* t = nullptr;
        for (const Layer& b : built) {
          if (b.name == l.tie) t = &b;
        }
        if (t == nullptr || t->kind != LayerKind::kEmbedding) {
          FailLayer(l, "tie '" + l.tie + "' must name an embedding layer that comes before it " +
                           (t == nullptr ? std::string("(there is none of that name before it)")
                                         : "('" + l.tie + "' is " + LayerKindName(t->kind) + ")") +
                           "; name the token embedding, or remove 'tie'");
        }
        const std::vector<int64_t>& d = t->blobs.at(0).dims;
        if (d[0] != l.num_output || d[1] != x.w) {
          FailLayer(l, "tie '" + l.tie + "': its table is " + Str(d[0]) + "x" + Str(d[1]) +
                           " (vocab x D), but this layer's weight would be " + Str(l.num_output) +
                           "x" + Str(x.w) + " (num_output x input " + Gives(l, 0, x) +
                           "); set num_output to the vocabulary");
        }
        layer.tied_to = t->id;
      } else {
        layer.blobs.push_back(MakeBlob(l.name + ".weight", {l.num_output, x.w}));
      }
      if (l.bias) layer.blobs.push_back(MakeBlob(l.name + ".bias", {l.num_output}));
      layer.fwd_macs = rows * x.w * l.num_output;
      layer.fwd_flops = 2 * layer.fwd_macs + (l.bias ? rows * l.num_output : 0);
      break;
    }
    case LayerKind::kAttention: {
      // Q, K, V = x Wq, x Wk, x Wv (S x D each); per head h of dh = D / heads: scores
      // Q_h K_h^T / sqrt(dh) (S x S), softmax, context P_h V_h (S x dh); output = context Wo.
      // A causal mask sets the upper triangle to -inf before the softmax; dense kernels still
      // compute the full score and context matmuls, so it changes no count here.
      // With `memory: M` (Transformer-XL) the keys and values span the M tokens kept from the
      // previous segment and the S of this one, L = S + M: Q, K and V are projected from all L
      // rows in one GEMM (the queries of the memory rows are computed and dropped, as
      // DeepLearningExamples' and Hugging Face's implementations do), the scores are S x L.
      // With `relative` the position embeddings of the L offsets are projected by Wr {D, D} (once
      // a batch, not an example: the cost models price it, this per-example count leaves it out)
      // and a second score term (Q + v) R^T (S x L) is shifted and added to the first
      // (Q + u) K^T; the learned biases u and v are Transformer-XL's, shared by every layer,
      // and not counted here (2 D parameters a model).
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 2);
      const Shape& x = in[0];
      const int64_t s = x.h, d = x.w, kl = s + l.memory;
      if (l.heads <= 0 || d % l.heads != 0) {
        FailLayer(l, "heads must be positive and divide the model width D, but heads is " +
                         Str(l.heads) + " and its input " + Gives(l, 0, x) +
                         "; set 'heads' to a divisor of " + Str(d));
      }
      layer.out = x;
      std::vector<const char*> projections = {"q", "k", "v", "o"};
      if (l.relative) projections.push_back("r");
      for (const char* p : projections) {
        layer.blobs.push_back(MakeBlob(l.name + "." + p + ".weight", {d, d}));
        if (l.bias) layer.blobs.push_back(MakeBlob(l.name + "." + p + ".bias", {d}));
      }
      // Rows projected: Q, K, V and O over S without memory, Q, K, V over L and O over S with.
      const int64_t proj_rows = l.memory > 0 ? 3 * kl + s : 4 * s;
      // Projections; scores and context (and with `relative` the second score term).
      layer.fwd_macs = proj_rows * d * d + (l.relative ? 3 : 2) * s * kl * d;
      // Softmax over heads x S x L scores: scale, max-subtract and exp, sum, divide; `relative`
      // adds u and v to the queries and sums the two score terms.
      layer.fwd_flops = 2 * layer.fwd_macs + (l.bias ? proj_rows * d : 0) + 4 * l.heads * s * kl +
                        (l.relative ? 2 * s * d + l.heads * s * kl : 0);
      break;
    }
    case LayerKind::kGelu:
    case LayerKind::kTanh:
      RequireBottoms(l, in.size(), 1, 1);
      layer.out = in[0];
      // GELU's tanh form: x^3, 2 multiply-adds, tanh, add, 2 multiplies; tanh counted as 4.
      layer.fwd_flops = (l.kind == LayerKind::kGelu ? 8 : 4) * layer.out.count();
      break;
    case LayerKind::kSoftmax:
      RequireBottoms(l, in.size(), 1, 1);
      layer.out = in[0];
      layer.fwd_flops = 3 * layer.out.count();  // over the last dimension, as softmax_loss
      break;
    case LayerKind::kPatchEmbed: {
      // A conv with kernel = stride = patch: [C, H, W] -> [(H/P)(W/P), D], a GEMM of
      // (patches x C P P) by (C P P x D).
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 3);
      const Shape& x = in[0];
      if (l.num_output <= 0) {
        FailLayer(l, "num_output must be positive, got " + Str(l.num_output) + "; set 'num_output'");
      }
      if (l.patch <= 0 || x.h % l.patch != 0 || x.w % l.patch != 0) {
        FailLayer(l, "patch " + Str(l.patch) + " must be positive and divide the image, but its "
                         "input " + Gives(l, 0, x) + "; set 'patch' to a divisor of " +
                         HxW(x.h, x.w));
      }
      const int64_t n = (x.h / l.patch) * (x.w / l.patch), k = x.c * l.patch * l.patch;
      layer.out = Seq(n, l.num_output);
      layer.blobs.push_back(
          MakeBlob(l.name + ".weight", {l.num_output, x.c, l.patch, l.patch}));
      if (l.bias) layer.blobs.push_back(MakeBlob(l.name + ".bias", {l.num_output}));
      layer.fc_in = k;
      layer.fc_out = l.num_output;
      layer.fc_rows = n;
      layer.fwd_macs = n * k * l.num_output;
      layer.fwd_flops = 2 * layer.fwd_macs + (l.bias ? n * l.num_output : 0);
      break;
    }
    case LayerKind::kClsToken:
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 2);
      layer.out = Seq(in[0].h + 1, in[0].w);
      layer.blobs.push_back(MakeBlob(l.name + ".token", {1, in[0].w}));
      break;  // a copy
    case LayerKind::kTokenPool:
      RequireBottoms(l, in.size(), 1, 1);
      RequireRank(l, in[0], 2);
      layer.out = Vec(in[0].w);
      layer.fwd_flops = l.pool_first ? 0 : in[0].count();
      break;
    case LayerKind::kMul: {
      // x * g: g of x's shape, or a per-channel gate [C, 1, 1] broadcast over an image [C, H, W]
      // (squeeze-and-excitation: the gate scales each channel).
      RequireBottoms(l, in.size(), 2, 2);
      const Shape& x = in[0];
      const Shape& g = in[1];
      const bool gate = x.rank == 3 && g.rank == 3 && g.c == x.c && g.h == 1 && g.w == 1;
      if (!(g == x) && !gate) {
        FailLayer(l, "the second input must have the shape of the first or be a per-channel gate "
                     "Cx1x1 of an image CxHxW, but '" + l.bottoms[0] + "' is " + ShapeStr(x) +
                         " and '" + l.bottoms[1] + "' is " + ShapeStr(g) +
                         "; list the tensor being scaled first, the gate second");
      }
      layer.out = x;
      layer.fwd_flops = x.count();
      break;
    }
    case LayerKind::kModule: {
      RequireBottoms(l, in.size(), 1, 1);
      layer.out = in[0];
      if (l.module_params.empty()) {
        FailLayer(l, "has no parameters; a module layer lists its parameters under 'params'");
      }
      for (const ModuleParam& p : l.module_params) {
        if (p.name.empty()) FailLayer(l, "a parameter has an empty name");
        for (int64_t d : p.dims) {
          if (d <= 0) FailLayer(l, "parameter '" + p.name + "' has a dimension " + Str(d));
        }
        layer.blobs.push_back(MakeBlob(l.name + "." + p.name, p.dims));
      }
      if (l.linear_in > 0 || l.linear_out > 0) {
        const ParamBlob& w = layer.blobs[0];
        if (l.linear_in <= 0 || l.linear_out <= 0 || l.linear_rows <= 0 ||
            w.count != l.linear_in * l.linear_out) {
          FailLayer(l, "linear: in " + Str(l.linear_in) + ", out " + Str(l.linear_out) +
                           ", rows " + Str(l.linear_rows) + " do not describe its first " +
                           "parameter '" + w.name + "' of " + Str(w.count) + " values as an " +
                           "out x in weight");
        }
        layer.fc_in = l.linear_in;
        layer.fc_out = l.linear_out;
        layer.fc_rows = l.linear_rows;
      }
      break;
    }
  }
  if (layer.out.c <= 0 || layer.out.h <= 0 || layer.out.w <= 0) {
    FailLayer(l, "output shape " + ShapeStr(layer.out) + " is empty; check kernel, stride and pad");
  }
  for (ParamBlob& b : layer.blobs) {
    b.count *= layer.value_words;
    layer.params += b.count;
  }
  layer.out_bytes = layer.out.count() * kBytesPerValue;
  if (l.kind == LayerKind::kAttention) {
    // What the forward pass writes and the backward pass reads: Q, K, V, the scores and the
    // probabilities (heads x S x L each, L = S + memory), the context, and the output; with
    // `relative` also the second score term and the two biased queries.
    const int64_t s = layer.out.h, d = layer.out.w, kl = s + l.memory;
    layer.out_bytes = (3 * s * d + 2 * kl * d + 2 * l.heads * s * kl +
                       (l.relative ? l.heads * s * kl + 2 * s * d : 0)) *
                      kBytesPerValue;
  }
  for (const Shape& s : in) layer.in_bytes += s.count() * kBytesPerValue;
}

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

}  // namespace

int64_t PoolOutSize(int64_t in, int64_t k, int64_t s, int64_t p, PoolRound round) {
  if (round == PoolRound::kFloor) return (in + 2 * p - k) / s + 1;
  int64_t out = CeilDiv(in + 2 * p - k, s) + 1;
  // Caffe: the last window must start inside the image, not in the padding.
  if (p > 0 && (out - 1) * s >= in + p) --out;
  return out;
}

std::string Shape::ToString() const {
  if (rank == 1) return Str(w);
  if (rank == 2) return Str(h) + "x" + Str(w);
  return Str(c) + "x" + Str(h) + "x" + Str(w);
}

std::string SourceLoc::ToString() const {
  std::string s = file.empty() ? "<model>" : file;
  if (line > 0) {
    // Appended piecewise: `":" + std::to_string(...)` trips GCC 12's false -Wrestrict warning.
    s += ':';
    s += std::to_string(line);
    s += ':';
    s += std::to_string(column);
  }
  return s;
}

bool LayerKindFromName(const std::string& name, LayerKind* kind) {
  for (const KindName& k : kKinds) {
    if (name == k.name) {
      if (kind != nullptr) *kind = k.kind;
      return true;
    }
  }
  return false;
}

const char* LayerKindName(LayerKind kind) {
  for (const KindName& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

std::string KnownLayerKinds() {
  std::string s;
  for (const KindName& k : kKinds) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

const Layer* Model::FindLayer(const std::string& name) const {
  for (const Layer& l : layers_) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

Model Model::Build(const ModelSpec& spec, const BuildOptions& options) {
  const std::vector<LayerSpec>& all = spec.layers;
  if (all.empty()) FailModel(spec, "has no layers; add a 'layers' list");
  const Shape input{spec.input_c, spec.input_h, spec.input_w, spec.input_rank};
  if (spec.input_c <= 0 || spec.input_h <= 0 || spec.input_w <= 0 || spec.input_rank < 1 ||
      spec.input_rank > 3 || (spec.input_rank < 3 && spec.input_c != 1) ||
      (spec.input_rank < 2 && spec.input_h != 1)) {
    FailModel(spec, "input shape " + ShapeStr(input) +
                        " must be positive; set input channels, height and width");
  }
  if (spec.value_words != 1 && spec.value_words != 2) {
    FailModel(spec, "value_words must be 1 (fp32) or 2 (fp64), got " + Str(spec.value_words));
  }

  // 1. Names: unique, not the reserved input name. Groups: every group left out must exist.
  std::map<std::string, size_t> index;  // layer name -> position in the file
  std::set<std::string> groups;
  for (size_t i = 0; i < all.size(); ++i) {
    const LayerSpec& l = all[i];
    if (l.name.empty()) FailLayer(l, "has an empty name; give every layer a unique name");
    if (l.name == kInputName) {
      FailLayer(l, "'data' is the name of the model input; rename the layer");
    }
    auto [it, inserted] = index.emplace(l.name, i);
    if (!inserted) {
      FailLayer(l, "duplicate layer name (first defined at " + all[it->second].loc.ToString() +
                       "); give every layer a unique name");
    }
    if (!l.group.empty()) groups.insert(l.group);
  }
  for (const std::string& g : options.without_groups) {
    if (groups.count(g) == 0) {
      std::string known;
      for (const auto& k : groups) known += (known.empty() ? "" : ", ") + k;
      FailModel(spec, "has no layer group '" + g + "' to leave out; known groups: " +
                          (known.empty() ? "(none)" : known));
    }
  }

  // 2. Resolve bottoms by name over the whole file (so that leaving a group out never changes
  // what a kept layer reads), then drop the left-out groups.
  std::vector<std::vector<size_t>> bottoms(all.size());  // file positions; empty = model input
  for (size_t i = 0; i < all.size(); ++i) {
    const LayerSpec& l = all[i];
    if (l.bottoms.empty()) {
      if (i > 0) bottoms[i].push_back(i - 1);
      continue;
    }
    for (const std::string& b : l.bottoms) {
      if (b == kInputName) {
        if (l.bottoms.size() != 1) {
          FailLayer(l, "the model input 'data' must be a layer's only bottom; feed it through a "
                       "layer first");
        }
        continue;
      }
      auto it = index.find(b);
      if (it == index.end()) {
        std::vector<std::string> known{kInputName};
        for (const auto& [name, pos] : index) known.push_back(name);
        std::string hint = ClosestName(b, known);
        FailLayer(l, "unknown bottom '" + b + "'" +
                         (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                         " a bottom names another layer of the model or 'data' (the input)");
      }
      if (it->second == i) FailLayer(l, "lists itself as a bottom; a layer cannot read its own output");
      bottoms[i].push_back(it->second);
    }
  }
  std::vector<bool> kept(all.size());
  std::vector<size_t> kept_pos;  // file positions of kept layers
  for (size_t i = 0; i < all.size(); ++i) {
    kept[i] = options.without_groups.count(all[i].group) == 0;
    if (kept[i]) kept_pos.push_back(i);
  }
  if (kept_pos.empty()) FailModel(spec, "no layers are left after leaving out groups");
  std::vector<int> vertex_of(all.size(), -1);
  for (size_t v = 0; v < kept_pos.size(); ++v) vertex_of[kept_pos[v]] = static_cast<int>(v);
  for (size_t i : kept_pos) {
    for (size_t b : bottoms[i]) {
      if (!kept[b]) {
        FailLayer(all[i], "reads '" + all[b].name + "' of group '" + all[b].group +
                              "', which is left out; put this layer in that group too, or keep "
                              "the group");
      }
    }
  }

  // 3. The DAG: an edge bottom -> top per input. Boost's topological_sort detects cycles; the
  // order itself is Kahn's algorithm preferring the earliest layer in the file, so that a file
  // written in forward order keeps its order (and layer ids follow the file).
  const size_t n = kept_pos.size();
  Graph g(n);
  for (size_t v = 0; v < n; ++v) {
    for (size_t b : bottoms[kept_pos[v]]) boost::add_edge(vertex_of[b], static_cast<int>(v), g);
  }
  try {
    std::vector<Graph::vertex_descriptor> reverse_order;
    boost::topological_sort(g, std::back_inserter(reverse_order));
  } catch (const boost::not_a_dag&) {
    std::vector<int> component(n);
    boost::strong_components(g, component.data());
    std::map<int, std::vector<size_t>> members;
    for (size_t v = 0; v < n; ++v) members[component[v]].push_back(v);
    for (size_t v = 0; v < n; ++v) {
      const auto& cyc = members[component[v]];
      if (cyc.size() < 2) continue;
      std::string names;
      for (size_t u : cyc) names += (names.empty() ? "" : ", ") + all[kept_pos[u]].name;
      FailLayer(all[kept_pos[v]], "is part of a cycle (layers " + names +
                                      "); a model must be acyclic, fix the 'bottom' lists");
    }
    FailModel(spec, "the layer graph has a cycle; fix the 'bottom' lists");
  }
  std::vector<size_t> order;  // vertices in forward order
  {
    std::vector<size_t> pending(n);
    std::set<size_t> ready;
    for (size_t v = 0; v < n; ++v) {
      pending[v] = boost::in_degree(v, g);
      if (pending[v] == 0) ready.insert(v);
    }
    while (!ready.empty()) {
      size_t v = *ready.begin();
      ready.erase(ready.begin());
      order.push_back(v);
      for (auto [e, end] = boost::out_edges(v, g); e != end; ++e) {
        size_t t = boost::target(*e, g);
        if (--pending[t] == 0) ready.insert(t);
      }
    }
  }

  // 4. Shapes, parameters and costs in forward order.
  Model m;
  m.name_ = spec.name;
  m.input_ = input;
  std::vector<int> id_of_vertex(n, -1);
  m.layers_.reserve(n);
  for (size_t v : order) {
    const LayerSpec& l = all[kept_pos[v]];
    Layer layer;
    layer.id = static_cast<int>(m.layers_.size());
    layer.name = l.name;
    layer.kind = l.kind;
    layer.spec = l;
    if (bottoms[kept_pos[v]].empty()) {
      layer.in_shapes.push_back(m.input_);
    } else {
      for (size_t b : bottoms[kept_pos[v]]) {
        int id = id_of_vertex[vertex_of[b]];
        layer.bottoms.push_back(id);
        layer.in_shapes.push_back(m.layers_[id].out);
      }
    }
    // Error messages name bottoms by the names in the file; an implicit bottom gets its name too.
    if (layer.spec.bottoms.empty()) {
      layer.spec.bottoms.push_back(layer.bottoms.empty() ? kInputName
                                                         : m.layers_[layer.bottoms[0]].name);
    }
    layer.value_words = spec.value_words;
    InferLayer(layer, m.layers_, &m.warnings_);
    id_of_vertex[v] = layer.id;
    m.total_params_ += layer.params;
    m.forward_macs_ += layer.fwd_macs;
    m.forward_flops_ += layer.fwd_flops;
    m.activation_bytes_ += layer.out_bytes;
    if (layer.params > 0) m.param_layers_.push_back(layer.id);
    m.layers_.push_back(std::move(layer));
  }
  return m;
}

}  // namespace poseidon::core
