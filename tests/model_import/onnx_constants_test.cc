// tests/model_import/onnx_constants_test.cc: the constant subgraphs the importer evaluates
// (model_import/onnx_constants.cc), on graphs built here: a conv bias computed by constant
// arithmetic and Identity copies of one initializer are weights of their own; pads computed by
// Concat; a learned position table read by Gather at positions from Range (Shape, Gather,
// Unsqueeze), Expand, Slice or Cast; positions that are not 0 .. S-1, and constants that loop,
// overflow or are too large to evaluate, are refused with one located line.
#include <string>
#include <vector>

#include "tests/model_import/onnx_test_graphs.h"

namespace poseidon::model_import {
namespace {

using namespace test_graphs;  // the graph builders of onnx_test_graphs.h

// x [1, 3, 8, 8] -> conv1 (3x3, pad 1; bias b1 * 2 + 1, computed) -> relu -> conv2 (w2) ->
// conv3 (Identity(w2), the copy torch.onnx writes for an equal tensor). An unused initializer
// of 5 values is left out. Parameters: 108 + 4 + 16 + 16 = 144.
TEST(OnnxConstants, ComputedBiasAndIdentityCopiesAreWeights) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {1, 3, 8, 8});
  AddInit(g, "w1", {4, 3, 3, 3});
  AddInit(g, "b1", {4});
  AddInit(g, "w2", {4, 4, 1, 1});
  AddInit(g, "stats", {5});
  AddConstant(g, "two", {}, {2.0}, /*ints=*/false);
  AddConstant(g, "one", {1}, {1.0}, /*ints=*/false);
  AddNode(g, "Mul", "/scale/Mul", {"b1", "two"}, "b1x2");
  AddNode(g, "Add", "/shift/Add", {"b1x2", "one"}, "bias");
  AddInts(AddNode(g, "Conv", "/conv1/Conv", {"x", "w1", "bias"}, "c1"), "pads", {1, 1, 1, 1});
  AddNode(g, "Relu", "/relu/Relu", {"c1"}, "r");
  AddNode(g, "Conv", "/conv2/Conv", {"r", "w2"}, "c2");
  AddNode(g, "Identity", "Identity_0", {"w2"}, "w3");
  AddNode(g, "Conv", "/conv3/Conv", {"c2", "w3"}, "y");
  g->add_output()->set_name("y");
  const ImportResult r = ImportOnnxBytes(m.SerializeAsString(), "t.onnx", {});
  EXPECT_EQ(r.params, 144);
  EXPECT_EQ(r.other_values, 5);  // b1 is the bias's; the unused statistics are not weights
  EXPECT_EQ(r.restored_batchnorm, 0);
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"conv1\", type: conv, bottom: \"data\", num_output: 4, "
                  "kernel: 3, pad: 1}"))
      << r.yaml;
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"conv3\", type: conv, bottom: \"conv2\", num_output: 4, "
                  "kernel: 1, bias: false}"))
      << r.yaml;
}

// x [1, 4, 8, 8] -> Pad (pads Concat([0, 0, 1, 1], [0, 0, 1, 1]), zeros) -> AveragePool 3x3,
// stride 1: one pool with pad 1 (8x8), as F.avg_pool2d(x, 3, 1, 1) exports.
std::string PaddedPool(std::vector<double> half_end = {0, 0, 1, 1}, bool relu_after = false) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {1, 4, 8, 8});
  AddConstant(g, "begin", {4}, {0, 0, 1, 1});
  AddConstant(g, "end", {4}, half_end);
  AddInt(AddNode(g, "Concat", "/pads/Concat", {"begin", "end"}, "pads"), "axis", 0);
  AddNode(g, "Pad", "/pool/Pad", {"x", "pads"}, "padded");
  if (relu_after) {
    AddNode(g, "Relu", "/relu/Relu", {"padded"}, "y");
  } else {
    AddInts(AddNode(g, "AveragePool", "/pool/AveragePool", {"padded"}, "y"), "kernel_shape",
            {3, 3});
  }
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

TEST(OnnxConstants, ComputedPadsFoldIntoTheAveragePool) {
  const ImportResult r = ImportOnnxBytes(PaddedPool(), "t.onnx", {});
  EXPECT_TRUE(Has(r.yaml,
                  "{name: \"pool\", type: pool, bottom: \"data\", method: avg, kernel: "
                  "3, pad: 1, round: floor}"))
      << r.yaml;
  EXPECT_EQ(r.folded.at("Pad"), 1);
  ExpectOneLine(Refusal(PaddedPool({0, 0, 2, 1})),
                "tiny.onnx: error: node '/pool/Pad' (Pad): padding that is not a zero padding");
  ExpectOneLine(Refusal(PaddedPool({0, 0, 1, 1}, /*relu_after=*/true)),
                "tiny.onnx: error: node '/pool/Pad' (Pad): padding that is not a zero padding");
}

// How the positions reach the table's Gather.
enum class Positions {
  kRange,
  kRangeFromOne,
  kExpanded,
  kSliced,
  kCastFromFloats,
  kSteppedBy0,
  kOverflowing,  // Range(-2^63, 2^62, 2^62): its third value would overflow int64
};

// A sequence x [2, 16, 8] plus nn.Embedding(40, 8)(positions), as torch.onnx writes it when it
// does not fold the lookup: Shape(x)[1] -> Range(0, S, 1) -> Gather(table) -> Unsqueeze -> Add.
std::string WithPositions(Positions how) {
  onnx::GraphProto* g = nullptr;
  onnx::ModelProto m = NewModel(&g, {2, 16, 8});
  AddInit(g, "pos.weight", {40, 8});
  AddNode(g, "Shape", "/pos/Shape", {"x"}, "shape");
  AddConstant(g, "axis1", {}, {1});
  AddInt(AddNode(g, "Gather", "/pos/Gather_1", {"shape", "axis1"}, "len"), "axis", 0);
  AddConstant(g, "zero", {}, {how == Positions::kRangeFromOne ? 1.0 : 0.0});
  AddConstant(g, "step", {}, {how == Positions::kSteppedBy0 ? 0.0 : 1.0});
  std::string ids = "ids";
  switch (how) {
    case Positions::kRangeFromOne:
      AddConstant(g, "end", {}, {17});
      AddNode(g, "Range", "/pos/Range", {"zero", "end", "step"}, ids);
      break;
    case Positions::kOverflowing:
      AddConstant(g, "min", {}, {-9223372036854775808.0});
      AddConstant(g, "big", {}, {4611686018427387904.0});
      AddNode(g, "Range", "/pos/Range", {"min", "big", "big"}, ids);
      break;
    case Positions::kExpanded:
      // HF's position_ids.expand(batch, S): [2, 16] positions, a [2, 16, 8] lookup.
      AddNode(g, "Range", "/pos/Range", {"zero", "len", "step"}, "r");
      AddConstant(g, "axes0", {1}, {0});
      AddNode(g, "Unsqueeze", "/pos/Unsqueeze_ids", {"r", "axes0"}, "r1");
      AddConstant(g, "batch_shape", {2}, {2, 16});
      AddNode(g, "Expand", "/pos/Expand", {"r1", "batch_shape"}, ids);
      break;
    case Positions::kSliced:
      // A buffer of 40 positions sliced to the sequence: position_ids[:, :S].
      AddConstant(g, "all", {1, 40}, [] {
        std::vector<double> v;
        for (int k = 0; k < 40; ++k) v.push_back(k);
        return v;
      }());
      AddConstant(g, "starts", {1}, {0});
      AddConstant(g, "ends", {1}, {16});
      AddConstant(g, "axes", {1}, {1});
      AddNode(g, "Slice", "/pos/Slice", {"all", "starts", "ends", "axes"}, ids);
      break;
    case Positions::kCastFromFloats:
      AddConstant(g, "fzero", {}, {0.0}, /*ints=*/false);
      AddConstant(g, "fend", {}, {16.0}, /*ints=*/false);
      AddConstant(g, "fstep", {}, {1.0}, /*ints=*/false);
      AddNode(g, "Range", "/pos/Range", {"fzero", "fend", "fstep"}, "fr");
      AddInt(AddNode(g, "Cast", "/pos/Cast", {"fr"}, ids), "to", onnx::TensorProto::INT64);
      break;
    case Positions::kRange:
    case Positions::kSteppedBy0:
      AddNode(g, "Range", "/pos/Range", {"zero", "len", "step"}, ids);
      break;
  }
  AddInt(AddNode(g, "Gather", "/pos/Gather", {"pos.weight", ids}, "pe"), "axis", 0);
  std::string added = "pe";
  if (how != Positions::kExpanded && how != Positions::kSliced) {
    AddConstant(g, "axes_pe", {1}, {0});
    AddNode(g, "Unsqueeze", "/pos/Unsqueeze", {"pe", "axes_pe"}, "pe1");
    added = "pe1";
  }
  AddNode(g, "Add", "/pos/Add", {"x", added}, "y");
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

TEST(OnnxConstants, PositionsZeroToSMinusOneReadAPositionTable) {
  for (Positions how :
       {Positions::kRange, Positions::kExpanded, Positions::kSliced, Positions::kCastFromFloats}) {
    const ImportResult r = ImportOnnxBytes(WithPositions(how), "t.onnx", {});
    EXPECT_EQ(r.params, 40 * 8) << static_cast<int>(how);
    EXPECT_TRUE(Has(r.yaml, "{name: \"pos\", type: pos_embedding, bottom: \"data\", max_len: 40}"))
        << r.yaml;
  }
}

TEST(OnnxConstants, OtherPositionsAreRefused) {
  for (Positions how :
       {Positions::kRangeFromOne, Positions::kSteppedBy0, Positions::kOverflowing}) {
    ExpectOneLine(Refusal(WithPositions(how)),
                  "tiny.onnx: error: node '/pos/Add' (Add): adds a constant tensor that is "
                  "neither a MatMul's bias nor a position table");
  }
}

// Pads from a node that reads its own output, or from a constant too large to evaluate: refused
// at the Pad, not looped on or allocated.
TEST(OnnxConstants, LoopingAndHugeConstantsAreRefusedNotEvaluated) {
  {
    onnx::GraphProto* g = nullptr;
    onnx::ModelProto m = NewModel(&g, {1, 4, 8, 8});
    AddConstant(g, "one", {1}, {1});
    AddNode(g, "Add", "/loop/Add", {"pads", "one"}, "pads");
    AddNode(g, "Pad", "/pad/Pad", {"x", "pads"}, "y");
    g->add_output()->set_name("y");
    ExpectOneLine(Refusal(m.SerializeAsString()), "tiny.onnx: error: node '/loop/Add' (Add)");
  }
  {
    onnx::GraphProto* g = nullptr;
    onnx::ModelProto m = NewModel(&g, {1, 4, 8, 8});
    AddConstant(g, "pads", {int64_t{1} << 30}, {});  // 2^30 values, none given
    AddNode(g, "Pad", "/pad/Pad", {"x", "pads"}, "p");
    AddInts(AddNode(g, "AveragePool", "/pool/AveragePool", {"p"}, "y"), "kernel_shape", {3, 3});
    g->add_output()->set_name("y");
    ExpectOneLine(Refusal(m.SerializeAsString()),
                  "tiny.onnx: error: node '/pad/Pad' (Pad): padding that is not a zero padding");
  }
}

}  // namespace
}  // namespace poseidon::model_import
