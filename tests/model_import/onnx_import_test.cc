// tests/model_import/onnx_import_test.cc: the ONNX importer (model_import/onnx_import.h) on
// models built here with ONNX's C++ protobuf classes (no python, no torch): a small CNN imports
// with the parameters its initializers hold, twice the same bytes; an unknown operator, a file
// that is not ONNX, a truncated one, an empty one and a missing one are refused with one located
// line.
#include "model_import/onnx_import.h"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#if defined(POSEIDON_WITH_ONNX)
#include <onnx/onnx_pb.h>

#include "tests/model_import/onnx_test_graphs.h"
#endif

namespace poseidon::model_import {
namespace {

#if defined(POSEIDON_WITH_ONNX)

using namespace test_graphs;  // the graph builders of onnx_test_graphs.h

// input [1, 3, 8, 8] -> Conv 4x3x3x3 (+bias, pad 1) -> Relu -> [op] -> GlobalAveragePool ->
// Flatten -> Gemm 2x4 (+bias): 4*27 + 4 + 8 + 2 = 122 parameters.
std::string TinyCnn(const std::string& extra_op = "", bool dilated = false,
                    bool zero_stride = false) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {1, 3, 8, 8}, onnx::TensorProto::FLOAT, 13, "onnx_import_test");
  AddInit(g, "conv.w", {4, 3, 3, 3});
  AddInit(g, "conv.b", {4});
  AddInit(g, "fc.w", {2, 4});
  AddInit(g, "fc.b", {2});
  onnx::NodeProto* conv = AddNode(g, "Conv", "/conv/Conv", {"x", "conv.w", "conv.b"}, "c");
  AddInts(conv, "kernel_shape", {3, 3});
  AddInts(conv, "pads", {1, 1, 1, 1});
  if (dilated) AddInts(conv, "dilations", {2, 2});
  if (zero_stride) AddInts(conv, "strides", {0, 1});
  AddNode(g, "Relu", "/relu/Relu", {"c"}, "r");
  std::string last = "r";
  if (!extra_op.empty()) {
    AddNode(g, extra_op, "weird1", {"r"}, "w");
    last = "w";
  }
  AddNode(g, "GlobalAveragePool", "/gap/GlobalAveragePool", {last}, "p");
  AddNode(g, "Flatten", "/Flatten", {"p"}, "f");
  AddInt(AddNode(g, "Gemm", "/fc/Gemm", {"f", "fc.w", "fc.b"}, "y"), "transB", 1);
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

// Two branches (a 1x1 conv; a depthwise 3x3 conv) concatenated, a 3x3 stride-2 max pool with
// ceil_mode (9 -> 4 floor, 5 ceil), Tanh, global pool, MatMul + Add, Softmax.
// Parameters: 8*4 + 8 (1x1) + 4*9 + 4 (depthwise) + 12*3 + 3 (MatMul, bias) = 119.
std::string Branches(bool asymmetric_pad = false, bool shared = false) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {2, 4, 9, 9});
  AddInit(g, "a.w", {8, 4, 1, 1});
  AddInit(g, "a.b", {8});
  AddInit(g, "d.w", {4, 1, 3, 3});
  AddInit(g, "d.b", {4});
  AddInit(g, "fc.w", {12, 3});
  AddInit(g, "fc.b", {3});
  AddNode(g, "Conv", "/a/Conv", {"x", "a.w", "a.b"}, "a");
  onnx::NodeProto* d = AddNode(g, "Conv", "/d/Conv", {"x", "d.w", "d.b"}, "d");
  AddInts(d, "pads",
          asymmetric_pad ? std::vector<int64_t>{0, 0, 1, 1} : std::vector<int64_t>{1, 1, 1, 1});
  AddInt(d, "group", 4);
  AddInt(AddNode(g, "Concat", "/cat/Concat", {"a", "d"}, "c"), "axis", 1);
  onnx::NodeProto* pool = AddNode(g, "MaxPool", "/pool/MaxPool", {"c"}, "p");
  AddInts(pool, "kernel_shape", {3, 3});
  AddInts(pool, "strides", {2, 2});
  AddInt(pool, "ceil_mode", 1);
  AddNode(g, "Tanh", "/act/Tanh", {"p"}, "t");
  AddNode(g, "GlobalAveragePool", "/gap/GlobalAveragePool", {"t"}, "gp");
  AddNode(g, "Flatten", "/Flatten", {"gp"}, "f");
  AddNode(g, "MatMul", "/fc/MatMul", {"f", "fc.w"}, "mm");
  AddNode(g, "Add", "/fc/Add", {"fc.b", "mm"}, "logits");
  std::string out = "logits";
  if (shared) {
    // The same weight again: refused (tied weights are not imported).
    AddNode(g, "MatMul", "/fc2/MatMul", {"f", "fc.w"}, "mm2");
    AddNode(g, "Add", "/sum/Add", {"logits", "mm2"}, "both");
    out = "both";
  }
  AddNode(g, "Softmax", "/Softmax", {out}, "y");
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

TEST(OnnxImport, SmallCnnImportsWithTheInitializersParameters) {
  ASSERT_TRUE(OnnxSupported());
  const ImportResult r = ImportOnnxBytes(TinyCnn(), "tiny.onnx", {});
  EXPECT_EQ(r.params, 122);
  EXPECT_EQ(r.layers, 4);  // conv, relu, global pool, fc (Flatten folded)
  EXPECT_EQ(r.folded.at("Flatten"), 1);
  EXPECT_NE(r.yaml.find("schema_version: 1"), std::string::npos);
  EXPECT_NE(r.yaml.find("description: \"imported from tiny.onnx (ONNX)\""), std::string::npos);
  EXPECT_NE(r.yaml.find("{name: \"conv\", type: conv, bottom: \"data\", num_output: 4, kernel: "
                        "3, pad: 1}"),
            std::string::npos)
      << r.yaml;
  EXPECT_NE(r.yaml.find("{name: \"fc\", type: fc, bottom: \"gap\", num_output: 2}"),
            std::string::npos)
      << r.yaml;
  // Deterministic: the same bytes give the same YAML.
  EXPECT_EQ(ImportOnnxBytes(TinyCnn(), "tiny.onnx", {}).yaml, r.yaml);
  ImportOptions named;
  named.name = "my_cnn";
  EXPECT_NE(ImportOnnxBytes(TinyCnn(), "tiny.onnx", named).yaml.find("name: \"my_cnn\""),
            std::string::npos);
}

TEST(OnnxImport, BranchesConcatCeilPoolDepthwiseAndMatMulBias) {
  const ImportResult r = ImportOnnxBytes(Branches(), "branches.onnx", {});
  EXPECT_EQ(r.params, 119);
  EXPECT_NE(r.yaml.find("{name: \"d\", type: conv, bottom: \"data\", num_output: 4, kernel: 3, "
                        "pad: 1, groups: 4}"),
            std::string::npos)
      << r.yaml;
  EXPECT_NE(r.yaml.find("{name: \"cat\", type: concat, bottom: [\"a\", \"d\"]}"), std::string::npos)
      << r.yaml;
  EXPECT_NE(r.yaml.find("{name: \"pool\", type: pool, bottom: \"cat\", method: max, kernel: 3, "
                        "stride: 2, round: ceil}"),
            std::string::npos)
      << r.yaml;
  EXPECT_NE(r.yaml.find("{name: \"fc\", type: fc, bottom: \"gap\", num_output: 3}"),
            std::string::npos)
      << r.yaml;
  EXPECT_NE(r.yaml.find("type: tanh"), std::string::npos);
  EXPECT_NE(r.yaml.find("{name: \"Softmax\", type: softmax, bottom: \"fc\"}"), std::string::npos)
      << r.yaml;
}

TEST(OnnxImport, AsymmetricPadsAndSharedWeightsAreRefused) {
  ExpectOneLine(Refusal(Branches(/*asymmetric_pad=*/true)),
                "tiny.onnx: error: node '/d/Conv' (Conv): asymmetric padding");
  ExpectOneLine(Refusal(Branches(false, /*shared=*/true)),
                "tiny.onnx: error: node '/fc2/MatMul' (MatMul): its weight 'fc.w' is also the "
                "weight of node '/fc/MatMul'");
}

TEST(OnnxImport, UnknownOperatorIsOneLocatedLine) {
  const std::string msg = Refusal(TinyCnn("Frobnicate"));
  ExpectOneLine(msg,
                "tiny.onnx: error: node 'weird1' (Frobnicate): no Poseidon layer type for "
                "this operator; ");
}

TEST(OnnxImport, UnsupportedAttributeNamesTheNode) {
  const std::string msg = Refusal(TinyCnn("", /*dilated=*/true));
  ExpectOneLine(msg, "tiny.onnx: error: node '/conv/Conv' (Conv): dilated windows");
}

TEST(OnnxImport, AZeroStrideIsRefusedBeforeShapeInferenceDividesByIt) {
  // ONNX's shape inference divides by the strides unchecked (SIGFPE); the import refuses first.
  ExpectOneLine(Refusal(TinyCnn("", false, /*zero_stride=*/true)),
                "tiny.onnx: error: node '/conv/Conv' (Conv): attribute 'strides' holds 0; check "
                "the file");
}

TEST(OnnxImport, NotOnnxTruncatedAndEmptyAreRefused) {
  ExpectOneLine(Refusal("this is a text file, not a model\n"), "tiny.onnx: error: not an ONNX");
  const std::string whole = TinyCnn();
  ExpectOneLine(Refusal(whole.substr(0, whole.size() / 2)), "tiny.onnx: error: not an ONNX");
  ExpectOneLine(Refusal(""), "tiny.onnx: error: the file is empty");
}

TEST(OnnxImport, FilesMissingOrOnDisk) {
  try {
    ImportOnnxFile("/nonexistent/model.onnx", {});
    ADD_FAILURE() << "no ImportError";
  } catch (const ImportError& e) {
    ExpectOneLine(e.what(), "/nonexistent/model.onnx: error: no such file");
  }
  const std::string path = ::testing::TempDir() + "onnx_import_test_tiny.onnx";
  {
    std::ofstream f(path, std::ios::binary);
    f << TinyCnn();
  }
  EXPECT_EQ(ImportOnnxFile(path, {}).params, 122);
  std::remove(path.c_str());
}

#else

TEST(OnnxImport, WithoutOnnxSaysWhatToInstall) {
  EXPECT_FALSE(OnnxSupported());
  try {
    ImportOnnxBytes("x", "m.onnx", {});
    ADD_FAILURE() << "no ImportError";
  } catch (const ImportError& e) {
    EXPECT_NE(std::string(e.what()).find("libonnx-dev"), std::string::npos) << e.what();
  }
}

#endif

}  // namespace
}  // namespace poseidon::model_import
