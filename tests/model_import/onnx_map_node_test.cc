// tests/model_import/onnx_map_node_test.cc: the operators of PyTorch's default exports that
// model_import/onnx_map_node.cc maps beyond one-to-one, on graphs built here: a conv and the
// BatchNorm torch.onnx's eval export folded into it (restored as conv + batchnorm, only where
// the exporter computed both weight and bias of a PyTorch file); ReLU6 (Clip), HardSwish and
// HardSigmoid as the nearest layer types, noted on their lines; a squeeze-and-excitation gate
// (Mul) as `mul`; x[:, 0] of a sequence as `token_pool: first`; a one-input Concat folded; an LM
// head tied to the token embedding (`tie:`). What stays refused says so in one line naming the
// node.
#include <string>
#include <vector>

#include "tests/model_import/onnx_test_graphs.h"

namespace poseidon::model_import {
namespace {

using namespace test_graphs;  // the graph builders of onnx_test_graphs.h

// x [1, 3, 8, 8] -> conv1 3x3 (weight w1, bias b1) -> Relu -> conv2 1x1 (weight w2, bias b2),
// written by `producer`. With torch.onnx's names for computed tensors ("onnx::Conv_N"; b2 an
// Identity copy of b1, as for two equal BatchNorm shifts) both were Conv + BatchNorm.
std::string ConvPair(const std::string& producer, const std::string& w1 = "onnx::Conv_1") {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {1, 3, 8, 8}, onnx::TensorProto::FLOAT, 14, producer);
  AddInit(g, w1, {4, 3, 3, 3});
  AddInit(g, "onnx::Conv_2", {4});
  AddInit(g, "onnx::Conv_4", {4, 4, 1, 1});
  AddNode(g, "Identity", "Identity_0", {"onnx::Conv_2"}, "onnx::Conv_5");
  AddInts(AddNode(g, "Conv", "/conv1/Conv", {"x", w1, "onnx::Conv_2"}, "c1"), "pads", {1, 1, 1, 1});
  AddNode(g, "Relu", "/relu/Relu", {"c1"}, "r");
  AddNode(g, "Conv", "/conv2/Conv", {"r", "onnx::Conv_4", "onnx::Conv_5"}, "y");
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

TEST(OnnxMapNode, BatchNormFoldedIntoAConvByPyTorchIsRestored) {
  const ImportResult r = ImportOnnxBytes(ConvPair("pytorch"), "t.onnx", {});
  // The module's count: convs without biases, two BatchNorms of scale and shift.
  EXPECT_EQ(r.params, (108 + 4 + 4) + (16 + 4 + 4));
  EXPECT_EQ(r.restored_batchnorm, 2);
  EXPECT_EQ(r.restored_params, 8);
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"conv1\", type: conv, bottom: \"data\", num_output: 4, "
                  "kernel: 3, pad: 1, bias: false}\n"
                  "  - {name: \"conv1_bn\", type: batchnorm, bottom: \"conv1\"}\n"
                  "  - {name: \"relu\", type: relu, bottom: \"conv1_bn\"}\n"))
      << r.yaml;
  EXPECT_TRUE(Has(r.yaml, "{name: \"conv2_bn\", type: batchnorm, bottom: \"conv2\"}")) << r.yaml;
  EXPECT_NE(r.Summary().find("(the ONNX weights' 132 and 8 of 2 BatchNorms restored after the "
                             "convs the export folded them into;"),
            std::string::npos)
      << r.Summary();
}

TEST(OnnxMapNode, ConvsAreTakenAsTheyAreUnlessPyTorchComputedWeightAndBias) {
  // Another exporter: the file's weights, convs with biases.
  ImportResult r = ImportOnnxBytes(ConvPair("other"), "t.onnx", {});
  EXPECT_EQ(r.params, 108 + 4 + 16 + 4);
  EXPECT_EQ(r.restored_batchnorm, 0);
  EXPECT_EQ(r.yaml.find("batchnorm"), std::string::npos) << r.yaml;
  // conv1's weight is a module's own parameter: conv1 had a bias of its own, no BatchNorm.
  r = ImportOnnxBytes(ConvPair("pytorch", "conv1.weight"), "t.onnx", {});
  EXPECT_EQ(r.restored_batchnorm, 1);
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"conv1\", type: conv, bottom: \"data\", num_output: 4, "
                  "kernel: 3, pad: 1}\n"))
      << r.yaml;
  EXPECT_EQ(r.params, (108 + 4) + (16 + 4 + 4));
}

// x [1, 3, 8, 8] -> conv 4 -> Clip(lo, 6) -> HardSwish -> [SE: GlobalAveragePool -> conv 1x1
// (bias) -> HardSigmoid -> Mul(gate, x)] -> GlobalAveragePool -> Flatten -> Gemm 2.
// Parameters: 108 + 4 (conv), 16 + 4 (SE conv), 8 + 2 (Gemm) = 142.
std::string MobileBlock(double clip_lo = 0.0, bool misshapen_gate = false) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {1, 3, 8, 8}, onnx::TensorProto::FLOAT, 14);
  AddInit(g, "conv.w", {4, 3, 3, 3});
  AddInit(g, "conv.b", {4});
  AddInit(g, "se.w", {4, 4, 1, 1});
  AddInit(g, "se.b", {4});
  AddInit(g, "fc.w", {2, 4});
  AddInit(g, "fc.b", {2});
  AddInts(AddNode(g, "Conv", "/conv/Conv", {"x", "conv.w", "conv.b"}, "c"), "pads", {1, 1, 1, 1});
  AddConstant(g, "lo", {}, {clip_lo}, /*ints=*/false);
  AddConstant(g, "hi", {}, {6.0}, /*ints=*/false);
  AddNode(g, "Clip", "/relu6/Clip", {"c", "lo", "hi"}, "r6");
  AddNode(g, "HardSwish", "/hs/HardSwish", {"r6"}, "hs");
  AddNode(g, "GlobalAveragePool", "/se/avgpool/GlobalAveragePool", {"hs"}, "sq");
  AddNode(g, "Conv", "/se/fc/Conv", {"sq", "se.w", "se.b"}, "ex");
  AddNode(g, "HardSigmoid", "/se/gate/HardSigmoid", {"ex"}, "gate");
  if (misshapen_gate) {
    // A 4x4 map is neither the image's shape nor a 1x1 gate.
    onnx::NodeProto* pool = AddNode(g, "MaxPool", "/half/MaxPool", {"hs"}, "half");
    AddInts(pool, "kernel_shape", {2, 2});
    AddInts(pool, "strides", {2, 2});
    AddNode(g, "Mul", "/se/Mul", {"half", "hs"}, "scaled");
  } else {
    AddNode(g, "Mul", "/se/Mul", {"gate", "hs"}, "scaled");
  }
  AddNode(g, "GlobalAveragePool", "/gap/GlobalAveragePool", {"scaled"}, "p");
  AddNode(g, "Flatten", "/Flatten", {"p"}, "f");
  AddInt(AddNode(g, "Gemm", "/fc/Gemm", {"f", "fc.w", "fc.b"}, "y"), "transB", 1);
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

TEST(OnnxMapNode, ActivationsWithoutATypeAreTheNearestAndTheGateIsAMul) {
  const ImportResult r = ImportOnnxBytes(MobileBlock(), "t.onnx", {});
  EXPECT_EQ(r.params, 142);
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"relu6\", type: relu, bottom: \"conv\"}  # ONNX Clip(0, 6) "
                  "(ReLU6), imported as relu\n"))
      << r.yaml;
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"hs\", type: gelu, bottom: \"relu6\"}  # ONNX HardSwish, "
                  "imported as gelu\n"))
      << r.yaml;
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"se.gate\", type: tanh, bottom: \"se.fc\"}  # ONNX "
                  "HardSigmoid, imported as tanh\n"))
      << r.yaml;
  // The tensor scaled first, the gate second, whatever the ONNX order.
  EXPECT_TRUE(Has(r.yaml, "{name: \"se\", type: mul, bottom: [\"hs\", \"se.gate\"]}\n")) << r.yaml;
  EXPECT_EQ(r.approximated.at("Clip as relu"), 1);
  EXPECT_EQ(r.approximated.at("HardSwish as gelu"), 1);
  EXPECT_EQ(r.approximated.at("HardSigmoid as tanh"), 1);
  EXPECT_NE(r.Summary().find("3 nodes imported as the nearest layer type (1 Clip as relu, 1 "
                             "HardSigmoid as tanh, 1 HardSwish as gelu)"),
            std::string::npos)
      << r.Summary();
}

TEST(OnnxMapNode, AClipThatIsNotAReluAndAMisshapenProductAreRefused) {
  ExpectOneLine(Refusal(MobileBlock(-1.0)),
                "tiny.onnx: error: node '/relu6/Clip' (Clip): a Clip that is not a relu");
  ExpectOneLine(Refusal(MobileBlock(0.0, /*misshapen_gate=*/true)),
                "tiny.onnx: error: node '/se/Mul' (Mul): a product of two tensors that neither");
}

// Token ids [2, 10] -> embedding 50x8 -> Concat of itself alone -> x[:, index] -> Gemm 3.
std::string FirstToken(int64_t index) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {2, 10}, onnx::TensorProto::INT64, 14);
  AddInit(g, "tok.weight", {50, 8});
  AddInit(g, "cls.weight", {3, 8});
  AddInit(g, "cls.bias", {3});
  AddNode(g, "Gather", "/tok/Gather", {"tok.weight", "x"}, "e");
  AddInt(AddNode(g, "Concat", "/cat/Concat", {"e"}, "e1"), "axis", 2);
  AddConstant(g, "at", {}, {static_cast<double>(index)});
  AddInt(AddNode(g, "Gather", "/Gather", {"e1", "at"}, "first"), "axis", 1);
  AddInt(AddNode(g, "Gemm", "/cls/Gemm", {"first", "cls.weight", "cls.bias"}, "y"), "transB", 1);
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

TEST(OnnxMapNode, TheFirstTokenIsATokenPoolAndAOneInputConcatIsFolded) {
  const ImportResult r = ImportOnnxBytes(FirstToken(0), "t.onnx", {});
  EXPECT_EQ(r.params, 50 * 8 + 3 * 8 + 3);
  EXPECT_EQ(r.folded.at("Concat"), 1);
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"Gather\", type: token_pool, bottom: \"tok\", method: first}\n"
                  "  - {name: \"cls\", type: fc, bottom: \"Gather\", num_output: 3}\n"))
      << r.yaml;
  ExpectOneLine(Refusal(FirstToken(3)),
                "tiny.onnx: error: node '/Gather' (Gather): a Gather that is neither a lookup in "
                "an embedding table nor the first token");
}

// Token ids [2, 6] -> embedding tok [20, 8] -> MatMul by `head` [8, 20]: tok's values
// transposed (the copy torch.onnx folds Transpose(wte.weight) into), or other values.
std::string LmHead(bool tied) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {2, 6}, onnx::TensorProto::INT64, 14, "pytorch");
  AddInit(g, "tok.weight", {20, 8});
  const onnx::TensorProto tok = g->initializer(0);
  onnx::TensorProto* head = g->add_initializer();
  head->set_name("onnx::MatMul_7");
  head->set_data_type(onnx::TensorProto::FLOAT);
  head->add_dims(8);
  head->add_dims(20);
  for (int d = 0; d < 8; ++d) {
    for (int v = 0; v < 20; ++v) {
      head->add_float_data(tied ? tok.float_data(v * 8 + d) : 0.5f + 0.01f * static_cast<float>(v));
    }
  }
  AddNode(g, "Gather", "/tok/Gather", {"tok.weight", "x"}, "e");
  AddNode(g, "MatMul", "/lm_head/MatMul", {"e", "onnx::MatMul_7"}, "y");
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

TEST(OnnxMapNode, AnLmHeadTiedToTheTokenTableIsCountedOnce) {
  ImportResult r = ImportOnnxBytes(LmHead(/*tied=*/true), "t.onnx", {});
  EXPECT_EQ(r.params, 20 * 8);
  EXPECT_EQ(r.other_values, 8 * 20);  // the exporter's transposed copy
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"lm_head\", type: linear, bottom: \"tok\", num_output: 20, "
                  "bias: false, tie: \"tok\"}\n"))
      << r.yaml;
  r = ImportOnnxBytes(LmHead(/*tied=*/false), "t.onnx", {});
  EXPECT_EQ(r.params, 2 * 20 * 8);
  EXPECT_EQ(r.yaml.find("tie:"), std::string::npos) << r.yaml;
}

// A PyTorch file adding to a sequence [2, 16, 8] a table [1, 16, 8] named `table`: a module's
// parameter (nn.Parameter, "pos") or the lookup torch.onnx folded ("onnx::Add_5").
std::string AddedTable(const std::string& table) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {2, 16, 8}, onnx::TensorProto::FLOAT, 14, "pytorch");
  AddInit(g, table, {1, 16, 8});
  AddNode(g, "Add", "/Add", {"x", table}, "y");
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

TEST(OnnxMapNode, APositionLookupTheExportFoldedIsNotedOnItsLine) {
  ImportResult r = ImportOnnxBytes(AddedTable("onnx::Add_5"), "t.onnx", {});
  EXPECT_EQ(r.params, 16 * 8);
  EXPECT_EQ(r.folded_position_tables, 1);
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"Add\", type: pos_embedding, bottom: \"data\"}  # the export "
                  "folded the lookup into the 16 rows read; a longer table's other rows "
                  "are not in the file\n"))
      << r.yaml;
  EXPECT_NE(r.Summary().find("1 position table folded by the export"), std::string::npos);
  r = ImportOnnxBytes(AddedTable("pos"), "t.onnx", {});
  EXPECT_EQ(r.folded_position_tables, 0);
  EXPECT_TRUE(Has(r.yaml, "{name: \"Add\", type: pos_embedding, bottom: \"data\"}\n")) << r.yaml;
}

}  // namespace
}  // namespace poseidon::model_import
