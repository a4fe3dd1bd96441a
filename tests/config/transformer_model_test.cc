// Tests of the transformer layers of core/model.cc and config/model_loader.cc: token-sequence
// shapes of rank 2 and 1, each new layer's shape, parameters, MACs, FLOPs and activation bytes
// against hand-computed values, tied weights counted once, located shape errors naming both
// layers and both shapes, and the library files' totals against the reference implementations'
// published parameter counts.
#include <string>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "core/model.h"
#include "core/sacp.h"

namespace poseidon::config {
namespace {

const std::string kModelsDir = std::string(POSEIDON_SOURCE_DIR) + "/scenarios/models";

core::Model BuildFile(const std::string& name) {
  return core::Model::Build(LoadModelFile(kModelsDir + "/" + name + ".yaml"));
}

core::Model BuildText(const std::string& text) {
  return core::Model::Build(LoadModelText(text, "tf.yaml"));
}

#define EXPECT_CONTAINS(msg, part) \
  EXPECT_NE((msg).find(part), std::string::npos) << "expected '" << (part) << "' in: " << (msg)

std::string BuildError(const std::string& text) {
  try {
    BuildText(text);
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

// "LINE:COL" of the first `needle` in `text` (1-based).
std::string PosOf(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << needle;
  int line = 1, col = 1;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

// ---- the library: published parameter counts -------------------------------------------------

TEST(TransformerLibraryTest, TotalsEqualThePublishedCounts) {
  struct Published {
    std::string name;
    int64_t params;
  };
  // Hugging Face BertModel (with the pooler), GPT2Model (= GPT2LMHeadModel, tied head counted
  // once), torchvision vit_b_16 with its 1000-class head; fmnist_vit counted by hand in its file.
  for (const Published& p : {Published{"bert_base", 109'482'240},
                             Published{"bert_large", 335'141'888},
                             Published{"gpt2_small", 124'439'808},
                             Published{"gpt2_medium", 354'823'168},
                             Published{"vit_b16", 86'567'656},
                             Published{"fmnist_vit", 139'018}}) {
    SCOPED_TRACE(p.name);
    const core::Model m = BuildFile(p.name);
    EXPECT_EQ(m.total_params(), p.params);
    int64_t blobs = 0;
    for (const core::Layer& l : m.layers()) {
      for (const core::ParamBlob& b : l.blobs) blobs += b.count;
    }
    EXPECT_EQ(blobs, p.params);  // what is synced is what is counted
    EXPECT_TRUE(m.warnings().empty());
  }
  EXPECT_LT(BuildFile("fmnist_vit").total_params(), 1'000'000);
}

TEST(TransformerLibraryTest, ShapesOfTheLibrary) {
  const core::Model bert = BuildFile("bert_base");
  EXPECT_EQ(bert.input_shape(), (core::Shape{1, 1, 128, 1}));
  EXPECT_EQ(bert.FindLayer("word_emb")->out, (core::Shape{1, 128, 768, 2}));
  EXPECT_EQ(bert.FindLayer("l11_ln")->out, (core::Shape{1, 128, 768, 2}));
  EXPECT_EQ(bert.FindLayer("pooler")->out, (core::Shape{1, 1, 768, 1}));
  EXPECT_EQ(bert.FindLayer("pos_emb")->blobs[0].dims, (std::vector<int64_t>{512, 768}));
  const core::Model vit = BuildFile("vit_b16");
  EXPECT_EQ(vit.FindLayer("patch")->out, (core::Shape{1, 196, 768, 2}));
  EXPECT_EQ(vit.FindLayer("cls")->out, (core::Shape{1, 197, 768, 2}));
  EXPECT_EQ(vit.FindLayer("pos")->params, 197 * 768);
  EXPECT_EQ(vit.FindLayer("head")->params, 769'000);
  EXPECT_EQ(BuildFile("fmnist_vit").FindLayer("patch")->out, (core::Shape{1, 16, 64, 2}));
}

// ---- tied weights ------------------------------------------------------------------------------

TEST(TransformerModelTest, TiedLmHeadIsCountedAndSyncedOnce) {
  const core::Model gpt2 = BuildFile("gpt2_small");
  const core::Layer& wte = *gpt2.FindLayer("wte");
  const core::Layer& head = *gpt2.FindLayer("lm_head");
  EXPECT_EQ(head.tied_to, wte.id);
  EXPECT_EQ(head.params, 0);
  EXPECT_TRUE(head.blobs.empty());
  EXPECT_EQ(wte.params, 50'257 * 768);
  EXPECT_EQ(head.fwd_macs, 1024LL * 768 * 50'257);  // the head still computes
  EXPECT_FALSE(core::HasSufficientFactors(head));     // its gradient is the embedding's
  for (int id : gpt2.param_layers()) EXPECT_NE(id, head.id);
  EXPECT_EQ(head.out, (core::Shape{1, 1024, 50'257, 2}));
}

// ---- each layer against hand-computed values -------------------------------------------------

const char* const kTextModel = R"(schema_version: 1
name: tiny_lm
input: {tokens: 8}
num_classes: 100
layers:
  - {name: emb, type: embedding, vocab: 100, num_output: 16}
  - {name: pos, type: pos_embedding, max_len: 10}
  - {name: seg, type: embedding, vocab: 2, num_output: 16}
  - {name: ln, type: layernorm}
  - {name: attn, type: attention, heads: 4, causal: true}
  - {name: fc1, type: linear, num_output: 32}
  - {name: gelu, type: gelu}
  - {name: fc2, type: linear, num_output: 16}
  - {name: drop, type: dropout, ratio: 0.1}
  - {name: res, type: add, bottom: [ln, drop]}
  - {name: sm, type: softmax}
  - {name: mean, type: token_pool}
  - {name: head, type: linear, num_output: 100, bias: false, tie: emb, bottom: res}
  - {name: loss, type: softmax_loss}
)";

TEST(TransformerModelTest, EachTextLayerByHand) {
  const core::Model m = BuildText(kTextModel);
  const int64_t s = 8, d = 16, h = 4;
  auto L = [&m](const char* n) { return *m.FindLayer(n); };
  EXPECT_EQ(m.input_shape(), (core::Shape{1, 1, 8, 1}));
  // embedding on token ids: a gather, [8] -> [8, 16]
  EXPECT_EQ(L("emb").out, (core::Shape{1, s, d, 2}));
  EXPECT_EQ(L("emb").params, 100 * d);
  EXPECT_EQ(L("emb").fwd_flops, 0);
  EXPECT_EQ(L("emb").out_bytes, s * d * 4);
  EXPECT_EQ(L("emb").in_bytes, s * 4);
  // pos_embedding: a {max_len, D} table added
  EXPECT_EQ(L("pos").params, 10 * d);
  EXPECT_EQ(L("pos").fwd_flops, s * d);
  // embedding on a sequence: looked up and added
  EXPECT_EQ(L("seg").out, (core::Shape{1, s, d, 2}));
  EXPECT_EQ(L("seg").params, 2 * d);
  EXPECT_EQ(L("seg").fwd_flops, s * d);
  // layernorm: gamma and beta, 7 FLOPs per value
  EXPECT_EQ(L("ln").params, 2 * d);
  EXPECT_EQ(L("ln").blobs[0].name, "ln.gamma");
  EXPECT_EQ(L("ln").fwd_flops, 7 * s * d);
  // attention: Q, K, V, O projections (weight and bias each); scores and context matmuls
  const core::Layer a = L("attn");
  EXPECT_EQ(a.out, (core::Shape{1, s, d, 2}));
  EXPECT_EQ(a.blobs.size(), 8u);
  EXPECT_EQ(a.blobs[0].name, "attn.q.weight");
  EXPECT_EQ(a.params, 4 * (d * d + d));                   // 1,088
  EXPECT_EQ(a.fwd_macs, 4 * s * d * d + 2 * s * s * d);   // 8,192 + 2,048
  EXPECT_EQ(a.fwd_flops, 2 * a.fwd_macs + 4 * s * d + 4 * h * s * s);  // 22,016
  EXPECT_EQ(a.out_bytes, (5 * s * d + 2 * h * s * s) * 4);              // 4,608
  // linear over the last dimension: a GEMM of (8 x 16) by (16 x 32)
  const core::Layer f = L("fc1");
  EXPECT_EQ(f.out, (core::Shape{1, s, 32, 2}));
  EXPECT_EQ(f.params, d * 32 + 32);
  EXPECT_EQ(f.fwd_macs, s * d * 32);
  EXPECT_EQ(f.fwd_flops, 2 * s * d * 32 + s * 32);
  EXPECT_EQ(f.fc_in, d);
  EXPECT_EQ(f.fc_out, 32);
  EXPECT_EQ(f.fc_rows, s);
  EXPECT_TRUE(core::HasSufficientFactors(f));
  EXPECT_EQ(L("gelu").fwd_flops, 8 * s * 32);
  EXPECT_EQ(L("fc2").params, 32 * d + d);
  EXPECT_EQ(L("drop").fwd_flops, s * d);
  EXPECT_EQ(L("res").fwd_flops, s * d);
  EXPECT_EQ(L("sm").fwd_flops, 3 * s * d);
  // mean pooling over tokens: [8, 16] -> [16]
  EXPECT_EQ(L("mean").out, (core::Shape{1, 1, d, 1}));
  EXPECT_EQ(L("mean").fwd_flops, s * d);
  // tied head: no blob of its own
  EXPECT_EQ(L("head").params, 0);
  EXPECT_EQ(L("head").tied_to, L("emb").id);
  EXPECT_EQ(L("head").fwd_macs, s * d * 100);
  EXPECT_EQ(L("loss").out, (core::Shape{1, s, 100, 2}));
  EXPECT_EQ(m.total_params(), 1600 + 160 + 32 + 32 + 1088 + 544 + 528);
  // SFB's threshold for a linear layer uses K = batch x tokens.
  EXPECT_DOUBLE_EQ(core::SfbThreshold(f, 2), 2.0 * 16 * 32 / (2.0 * 8 * (16 + 32)));
  EXPECT_EQ(core::SfbThreshold(L("head"), 2), 0.0);
}

// Transformer-XL's attention: keys and values over the segment and a memory of M tokens (Q, K, V
// projected from all L = S + M rows, O from S), and relative positions (a position projection
// {D, D}, a second score term, u and v added to the queries); by hand, with a plain layer of
// the same width beside it.
TEST(TransformerModelTest, MemoryAndRelativeAttentionByHand) {
  const core::Model m = BuildText(R"(schema_version: 1
name: tiny_xl
input: {tokens: 8}
num_classes: 100
layers:
  - {name: emb, type: embedding, vocab: 100, num_output: 16}
  - {name: plain, type: attention, heads: 4, causal: true, bias: false}
  - {name: mem, type: attention, heads: 4, causal: true, bias: false, memory: 8}
  - {name: xl, type: attention, heads: 4, causal: true, bias: false, memory: 8, relative: true}
  - {name: head, type: linear, num_output: 100}
  - {name: loss, type: softmax_loss}
)");
  const int64_t s = 8, d = 16, h = 4, kl = 16;
  const core::Layer& plain = *m.FindLayer("plain");
  const core::Layer& mem = *m.FindLayer("mem");
  const core::Layer& xl = *m.FindLayer("xl");
  EXPECT_EQ(plain.fwd_macs, 4 * s * d * d + 2 * s * s * d);
  EXPECT_EQ(mem.out, (core::Shape{1, s, d, 2}));
  EXPECT_EQ(mem.params, plain.params);  // the memory is carried, not learned
  EXPECT_EQ(mem.fwd_macs, (3 * kl + s) * d * d + 2 * s * kl * d);
  EXPECT_EQ(mem.fwd_flops, 2 * mem.fwd_macs + 4 * h * s * kl);
  EXPECT_EQ(mem.out_bytes, (3 * s * d + 2 * kl * d + 2 * h * s * kl) * 4);
  EXPECT_EQ(xl.params, 5 * d * d);  // Wq, Wk, Wv, Wo and the position projection Wr
  EXPECT_EQ(xl.blobs.back().name, "xl.r.weight");
  EXPECT_EQ(xl.fwd_macs, (3 * kl + s) * d * d + 3 * s * kl * d);
  EXPECT_EQ(xl.fwd_flops, 2 * xl.fwd_macs + 4 * h * s * kl + 2 * s * d + h * s * kl);
  EXPECT_EQ(xl.out_bytes, (3 * s * d + 2 * kl * d + 3 * h * s * kl + 2 * s * d) * 4);
}

// The Transformer-XL files: DeepLearningExamples' count less the two attention biases (u, v: 2 D)
// its layers share, which the schema's attention does not count; every attention layer spans a
// memory as long as its segment.
TEST(TransformerLibraryTest, TheTransformerXlFilesCountDeepLearningExamplesLessTheSharedBiases) {
  const core::Model base = BuildFile("transformer_xl_base");
  const core::Model large = BuildFile("transformer_xl_large");
  EXPECT_EQ(base.total_params(), 191'948'759 - 2 * 512);
  EXPECT_EQ(large.total_params(), 519'963'095 - 2 * 1024);
  EXPECT_TRUE(base.warnings().empty());
  EXPECT_EQ(base.FindLayer("l15_attn")->spec.memory, 192);
  EXPECT_TRUE(large.FindLayer("l17_attn")->spec.relative);
  EXPECT_EQ(base.FindLayer("crit")->tied_to, base.FindLayer("word_emb")->id);
}

// A model of an embedding and the one layer given (a flow-map line).
std::string EmbeddingThen(const std::string& layer) {
  return "schema_version: 1\nname: bad\ninput: {tokens: 8}\nnum_classes: 10\nlayers:\n"
         "  - {name: emb, type: embedding, vocab: 10, num_output: 16}\n  - " +
         layer + "\n";
}

TEST(TransformerModelTest, AMemoryOrRelativeKeyOfTheWrongKindIsLocated) {
  const std::string neg = EmbeddingThen("{name: attn, type: attention, heads: 4, memory: -2}");
  const std::string msg = BuildError(neg);
  EXPECT_CONTAINS(msg, "tf.yaml:" + PosOf(neg, "-2"));
  EXPECT_CONTAINS(msg, "'memory' must not be negative, got -2");
  EXPECT_CONTAINS(
      BuildError(EmbeddingThen("{name: attn, type: attention, heads: 4, relative: sometimes}")),
      "relative");
  EXPECT_CONTAINS(BuildError(EmbeddingThen("{name: fc, type: linear, num_output: 4, memory: 3}")),
                  "memory");
}

TEST(TransformerModelTest, PatchEmbedClassTokenAndFirstTokenByHand) {
  const core::Model m = BuildText(R"(schema_version: 1
name: tiny_vit
input: {channels: 3, height: 8, width: 8}
num_classes: 5
layers:
  - {name: patch, type: patch_embed, num_output: 16, patch: 4}
  - {name: cls, type: cls_token}
  - {name: pos, type: pos_embedding}
  - {name: first, type: token_pool, method: first}
  - {name: tanh, type: tanh}
  - {name: head, type: fc, num_output: 5}
  - {name: loss, type: softmax_loss}
)");
  const core::Layer& p = *m.FindLayer("patch");
  EXPECT_EQ(p.out, (core::Shape{1, 4, 16, 2}));  // (8/4)^2 patches
  EXPECT_EQ(p.blobs[0].dims, (std::vector<int64_t>{16, 3, 4, 4}));
  EXPECT_EQ(p.params, 16 * 48 + 16);
  EXPECT_EQ(p.fwd_macs, 4 * 48 * 16);
  EXPECT_EQ(p.fwd_flops, 2 * 4 * 48 * 16 + 4 * 16);
  EXPECT_EQ(p.fc_rows, 4);
  EXPECT_FALSE(core::HasSufficientFactors(p));
  EXPECT_EQ(m.FindLayer("cls")->out, (core::Shape{1, 5, 16, 2}));
  EXPECT_EQ(m.FindLayer("cls")->params, 16);
  EXPECT_EQ(m.FindLayer("pos")->params, 5 * 16);
  EXPECT_EQ(m.FindLayer("first")->out, (core::Shape{1, 1, 16, 1}));
  EXPECT_EQ(m.FindLayer("first")->fwd_flops, 0);
  EXPECT_EQ(m.FindLayer("tanh")->fwd_flops, 4 * 16);
  EXPECT_EQ(m.FindLayer("head")->fc_in, 16);
  EXPECT_EQ(m.FindLayer("head")->out, (core::Shape{5, 1, 1}));
}

TEST(TransformerModelTest, SequenceInputAndShapeStrings) {
  const core::Model m = BuildText(R"(schema_version: 1
name: seq
input: {shape: [12, 32]}
layers:
  - {name: ln, type: layernorm}
)");
  EXPECT_EQ(m.input_shape(), (core::Shape{1, 12, 32, 2}));
  EXPECT_EQ(m.input_shape().ToString(), "12x32");
  EXPECT_EQ((core::Shape{1, 1, 7, 1}).ToString(), "7");
  EXPECT_EQ((core::Shape{3, 4, 5}).ToString(), "3x4x5");
  EXPECT_FALSE((core::Shape{1, 12, 32, 2}) == (core::Shape{1, 12, 32, 3}));
}

// ---- located errors ------------------------------------------------------------------------

TEST(TransformerModelTest, AShapeMismatchNamesBothLayersAndShapes) {
  const std::string text = R"(schema_version: 1
name: bad
input: {shape: [8, 16]}
layers:
  - {name: a, type: linear, num_output: 16}
  - {name: b, type: linear, num_output: 32}
  - {name: res, type: add, bottom: [a, b]}
)";
  const std::string msg = BuildError(text);
  EXPECT_CONTAINS(msg, "tf.yaml:" + PosOf(text, "{name: res") + ": error: layer 'res' (add)");
  EXPECT_CONTAINS(msg, "'a' is 8x16 and 'b' is 8x32");
}

TEST(TransformerModelTest, RankAndSizeErrorsNameTheLayerTheBottomAndTheShape) {
  const std::string conv = R"(schema_version: 1
name: bad
input: {shape: [8, 16]}
layers:
  - {name: proj, type: linear, num_output: 16}
  - {name: conv1, type: conv, num_output: 4, kernel: 3}
)";
  std::string msg = BuildError(conv);
  EXPECT_CONTAINS(msg, "tf.yaml:" + PosOf(conv, "{name: conv1") + ": error: layer 'conv1' (conv)");
  EXPECT_CONTAINS(msg, "expects an image [C, H, W], but its input 'proj' gives 8x16");

  const std::string heads = R"(schema_version: 1
name: bad
input: {shape: [8, 16]}
layers:
  - {name: attn, type: attention, heads: 3}
)";
  msg = BuildError(heads);
  EXPECT_CONTAINS(msg, "layer 'attn' (attention): heads must be positive and divide the model "
                       "width D, but heads is 3 and its input the model input 'data' is 8x16");

  const std::string pos = R"(schema_version: 1
name: bad
input: {tokens: 20}
layers:
  - {name: emb, type: embedding, vocab: 10, num_output: 4}
  - {name: pos, type: pos_embedding, max_len: 16}
)";
  msg = BuildError(pos);
  EXPECT_CONTAINS(msg, "layer 'pos' (pos_embedding): max_len 16 is shorter than the sequence: its "
                       "input 'emb' gives 20x4");

  const std::string tie = R"(schema_version: 1
name: bad
input: {tokens: 4}
layers:
  - {name: emb, type: embedding, vocab: 10, num_output: 4}
  - {name: head, type: linear, num_output: 11, tie: emb}
)";
  msg = BuildError(tie);
  EXPECT_CONTAINS(msg, "tf.yaml:" + PosOf(tie, "{name: head") + ": error: layer 'head' (linear)");
  EXPECT_CONTAINS(msg, "tie 'emb': its table is 10x4 (vocab x D), but this layer's weight would "
                       "be 11x4");
  const std::string tie2 = R"(schema_version: 1
name: bad
input: {tokens: 4}
layers:
  - {name: emb, type: embedding, vocab: 10, num_output: 4}
  - {name: head, type: linear, num_output: 10, tie: nope}
)";
  EXPECT_CONTAINS(BuildError(tie2), "tie 'nope' must name an embedding layer that comes before it");

  const std::string patch = R"(schema_version: 1
name: bad
input: {channels: 1, height: 28, width: 28}
layers:
  - {name: patch, type: patch_embed, num_output: 8, patch: 5}
)";
  EXPECT_CONTAINS(BuildError(patch), "patch 5 must be positive and divide the image, but its "
                                     "input the model input 'data' is 1x28x28");
  const std::string shape = R"(schema_version: 1
name: bad
input: {shape: [8, 16, 2]}
layers:
  - {name: ln, type: layernorm}
)";
  EXPECT_CONTAINS(BuildError(shape), "tf.yaml:3:16: error: input: shape: expected [S, D]");
}

}  // namespace
}  // namespace poseidon::config
