// Tests of config/model_loader.cc: the shipped model files reproduce the reference sizes
// (docs: /work/shared/reference/poseidon.md section 6), a model written only as YAML loads, and
// every kind of bad input gives an error that names the file, line and column.
#include "config/model_loader.h"

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "core/model.h"

namespace poseidon::config {
namespace {

const std::string kModelsDir = std::string(POSEIDON_SOURCE_DIR) + "/scenarios/models";

core::Model BuildFile(const std::string& name, std::set<std::string> without = {}) {
  core::BuildOptions opt;
  opt.without_groups = std::move(without);
  return core::Model::Build(LoadModelFile(kModelsDir + "/" + name + ".yaml"), opt);
}

// ---- the shipped models --------------------------------------------------------------------

struct Reference {
  std::string name;
  std::set<std::string> without;
  int64_t params;
  double macs;       // forward MACs per image as published
  double tolerance;  // half a unit of the published precision
};

// Section 6 of the reference, plus ResNet-18/34/101/152 (torchvision's counts and GFLOPS) and the Fashion-MNIST models
// (counted by hand in their files).
const Reference kReferences[] = {
    {"cifar10_quick", {}, 145'578, 12.35e6, 0.005e6},
    {"alexnet", {}, 60'965'224, 724.4e6, 0.05e6},
    {"googlenet", {"aux"}, 6'998'552, 1.583e9, 0.0005e9},
    {"googlenet", {}, 13'378'280, 1.591e9, 0.0005e9},
    {"vgg16", {}, 138'357'544, 15.47e9, 0.005e9},
    {"vgg19", {}, 143'667'240, 19.63e9, 0.005e9},
    {"vgg19_22k", {}, 229'052'817, 19.72e9, 0.005e9},
    {"resnet18", {}, 11'689'512, 1.81e9, 0.005e9},
    {"resnet34", {}, 21'797'672, 3.66e9, 0.005e9},
    {"resnet50", {}, 25'557'032, 4.1e9, 0.05e9},
    {"resnet101", {}, 44'549'160, 7.80e9, 0.005e9},
    {"resnet152", {}, 60'192'808, 11.5e9, 0.05e9},
    {"fmnist_cnn", {}, 115'306, 8'191'104, 0.5},
    {"fmnist_mlp", {}, 1'863'690, 1'861'632, 0.5},
};

TEST(ShippedModelsTest, TotalsMatchTheReference) {
  for (const Reference& r : kReferences) {
    SCOPED_TRACE(r.name + (r.without.empty() ? "" : " without aux"));
    core::Model m = BuildFile(r.name, r.without);
    EXPECT_EQ(m.total_params(), r.params);
    EXPECT_NEAR(static_cast<double>(m.forward_macs()), r.macs, r.tolerance);
  }
}

TEST(ShippedModelsTest, ExactMacsOfTheSmallModels) {
  EXPECT_EQ(BuildFile("cifar10_quick").forward_macs(), 12'354'176);
  EXPECT_EQ(BuildFile("alexnet").forward_macs(), 724'406'816);
}

TEST(ShippedModelsTest, EveryFileLoadsWithItsNameAndSchema) {
  std::vector<std::string> names = ListModelNames(kModelsDir);
  for (const Reference& r : kReferences) {
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), r.name)) << r.name;
  }
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    core::ModelSpec spec = LoadModelFile(FindModelFile(n, kModelsDir));
    EXPECT_EQ(spec.name, n);
    EXPECT_FALSE(spec.description.empty());
    core::Model m = core::Model::Build(spec);
    ASSERT_GE(m.layers().size(), 2u);
    for (const auto& l : spec.layers) {
      EXPECT_GT(l.loc.line, 0) << l.name;
      EXPECT_EQ(l.loc.file, FindModelFile(n, kModelsDir));
    }
    // BERT is shipped as the encoder (Hugging Face's BertModel): no classes, no loss.
    if (n == "bert_base" || n == "bert_large") {
      EXPECT_EQ(spec.num_classes, 0);
      EXPECT_NE(m.layers().back().kind, core::LayerKind::kSoftmaxLoss);
      continue;
    }
    EXPECT_GT(spec.num_classes, 0);
    // The last layer is the loss; the one feeding it has num_classes outputs (per token for a
    // language model: [S, vocab]).
    EXPECT_EQ(m.layers().back().kind, core::LayerKind::kSoftmaxLoss);
    const core::Shape& out = m.layers().back().out;
    // SSD300 scores num_classes per default box, one loss per feature map (its heads cannot be
    // concatenated): the last, conf5_loss, reads the 1x1 map's 4 boxes x num_classes channels.
    if (n == "ssd300") {
      EXPECT_EQ(out, (core::Shape{4 * spec.num_classes, 1, 1}));
      continue;
    }
    EXPECT_EQ(out.rank == 3 ? out.c : out.w, spec.num_classes);
  }
}

TEST(ShippedModelsTest, AlexNetShapes) {
  core::Model m = BuildFile("alexnet");
  EXPECT_EQ(m.input_shape(), (core::Shape{3, 227, 227}));
  EXPECT_EQ(m.FindLayer("conv1")->out, (core::Shape{96, 55, 55}));
  EXPECT_EQ(m.FindLayer("pool1")->out, (core::Shape{96, 27, 27}));
  EXPECT_EQ(m.FindLayer("pool2")->out, (core::Shape{256, 13, 13}));
  EXPECT_EQ(m.FindLayer("pool5")->out, (core::Shape{256, 6, 6}));
  EXPECT_EQ(m.FindLayer("fc6")->fc_in, 9216);
  EXPECT_EQ(m.FindLayer("conv2")->params, 307'456);  // grouped: 256*48*5*5 + 256
  EXPECT_EQ(m.param_layers().size(), 8u);
}

TEST(ShippedModelsTest, GoogLeNetAuxHeadsAreAGroup) {
  core::Model full = BuildFile("googlenet");
  core::Model main = BuildFile("googlenet", {"aux"});
  EXPECT_NE(full.FindLayer("loss1/classifier"), nullptr);
  EXPECT_EQ(main.FindLayer("loss1/classifier"), nullptr);
  EXPECT_EQ(main.FindLayer("inception_5b/output")->out, (core::Shape{1024, 7, 7}));
  EXPECT_EQ(main.FindLayer("inception_3a/output")->out, (core::Shape{256, 28, 28}));
  EXPECT_EQ(full.FindLayer("loss1/ave_pool")->out, (core::Shape{512, 4, 4}));
  EXPECT_EQ(full.FindLayer("loss2/ave_pool")->out, (core::Shape{528, 4, 4}));
}

TEST(ShippedModelsTest, ResNet50Shapes) {
  core::Model m = BuildFile("resnet50");
  EXPECT_EQ(m.FindLayer("pool1")->out, (core::Shape{64, 56, 56}));
  EXPECT_EQ(m.FindLayer("res3a")->out, (core::Shape{512, 28, 28}));
  EXPECT_EQ(m.FindLayer("res5c_relu")->out, (core::Shape{2048, 7, 7}));
  EXPECT_EQ(m.FindLayer("fc1000")->fc_in, 2048);
  EXPECT_EQ(m.FindLayer("conv1")->blobs.size(), 1u);  // no bias
}

// ---- a model written only as YAML ----------------------------------------------------------

TEST(ModelLoaderTest, ExtraModelFromText) {
  const std::string text = R"(schema_version: 1
name: tiny
description: a model that exists only in this test
input: {channels: 3, height: 16, width: 16}
num_classes: 5
layers:
  - name: conv1
    type: conv
    num_output: 8
    kernel_h: 3
    kernel_w: 5
    pad_h: 1
    pad_w: 2
    stride: 2
    bias: false
  - {name: bn1, type: batchnorm}
  - {name: relu1, type: relu}
  - {name: left, type: conv, num_output: 4, kernel: 1, groups: 2}
  - {name: right, type: pool, bottom: relu1, method: avg, kernel: 3, stride: 1, pad: 1}
  - {name: cat, type: concat, bottom: [left, right]}
  - {name: gap, type: pool, global: true, method: avg, group: head}
  - {name: norm, type: lrn, bottom: cat, local_size: 3, alpha: 0.001, beta: 0.5, k: 2}
  - {name: fc, type: fc, num_output: 5}
  - {name: drop, type: dropout, ratio: 0.25}
  - {name: loss, type: softmax_loss}
)";
  core::ModelSpec spec = LoadModelText(text, "tiny.yaml");
  EXPECT_EQ(spec.name, "tiny");
  EXPECT_EQ(spec.num_classes, 5);
  ASSERT_EQ(spec.layers.size(), 11u);
  const core::LayerSpec& c = spec.layers[0];
  EXPECT_EQ(c.loc.ToString(), "tiny.yaml:7:5");
  EXPECT_EQ(c.kind, core::LayerKind::kConv);
  EXPECT_EQ(c.kernel_h, 3);
  EXPECT_EQ(c.kernel_w, 5);
  EXPECT_EQ(c.pad_w, 2);
  EXPECT_EQ(c.stride_h, 2);
  EXPECT_FALSE(c.bias);
  EXPECT_EQ(spec.layers[4].pool, core::PoolMethod::kAvg);
  EXPECT_EQ(spec.layers[4].bottoms, (std::vector<std::string>{"relu1"}));
  EXPECT_EQ(spec.layers[5].bottoms, (std::vector<std::string>{"left", "right"}));
  EXPECT_TRUE(spec.layers[6].global_pool);
  EXPECT_EQ(spec.layers[6].group, "head");
  EXPECT_EQ(spec.layers[7].local_size, 3);
  EXPECT_DOUBLE_EQ(spec.layers[7].k, 2.0);
  EXPECT_DOUBLE_EQ(spec.layers[9].dropout_ratio, 0.25);
  EXPECT_EQ(spec.layers[1].loc.ToString(), "tiny.yaml:16:5");

  core::Model m = core::Model::Build(spec);
  // conv1: 16x16 -> floor((16+2-3)/2)+1 = 8, floor((16+4-5)/2)+1 = 8.
  EXPECT_EQ(m.FindLayer("conv1")->out, (core::Shape{8, 8, 8}));
  EXPECT_EQ(m.FindLayer("cat")->out, (core::Shape{12, 8, 8}));
  const int64_t params = 8 * 3 * 3 * 5     // conv1, no bias
                         + 2 * 8           // bn1 scale + shift
                         + 4 * 4 * 1 * 1 + 4  // left: groups 2 -> 4 inputs per group
                         + 12 * 8 * 8 * 5 + 5;  // fc flattens 12x8x8
  EXPECT_EQ(m.total_params(), params);
  const int64_t macs = 8 * 8 * 8 * 3 * 3 * 5 + 4 * 8 * 8 * 4 + 12 * 8 * 8 * 5;
  EXPECT_EQ(m.forward_macs(), macs);

  core::BuildOptions opt;
  opt.without_groups = {"head"};
  EXPECT_EQ(core::Model::Build(spec, opt).layers().size(), 10u);
}

TEST(ModelLoaderTest, NameDefaultsToTheFileStem) {
  core::ModelSpec spec = LoadModelText(
      "schema_version: 1\ninput: {channels: 1, height: 2, width: 2}\nlayers:\n"
      "  - {name: fc, type: fc, num_output: 3}\n",
      "dir/my_model.yaml");
  EXPECT_EQ(spec.name, "my_model");
  EXPECT_EQ(core::Model::Build(spec).total_params(), 4 * 3 + 3);
}

TEST(ModelLoaderTest, FindAndListModels) {
  std::vector<std::string> names = ListModelNames(kModelsDir);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_TRUE(std::binary_search(names.begin(), names.end(), "alexnet"));
  EXPECT_EQ(FindModelFile("alexnet", kModelsDir), kModelsDir + "/alexnet.yaml");
  EXPECT_EQ(FindModelFile("some/where/x.yaml", kModelsDir), "some/where/x.yaml");
  try {
    FindModelFile("alexnett", kModelsDir);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unknown model 'alexnett'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean 'alexnet'?"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cifar10_quick"), std::string::npos) << msg;
  }
  EXPECT_TRUE(ListModelNames(kModelsDir + "/no_such_dir").empty());
}

// ---- bad input: one test per kind of error ---------------------------------------------------

// "LINE:COL" of the first occurrence of `needle` in `text` (1-based), to state where an error
// must point without counting columns by hand.
std::string PosOf(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
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

template <typename Error>
std::string ErrorOf(const std::string& text, bool build = false) {
  try {
    core::ModelSpec spec = LoadModelText(text, "bad.yaml");
    if (build) core::Model::Build(spec);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

const std::string kHead =
    "schema_version: 1\nname: bad\ninput: {channels: 3, height: 32, width: 32}\nlayers:\n";

#define EXPECT_CONTAINS(msg, part) \
  EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg) << "\nmissing: " << (part)

TEST(ModelLoaderErrorTest, MalformedYaml) {
  const std::string text = kHead + "  - {name: conv1, type: conv, num_output: 8\n  - {name: x}\n";
  std::string msg = ErrorOf<ConfigError>(text);
  EXPECT_CONTAINS(msg, "bad.yaml:");
  EXPECT_CONTAINS(msg, "error: YAML syntax");
}

TEST(ModelLoaderErrorTest, UnknownKeySuggestsTheKnownOne) {
  const std::string text = kHead + "  - {name: conv1, type: conv, num_output: 8, kernal: 3}\n";
  std::string msg = ErrorOf<ConfigError>(text);
  EXPECT_CONTAINS(msg, "bad.yaml:5:46: error: unknown key 'kernal'");
  EXPECT_EQ(PosOf(text, "kernal"), "5:46");
  EXPECT_CONTAINS(msg, "layer 'conv1' (conv)");
  EXPECT_CONTAINS(msg, "did you mean 'kernel'?");
}

TEST(ModelLoaderErrorTest, KeyOfAnotherLayerKind) {
  const std::string text = kHead + "  - {name: relu1, type: relu, num_output: 8}\n";
  std::string msg = ErrorOf<ConfigError>(text);
  EXPECT_CONTAINS(msg, "bad.yaml:" + PosOf(text, "num_output") + ": error: unknown key 'num_output'");
  EXPECT_CONTAINS(msg, "layer 'relu1' (relu)");
}

TEST(ModelLoaderErrorTest, UnknownTopLevelKey) {
  const std::string text = kHead + "  - {name: r, type: relu}\nnum_clases: 10\n";
  std::string msg = ErrorOf<ConfigError>(text);
  EXPECT_CONTAINS(msg, "bad.yaml:6:1: error: unknown key 'num_clases'");
  EXPECT_CONTAINS(msg, "did you mean 'num_classes'?");
}

TEST(ModelLoaderErrorTest, UnknownLayerKindListsTheKnownOnes) {
  const std::string text = kHead + "  - {name: c, type: convolution, num_output: 8}\n";
  std::string msg = ErrorOf<ConfigError>(text);
  EXPECT_CONTAINS(msg, "bad.yaml:" + PosOf(text, "convolution") + ": error: unknown layer type "
                                                                  "'convolution'");
  EXPECT_CONTAINS(msg, core::KnownLayerKinds());
}

TEST(ModelLoaderErrorTest, MissingSchemaVersion) {
  std::string msg = ErrorOf<ConfigError>(kHead.substr(kHead.find('\n') + 1) +
                                         "  - {name: r, type: relu}\n");
  EXPECT_CONTAINS(msg, "bad.yaml:1:1: error:");
  EXPECT_CONTAINS(msg, "schema_version: 1");
}

TEST(ModelLoaderErrorTest, WrongSchemaVersion) {
  std::string msg = ErrorOf<ConfigError>("name: x\nschema_version: 2\n");
  EXPECT_CONTAINS(msg, "bad.yaml:2:17: error: unsupported schema_version 2");
}

TEST(ModelLoaderErrorTest, WrongTypeOfValue) {
  const std::string text = kHead + "  - {name: c, type: conv, num_output: ten, kernel: 3}\n";
  std::string msg = ErrorOf<ConfigError>(text);
  EXPECT_CONTAINS(msg, "bad.yaml:" + PosOf(text, "ten") + ": error: num_output: expected an "
                                                          "integer, got 'ten'");
  std::string msg2 = ErrorOf<ConfigError>(kHead + "  - {name: c, type: conv, num_output: 8, "
                                                  "kernel: 3, bias: maybe}\n");
  EXPECT_CONTAINS(msg2, "bad.yaml:5:");
  EXPECT_CONTAINS(msg2, "expected true or false");
  std::string msg3 = ErrorOf<ConfigError>(kHead + "  - {name: c, type: fc, num_output: -3}\n");
  EXPECT_CONTAINS(msg3, "must be a positive integer");
}

TEST(ModelLoaderErrorTest, MissingRequiredKey) {
  const std::string text = kHead + "  - {name: c, type: conv, num_output: 8}\n";
  std::string msg = ErrorOf<ConfigError>(text);
  EXPECT_CONTAINS(msg, "bad.yaml:5:5: error: layer 'c' (conv) is missing required key 'kernel'");
  std::string msg2 = ErrorOf<ConfigError>(kHead + "  - {type: relu}\n");
  EXPECT_CONTAINS(msg2, "bad.yaml:5:5: error:");
  EXPECT_CONTAINS(msg2, "missing required key 'name'");
  std::string msg3 =
      ErrorOf<ConfigError>("schema_version: 1\nlayers:\n  - {name: r, type: relu}\n");
  EXPECT_CONTAINS(msg3, "missing required key 'input'");
  // A product needs its two inputs named; so does a sum.
  std::string msg4 = ErrorOf<ConfigError>(kHead + "  - {name: m, type: mul}\n");
  EXPECT_CONTAINS(msg4, "bad.yaml:5:5: error: layer 'm' (mul) is missing required key 'bottom' "
                        "(the list of layers to multiply)");
  EXPECT_CONTAINS(ErrorOf<ConfigError>(kHead + "  - {name: s, type: add}\n"),
                  "(the list of layers to add)");
}

TEST(ModelLoaderTest, MulLayerLoadsWithItsBottoms) {
  const core::ModelSpec spec = LoadModelText(
      kHead + "  - {name: x, type: conv, num_output: 4, kernel: 1}\n"
              "  - {name: gap, type: pool, global: true}\n"
              "  - {name: scale, type: mul, bottom: [x, gap]}\n",
      "se.yaml");
  ASSERT_EQ(spec.layers.size(), 3u);
  EXPECT_EQ(spec.layers[2].kind, core::LayerKind::kMul);
  EXPECT_EQ(spec.layers[2].bottoms, (std::vector<std::string>{"x", "gap"}));
  EXPECT_EQ(core::Model::Build(spec).FindLayer("scale")->out, (core::Shape{4, 32, 32}));
  EXPECT_CONTAINS(ErrorOf<ConfigError>(kHead + "  - {name: m, type: mul, bottom: [a, b], ratio: 1}\n"),
                  "unknown key 'ratio'");
}

TEST(ModelLoaderErrorTest, ConflictingAndIncompleteWindowKeys) {
  std::string msg =
      ErrorOf<ConfigError>(kHead + "  - {name: c, type: conv, num_output: 8, kernel: 3, kernel_h: 3}\n");
  EXPECT_CONTAINS(msg, "not both");
  std::string msg2 =
      ErrorOf<ConfigError>(kHead + "  - {name: c, type: conv, num_output: 8, kernel_h: 3}\n");
  EXPECT_CONTAINS(msg2, "'kernel_h' and 'kernel_w' go together");
  std::string msg3 =
      ErrorOf<ConfigError>(kHead + "  - {name: p, type: pool, global: true, kernel: 3}\n");
  EXPECT_CONTAINS(msg3, "global pool covers the whole input plane");
  std::string msg4 = ErrorOf<ConfigError>(kHead + "  - {name: p, type: pool, method: mean, "
                                                  "kernel: 3}\n");
  EXPECT_CONTAINS(msg4, "unknown method 'mean'");
}

TEST(ModelLoaderErrorTest, BadStructure) {
  std::string msg = ErrorOf<ConfigError>(kHead + "  - just_a_name\n");
  EXPECT_CONTAINS(msg, "bad.yaml:5:5: error: expected a mapping for layer #1");
  std::string msg2 = ErrorOf<ConfigError>(
      "schema_version: 1\ninput: {channels: 3, height: 32, width: 32}\nlayers: {a: 1}\n");
  EXPECT_CONTAINS(msg2, "bad.yaml:3:9: error: layers: expected a list");
  std::string msg3 = ErrorOf<ConfigError>(kHead + "  - {name: c, type: concat, bottom: {a: 1}}\n");
  EXPECT_CONTAINS(msg3, "bottom: expected a layer name or a list");
  std::string msg4 = ErrorOf<ConfigError>(kHead + "  - {name: c, type: add}\n");
  EXPECT_CONTAINS(msg4, "missing required key 'bottom'");
  std::string msg5 = ErrorOf<ConfigError>(kHead + "  - {name: d, type: dropout, ratio: 1.5}\n");
  EXPECT_CONTAINS(msg5, "[0, 1)");
}

TEST(ModelLoaderErrorTest, InconsistentShapesNameTheLayerInTheFile) {
  const std::string text = kHead +
                           "  - {name: conv1, type: conv, num_output: 8, kernel: 3}\n"
                           "  - {name: conv2, type: conv, num_output: 8, kernel: 1, bottom: data}\n"
                           "  - {name: cat, type: concat, bottom: [conv1, conv2]}\n";
  std::string msg = ErrorOf<core::ModelError>(text, true);
  EXPECT_CONTAINS(msg, "bad.yaml:7:5: error: layer 'cat' (concat)");
  EXPECT_CONTAINS(msg, "'conv1' is 8x30x30");
  EXPECT_CONTAINS(msg, "'conv2' is 8x32x32");
}

TEST(ModelLoaderErrorTest, GroupedConvChannelsNameTheLayerInTheFile) {
  const std::string text = kHead + "  - {name: c, type: conv, num_output: 8, kernel: 3, groups: 2}\n";
  std::string msg = ErrorOf<core::ModelError>(text, true);
  EXPECT_CONTAINS(msg, "bad.yaml:5:5: error: layer 'c' (conv): input channels 3 are not divisible");
}

TEST(ModelLoaderErrorTest, UnknownBottomNameTheLayerInTheFile) {
  const std::string text = kHead +
                           "  - {name: conv1, type: conv, num_output: 8, kernel: 3}\n"
                           "  - name: relu1\n"
                           "    type: relu\n"
                           "    bottom: conv_1\n";
  std::string msg = ErrorOf<core::ModelError>(text, true);
  EXPECT_CONTAINS(msg, "bad.yaml:6:5: error: layer 'relu1' (relu): unknown bottom 'conv_1'");
  EXPECT_CONTAINS(msg, "did you mean 'conv1'?");
}

TEST(ModelLoaderErrorTest, UnreadableFile) {
  try {
    LoadModelFile(kModelsDir + "/no_such_model.yaml");
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_CONTAINS(std::string(e.what()), "no_such_model.yaml: error: cannot read file");
  }
}

// ---- pooling rounding ----------------------------------------------------------------------

TEST(ModelLoaderRoundTest, RoundKeyIsReadAndDefaultsToCeil) {
  const std::string text = kHead +
                           "  - {name: a, type: pool, kernel: 3, stride: 2, round: floor}\n"
                           "  - {name: b, type: pool, bottom: data, kernel: 3, stride: 2, round: "
                           "ceil}\n"
                           "  - {name: c, type: pool, bottom: data, kernel: 3, stride: 2}\n";
  core::ModelSpec spec = LoadModelText(text, "r.yaml");
  ASSERT_EQ(spec.layers.size(), 3u);
  EXPECT_EQ(spec.layers[0].pool_round, core::PoolRound::kFloor);
  EXPECT_TRUE(spec.layers[0].round_given);
  EXPECT_EQ(spec.layers[1].pool_round, core::PoolRound::kCeil);
  EXPECT_TRUE(spec.layers[1].round_given);
  EXPECT_EQ(spec.layers[2].pool_round, core::PoolRound::kCeil);
  EXPECT_FALSE(spec.layers[2].round_given);
  core::Model m = core::Model::Build(spec);
  EXPECT_EQ(m.layers()[0].out, (core::Shape{3, 15, 15}));
  EXPECT_EQ(m.layers()[1].out, (core::Shape{3, 16, 16}));
  EXPECT_EQ(m.layers()[2].out, (core::Shape{3, 16, 16}));
  // The warning names the layer without `round`, at its place in the file.
  ASSERT_EQ(m.warnings().size(), 1u);
  EXPECT_EQ(m.warnings()[0],
            "r.yaml:" + PosOf(text, "{name: c") +
                ": warning: layer 'c' (pool): 'round' not given: ceil (the default, Caffe's) "
                "gives 16x16, floor (PyTorch's default) would give 15x15; write 'round: ceil' or "
                "'round: floor' to say which");
}

TEST(ModelLoaderRoundTest, BadRoundValues) {
  const std::string text = kHead + "  - {name: p, type: pool, kernel: 3, round: down}\n";
  std::string msg = ErrorOf<ConfigError>(text);
  EXPECT_CONTAINS(msg, "bad.yaml:" + PosOf(text, "down") + ": error: unknown round 'down'");
  EXPECT_CONTAINS(msg, "known: ceil, floor");
  const std::string text2 = kHead + "  - {name: p, type: pool, global: true, round: floor}\n";
  std::string msg2 = ErrorOf<ConfigError>(text2);
  EXPECT_CONTAINS(msg2, "bad.yaml:" + PosOf(text2, "floor") + ": error: a global pool covers the "
                                                              "whole input plane; remove 'round'");
  const std::string text3 = kHead + "  - {name: c, type: conv, num_output: 2, kernel: 3, round: "
                                    "floor}\n";
  EXPECT_CONTAINS(ErrorOf<ConfigError>(text3),
                  "bad.yaml:" + PosOf(text3, "round") + ": error: unknown key 'round'");
}

TEST(ShippedModelsTest, EveryFileLoadsWithoutWarnings) {
  for (const auto& n : ListModelNames(kModelsDir)) {
    SCOPED_TRACE(n);
    core::Model m = BuildFile(n);
    for (const auto& w : m.warnings()) ADD_FAILURE() << w;
  }
}

// The shipped files' shapes and totals as they were before `round` and `repeat` existed (the
// ResNet stems then read pad 0 with ceil rounding; they now read torchvision's pad 1 with floor
// rounding, which gives the same 56x56).
TEST(ShippedModelsTest, TotalsAndShapesOfTheFilesWithExplicitRound) {
  struct Totals {
    std::string name;
    int64_t params, macs, flops, activation_bytes;
    size_t layers;
  };
  const Totals kTotals[] = {
      {"cifar10_quick", 145'578, 12'354'176, 24'875'368, 307'536, 12},
      {"fmnist_cnn", 115'306, 8'191'104, 16'508'232, 234'704, 12},
  };
  for (const Totals& t : kTotals) {
    SCOPED_TRACE(t.name);
    core::Model m = BuildFile(t.name);
    EXPECT_EQ(m.total_params(), t.params);
    EXPECT_EQ(m.forward_macs(), t.macs);
    EXPECT_EQ(m.forward_flops(), t.flops);
    EXPECT_EQ(m.activation_bytes(), t.activation_bytes);
    EXPECT_EQ(m.layers().size(), t.layers);
  }
  for (const char* n : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"}) {
    SCOPED_TRACE(n);
    const core::Model m = BuildFile(n);  // kept alive: FindLayer points into it
    const core::Layer* pool1 = m.FindLayer("pool1");
    ASSERT_NE(pool1, nullptr);
    EXPECT_EQ(pool1->out, (core::Shape{64, 56, 56}));
    EXPECT_EQ(pool1->spec.pool_round, core::PoolRound::kFloor);
    EXPECT_EQ(pool1->spec.pad_h, 1);
  }
  const core::Model googlenet = BuildFile("googlenet");
  const core::Layer* g = googlenet.FindLayer("pool1/3x3_s2");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->out, (core::Shape{64, 56, 56}));
  EXPECT_EQ(g->spec.pool_round, core::PoolRound::kCeil);
}

// ---- repeat blocks ---------------------------------------------------------------------------

std::vector<std::string> Names(const core::ModelSpec& spec) {
  std::vector<std::string> v;
  for (const auto& l : spec.layers) v.push_back(l.name);
  return v;
}

TEST(ModelLoaderRepeatTest, ExpandsCopiesWithIndexedNamesAndPrev) {
  const std::string text = kHead +
                           "  - {name: stem, type: conv, num_output: 4, kernel: 3, pad: 1}\n"
                           "  - repeat: 3\n"
                           "    layers:\n"
                           "      - {name: \"blk{i}_conv\", type: conv, num_output: 4, kernel: 3, "
                           "pad: 1}\n"
                           "      - {name: \"blk{i}\", type: add, bottom: [\"{prev}\", "
                           "\"blk{i}_conv\"], group: \"g{i}\"}\n"
                           "  - {name: head, type: fc, num_output: 10}\n";
  core::ModelSpec spec = LoadModelText(text, "r.yaml");
  EXPECT_EQ(Names(spec), (std::vector<std::string>{"stem", "blk0_conv", "blk0", "blk1_conv",
                                                   "blk1", "blk2_conv", "blk2", "head"}));
  // {prev}: the layer before the block for the first copy, then the previous copy's last layer.
  EXPECT_EQ(spec.layers[2].bottoms, (std::vector<std::string>{"stem", "blk0_conv"}));
  EXPECT_EQ(spec.layers[4].bottoms, (std::vector<std::string>{"blk0", "blk1_conv"}));
  EXPECT_EQ(spec.layers[6].bottoms, (std::vector<std::string>{"blk1", "blk2_conv"}));
  EXPECT_EQ(spec.layers[6].group, "g2");
  // A copy's first layer without `bottom` reads the previous layer in the file.
  EXPECT_TRUE(spec.layers[3].bottoms.empty());
  // Every copy carries the location of its template.
  EXPECT_EQ(spec.layers[1].loc.ToString(), "r.yaml:" + PosOf(text, "{name: \"blk{i}_conv\""));
  EXPECT_EQ(spec.layers[5].loc.ToString(), spec.layers[1].loc.ToString());
  core::Model m = core::Model::Build(spec);
  EXPECT_EQ(m.layers().size(), 8u);
  EXPECT_EQ(m.FindLayer("blk2")->bottoms,
            (std::vector<int>{m.FindLayer("blk1")->id, m.FindLayer("blk2_conv")->id}));
  EXPECT_EQ(m.FindLayer("blk1_conv")->bottoms, (std::vector<int>{m.FindLayer("blk0")->id}));
}

TEST(ModelLoaderRepeatTest, StartOffsetsLettersAndBraces) {
  const std::string text = kHead +
                           "  - repeat: 2\n"
                           "    start: 1\n"
                           "    layers:\n"
                           "      - {name: \"r{i:a}\", type: relu}\n"
                           "      - {name: \"s{i}_{{x}}\", type: relu, bottom: \"{prev}\"}\n"
                           "  - repeat: 2\n"
                           "    layers:\n"
                           "      - {name: \"t{i+1}\", type: relu, bottom: \"r{i:a}\"}\n"
                           "      - {name: \"u{i}\", type: relu, bottom: \"t{i-0}\"}\n";
  core::ModelSpec spec = LoadModelText(text, "r.yaml");
  EXPECT_EQ(Names(spec),
            (std::vector<std::string>{"rb", "s1_{x}", "rc", "s2_{x}", "t1", "u0", "t2", "u1"}));
  // A first block's {prev} is the model input.
  EXPECT_EQ(spec.layers[1].bottoms, (std::vector<std::string>{"data"}));
  EXPECT_EQ(spec.layers[3].bottoms, (std::vector<std::string>{"s1_{x}"}));
  EXPECT_EQ(spec.layers[4].bottoms, (std::vector<std::string>{"ra"}));
  EXPECT_EQ(spec.layers[5].bottoms, (std::vector<std::string>{"t0"}));
  // Outside a repeat block braces are plain characters (as they were before repeat existed).
  core::ModelSpec plain = LoadModelText(kHead + "  - {name: \"x{i}\", type: relu}\n", "p.yaml");
  EXPECT_EQ(plain.layers[0].name, "x{i}");
}

// ResNet-152 in repeat form equals the generated, written-out file, layer by layer.
TEST(ModelLoaderRepeatTest, ResNet152InRepeatFormEqualsTheGeneratedFile) {
  const std::string generated =
      std::string(POSEIDON_SOURCE_DIR) + "/tests/data/models/resnet152_generated.yaml";
  const core::Model want = core::Model::Build(LoadModelFile(generated));
  const core::Model got = BuildFile("resnet152");
  EXPECT_EQ(want.total_params(), 60'192'808);  // torchvision's count
  EXPECT_EQ(got.total_params(), want.total_params());
  EXPECT_EQ(got.forward_macs(), want.forward_macs());
  EXPECT_EQ(got.forward_flops(), want.forward_flops());
  EXPECT_EQ(got.activation_bytes(), want.activation_bytes());
  EXPECT_EQ(got.name(), want.name());
  EXPECT_EQ(got.param_layers(), want.param_layers());
  ASSERT_EQ(got.layers().size(), want.layers().size());
  for (size_t i = 0; i < want.layers().size(); ++i) {
    const core::Layer& a = got.layers()[i];
    const core::Layer& b = want.layers()[i];
    SCOPED_TRACE(b.name);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.bottoms, b.bottoms);
    EXPECT_EQ(a.spec.bottoms, b.spec.bottoms);
    EXPECT_EQ(a.in_shapes, b.in_shapes);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.params, b.params);
    EXPECT_EQ(a.fwd_macs, b.fwd_macs);
    EXPECT_EQ(a.fwd_flops, b.fwd_flops);
    EXPECT_EQ(a.in_bytes, b.in_bytes);
    EXPECT_EQ(a.out_bytes, b.out_bytes);
    ASSERT_EQ(a.blobs.size(), b.blobs.size());
    for (size_t k = 0; k < a.blobs.size(); ++k) {
      EXPECT_EQ(a.blobs[k].name, b.blobs[k].name);
      EXPECT_EQ(a.blobs[k].dims, b.blobs[k].dims);
    }
    EXPECT_EQ(a.spec.num_output, b.spec.num_output);
    EXPECT_EQ(a.spec.kernel_h, b.spec.kernel_h);
    EXPECT_EQ(a.spec.stride_h, b.spec.stride_h);
    EXPECT_EQ(a.spec.pad_h, b.spec.pad_h);
    EXPECT_EQ(a.spec.bias, b.spec.bias);
    EXPECT_EQ(a.spec.pool_round, b.spec.pool_round);
  }
}

TEST(ModelLoaderRepeatErrorTest, CountMustBeAPositiveInteger) {
  for (const std::string v : {"0", "-2", "two", "2.5", "[3]"}) {
    SCOPED_TRACE(v);
    const std::string text = kHead + "  - repeat: " + v + "\n    layers:\n      - {name: "
                                                          "\"r{i}\", type: relu}\n";
    std::string msg = ErrorOf<ConfigError>(text);
    EXPECT_CONTAINS(msg, "bad.yaml:5:13: error: 'repeat' is the number of copies of the block "
                         "and must be a positive integer, got ");
    EXPECT_CONTAINS(msg, "write e.g. 'repeat: 3'");
  }
}

TEST(ModelLoaderRepeatErrorTest, UnknownPlaceholderIsLocatedAtItsValue) {
  const std::string text = kHead +
                           "  - repeat: 2\n"
                           "    layers:\n"
                           "      - {name: \"r{j}\", type: relu}\n";
  std::string msg = ErrorOf<ConfigError>(text);
  EXPECT_CONTAINS(msg, "bad.yaml:" + PosOf(text, "\"r{j}\"") +
                           ": error: unknown placeholder '{j}' in 'r{j}' (did you mean '{i}'?); "
                           "a repeat block knows {i}");
  EXPECT_CONTAINS(msg, "{prev}");
  // In a bottom list, the item itself.
  const std::string text2 = kHead +
                            "  - {name: a, type: relu}\n"
                            "  - repeat: 2\n"
                            "    layers:\n"
                            "      - {name: \"r{i}\", type: add, bottom: [a, \"{prevv}\"]}\n";
  std::string msg2 = ErrorOf<ConfigError>(text2);
  EXPECT_CONTAINS(msg2, "bad.yaml:" + PosOf(text2, "\"{prevv}\"") +
                            ": error: unknown placeholder '{prevv}' in '{prevv}' (did you "
                            "mean '{prev}'?)");
  const std::string text3 = kHead + "  - repeat: 2\n    layers:\n      - {name: \"r{i\", type: "
                                    "relu}\n";
  EXPECT_CONTAINS(ErrorOf<ConfigError>(text3),
                  "bad.yaml:" + PosOf(text3, "\"r{i\"") + ": error: unclosed '{' in 'r{i'");
  const std::string text4 = kHead + "  - repeat: 27\n    layers:\n      - {name: \"r{i:a}\", "
                                    "type: relu}\n";
  EXPECT_CONTAINS(ErrorOf<ConfigError>(text4),
                  "bad.yaml:" + PosOf(text4, "\"r{i:a}\"") + ": error: '{i:a}' in 'r{i:a}' "
                                                             "writes the index as a letter");
}

TEST(ModelLoaderRepeatErrorTest, NameCollisionAfterExpansionNamesBothOrigins) {
  // Two copies of a name without {i}.
  const std::string text = kHead +
                           "  - repeat: 2\n"
                           "    layers:\n"
                           "      - {name: \"r{i}\", type: relu}\n"
                           "      - {name: same, type: relu}\n";
  std::string msg = ErrorOf<ConfigError>(text);
  const std::string at = "bad.yaml:" + PosOf(text, "same");
  const std::string block = "bad.yaml:" + PosOf(text, "repeat");
  EXPECT_CONTAINS(msg, at + ": error: layer name 'same' is given twice after expanding repeat "
                            "blocks: by " +
                           at + ", copy {i}=1 of the repeat block at " + block + " and before by " +
                           at + ", copy {i}=0 of the repeat block at " + block +
                           "; make the names differ (put {i} in a repeated name)");
  // A copy that takes the name of a layer outside the block.
  const std::string text2 = kHead +
                            "  - {name: r1, type: relu}\n"
                            "  - repeat: 3\n"
                            "    layers:\n"
                            "      - {name: \"r{i}\", type: relu}\n";
  std::string msg2 = ErrorOf<ConfigError>(text2);
  const std::string at2 = "bad.yaml:" + PosOf(text2, "\"r{i}\"");
  EXPECT_CONTAINS(msg2, at2 + ": error: layer name 'r1' is given twice after expanding repeat "
                              "blocks: by " +
                            at2 + ", copy {i}=1 of the repeat block at bad.yaml:" +
                            PosOf(text2, "repeat") + " and before by bad.yaml:" +
                            PosOf(text2, "r1") + ";");
  // Duplicates without any repeat block are still Model::Build's to report.
  EXPECT_CONTAINS(ErrorOf<core::ModelError>(kHead + "  - {name: a, type: relu}\n  - {name: a, "
                                                    "type: relu}\n",
                                            true),
                  "duplicate layer name");
}

TEST(ModelLoaderRepeatErrorTest, BlockShape) {
  const std::string nested = kHead +
                             "  - repeat: 2\n"
                             "    layers:\n"
                             "      - repeat: 2\n"
                             "        layers: [{name: \"r{i}\", type: relu}]\n";
  std::string msg = ErrorOf<ConfigError>(nested);
  EXPECT_CONTAINS(msg, "bad.yaml:7:17: error: repeat blocks do not nest (this one is inside the "
                       "repeat block at bad.yaml:5:5)");
  const std::string unknown = kHead + "  - repeat: 2\n    layer: [{name: \"r{i}\", type: relu}]\n";
  std::string msg2 = ErrorOf<ConfigError>(unknown);
  EXPECT_CONTAINS(msg2, "bad.yaml:6:5: error: unknown key 'layer' in the repeat block; did you "
                        "mean 'layers'?");
  std::string msg3 = ErrorOf<ConfigError>(kHead + "  - repeat: 2\n    layers: []\n");
  EXPECT_CONTAINS(msg3, "bad.yaml:6:13: error: layers of the repeat block (entry #1 of the "
                        "model's layers): expected a non-empty list of layers");
  std::string msg4 = ErrorOf<ConfigError>(kHead + "  - repeat: 2\n    start: -1\n    layers: "
                                                  "[{name: \"r{i}\", type: relu}]\n");
  EXPECT_CONTAINS(msg4, "bad.yaml:6:12: error: 'start' must not be negative, got -1");
  // A count that would make an absurdly long model (a typo) is refused before expanding.
  std::string msg7 = ErrorOf<ConfigError>(kHead + "  - repeat: 2000000\n    layers:\n      - "
                                                  "{name: \"r{i}\", type: relu}\n");
  EXPECT_CONTAINS(msg7, "bad.yaml:5:13: error: 'repeat: 2000000' of a 1-layer block makes the "
                        "model longer than 1000000 layers");
  // A bad template layer names its place in the block.
  std::string msg5 = ErrorOf<ConfigError>(kHead + "  - repeat: 2\n    layers:\n      - {type: "
                                                  "relu}\n");
  EXPECT_CONTAINS(msg5, "bad.yaml:7:9: error:");
  EXPECT_CONTAINS(msg5, "missing required key 'name'");
  // Shape errors in a copy name the expanded layer at its template's place.
  std::string msg6 = ErrorOf<core::ModelError>(
      kHead + "  - repeat: 5\n    layers:\n      - {name: \"p{i}\", type: pool, kernel: 3, "
              "stride: 2, round: floor}\n",
      true);
  // 32 -> 15 -> 7 -> 3 -> 1, and copy 4 cannot fit its 3x3 window.
  EXPECT_CONTAINS(msg6, "bad.yaml:7:9: error: layer 'p4' (pool): kernel 3x3 is larger than the "
                        "padded input 1x1");
}

}  // namespace
}  // namespace poseidon::config

namespace poseidon::config {
namespace {

// A framework's layer table (poseidon.torch writes one): module layers with their parameters and
// an nn.Linear's GEMM shape, fp64 values as two words.
TEST(ModelLoaderTest, ModuleLayersOfAFrameworksTable) {
  const std::string text =
      "schema_version: 1\nname: table\ninput: {tokens: 1}\nvalue_words: 2\nlayers:\n"
      "  - {name: enc.0, type: module, params: [{name: weight, dims: [4, 6]}, {name: bias, dims: "
      "[4]}], linear: {in: 6, out: 4, rows: 3}}\n"
      "  - {name: norm, type: module, params: [{name: weight, dims: [4]}]}\n";
  const core::Model m = core::Model::Build(LoadModelText(text, "table.yaml"));
  ASSERT_EQ(m.layers().size(), 2u);
  EXPECT_EQ(m.layers()[0].blobs[0].name, "enc.0.weight");
  EXPECT_EQ(m.layers()[0].fc_rows, 3);
  EXPECT_EQ(m.total_params(), 2 * (24 + 4 + 4));
}

TEST(ModelLoaderErrorTest, AModuleParameterWithoutDimsIsLocated) {
  const std::string text =
      "schema_version: 1\nname: t\ninput: {tokens: 1}\nlayers:\n"
      "  - {name: m, type: module, params: [{name: weight, dims: [4, x]}]}\n";
  std::string msg;
  try {
    LoadModelText(text, "t.yaml");
  } catch (const ConfigError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("t.yaml:5:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected positive integers, got 'x'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace poseidon::config
