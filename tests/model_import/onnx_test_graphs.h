// tests/model_import/onnx_test_graphs.h: ONNX graphs built in tests with ONNX's C++ protobuf
// classes (no python, no torch), for the importer's tests.
//
//   onnx::GraphProto* g = nullptr;
//   onnx::ModelProto m = NewModel(&g, {1, 3, 8, 8});       // one float input "x"
//   AddInit(g, "conv.w", {4, 3, 3, 3});
//   AddNode(g, "Conv", "/conv/Conv", {"x", "conv.w"}, "y");
//   g->add_output()->set_name("y");
//   ImportOnnxBytes(m.SerializeAsString(), "t.onnx", {});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "model_import/onnx_import.h"

namespace poseidon::model_import::test_graphs {

// A model of IR 7 and `opset` with one input "x" of `dims` (floats, or `elem`).
inline onnx::ModelProto NewModel(onnx::GraphProto** g, const std::vector<int64_t>& dims,
                                 int elem = onnx::TensorProto::FLOAT, int opset = 13,
                                 const std::string& producer = "") {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.set_producer_name(producer);
  m.add_opset_import()->set_version(opset);
  *g = m.mutable_graph();
  (*g)->set_name("test");
  onnx::ValueInfoProto* in = (*g)->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  return m;
}

// A float initializer of `dims` holding 0.01 * (k % 7).
inline void AddInit(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims) {
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

inline onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op, const std::string& name,
                                std::vector<std::string> in, std::string out) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : in) n->add_input(i);
  n->add_output(out);
  return n;
}

inline void AddInts(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

inline void AddInt(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// A Constant node `out` holding int64 (or float) `values` of `dims` ({} a scalar).
inline void AddConstant(onnx::GraphProto* g, const std::string& out, std::vector<int64_t> dims,
                        std::vector<double> values, bool ints = true) {
  onnx::NodeProto* n = AddNode(g, "Constant", out + "_node", {}, out);
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* t = a->mutable_t();
  t->set_data_type(ints ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (double v : values) {
    if (ints) {
      t->add_int64_data(static_cast<int64_t>(v));
    } else {
      t->add_float_data(static_cast<float>(v));
    }
  }
}

// The one-line message ImportOnnxBytes refuses `bytes` with (as file `file`); a failure if it
// imports them.
inline std::string Refusal(const std::string& bytes, const std::string& file = "tiny.onnx") {
  try {
    ImportOnnxBytes(bytes, file, {});
  } catch (const ImportError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ImportError";
  return "";
}

// Whether the YAML holds `line` (a layer's, or several in a row).
inline bool Has(const std::string& yaml, const std::string& line) {
  return yaml.find(line) != std::string::npos;
}

inline void ExpectOneLine(const std::string& msg, const std::string& starts) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind(starts, 0), 0u) << msg;
}

}  // namespace poseidon::model_import::test_graphs
