// Tests of cost/compute_model.h: roofline closed forms on a hand-built model, profile replay,
// batch scaling, missing layers, copies, updates, SFB rebuilds and stragglers.
#include "cost/compute_model.h"

#include <string>

#include <gtest/gtest.h>

#include "config/compute_loader.h"
#include "config/yaml_reader.h"

namespace poseidon::cost {
namespace {

using core::LayerKind;

// Five layers on a 3x32x32 input (ids in forward order):
//   0 conv1 16x5x5 pad 2 -> 16x32x32   macs 1,228,800  flops 2,473,984 (incl. 16,384 bias adds)
//                                        in 12,288 B  out 65,536 B  params 1,216 (4,864 B)
//   1 relu1                             flops 16,384   in 65,536 B  out 65,536 B
//   2 pool1 max 2x2 stride 2 -> 16x16x16 flops 16,384 in 65,536 B  out 16,384 B
//   3 fc1 4096 -> 10                    macs 40,960    flops 81,930  in 16,384 B  out 40 B
//                                        params 40,970 (163,880 B)
//   4 loss softmax_loss                 flops 30       in 40 B      out 40 B
core::Model TinyModel() {
  core::ModelSpec spec;
  spec.name = "tiny";
  spec.input_c = 3;
  spec.input_h = 32;
  spec.input_w = 32;
  spec.num_classes = 10;
  auto add = [&spec](const std::string& name, LayerKind kind) -> core::LayerSpec& {
    core::LayerSpec l;
    l.name = name;
    l.kind = kind;
    spec.layers.push_back(l);
    return spec.layers.back();
  };
  core::LayerSpec& conv = add("conv1", LayerKind::kConv);
  conv.num_output = 16;
  conv.kernel_h = conv.kernel_w = 5;
  conv.pad_h = conv.pad_w = 2;
  add("relu1", LayerKind::kRelu);
  core::LayerSpec& pool = add("pool1", LayerKind::kPool);
  pool.kernel_h = pool.kernel_w = 2;
  pool.stride_h = pool.stride_w = 2;
  core::LayerSpec& fc = add("fc1", LayerKind::kFc);
  fc.num_output = 10;
  add("loss", LayerKind::kSoftmaxLoss);
  return core::Model::Build(spec);
}

// Effective rates chosen for round numbers: R = 1e12 FLOP/s, W = 1e11 B/s (ridge at 10 FLOP/B),
// 1 us launch, 6 GB/s PCIe.
config::DeviceSpec TestDevice() {
  config::DeviceSpec d;
  d.name = "testdev";
  d.peak_flops = 2e12;
  d.compute_efficiency = 0.5;
  d.memory_bandwidth_Bps = 2e11;
  d.memory_efficiency = 0.5;
  d.kernel_launch_ns = 1000;
  d.pcie_bandwidth_Bps = 6e9;
  d.compute_model = config::DeviceComputeModel::kRoofline;  // the closed forms below
  return d;
}

constexpr int64_t kBatch = 64;

TEST(ComputeModelTest, TinyModelHasTheCountsTheClosedFormsAssume) {
  core::Model m = TinyModel();
  ASSERT_EQ(m.layers().size(), 5u);
  const auto& l = m.layers();
  EXPECT_EQ(l[0].name, "conv1");
  EXPECT_EQ(l[0].fwd_macs, 1228800);
  EXPECT_EQ(l[0].fwd_flops, 2473984);
  EXPECT_EQ(l[0].in_bytes, 12288);
  EXPECT_EQ(l[0].out_bytes, 65536);
  EXPECT_EQ(l[0].params, 1216);
  EXPECT_TRUE(l[0].bottoms.empty());
  EXPECT_EQ(l[1].fwd_flops, 16384);
  EXPECT_EQ(l[1].in_bytes, 65536);
  EXPECT_EQ(l[1].out_bytes, 65536);
  EXPECT_EQ(l[2].fwd_flops, 16384);
  EXPECT_EQ(l[2].out_bytes, 16384);
  EXPECT_EQ(l[3].name, "fc1");
  EXPECT_EQ(l[3].fwd_flops, 81930);
  EXPECT_EQ(l[3].in_bytes, 16384);
  EXPECT_EQ(l[3].out_bytes, 40);
  EXPECT_EQ(l[3].params, 40970);
  EXPECT_EQ(l[3].fc_in, 4096);
  EXPECT_EQ(l[3].fc_out, 10);
  EXPECT_EQ(l[4].fwd_flops, 30);
  EXPECT_EQ(l[4].in_bytes, 40);
}

TEST(ComputeModelTest, RooflineClosedForms) {
  ComputeModel c = ComputeModel::FromDevice(TinyModel(), TestDevice(), kBatch);
  ASSERT_EQ(c.num_layers(), 5);
  EXPECT_EQ(c.batch(), kBatch);
  EXPECT_EQ(c.source(), "roofline testdev (batch 64)");
  EXPECT_TRUE(c.warnings().empty());

  // conv1 forward, compute-bound: F = 64 * 2,473,984 = 158,334,976 FLOP -> 158,334.976 ns;
  // D = 64 * 77,824 + 4,864 = 4,985,600 B -> 49,856 ns.  1000 + 158,334.976 -> 159,335.
  EXPECT_EQ(c.fwd_ns(0), 159335);
  // conv1 backward, fed by the input (weight gradient only): F = 1x forward, D = 4,990,464 B.
  EXPECT_EQ(c.bwd_ns(0), 159335);
  // relu1, memory-bound: D = 64 * 131,072 = 8,388,608 B -> 83,886.08 ns (F: 1,048.576 ns).
  EXPECT_EQ(c.fwd_ns(1), 84886);
  // relu1 backward: 2x bytes -> 167,772.16 ns.
  EXPECT_EQ(c.bwd_ns(1), 168772);
  // pool1: D = 64 * 81,920 = 5,242,880 B -> 52,428.8 ns; backward 104,857.6 ns.
  EXPECT_EQ(c.fwd_ns(2), 53429);
  EXPECT_EQ(c.bwd_ns(2), 105858);
  // fc1, memory-bound at batch 64: D = 64 * 16,424 + 163,880 = 1,215,016 B -> 12,150.16 ns
  // (F = 5,243,520 FLOP -> 5,243.52 ns).
  EXPECT_EQ(c.fwd_ns(3), 13150);
  // fc1 backward: F = 2x -> 10,487.04 ns; D = 64 * (2 * 16,384 + 40) + 2 * 163,880
  // = 2,427,472 B -> 24,274.72 ns.
  EXPECT_EQ(c.bwd_ns(3), 25275);
  // loss: D = 64 * 80 = 5,120 B -> 51.2 ns; backward F = 64 * 10 values, D = 2 * 64 * 40 B.
  EXPECT_EQ(c.fwd_ns(4), 1051);
  EXPECT_EQ(c.bwd_ns(4), 1051);

  EXPECT_EQ(c.total_fwd_ns(), 159335 + 84886 + 53429 + 13150 + 1051);
  EXPECT_EQ(c.total_bwd_ns(), 159335 + 168772 + 105858 + 25275 + 1051);
}

TEST(ComputeModelTest, ComputeBoundLayersFollowPeakAndMemoryBoundLayersFollowBandwidth) {
  core::Model m = TinyModel();
  config::DeviceSpec base = TestDevice();
  base.kernel_launch_ns = 0;
  config::DeviceSpec fast_compute = base;
  fast_compute.peak_flops *= 2;
  config::DeviceSpec fast_memory = base;
  fast_memory.memory_bandwidth_Bps *= 2;

  ComputeModel c0 = ComputeModel::FromDevice(m, base, kBatch);
  ComputeModel cf = ComputeModel::FromDevice(m, fast_compute, kBatch);
  ComputeModel cm = ComputeModel::FromDevice(m, fast_memory, kBatch);
  // conv1 (compute-bound): twice the FLOP rate halves it; twice the bandwidth changes nothing.
  EXPECT_EQ(cf.fwd_ns(0), 79167);  // 158,334.976 / 2 = 79,167.488
  EXPECT_EQ(cm.fwd_ns(0), c0.fwd_ns(0));
  // relu1 and fc1 (memory-bound): the other way round.
  for (int id : {1, 3}) {
    EXPECT_EQ(cf.fwd_ns(id), c0.fwd_ns(id)) << id;
    EXPECT_NEAR(static_cast<double>(cm.fwd_ns(id)), c0.fwd_ns(id) / 2.0, 1.0) << id;
  }
  // A large enough batch does not make fc1 compute-bound here (intensity ~ 2*macs/(4*(in+out))
  // per image stays below the ridge), but it does amortise the weight read.
  ComputeModel big = ComputeModel::FromDevice(m, base, 4096);
  EXPECT_LT(static_cast<double>(big.fwd_ns(3)) / 4096, static_cast<double>(c0.fwd_ns(3)) / 64);
}

TEST(ComputeModelTest, ParameterFreeLayerFedByTheInputHasNoBackward) {
  core::ModelSpec spec;
  spec.name = "poolfirst";
  spec.input_c = 1;
  spec.input_h = 8;
  spec.input_w = 8;
  core::LayerSpec pool;
  pool.name = "pool0";
  pool.kind = LayerKind::kPool;
  pool.kernel_h = pool.kernel_w = 2;
  pool.stride_h = pool.stride_w = 2;
  spec.layers.push_back(pool);
  core::LayerSpec fc;
  fc.name = "fc";
  fc.kind = LayerKind::kFc;
  fc.num_output = 4;
  spec.layers.push_back(fc);
  core::Model m = core::Model::Build(spec);
  ComputeModel c = ComputeModel::FromDevice(m, TestDevice(), 8);
  EXPECT_GT(c.fwd_ns(0), 0);
  EXPECT_EQ(c.bwd_ns(0), 0);
  EXPECT_GT(c.bwd_ns(1), 1000);  // fc has a data gradient (its bottom is a layer): launch + work
}

TEST(ComputeModelTest, CopyUpdateAndSfbRebuild) {
  core::Model m = TinyModel();
  ComputeModel c = ComputeModel::FromDevice(m, TestDevice(), kBatch);
  EXPECT_EQ(c.CopyNs(6'000'000), 1'000'000);  // 6 MB at 6 GB/s = 1 ms
  EXPECT_EQ(c.CopyNs(0), 0);
  // Default host memory bandwidth 10e9 B/s, 5 x bytes moved: 1e6 B -> 500 us.
  EXPECT_EQ(c.UpdateNs(1'000'000), 500'000);
  c.set_host_memory_bandwidth(20e9);
  EXPECT_EQ(c.UpdateNs(1'000'000), 250'000);
  c.set_pcie_bandwidth(0);  // a CPU device: nothing to copy
  EXPECT_EQ(c.CopyNs(6'000'000), 0);

  // fc1 (M = 4096, N = 10) from K = 64: F = 2 * 64 * 40,960 = 5,242,880 -> 5,242.88 ns;
  // D = 4 * (64 * 4,106 + 2 * 40,960) = 1,378,816 B -> 13,788.16 ns; + 1,000 launch.
  EXPECT_EQ(c.SfbRebuildNs(3, 64), 14788);
  EXPECT_EQ(c.SfbRebuildNs(3, 0), 0);
}

TEST(ComputeModelDeathTest, SfbRebuildOfANonFcLayerIsAProgrammingError) {
  ComputeModel c = ComputeModel::FromDevice(TinyModel(), TestDevice(), kBatch);
  EXPECT_DEATH(c.SfbRebuildNs(0, 64), "not an FC layer");
  EXPECT_DEATH(c.fwd_ns(5), "check failed");
}

TEST(ComputeModelTest, ScaledByMultipliesComputeOnly) {
  ComputeModel c = ComputeModel::FromDevice(TinyModel(), TestDevice(), kBatch);
  ComputeModel s = c.ScaledBy(1.5);
  EXPECT_EQ(s.fwd_ns(0), 239002);  // llround(159,334.976 * 1.5 = 239,002.464)
  EXPECT_EQ(s.bwd_ns(1), 253158);  // llround(168,772.16 * 1.5 = 253,158.24)
  int64_t sum = 0;
  for (int i = 0; i < s.num_layers(); ++i) sum += s.fwd_ns(i);
  EXPECT_EQ(s.total_fwd_ns(), sum);
  EXPECT_EQ(s.SfbRebuildNs(3, 64), 22182);  // llround(14,788.16 * 1.5 = 22,182.24)
  EXPECT_EQ(s.CopyNs(6'000'000), c.CopyNs(6'000'000));
  EXPECT_EQ(s.UpdateNs(1'000'000), c.UpdateNs(1'000'000));
  EXPECT_DOUBLE_EQ(s.slowdown(), 1.5);
  EXPECT_EQ(s.source(), "roofline testdev (batch 64), slowed down x1.5");
  // Composes, and the original is untouched.
  EXPECT_DOUBLE_EQ(s.ScaledBy(2).slowdown(), 3.0);
  EXPECT_EQ(c.fwd_ns(0), 159335);
}

std::string FixturePath() {
  return std::string(POSEIDON_SOURCE_DIR) + "/tests/data/profiles/tiny_b64.yaml";
}

TEST(ComputeModelTest, ProfileReplayIsExact) {
  const std::string file = FixturePath();
  config::ProfileSpec p = config::LoadProfileFile(file);
  ComputeModel c = ComputeModel::FromProfile(TinyModel(), p, kBatch, file);
  EXPECT_TRUE(c.warnings().empty());
  EXPECT_EQ(c.source(), "profile " + file);
  EXPECT_EQ(c.fwd_ns(0), 1'234'567);
  EXPECT_EQ(c.bwd_ns(0), 2'500'000);
  EXPECT_EQ(c.fwd_ns(1), 100'000);
  EXPECT_EQ(c.bwd_ns(1), 125'000);
  EXPECT_EQ(c.fwd_ns(2), 2);  // 1.6 ns rounds to the nearest ns
  EXPECT_EQ(c.fwd_ns(3), 2'000'000);
  EXPECT_EQ(c.bwd_ns(3), 4'000'000);
  EXPECT_EQ(c.total_fwd_ns(), 1'234'567 + 100'000 + 2 + 2'000'000 + 10'000);
  EXPECT_EQ(c.total_bwd_ns(), 2'500'000 + 125'000 + 50'000 + 4'000'000 + 20'000);
  // update_ms_per_mb: 0.5 -> 0.5 ns per byte; pcie_gbs: 8.
  EXPECT_EQ(c.UpdateNs(1'000'000), 500'000);
  EXPECT_EQ(c.CopyNs(8'000'000), 1'000'000);
  // The fc1 forward at batch 64 is the 64 x 4096 x 10 GEMM: K = 32 takes half of it.
  EXPECT_EQ(c.SfbRebuildNs(3, 32), 1'000'000);
}

TEST(ComputeModelTest, ProfileBatchScalingIsLinearAndWarns) {
  const std::string file = FixturePath();
  config::ProfileSpec p = config::LoadProfileFile(file);
  ComputeModel c = ComputeModel::FromProfile(TinyModel(), p, 32, file);
  EXPECT_EQ(c.fwd_ns(3), 1'000'000);
  EXPECT_EQ(c.bwd_ns(0), 1'250'000);
  EXPECT_NEAR(static_cast<double>(c.fwd_ns(0)), 617'283.5, 0.5);  // a tie: either side
  ASSERT_EQ(c.warnings().size(), 1u);
  EXPECT_NE(c.warnings()[0].find("batch 64"), std::string::npos) << c.warnings()[0];
  EXPECT_NE(c.warnings()[0].find("batch 32"), std::string::npos) << c.warnings()[0];
  EXPECT_NE(c.source().find("scaled"), std::string::npos) << c.source();
  // Same rebuild cost per factor as at batch 64.
  EXPECT_EQ(c.SfbRebuildNs(3, 32), 1'000'000);

  ComputeModel twice = ComputeModel::FromProfile(TinyModel(), p, 128, file);
  EXPECT_EQ(twice.fwd_ns(3), 4'000'000);
  EXPECT_EQ(twice.total_bwd_ns(), 2 * (2'500'000 + 125'000 + 50'000 + 4'000'000 + 20'000));
}

TEST(ComputeModelTest, ProfileMissingALayerIsALocatedError) {
  config::ProfileSpec p = config::ParseProfileYaml(
      "schema_version: 1\n"
      "model: tiny\n"
      "batch: 64\n"
      "device: test\n"
      "backend: synthetic\n"
      "provenance: {}\n"
      "layers:\n"
      "  - {name: conv1, fwd_ms: 1, bwd_ms: 2}\n"
      "  - {name: relu1, fwd_ms: 1, bwd_ms: 2}\n"
      "  - {name: pool1, fwd_ms: 1, bwd_ms: 2}\n"
      "  - {name: loss, fwd_ms: 1, bwd_ms: 2}\n",
      "partial.yaml");
  try {
    ComputeModel::FromProfile(TinyModel(), p, kBatch, "partial.yaml");
    FAIL() << "expected a ConfigError";
  } catch (const config::ConfigError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("partial.yaml:1:1: error:", 0), 0u) << msg;
    EXPECT_NE(msg.find("'fc1'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("calibrate"), std::string::npos) << msg;
  }
}

TEST(ComputeModelTest, ProfileWithExtraLayersAndAnotherModelNameWarns) {
  config::ProfileSpec p = config::LoadProfileFile(FixturePath());
  p.model = "tiny-v2";
  p.layers["aux_fc"] = {};
  ComputeModel c = ComputeModel::FromProfile(TinyModel(), p, kBatch, "x.yaml");
  ASSERT_EQ(c.warnings().size(), 2u);
  EXPECT_NE(c.warnings()[0].find("tiny-v2"), std::string::npos) << c.warnings()[0];
  EXPECT_NE(c.warnings()[1].find("aux_fc"), std::string::npos) << c.warnings()[1];
}

TEST(ComputeModelTest, SameInputsGiveIdenticalResults) {
  ComputeModel a = ComputeModel::FromDevice(TinyModel(), TestDevice(), kBatch);
  ComputeModel b = ComputeModel::FromDevice(TinyModel(), TestDevice(), kBatch);
  for (int i = 0; i < a.num_layers(); ++i) {
    EXPECT_EQ(a.fwd_ns(i), b.fwd_ns(i));
    EXPECT_EQ(a.bwd_ns(i), b.bwd_ns(i));
  }
}

// A replayed task (live ReplayedCompute and the simulator alike) is credited with up to
// kReplayAbsorbNs of its stream's wait: handed over before or within 1 ms of the previous
// task's modelled end, it starts at that end; later, 1 ms before it was handed over. A wait of
// 999 us and one of 1001 us now cost 0 and 1 us, where the rule before charged the second all
// of it (ViT all-reduce on 2 workers at 1 Gbit/s: a sync tail of about 960 us, live runs at
// 5.87 or 6.8 ms an iteration by which side of 1 ms it fell).
TEST(ComputeModelTest, AReplayedTaskIsCreditedUpToOneMillisecondOfItsWait) {
  const int64_t end = 5'000'000;
  EXPECT_EQ(ReplayedTaskStart(end - 300'000, end), end);  // handed over early: after its end
  EXPECT_EQ(ReplayedTaskStart(end, end), end);
  EXPECT_EQ(ReplayedTaskStart(end + 999'000, end), end);  // within 1 ms: at the end
  EXPECT_EQ(ReplayedTaskStart(end + 1'000'000, end), end);
  EXPECT_EQ(ReplayedTaskStart(end + 1'001'000, end), end + 1'000);  // beyond: 1 ms credited
  EXPECT_EQ(ReplayedTaskStart(end + 50'000'000, end), end + 49'000'000);
  // Continuous: one more ns of wait never moves the start by more than one ns.
  for (int64_t lag = 990'000; lag <= 1'010'000; lag += 1'000) {
    const int64_t a = ReplayedTaskStart(end + lag, end), b = ReplayedTaskStart(end + lag + 1, end);
    EXPECT_LE(b - a, 1) << lag;
    EXPECT_GE(b - a, 0) << lag;
  }
}

}  // namespace
}  // namespace poseidon::cost
