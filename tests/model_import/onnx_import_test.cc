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
#endif

namespace poseidon::model_import {
namespace {

#if defined(POSEIDON_WITH_ONNX)

void AddInit(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t k = 0; k < n; ++k) t->add_float_data(0.01f * static_cast<float>(k % 7));
}

onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op, const std::string& name,
                         std::vector<std::string> in, std::string out) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
  return n;
}

void AddInts(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// input [1, 3, 8, 8] -> Conv 4x3x3x3 (+bias, pad 1) -> Relu -> [op] -> GlobalAveragePool ->
// Flatten -> Gemm 2x4 (+bias): 4*27 + 4 + 8 + 2 = 122 parameters.
std::string TinyCnn(const std::string& extra_op = "", bool dilated = false) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.set_producer_name("onnx_import_test");
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("tiny");
  onnx::ValueInfoProto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {1, 3, 8, 8}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  AddInit(g, "conv.w", {4, 3, 3, 3});
  AddInit(g, "conv.b", {4});
  AddInit(g, "fc.w", {2, 4});
  AddInit(g, "fc.b", {2});
  onnx::NodeProto* conv = AddNode(g, "Conv", "/conv/Conv", {"x", "conv.w", "conv.b"}, "c");
  AddInts(conv, "kernel_shape", {3, 3});
  AddInts(conv, "pads", {1, 1, 1, 1});
  if (dilated) AddInts(conv, "dilations", {2, 2});
  AddNode(g, "Relu", "/relu/Relu", {"c"}, "r");
  std::string last = "r";
  if (!extra_op.empty()) {
    AddNode(g, extra_op, "weird1", {"r"}, "w");
    last = "w";
  }
  AddNode(g, "GlobalAveragePool", "/gap/GlobalAveragePool", {last}, "p");
  AddNode(g, "Flatten", "/Flatten", {"p"}, "f");
  onnx::NodeProto* gemm = AddNode(g, "Gemm", "/fc/Gemm", {"f", "fc.w", "fc.b"}, "y");
  onnx::AttributeProto* tb = gemm->add_attribute();
  tb->set_name("transB");
  tb->set_type(onnx::AttributeProto::INT);
  tb->set_i(1);
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

onnx::ModelProto Start(onnx::GraphProto** g) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  *g = m.mutable_graph();
  onnx::ValueInfoProto* in = (*g)->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {2, 4, 9, 9}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  return m;
}

// Two branches (a 1x1 conv; a depthwise 3x3 conv) concatenated, a 3x3 stride-2 max pool with
// ceil_mode (9 -> 4 floor, 5 ceil), Tanh, global pool, MatMul + Add, Softmax.
// Parameters: 8*4 + 8 (1x1) + 4*9 + 4 (depthwise) + 12*3 + 3 (MatMul, bias) = 119.
std::string Branches(bool asymmetric_pad = false, bool shared = false) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = Start(&g);
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
  onnx::AttributeProto* grp = d->add_attribute();
  grp->set_name("group");
  grp->set_type(onnx::AttributeProto::INT);
  grp->set_i(4);
  onnx::NodeProto* cat = AddNode(g, "Concat", "/cat/Concat", {"a", "d"}, "c");
  onnx::AttributeProto* axis = cat->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  onnx::NodeProto* pool = AddNode(g, "MaxPool", "/pool/MaxPool", {"c"}, "p");
  AddInts(pool, "kernel_shape", {3, 3});
  AddInts(pool, "strides", {2, 2});
  onnx::AttributeProto* ceil = pool->add_attribute();
  ceil->set_name("ceil_mode");
  ceil->set_type(onnx::AttributeProto::INT);
  ceil->set_i(1);
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

void ExpectOneLine(const std::string& msg, const std::string& starts) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind(starts, 0), 0u) << msg;
}

std::string Refusal(const std::string& bytes) {
  try {
    ImportOnnxBytes(bytes, "tiny.onnx", {});
  } catch (const ImportError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ImportError";
  return "";
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
