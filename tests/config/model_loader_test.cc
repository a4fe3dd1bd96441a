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
    EXPECT_GT(spec.num_classes, 0);
    core::Model m = core::Model::Build(spec);
    // The last layer is the loss; the one feeding it has num_classes outputs.
    ASSERT_GE(m.layers().size(), 2u);
    EXPECT_EQ(m.layers().back().kind, core::LayerKind::kSoftmaxLoss);
    EXPECT_EQ(m.layers().back().out.c, spec.num_classes);
    for (const auto& l : spec.layers) {
      EXPECT_GT(l.loc.line, 0) << l.name;
      EXPECT_EQ(l.loc.file, FindModelFile(n, kModelsDir));
    }
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

}  // namespace
}  // namespace poseidon::config
