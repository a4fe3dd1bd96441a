// core/model.h: a neural-network model as the protocol core sees it.
//
// A ModelSpec is the plain description read from scenarios/models/NAME.yaml (by config/, which fills
// the SourceLoc of every layer so that errors can name file:line:column). Model::Build derives the
// layer DAG (Boost.Graph), a topological (forward) order, per-image output shapes, parameter blobs,
// forward multiply-accumulates and activation bytes, and rejects inconsistent models with a
// ModelError that names the layer and its place in the file.
//
//   ModelSpec spec = config::LoadModelFile("scenarios/models/alexnet.yaml");
//   Model m = Model::Build(spec);
//   m.total_params();   // 60,965,224
//
// All counts are per image (batch 1); multiply by the batch size where needed. Units: bytes are
// fp32 bytes (4 per value). Thread-safety: a built Model is immutable and may be shared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace poseidon::core {

// Where a value came from in a user's file (1-based line and column; 0 when unknown).
struct SourceLoc {
  std::string file;
  int line = 0;
  int column = 0;
  // "file:line:column" (or just "file", or "<model>" when nothing is known).
  std::string ToString() const;
};

// Bad model description (unknown layer kind, unknown bottom, shapes that do not fit, a cycle).
// what() reads "FILE:LINE:COL: error: layer 'NAME' (KIND): what is wrong; what to do" (model-wide
// problems: "FILE: error: model 'NAME': ...").
class ModelError : public std::runtime_error {
 public:
  explicit ModelError(const std::string& msg) : std::runtime_error(msg) {}
};

enum class LayerKind {
  kConv,
  kPool,
  kRelu,
  kLrn,
  kFc,
  kDropout,
  kConcat,
  kSoftmaxLoss,
  kBatchNorm,
  kAdd,
  // Transformer layers: they read and write token sequences [S, D] (rank 2; see Shape).
  kEmbedding,
  kPosEmbedding,
  kLayerNorm,
  kLinear,
  kAttention,
  kGelu,
  kTanh,
  kSoftmax,
  kPatchEmbed,
  kClsToken,
  kTokenPool,
  // An element-wise product (a squeeze-and-excitation gate; ONNX Mul of two activations).
  kMul,
  // A framework module's own parameters, as the framework declares them (a PyTorch job's layer
  // table, poseidon.torch): no computation is known, the shape passes through.
  kModule,
};
// The last kind, for loops over the registry.
constexpr LayerKind kLastLayerKind = LayerKind::kModule;

// Registry of layer kinds by name ("conv", "pool", "relu", "lrn", "fc", "dropout", "concat",
// "softmax_loss", "batchnorm", "add", "embedding", "pos_embedding", "layernorm", "linear",
// "attention", "gelu", "tanh", "softmax", "patch_embed", "cls_token", "token_pool", "mul",
// "module"). Returns false for an unknown name.
bool LayerKindFromName(const std::string& name, LayerKind* kind);
const char* LayerKindName(LayerKind kind);
// "conv, pool, relu, ..." for error messages that list the known kinds.
std::string KnownLayerKinds();

enum class PoolMethod { kMax, kAvg };

// How a pooling layer rounds its output size (`round:` in the model file).
//   kCeil   Caffe's: out = ceil((H + 2p - k) / s) + 1, minus one when pad > 0 and the last window
//           would start in the padding; the last window may run past the padded input and is
//           clipped (for avg, its divisor is the clipped size).
//   kFloor  PyTorch's and oneDNN's default: out = floor((H + 2p - k) / s) + 1; every window lies
//           inside the padded input.
enum class PoolRound { kCeil, kFloor };

// One parameter of a `module` layer: its name within the module and its dims (values).
struct ModuleParam {
  std::string name;
  std::vector<int64_t> dims;
};

// One layer as written in the model file. Fields that do not apply to a kind are left at their
// defaults; config/ rejects keys that do not belong to the kind.
struct LayerSpec {
  std::string name;
  LayerKind kind = LayerKind::kRelu;
  // Names of the layers feeding this one. Empty means "the previous layer in the file" (or the
  // model input for the first layer). The special name "data" is the model input.
  std::vector<std::string> bottoms;
  // Optional group tag (for example "aux" for GoogLeNet's auxiliary heads); Build can leave a
  // group out.
  std::string group;

  // conv: num_output, kernel, stride, pad, groups, bias. fc: num_output, bias.
  int64_t num_output = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t groups = 1;
  bool bias = true;
  // pool: method, kernel/stride/pad above, or global pooling over the whole plane.
  PoolMethod pool = PoolMethod::kMax;
  bool global_pool = false;
  // pool: output rounding; `round_given` is false when the file left it to the default (ceil), in
  // which case Build warns if floor would give another shape.
  PoolRound pool_round = PoolRound::kCeil;
  bool round_given = false;
  // lrn (Caffe ACROSS_CHANNELS): local_size, alpha, beta, k.
  int64_t local_size = 5;
  double alpha = 1e-4, beta = 0.75, k = 1.0;
  // dropout
  double dropout_ratio = 0.5;
  // batchnorm: learnable scale and shift (counted as parameters, 2*C); running mean/var are not
  // parameters.
  bool bn_affine = true;
  // concat: along channels (axis 1), the only axis supported.
  // embedding: a {vocab, num_output} table. pos_embedding: a {max_len, D} table added to its
  // input (max_len 0: the sequence length).
  int64_t vocab = 0;
  int64_t max_len = 0;
  // attention: heads (dividing D); causal masks the scores but changes no count (see model.cc).
  // memory: tokens of the previous segment that the keys and values also span (Transformer-XL's
  // mems, carried without gradient); relative: Transformer-XL's relative positions (a position
  // projection {D, D} and a second score term; see model.cc).
  int64_t heads = 0;
  bool causal = false;
  int64_t memory = 0;
  bool relative = false;
  // patch_embed: the patch size in pixels (kernel = stride = patch).
  int64_t patch = 0;
  // token_pool: mean over the tokens, or the first token (BERT's pooler, ViT's class token).
  bool pool_first = false;
  // linear: the name of an embedding layer whose table is this layer's weight (GPT-2's LM head);
  // the weight is then that layer's blob, counted and synced once, there.
  std::string tie;
  // module: the module's parameters in the framework's order. When the module applies a weight
  // as a GEMM (an nn.Linear), linear_in / linear_out are M and N of its N x M weight (the first
  // parameter) and linear_rows the rows per example its input carries (the tokens of a
  // sequence; 1 for a vector): its weight may then go by sufficient factors.
  std::vector<ModuleParam> module_params;
  int64_t linear_in = 0, linear_out = 0, linear_rows = 1;

  SourceLoc loc;
};

struct ModelSpec {
  std::string name;
  std::string description;
  // Per-image input shape (channels, height, width) and number of classes (informational).
  // input_rank 2 is a sequence [S, D] (input_h = S, input_w = D, input_c = 1), rank 1 a sequence
  // of S token ids (input_w = S, input_c = input_h = 1): see Shape.
  int64_t input_c = 0, input_h = 0, input_w = 0;
  int input_rank = 3;
  int64_t num_classes = 0;
  std::vector<LayerSpec> layers;
  // 32-bit words one parameter value takes: 1 (fp32, every model file) or 2 (a float64 PyTorch
  // model's layer table). Blob counts, chunks and messages are in words; a value is never split
  // between two chunks, ring segments or messages.
  int value_words = 1;
  SourceLoc loc;  // where the model file starts
};

// Output size of a pooling window along one axis (input `in`, kernel `k`, stride `s`, pad `p`),
// under `round`. Assumes k <= in + 2p, s > 0, 0 <= p < k (Build checks these first).
int64_t PoolOutSize(int64_t in, int64_t k, int64_t s, int64_t p, PoolRound round);

// Per-image shape of a layer's output (NCHW without N). FC outputs are {num_output, 1, 1}.
// Shapes of lower rank are right-aligned in (c, h, w), the dimensions in front being 1: an image
// is rank 3 [C, H, W]; a token sequence rank 2 [S, D] = {1, S, D}; token ids or a pooled vector
// rank 1 [D] = {1, 1, D}. The last dimension is always `w`. Shapes of different rank differ.
struct Shape {
  int64_t c = 0, h = 0, w = 0;
  int rank = 3;
  int64_t count() const { return c * h * w; }
  // "CxHxW", "SxD" or "D".
  std::string ToString() const;
  bool operator==(const Shape&) const = default;
};

// One learnable parameter blob (a layer's weights or its bias). It is the unit the parameter
// server chunks and places.
struct ParamBlob {
  std::string name;           // "conv1.weight", "conv1.bias", "bn1.scale", ...
  std::vector<int64_t> dims;  // e.g. {out, in/groups, kh, kw}
  int64_t count = 0;          // 32-bit words: the product of dims x the model's value_words
  int64_t bytes() const { return count * 4; }
};

struct Layer {
  int id = 0;  // index in Model::layers(), which is a topological order
  std::string name;
  LayerKind kind = LayerKind::kRelu;
  std::vector<int> bottoms;  // ids of input layers; empty for layers fed by the model input
  std::vector<Shape> in_shapes;  // per bottom (the model input when bottoms is empty)
  Shape out;
  std::vector<ParamBlob> blobs;
  int64_t params = 0;        // sum of blob counts
  int64_t fwd_macs = 0;      // multiply-accumulates of the forward pass (conv, fc, linear,
                             // attention, patch_embed; 0 otherwise)
  int64_t fwd_flops = 0;     // all floating-point ops of the forward pass (2*macs + elementwise)
  int64_t out_bytes = 0;     // activation bytes written by the forward pass (for attention its
                             // intermediates too: Q, K, V, scores, probabilities, context)
  int64_t in_bytes = 0;      // activation bytes read by the forward pass
  // For kFc and kLinear (and kPatchEmbed, whose weight is a GEMM over non-overlapping patches): M
  // (inputs) and N (outputs) of the N x M weight, for sufficient factors and GEMM costs, and the
  // rows the weight is applied to per image (1 for fc; the tokens for linear, the patches for
  // patch_embed): a GEMM of (batch x fc_rows) x M by M x N.
  int64_t fc_in = 0, fc_out = 0, fc_rows = 1;
  // For a linear layer with `tie`: the id of the embedding layer whose blob is its weight.
  int tied_to = -1;
  // 32-bit words per parameter value (ModelSpec::value_words).
  int value_words = 1;
  // The layer as written, except that `bottoms` always names its inputs: an implicit bottom is
  // filled in with the previous layer's name, or "data" for the model input.
  LayerSpec spec;
};

// Whether SACP may send a layer's gradient as sufficient factors (an fc layer, a linear layer
// with its own weight, or a module that applies its weight as a GEMM; K per worker is then
// batch x fc_rows).
inline bool HasSufficientFactors(const Layer& l) {
  return (l.kind == LayerKind::kFc || l.kind == LayerKind::kLinear ||
          (l.kind == LayerKind::kModule && l.fc_in > 0)) &&
         l.tied_to < 0;
}
// K, the rows of a worker's sufficient factors for `batch` images: batch x fc_rows.
inline int64_t SfbFactorRows(const Layer& l, int64_t batch) { return batch * l.fc_rows; }
// The 32-bit words of `rows` factor rows of the layer: rows x (M + N) values.
inline int64_t SfbRowWords(const Layer& l, int64_t rows) {
  return rows * (l.fc_in + l.fc_out) * l.value_words;
}
// The words of one worker's factors of the layer: K x (M + N) values.
inline int64_t SfbFactorFloats(const Layer& l, int64_t batch) {
  return SfbRowWords(l, SfbFactorRows(l, batch));
}
// The most factor rows one message may carry: the plan's K, or min(M, N), enough for any
// gradient (a sum of more rows is sent as min(M, N) rows: the identity and the gradient).
inline int64_t SfbMaxRows(const Layer& l, int64_t batch) {
  return std::max(SfbFactorRows(l, batch), std::min(l.fc_in, l.fc_out));
}

struct BuildOptions {
  // Groups of layers to leave out (for example {"aux"}).
  std::set<std::string> without_groups;
};

class Model {
 public:
  // Throws ModelError on an inconsistent description.
  static Model Build(const ModelSpec& spec, const BuildOptions& options = {});

  const std::string& name() const { return name_; }
  const std::vector<Layer>& layers() const { return layers_; }
  const Layer* FindLayer(const std::string& name) const;
  Shape input_shape() const { return input_; }

  int64_t total_params() const { return total_params_; }
  int64_t forward_macs() const { return forward_macs_; }
  int64_t forward_flops() const { return forward_flops_; }
  int64_t activation_bytes() const { return activation_bytes_; }  // sum of out_bytes
  // Ids of layers that have parameters, in forward order.
  const std::vector<int>& param_layers() const { return param_layers_; }
  // Things in the description that are legal but probably not what was meant, one line each:
  // "FILE:LINE:COL: warning: layer 'NAME' (KIND): ...; what to write to say which". Today: a
  // pooling layer without `round` whose output shape would differ under floor rounding. Hosts
  // print them (poseidon models show to stderr, simulate with its other warnings).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::string name_;
  Shape input_;
  std::vector<Layer> layers_;
  std::vector<int> param_layers_;
  std::vector<std::string> warnings_;
  int64_t total_params_ = 0, forward_macs_ = 0, forward_flops_ = 0, activation_bytes_ = 0;
};

}  // namespace poseidon::core
