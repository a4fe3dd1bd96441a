// Tests of core/model.cc on hand-made specs: shapes (Caffe rules), parameters, MACs, the DAG and
// every ModelError.
#include "core/model.h"

#include <gtest/gtest.h>

namespace poseidon::core {
namespace {

int g_line = 0;  // each helper-made layer gets its own line, so errors can be told apart

LayerSpec L(const std::string& name, LayerKind kind, std::vector<std::string> bottoms = {}) {
  LayerSpec l;
  l.name = name;
  l.kind = kind;
  l.bottoms = std::move(bottoms);
  l.loc = SourceLoc{"test.yaml", ++g_line + 10, 5};
  return l;
}

LayerSpec Conv(const std::string& name, int64_t out, int64_t k, int64_t stride = 1, int64_t pad = 0,
               std::vector<std::string> bottoms = {}) {
  LayerSpec l = L(name, LayerKind::kConv, std::move(bottoms));
  l.num_output = out;
  l.kernel_h = l.kernel_w = k;
  l.stride_h = l.stride_w = stride;
  l.pad_h = l.pad_w = pad;
  return l;
}

LayerSpec Pool(const std::string& name, int64_t k, int64_t stride, int64_t pad = 0,
               std::vector<std::string> bottoms = {}) {
  LayerSpec l = L(name, LayerKind::kPool, std::move(bottoms));
  l.kernel_h = l.kernel_w = k;
  l.stride_h = l.stride_w = stride;
  l.pad_h = l.pad_w = pad;
  return l;
}

LayerSpec Fc(const std::string& name, int64_t out, std::vector<std::string> bottoms = {}) {
  LayerSpec l = L(name, LayerKind::kFc, std::move(bottoms));
  l.num_output = out;
  return l;
}

ModelSpec Spec(int64_t c, int64_t h, int64_t w, std::vector<LayerSpec> layers) {
  ModelSpec s;
  s.name = "test";
  s.input_c = c;
  s.input_h = h;
  s.input_w = w;
  s.layers = std::move(layers);
  s.loc = SourceLoc{"test.yaml", 1, 1};
  return s;
}

// Builds and expects a ModelError whose message contains every one of `parts`.
void ExpectError(const ModelSpec& spec, const std::vector<std::string>& parts,
                 const BuildOptions& options = {}) {
  try {
    Model::Build(spec, options);
    ADD_FAILURE() << "expected a ModelError";
  } catch (const ModelError& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nmissing: " << p;
  }
}

TEST(SourceLocTest, ToString) {
  EXPECT_EQ((SourceLoc{"a.yaml", 3, 7}.ToString()), "a.yaml:3:7");
  EXPECT_EQ((SourceLoc{"a.yaml", 0, 0}.ToString()), "a.yaml");
  EXPECT_EQ(SourceLoc{}.ToString(), "<model>");
}

TEST(LayerKindTest, RegistryRoundTrips) {
  const std::vector<std::string> names = {"conv",    "pool",   "relu",         "lrn",
                                          "fc",      "dropout", "concat",      "softmax_loss",
                                          "batchnorm", "add"};
  for (const auto& n : names) {
    LayerKind k;
    ASSERT_TRUE(LayerKindFromName(n, &k)) << n;
    EXPECT_EQ(LayerKindName(k), n);
    EXPECT_NE(KnownLayerKinds().find(n), std::string::npos);
  }
  LayerKind k;
  EXPECT_FALSE(LayerKindFromName("convolution", &k));
  EXPECT_EQ(KnownLayerKinds().substr(0, 16), "conv, pool, relu");
}

TEST(ModelBuildTest, ConvShapesParamsAndMacs) {
  ModelSpec s = Spec(3, 227, 227, {Conv("conv1", 96, 11, 4)});
  Model m = Model::Build(s);
  const Layer& c = m.layers()[0];
  EXPECT_EQ(c.out, (Shape{96, 55, 55}));
  ASSERT_EQ(c.blobs.size(), 2u);
  EXPECT_EQ(c.blobs[0].name, "conv1.weight");
  EXPECT_EQ(c.blobs[0].dims, (std::vector<int64_t>{96, 3, 11, 11}));
  EXPECT_EQ(c.blobs[1].dims, (std::vector<int64_t>{96}));
  EXPECT_EQ(c.params, 96 * 3 * 11 * 11 + 96);
  EXPECT_EQ(c.fwd_macs, 96LL * 55 * 55 * 3 * 11 * 11);
  EXPECT_EQ(c.out_bytes, 96LL * 55 * 55 * 4);
  EXPECT_EQ(c.in_bytes, 3LL * 227 * 227 * 4);
  EXPECT_TRUE(c.bottoms.empty());
  EXPECT_EQ(m.total_params(), c.params);
  EXPECT_EQ(m.forward_macs(), c.fwd_macs);
  EXPECT_GE(m.forward_flops(), 2 * c.fwd_macs);
}

TEST(ModelBuildTest, ConvFloorsAndNoBias) {
  LayerSpec c = Conv("c", 8, 3, 2, 0);
  c.bias = false;
  Model m = Model::Build(Spec(4, 10, 10, {c}));
  EXPECT_EQ(m.layers()[0].out, (Shape{8, 4, 4}));  // floor((10-3)/2)+1 = 4
  EXPECT_EQ(m.layers()[0].blobs.size(), 1u);
  EXPECT_EQ(m.total_params(), 8 * 4 * 3 * 3);
}

TEST(ModelBuildTest, RectangularKernel) {
  LayerSpec c = Conv("c", 2, 1);
  c.kernel_h = 1;
  c.kernel_w = 7;
  c.pad_w = 3;
  Model m = Model::Build(Spec(1, 17, 17, {c}));
  EXPECT_EQ(m.layers()[0].out, (Shape{2, 17, 17}));
  EXPECT_EQ(m.layers()[0].blobs[0].dims, (std::vector<int64_t>{2, 1, 1, 7}));
}

TEST(ModelBuildTest, PoolingUsesCaffeCeil) {
  // 55 -> 27 (AlexNet), 32 -> 16 (CIFAR quick: ceil(29/2)+1), 112 -> 56 (GoogLeNet), 14 -> 7.
  struct Case {
    int64_t in, k, s, p, out;
  } cases[] = {{55, 3, 2, 0, 27}, {32, 3, 2, 0, 16}, {112, 3, 2, 0, 56}, {14, 3, 2, 0, 7},
               {13, 3, 2, 0, 6},  {7, 3, 2, 0, 3},   {28, 3, 1, 1, 28}, {14, 5, 3, 0, 4},
               {4, 2, 2, 1, 3},   {112, 3, 2, 1, 57}};
  for (const Case& c : cases) {
    Model m = Model::Build(Spec(2, c.in, c.in, {Pool("p", c.k, c.s, c.p)}));
    EXPECT_EQ(m.layers()[0].out, (Shape{2, c.out, c.out}))
        << c.in << " k" << c.k << " s" << c.s << " p" << c.p;
    EXPECT_EQ(m.layers()[0].params, 0);
  }
  // Clip: in 5, k 2, s 2, p 1: ceil(5/2)+1 = 4; (4-1)*2 = 6 >= 5+1, so 3.
  Model m = Model::Build(Spec(1, 5, 5, {Pool("p", 2, 2, 1)}));
  EXPECT_EQ(m.layers()[0].out, (Shape{1, 3, 3}));
}

TEST(ModelBuildTest, GlobalPooling) {
  LayerSpec p = L("gap", LayerKind::kPool);
  p.global_pool = true;
  p.pool = PoolMethod::kAvg;
  Model m = Model::Build(Spec(2048, 7, 7, {p, Fc("fc", 1000)}));
  EXPECT_EQ(m.layers()[0].out, (Shape{2048, 1, 1}));
  EXPECT_EQ(m.layers()[0].fwd_flops, 2048 * 49);
  EXPECT_EQ(m.layers()[1].fc_in, 2048);
}

TEST(ModelBuildTest, PoolingFloorRoundingAsPyTorch) {
  // (in, k, s, p): ceil (Caffe's, with its last-window clip) and floor (PyTorch's default).
  struct Case {
    int64_t in, k, s, p, ceil, floor;
  } cases[] = {
      {55, 3, 2, 0, 27, 27},    // AlexNet: exact fit, they agree
      {13, 3, 2, 0, 6, 6},      // exact fit
      {28, 3, 1, 1, 28, 28},    // stride 1: always agree
      {224, 2, 2, 0, 112, 112}, // VGG
      {14, 5, 3, 0, 4, 4},      // GoogLeNet aux head
      {4, 2, 2, 1, 3, 3},       // ceil 3 and floor 3
      {5, 2, 2, 1, 3, 3},       // ceil 4 clipped to 3 (last window in the padding); floor 3
      {32, 3, 2, 0, 16, 15},    // CIFAR-10 quick pool1
      {112, 3, 2, 0, 56, 55},   // GoogLeNet / Caffe ResNet stem
      {112, 3, 2, 1, 57, 56},   // torchvision ResNet stem: pad 1, floor
      {14, 3, 2, 0, 7, 6},
      {7, 2, 2, 0, 4, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.in << " k" << c.k << " s" << c.s << " p" << c.p);
    EXPECT_EQ(PoolOutSize(c.in, c.k, c.s, c.p, PoolRound::kCeil), c.ceil);
    EXPECT_EQ(PoolOutSize(c.in, c.k, c.s, c.p, PoolRound::kFloor), c.floor);
    LayerSpec p = Pool("p", c.k, c.s, c.p);
    p.pool_round = PoolRound::kFloor;
    p.round_given = true;
    Model m = Model::Build(Spec(2, c.in, c.in, {p}));
    EXPECT_EQ(m.layers()[0].out, (Shape{2, c.floor, c.floor}));
    EXPECT_EQ(m.layers()[0].fwd_flops, 2 * c.floor * c.floor * c.k * c.k);
    EXPECT_TRUE(m.warnings().empty());
    // Under floor no window runs past the padded input.
    EXPECT_LE((c.floor - 1) * c.s + c.k, c.in + 2 * c.p);
    p.pool_round = PoolRound::kCeil;
    EXPECT_EQ(Model::Build(Spec(2, c.in, c.in, {p})).layers()[0].out,
              (Shape{2, c.ceil, c.ceil}));
  }
}

TEST(ModelBuildTest, PoolWithoutRoundWarnsWhenTheConventionsDisagree) {
  LayerSpec p = Pool("pool1", 3, 2);
  Model m = Model::Build(Spec(3, 32, 32, {p}));
  EXPECT_EQ(m.layers()[0].out, (Shape{3, 16, 16}));  // the default stays ceil
  ASSERT_EQ(m.warnings().size(), 1u);
  EXPECT_EQ(m.warnings()[0],
            p.loc.ToString() +
                ": warning: layer 'pool1' (pool): 'round' not given: ceil (the default, Caffe's) "
                "gives 16x16, floor (PyTorch's default) would give 15x15; write 'round: ceil' or "
                "'round: floor' to say which");
  // One axis is enough: 13 agrees (6), 32 does not.
  Model m2 = Model::Build(Spec(3, 13, 32, {p}));
  ASSERT_EQ(m2.warnings().size(), 1u);
  EXPECT_NE(m2.warnings()[0].find("ceil (the default, Caffe's) gives 6x16, floor (PyTorch's "
                                  "default) would give 6x15"),
            std::string::npos)
      << m2.warnings()[0];
  // No warning where they agree, where `round` is given (either way), or for global pooling.
  EXPECT_TRUE(Model::Build(Spec(3, 13, 13, {p})).warnings().empty());
  p.round_given = true;
  EXPECT_TRUE(Model::Build(Spec(3, 32, 32, {p})).warnings().empty());
  LayerSpec g = L("gap", LayerKind::kPool);
  g.global_pool = true;
  EXPECT_TRUE(Model::Build(Spec(3, 7, 9, {g})).warnings().empty());
  // Every pool is looked at, in forward order.
  Model m3 = Model::Build(Spec(3, 32, 32, {Pool("a", 3, 2), Pool("b", 3, 2)}));
  ASSERT_EQ(m3.warnings().size(), 2u);
  EXPECT_NE(m3.warnings()[1].find("layer 'b' (pool): 'round' not given: ceil (the default, "
                                  "Caffe's) gives 8x8, floor (PyTorch's default) would give 7x7"),
            std::string::npos)
      << m3.warnings()[1];
}

TEST(ModelBuildTest, GroupedConvParams) {
  LayerSpec c = Conv("conv2", 256, 5, 1, 2);
  c.groups = 2;
  Model m = Model::Build(Spec(96, 27, 27, {c}));
  const Layer& l = m.layers()[0];
  EXPECT_EQ(l.blobs[0].dims, (std::vector<int64_t>{256, 48, 5, 5}));
  EXPECT_EQ(l.params, 256 * 48 * 25 + 256);  // 307,456 as in AlexNet
  EXPECT_EQ(l.fwd_macs, 256LL * 27 * 27 * 48 * 25);
}

TEST(ModelBuildTest, FcFlattensItsInput) {
  Model m = Model::Build(Spec(256, 6, 6, {Fc("fc6", 4096)}));
  const Layer& l = m.layers()[0];
  EXPECT_EQ(l.fc_in, 9216);
  EXPECT_EQ(l.fc_out, 4096);
  EXPECT_EQ(l.out, (Shape{4096, 1, 1}));
  EXPECT_EQ(l.blobs[0].dims, (std::vector<int64_t>{4096, 9216}));
  EXPECT_EQ(l.params, 9216 * 4096 + 4096);
  EXPECT_EQ(l.fwd_macs, 9216 * 4096);
}

TEST(ModelBuildTest, ElementwiseLayersKeepShapes) {
  LayerSpec bn = L("bn", LayerKind::kBatchNorm);
  LayerSpec lrn = L("lrn", LayerKind::kLrn);
  Model m = Model::Build(Spec(16, 8, 8, {L("relu", LayerKind::kRelu), lrn, bn,
                                         L("drop", LayerKind::kDropout),
                                         L("loss", LayerKind::kSoftmaxLoss)}));
  for (const Layer& l : m.layers()) EXPECT_EQ(l.out, (Shape{16, 8, 8})) << l.name;
  const Layer* b = m.FindLayer("bn");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->blobs.size(), 2u);
  EXPECT_EQ(b->blobs[0].name, "bn.scale");
  EXPECT_EQ(b->blobs[1].name, "bn.shift");
  EXPECT_EQ(b->params, 32);
  EXPECT_EQ(m.total_params(), 32);
  EXPECT_EQ(m.forward_macs(), 0);
  EXPECT_GT(m.forward_flops(), 0);
  EXPECT_EQ(m.param_layers(), (std::vector<int>{2}));
  EXPECT_EQ(m.activation_bytes(), 5 * 16 * 8 * 8 * 4);
  EXPECT_EQ(m.FindLayer("nope"), nullptr);

  bn.bn_affine = false;
  Model m2 = Model::Build(Spec(16, 8, 8, {bn}));
  EXPECT_EQ(m2.total_params(), 0);
}

TEST(ModelBuildTest, ConcatAlongChannels) {
  Model m = Model::Build(Spec(
      8, 28, 28,
      {Conv("a", 64, 1), Conv("b", 128, 3, 1, 1, {"data"}), Pool("c", 3, 1, 1, {"data"}),
       L("cat", LayerKind::kConcat, {"a", "b", "c"})}));
  const Layer* cat = m.FindLayer("cat");
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(cat->out, (Shape{64 + 128 + 8, 28, 28}));
  EXPECT_EQ(cat->bottoms.size(), 3u);
  EXPECT_EQ(cat->in_bytes, (64 + 128 + 8) * 28 * 28 * 4);
  EXPECT_EQ(cat->fwd_macs, 0);
}

TEST(ModelBuildTest, AddAndProjectionShortcut) {
  LayerSpec proj = Conv("proj", 32, 1, 2, 0, {"data"});
  Model m = Model::Build(Spec(16, 8, 8, {Conv("c1", 32, 3, 2, 1), proj,
                                         L("sum", LayerKind::kAdd, {"c1", "proj"}),
                                         L("relu", LayerKind::kRelu)}));
  const Layer* sum = m.FindLayer("sum");
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->out, (Shape{32, 4, 4}));
  EXPECT_EQ(sum->fwd_flops, 32 * 4 * 4);
  // relu has no bottom: it reads the previous layer in the file (sum).
  EXPECT_EQ(m.FindLayer("relu")->bottoms, (std::vector<int>{sum->id}));
  // Layer::spec names every input, implicit ones included.
  EXPECT_EQ(m.FindLayer("relu")->spec.bottoms, (std::vector<std::string>{"sum"}));
  EXPECT_EQ(m.FindLayer("c1")->spec.bottoms, (std::vector<std::string>{"data"}));
}

TEST(ModelBuildTest, MulScalesChannelsByAGate) {
  // Squeeze-and-excitation: a global pool, a 1x1 conv back to C channels, then x * gate.
  LayerSpec gap = L("gap", LayerKind::kPool, {"x"});
  gap.global_pool = true;
  Model m = Model::Build(Spec(3, 8, 8, {Conv("x", 16, 3, 1, 1), gap, Conv("fc", 16, 1),
                                        L("scale", LayerKind::kMul, {"x", "fc"}),
                                        L("same", LayerKind::kMul, {"scale", "x"})}));
  const Layer* scale = m.FindLayer("scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->out, (Shape{16, 8, 8}));
  EXPECT_EQ(scale->params, 0);
  EXPECT_EQ(scale->fwd_macs, 0);
  EXPECT_EQ(scale->fwd_flops, 16 * 8 * 8);
  EXPECT_EQ(scale->in_bytes, (16 * 8 * 8 + 16) * 4);
  EXPECT_EQ(scale->out_bytes, 16 * 8 * 8 * 4);
  // Two tensors of one shape multiply too (any rank).
  const Layer* same = m.FindLayer("same");
  EXPECT_EQ(same->out, (Shape{16, 8, 8}));
  EXPECT_EQ(same->in_bytes, 2 * 16 * 8 * 8 * 4);
  EXPECT_EQ(m.total_params(), (16 * 3 * 9 + 16) + (16 * 16 + 16));
  LayerKind k;
  ASSERT_TRUE(LayerKindFromName("mul", &k));
  EXPECT_EQ(k, LayerKind::kMul);
  EXPECT_EQ(LayerKindName(LayerKind::kMul), std::string("mul"));
}

TEST(ModelErrorTest, MulGateOfTheWrongShapeOrOrder) {
  LayerSpec gap = L("gap", LayerKind::kPool, {"x"});
  gap.global_pool = true;
  // A gate of 8 channels for an image of 16.
  ModelSpec s = Spec(3, 8, 8, {Conv("x", 16, 1), gap, Conv("g", 8, 1),
                               L("scale", LayerKind::kMul, {"x", "g"})});
  ExpectError(s, {s.layers[3].loc.ToString() + ": error: layer 'scale' (mul)", "'x' is 16x8x8",
                  "'g' is 8x1x1", "per-channel gate"});
  // The gate first.
  s = Spec(3, 8, 8, {Conv("x", 16, 1), gap, Conv("g", 16, 1),
                     L("scale", LayerKind::kMul, {"g", "x"})});
  ExpectError(s, {"layer 'scale' (mul)", "list the tensor being scaled first"});
  s = Spec(3, 8, 8, {Conv("x", 16, 1), L("sq", LayerKind::kMul, {"x"})});
  ExpectError(s, {"layer 'sq' (mul)", "takes 2 inputs, got 1"});
}

TEST(ModelBuildTest, TopologicalOrderFollowsTheFileWhenPossible) {
  // "b" reads "c", which comes later in the file: the forward order must put c first.
  Model m = Model::Build(Spec(1, 4, 4, {L("a", LayerKind::kRelu), L("b", LayerKind::kRelu, {"c"}),
                                        L("c", LayerKind::kRelu, {"a"})}));
  ASSERT_EQ(m.layers().size(), 3u);
  EXPECT_EQ(m.layers()[0].name, "a");
  EXPECT_EQ(m.layers()[1].name, "c");
  EXPECT_EQ(m.layers()[2].name, "b");
  for (const Layer& l : m.layers()) {
    EXPECT_EQ(l.id, &l - &m.layers()[0]);
    for (int b : l.bottoms) EXPECT_LT(b, l.id);
  }
}

TEST(ModelBuildTest, WithoutGroupsDropsTheGroup) {
  LayerSpec aux1 = Fc("aux_fc", 10, {"conv"});
  aux1.group = "aux";
  LayerSpec aux2 = L("aux_loss", LayerKind::kSoftmaxLoss);
  aux2.group = "aux";
  ModelSpec s = Spec(3, 8, 8, {Conv("conv", 4, 3), aux1, aux2, Fc("fc", 10, {"conv"}),
                               L("loss", LayerKind::kSoftmaxLoss)});
  Model full = Model::Build(s);
  BuildOptions opt;
  opt.without_groups = {"aux"};
  Model main = Model::Build(s, opt);
  EXPECT_EQ(full.layers().size(), 5u);
  EXPECT_EQ(main.layers().size(), 3u);
  EXPECT_EQ(main.FindLayer("aux_fc"), nullptr);
  EXPECT_EQ(full.total_params() - main.total_params(), 4 * 6 * 6 * 10 + 10);
}

// ---- errors: each names the file, line and column of the layer, the layer and its kind ----

TEST(ModelErrorTest, KeptLayerReadingADroppedOne) {
  LayerSpec aux = Fc("aux_fc", 10);
  aux.group = "aux";
  LayerSpec fc = Fc("fc", 10);  // implicit bottom: aux_fc
  ModelSpec s = Spec(3, 8, 8, {Conv("conv", 4, 3), aux, fc});
  BuildOptions opt;
  opt.without_groups = {"aux"};
  ExpectError(s, {s.layers[2].loc.ToString() + ": error: layer 'fc' (fc)", "aux_fc", "left out"},
              opt);
}

TEST(ModelErrorTest, UnknownGroupToLeaveOut) {
  LayerSpec aux = Fc("aux_fc", 10);
  aux.group = "aux";
  BuildOptions opt;
  opt.without_groups = {"axu"};
  ExpectError(Spec(3, 8, 8, {aux}), {"no layer group 'axu'", "known groups: aux"}, opt);
}

TEST(ModelErrorTest, Cycle) {
  ModelSpec s = Spec(1, 4, 4, {L("a", LayerKind::kRelu, {"c"}), L("b", LayerKind::kRelu, {"a"}),
                               L("c", LayerKind::kRelu, {"b"})});
  ExpectError(s, {s.layers[0].loc.ToString() + ": error: layer 'a' (relu)", "cycle", "a, b, c"});
}

TEST(ModelErrorTest, SelfLoop) {
  ModelSpec s = Spec(1, 4, 4, {L("a", LayerKind::kRelu, {"a"})});
  ExpectError(s, {"layer 'a' (relu)", "itself"});
}

TEST(ModelErrorTest, UnknownBottomSuggestsTheClosestName) {
  ModelSpec s = Spec(3, 8, 8, {Conv("conv1", 4, 3), L("relu1", LayerKind::kRelu, {"conv_1"})});
  ExpectError(s, {s.layers[1].loc.ToString() + ": error: layer 'relu1' (relu)",
                  "unknown bottom 'conv_1'", "did you mean 'conv1'?"});
}

TEST(ModelErrorTest, DuplicateName) {
  ModelSpec s = Spec(3, 8, 8, {Conv("conv1", 4, 3), L("conv1", LayerKind::kRelu)});
  ExpectError(s, {s.layers[1].loc.ToString() + ": error: layer 'conv1' (relu)",
                  "duplicate layer name", s.layers[0].loc.ToString()});
}

TEST(ModelErrorTest, LayerNamedData) {
  ExpectError(Spec(3, 8, 8, {L("data", LayerKind::kRelu)}), {"layer 'data' (relu)", "rename"});
}

TEST(ModelErrorTest, ChannelsNotDivisibleByGroups) {
  LayerSpec c = Conv("conv2", 256, 5, 1, 2);
  c.groups = 2;
  ModelSpec s = Spec(95, 27, 27, {c});
  ExpectError(s, {s.layers[0].loc.ToString() + ": error: layer 'conv2' (conv)",
                  "input channels 95 are not divisible by groups 2"});
  s.input_c = 96;
  s.layers[0].num_output = 255;
  ExpectError(s, {"num_output 255 is not divisible by groups 2"});
}

TEST(ModelErrorTest, KernelLargerThanPaddedInput) {
  ModelSpec s = Spec(3, 4, 4, {Conv("conv1", 8, 5, 1, 0)});
  ExpectError(s, {s.layers[0].loc.ToString() + ": error: layer 'conv1' (conv)",
                  "kernel 5x5 is larger than the padded input 4x4"});
  ExpectError(Spec(3, 2, 2, {Pool("pool1", 3, 2)}), {"layer 'pool1' (pool)", "larger"});
}

TEST(ModelErrorTest, PoolPadNotSmallerThanKernel) {
  ExpectError(Spec(3, 8, 8, {Pool("pool1", 2, 2, 2)}), {"layer 'pool1' (pool)", "smaller than"});
}

TEST(ModelErrorTest, ConcatSpatialMismatch) {
  ModelSpec s = Spec(3, 8, 8, {Conv("a", 4, 3), Conv("b", 4, 1, 1, 0, {"data"}),
                               L("cat", LayerKind::kConcat, {"a", "b"})});
  ExpectError(s, {s.layers[2].loc.ToString() + ": error: layer 'cat' (concat)", "'a' is 4x6x6",
                  "'b' is 4x8x8"});
}

TEST(ModelErrorTest, AddShapeMismatch) {
  ModelSpec s = Spec(3, 8, 8, {Conv("a", 4, 1), Conv("b", 8, 1, 1, 0, {"data"}),
                               L("sum", LayerKind::kAdd, {"a", "b"})});
  ExpectError(s, {s.layers[2].loc.ToString() + ": error: layer 'sum' (add)", "same shape"});
}

TEST(ModelErrorTest, WrongNumberOfBottoms) {
  ExpectError(Spec(3, 8, 8, {Conv("a", 4, 1), L("sum", LayerKind::kAdd, {"a"})}),
              {"layer 'sum' (add)", "at least 2"});
  ExpectError(Spec(3, 8, 8, {Conv("a", 4, 1), Conv("b", 4, 1), Fc("fc", 2, {"a", "b"})}),
              {"layer 'fc' (fc)", "takes 1 input"});
}

TEST(ModelErrorTest, FcWithoutOutputs) {
  ModelSpec s = Spec(3, 8, 8, {Fc("fc", 0)});
  ExpectError(s, {s.layers[0].loc.ToString() + ": error: layer 'fc' (fc)",
                  "num_output must be positive"});
}

TEST(ModelErrorTest, LrnEvenWindow) {
  LayerSpec lrn = L("norm", LayerKind::kLrn);
  lrn.local_size = 4;
  ExpectError(Spec(3, 8, 8, {lrn}), {"layer 'norm' (lrn)", "odd"});
}

TEST(ModelErrorTest, BadModelInput) {
  ExpectError(Spec(0, 8, 8, {L("r", LayerKind::kRelu)}), {"test.yaml:1:1: error: model 'test'"});
  ExpectError(Spec(3, 8, 8, {}), {"no layers"});
}

}  // namespace
}  // namespace poseidon::core
