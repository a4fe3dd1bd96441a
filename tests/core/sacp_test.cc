// Tests of core/sacp.cc: closed forms of every scheme and layout, a brute-force byte count of the
// same traffic machine by machine, the auto boundary P <= 2MN/(K(M+N)) (AlexNet, VGG19 and
// hand-built layers), requests, overrides and errors.
#include "core/sacp.h"
#include "core/sacp_time.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "core/model.h"

namespace poseidon::core {
namespace {

LayerSpec Fc(const std::string& name, int64_t out, bool bias = true) {
  LayerSpec l;
  l.name = name;
  l.kind = LayerKind::kFc;
  l.num_output = out;
  l.bias = bias;
  return l;
}

LayerSpec Conv(const std::string& name, int64_t out, int64_t k) {
  LayerSpec l;
  l.name = name;
  l.kind = LayerKind::kConv;
  l.num_output = out;
  l.kernel_h = l.kernel_w = k;
  return l;
}

LayerSpec Plain(const std::string& name, LayerKind kind) {
  LayerSpec l;
  l.name = name;
  l.kind = kind;
  return l;
}

// data(c x h x w) -> layers...
Model Build(int64_t c, int64_t h, int64_t w, std::vector<LayerSpec> layers) {
  ModelSpec s;
  s.name = "hand";
  s.input_c = c;
  s.input_h = h;
  s.input_w = w;
  s.layers = std::move(layers);
  return Model::Build(s);
}

// One FC layer M -> N (with or without bias), then the loss.
Model SingleFc(int64_t m, int64_t n, bool bias = true) {
  return Build(m, 1, 1, {Fc("fc", n, bias), Plain("loss", LayerKind::kSoftmaxLoss)});
}

// data(3x8x8) -> conv1(4, 3x3) -> relu1 -> fc1(32) -> relu2 -> fc2(10) -> loss
Model SmallNet() {
  return Build(3, 8, 8,
               {Conv("conv1", 4, 3), Plain("relu1", LayerKind::kRelu), Fc("fc1", 32),
                Plain("relu2", LayerKind::kRelu), Fc("fc2", 10),
                Plain("loss", LayerKind::kSoftmaxLoss)});
}

Model LoadModel(const std::string& name) {
  return Model::Build(config::LoadModelFile(std::string(POSEIDON_SOURCE_DIR) +
                                            "/scenarios/models/" + name + ".yaml"));
}

SacpInput Input(int workers, int servers, bool colocated, int64_t batch,
                SchemeRequest request = SchemeRequest::kAuto) {
  SacpInput in;
  in.workers = workers;
  in.servers = servers;
  in.colocated = colocated;
  in.batch = batch;
  in.default_request = request;
  return in;
}

const LayerPlan& PlanOf(const Plan& plan, const Model& model, const std::string& name) {
  const Layer* layer = model.FindLayer(name);
  EXPECT_NE(layer, nullptr) << name;
  for (const auto& lp : plan.layers) {
    if (lp.layer == layer->id) return lp;
  }
  ADD_FAILURE() << "no plan for " << name;
  return plan.layers.front();
}

// Brute force: put every actor on its machine (worker i on machine i; shard j on machine j mod P1
// co-located, on machine P1 + j dedicated), move every byte of the scheme, and return the largest
// sent + received of any machine. Shares are fractional (doubles), as in the model.
struct Brute {
  int p1, p2;
  bool colocated;
  std::vector<double> nic;
  Brute(int workers, int servers, bool coloc)
      : p1(workers), p2(servers), colocated(coloc), nic(workers + (coloc ? 0 : servers), 0.0) {}
  int ShardMachine(int j) const { return colocated ? j % p1 : p1 + j; }
  void Move(int from, int to, double bytes) {
    if (from == to) return;
    nic[from] += bytes;
    nic[to] += bytes;
  }
  // Push gradient shares (`push` bytes in all), pull parameter shares (`pull`; the same in fp32).
  void Ps(double push, double pull) {
    for (int w = 0; w < p1; ++w) {
      for (int j = 0; j < p2; ++j) {
        Move(w, ShardMachine(j), push / p2);
        Move(ShardMachine(j), w, pull / p2);
      }
    }
  }
  void Ps(double s) { Ps(s, s); }
  // `value_bytes`: a factor value on the wire (4, or 2 with a 16-bit gradient wire).
  void SfbWeight(int64_t k, int64_t m, int64_t n, double value_bytes = 4) {
    for (int w = 0; w < p1; ++w) {
      for (int v = 0; v < p1; ++v) {
        if (v != w) Move(w, v, value_bytes * static_cast<double>(k * (m + n)));
      }
    }
  }
  void Ring(double s) {  // reduce-scatter then all-gather: 2(P1-1) steps of one S/P1 chunk each
    for (int step = 0; step < 2 * (p1 - 1); ++step) {
      for (int w = 0; w < p1; ++w) Move(w, (w + 1) % p1, s / p1);
    }
  }
  double Max() const { return *std::max_element(nic.begin(), nic.end()); }
};

TEST(Sacp, Names) {
  for (Scheme s : {Scheme::kPs, Scheme::kSfb, Scheme::kAllreduce}) {
    Scheme back = Scheme::kPs;
    ASSERT_TRUE(SchemeFromName(SchemeName(s), &back));
    EXPECT_EQ(back, s);
  }
  EXPECT_STREQ(SchemeName(Scheme::kAllreduce), "allreduce");
  Scheme s = Scheme::kPs;
  EXPECT_FALSE(SchemeFromName("auto", &s));
  EXPECT_FALSE(SchemeFromName("PS", &s));
  SchemeRequest r = SchemeRequest::kPs;
  ASSERT_TRUE(SchemeRequestFromName("auto", &r));
  EXPECT_EQ(r, SchemeRequest::kAuto);
  ASSERT_TRUE(SchemeRequestFromName("sfb", &r));
  EXPECT_EQ(r, SchemeRequest::kSfb);
  EXPECT_FALSE(SchemeRequestFromName("hybrid", &r));
}

// Co-located, P1 = P2 = P: PS = AR = 4S(P-1)/P, SFB = 2K(P-1)(M+N)*4 + PS(bias).
TEST(Sacp, ColocatedClosedForms) {
  const int64_t m = 64, n = 32, k = 8;
  const Model model = SingleFc(m, n);
  const Layer& fc = *model.FindLayer("fc");
  const int64_t s = 4 * (m * n + n), s_bias = 4 * n;
  for (int p : {1, 2, 4, 8, 16}) {
    const SchemeCost c = LayerCost(fc, Input(p, p, true, k));
    EXPECT_EQ(c.ps, 4 * s * (p - 1) / p) << p;
    EXPECT_EQ(c.allreduce, 4 * s * (p - 1) / p) << p;
    EXPECT_EQ(c.sfb, 2 * k * (p - 1) * (m + n) * 4 + 4 * s_bias * (p - 1) / p) << p;
  }
  // The paper's form for the weight alone, in floats: 4MN(P-1)/P vs 2K(P-1)(M+N).
  const Model nobias = SingleFc(m, n, false);
  const SchemeCost c = LayerCost(*nobias.FindLayer("fc"), Input(8, 8, true, k));
  EXPECT_EQ(c.ps, 4 * (4 * m * n * 7 / 8));
  EXPECT_EQ(c.sfb, 4 * (2 * k * 7 * (m + n)));
}

TEST(Sacp, OneWorkerMovesNothingColocated) {
  const Model model = SmallNet();
  for (int servers : {1, 3}) {
    const Plan plan = PlanSchemes(model, Input(1, servers, true, 32));
    for (const auto& lp : plan.layers) {
      EXPECT_EQ(lp.cost.ps, 0);
      EXPECT_EQ(lp.cost.allreduce, 0);
      if (lp.cost.sfb >= 0) {
        EXPECT_EQ(lp.cost.sfb, 0);
      }
      EXPECT_EQ(lp.scheme, Scheme::kPs) << lp.reason;  // all tie at 0: ps is kept
    }
    EXPECT_EQ(plan.total_bytes, 0);
    EXPECT_EQ(plan.all_ps_bytes, 0);
  }
}

// Dedicated: PS = max(2S, 2 P1 S / P2); SFB = max(SFB(W) + 2 S_b, 2 P1 S_b / P2); AR = 4S(P1-1)/P1.
TEST(Sacp, DedicatedClosedForms) {
  const int64_t m = 64, n = 32, k = 4;
  const Model model = SingleFc(m, n);
  const Layer& fc = *model.FindLayer("fc");
  const int64_t s = 4 * (m * n + n), s_bias = 4 * n;
  struct Case {
    int p1, p2;
  };
  for (const Case& cs : {Case{8, 2}, Case{2, 8}, Case{4, 4}, Case{8, 8}, Case{1, 1}, Case{16, 4}}) {
    const SchemeCost c = LayerCost(fc, Input(cs.p1, cs.p2, false, k));
    const int64_t sfb_w = 2 * k * (cs.p1 - 1) * (m + n) * 4;
    EXPECT_EQ(c.ps, std::max(2 * s, 2 * cs.p1 * s / cs.p2)) << cs.p1 << "/" << cs.p2;
    EXPECT_EQ(c.sfb, std::max(sfb_w + 2 * s_bias, 2 * cs.p1 * s_bias / cs.p2))
        << cs.p1 << "/" << cs.p2;
    EXPECT_EQ(c.allreduce, 4 * s * (cs.p1 - 1) / cs.p1) << cs.p1 << "/" << cs.p2;
  }
}

// Co-located with P1 != P2: PS = 2S + 2 ceil(P2/P1) S (P1-2) / P2.
TEST(Sacp, ColocatedUnevenShards) {
  const Model model = SingleFc(64, 32, false);
  const Layer& fc = *model.FindLayer("fc");
  const int64_t s = 4 * 64 * 32;
  EXPECT_EQ(LayerCost(fc, Input(8, 4, true, 1)).ps, 5 * s);  // 2S + 2*1*S*6/4
  EXPECT_EQ(LayerCost(fc, Input(4, 8, true, 1)).ps, 3 * s);  // 2S + 2*2*S*2/8
  EXPECT_EQ(LayerCost(fc, Input(2, 5, true, 1)).ps, 2 * s);  // P1 = 2: 2S whatever P2
  EXPECT_EQ(LayerCost(fc, Input(8, 1, true, 1)).ps, 14 * s);  // one shard serves all: 2S(P1-1)
  // All-reduce does not use the shards.
  EXPECT_EQ(LayerCost(fc, Input(8, 1, true, 1)).allreduce, 4 * s * 7 / 8);
}

// Every layout, machine by machine, against the closed forms (fractional shares: the model rounds
// to the nearest byte).
TEST(Sacp, MatchesBruteForceByteCount) {
  const int64_t m = 37, n = 23, k = 5;  // odd sizes: shares are not whole bytes
  const Model model = SingleFc(m, n);
  const Layer& fc = *model.FindLayer("fc");
  const double s = 4.0 * static_cast<double>(fc.params);
  const double s_bias = 4.0 * static_cast<double>(n);
  for (bool colocated : {true, false}) {
    for (int p1 : {1, 2, 3, 4, 7, 8}) {
      for (int p2 : {1, 2, 3, 5, 8, 12}) {
        const SchemeCost c = LayerCost(fc, Input(p1, p2, colocated, k));
        Brute ps(p1, p2, colocated), sfb(p1, p2, colocated), ar(p1, p2, colocated);
        ps.Ps(s);
        sfb.SfbWeight(k, m, n);
        sfb.Ps(s_bias);
        ar.Ring(s);
        const std::string where = std::string(colocated ? "colocated " : "dedicated ") +
                                  std::to_string(p1) + "x" + std::to_string(p2);
        EXPECT_NEAR(static_cast<double>(c.ps), ps.Max(), 0.5001) << where;
        EXPECT_NEAR(static_cast<double>(c.sfb), sfb.Max(), 0.5001) << where;
        EXPECT_NEAR(static_cast<double>(c.allreduce), ar.Max(), 0.5001) << where;
      }
    }
  }
}

// protocol.gradient_wire fp16 / bf16: the same machine-by-machine count with every gradient value
// (pushes, factors, ring steps) at 2 bytes and the pulled parameters at 4, as the simulator prices
// the messages (core::WirePayloadBytes).
TEST(Sacp, MatchesBruteForceByteCountWithA16BitGradientWire) {
  const int64_t m = 37, n = 23, k = 5;
  const Model model = SingleFc(m, n);
  const Layer& fc = *model.FindLayer("fc");
  const double values = static_cast<double>(fc.params);
  for (WireFormat wire : {WireFormat::kFp16, WireFormat::kBf16}) {
    for (bool colocated : {true, false}) {
      for (int p1 : {1, 2, 3, 4, 7, 8}) {
        for (int p2 : {1, 2, 3, 5, 8, 12}) {
          SacpInput in = Input(p1, p2, colocated, k);
          in.gradient_wire = wire;
          const SchemeCost c = LayerCost(fc, in);
          Brute ps(p1, p2, colocated), sfb(p1, p2, colocated), ar(p1, p2, colocated);
          ps.Ps(2 * values, 4 * values);
          sfb.SfbWeight(k, m, n, 2);
          sfb.Ps(2.0 * static_cast<double>(n), 4.0 * static_cast<double>(n));
          ar.Ring(2 * values);
          const std::string where = std::string(WireFormatName(wire)) +
                                    (colocated ? " colocated " : " dedicated ") +
                                    std::to_string(p1) + "x" + std::to_string(p2);
          EXPECT_NEAR(static_cast<double>(c.ps), ps.Max(), 0.5001) << where;
          EXPECT_NEAR(static_cast<double>(c.sfb), sfb.Max(), 0.5001) << where;
          EXPECT_NEAR(static_cast<double>(c.allreduce), ar.Max(), 0.5001) << where;
        }
      }
    }
  }
}

// A 16-bit wire halves what the pushes, factors and ring steps take, not the pulls: PS is 3/4 of
// fp32's (S/2 + S instead of 2S), the ring 1/2; `paper` keeps choosing by fp32 bytes and says so,
// and the plan's totals are the wire's.
TEST(Sacp, ASixteenBitGradientWireHalvesThePushesNotThePulls) {
  const Model alexnet = LoadModel("alexnet");
  SacpInput in = Input(8, 8, true, 256, SchemeRequest::kPaper);
  const Plan fp32 = PlanSchemes(alexnet, in);
  in.gradient_wire = WireFormat::kFp16;
  const Plan fp16 = PlanSchemes(alexnet, in);
  ASSERT_EQ(fp32.layers.size(), fp16.layers.size());
  for (size_t i = 0; i < fp32.layers.size(); ++i) {
    const LayerPlan &a = fp32.layers[i], &b = fp16.layers[i];
    const Layer& l = alexnet.layers()[static_cast<size_t>(a.layer)];
    const int64_t pull = a.cost.ps / 2;  // fp32: push = pull
    const double half_pull = static_cast<double>(pull) / 2;
    const double half_ring = static_cast<double>(a.cost.allreduce) / 2;
    EXPECT_NEAR(static_cast<double>(b.cost.ps - pull), half_pull, 1.0) << l.name;
    EXPECT_NEAR(static_cast<double>(b.cost.allreduce), half_ring, 1.0) << l.name;
    if (HasSufficientFactors(l)) {
      // The weight's factors, 2K(P-1)(M+N) values, halve; the bias (N values) by PS: 3/4.
      const int64_t factors = 2 * 256 * l.fc_rows * 7 * (l.fc_in + l.fc_out);
      EXPECT_EQ(a.cost.sfb, factors * 4 + 4 * (4 * l.fc_out) * 7 / 8) << l.name;
      EXPECT_EQ(b.cost.sfb, factors * 2 + 3 * (4 * l.fc_out) * 7 / 8) << l.name;
    }
    EXPECT_EQ(a.scheme, b.scheme) << l.name;
    EXPECT_EQ(b.reason, a.reason + " (in fp32, the paper's rule)") << l.name;
  }
  int64_t total = 0;
  for (const LayerPlan& lp : fp16.layers) total += lp.cost.of(lp.scheme);
  EXPECT_NEAR(static_cast<double>(fp16.total_bytes), static_cast<double>(total), 8.0);
  EXPECT_LT(fp16.total_bytes, fp32.total_bytes);
}

// floor(2MN / (K(M+N))) in integers.
int FloorThreshold(int64_t m, int64_t n, int64_t k) {
  return static_cast<int>(2 * m * n / (k * (m + n)));
}

// Auto picks SFB exactly when P <= 2MN/(K(M+N)) (co-located, P1 = P2 = P >= 2).
void ExpectBoundary(const Model& model, const std::string& name, int64_t k, int expected_p) {
  const Layer& layer = *model.FindLayer(name);
  const int p = FloorThreshold(layer.fc_in, layer.fc_out, k);
  EXPECT_EQ(p, expected_p) << name;
  EXPECT_LE(static_cast<double>(p), SfbThreshold(layer, k));
  EXPECT_GT(static_cast<double>(p + 1), SfbThreshold(layer, k));
  ASSERT_GE(p, 2) << name;
  for (int q : {2, p - 1, p, p + 1, p + 2, 2 * p}) {
    if (q < 2) continue;
    const Plan plan = PlanSchemes(model, Input(q, q, true, k));
    const LayerPlan& lp = PlanOf(plan, model, name);
    EXPECT_TRUE(lp.requested_auto);
    EXPECT_EQ(lp.scheme, q <= p ? Scheme::kSfb : Scheme::kPs)
        << name << " K=" << k << " P=" << q << ": " << lp.reason;
    EXPECT_EQ(lp.cost.sfb <= lp.cost.ps, q <= p) << name << " P=" << q;
  }
}

TEST(Sacp, AutoBoundaryAlexNet) {
  const Model alexnet = LoadModel("alexnet");
  ExpectBoundary(alexnet, "fc6", 256, 22);  // 2*9216*4096/(256*13312) = 22.15
  ExpectBoundary(alexnet, "fc7", 256, 16);  // 2*4096*4096/(256*8192) = 16 exactly: a tie
  ExpectBoundary(alexnet, "fc8", 256, 6);   // 2*4096*1000/(256*5096) = 6.28
  ExpectBoundary(alexnet, "fc6", 32, 177);
}

TEST(Sacp, AutoBoundaryVgg19) {
  const Model vgg19 = LoadModel("vgg19");
  ExpectBoundary(vgg19, "fc6", 32, 220);  // 2*25088*4096/(32*29184) = 220.07
  ExpectBoundary(vgg19, "fc7", 32, 128);
}

TEST(Sacp, AutoBoundaryHandBuilt) {
  struct Case {
    int64_t m, n, k;
    bool bias;
  };
  for (const Case& c : {Case{64, 64, 8, true}, Case{64, 64, 8, false}, Case{1000, 10, 2, true},
                        Case{300, 700, 7, true}, Case{4096, 21841, 32, true}}) {
    const Model model = SingleFc(c.m, c.n, c.bias);
    ExpectBoundary(model, "fc", c.k, FloorThreshold(c.m, c.n, c.k));
  }
  // At an exact threshold (M = N = 64, K = 8: 2MN/(K(M+N)) = 8) the costs are equal and SFB wins.
  const Model model = SingleFc(64, 64);
  const LayerPlan lp = PlanSchemes(model, Input(8, 8, true, 8)).layers[0];
  EXPECT_EQ(lp.cost.sfb, lp.cost.ps);
  EXPECT_EQ(lp.cost.allreduce, lp.cost.ps);
  EXPECT_EQ(lp.scheme, Scheme::kSfb) << lp.reason;
  EXPECT_EQ(lp.reason.rfind("auto: sfb ", 0), 0u) << lp.reason;
  EXPECT_NE(lp.reason.find(" = ps "), std::string::npos) << lp.reason;
}

TEST(Sacp, ConvNeverSfb) {
  const Model alexnet = LoadModel("alexnet");
  for (int p : {2, 8, 64}) {
    for (SchemeRequest r : {SchemeRequest::kAuto, SchemeRequest::kSfb}) {
      const Plan plan = PlanSchemes(alexnet, Input(p, p, true, 1, r));
      for (const auto& lp : plan.layers) {
        const Layer& layer = alexnet.layers()[lp.layer];
        if (layer.kind != LayerKind::kFc) {
          EXPECT_EQ(lp.cost.sfb, -1) << layer.name;
          EXPECT_NE(lp.scheme, Scheme::kSfb) << layer.name;
        } else if (r == SchemeRequest::kSfb) {
          EXPECT_EQ(lp.scheme, Scheme::kSfb) << layer.name;  // model-wide sfb = the FC layers
        }
      }
    }
  }
}

TEST(Sacp, AllreduceWinsWhenShardsAreFew) {
  // Co-located 8 workers on 1 shard: PS = 14S, AR = 3.5S.
  const Model model = SmallNet();
  const Plan plan = PlanSchemes(model, Input(8, 1, true, 1024));
  EXPECT_EQ(PlanOf(plan, model, "conv1").scheme, Scheme::kAllreduce);
  // Dedicated with one worker: the lone worker keeps its parameters (0 bytes) rather than 2S.
  const Plan one = PlanSchemes(model, Input(1, 2, false, 32));
  EXPECT_EQ(PlanOf(one, model, "conv1").scheme, Scheme::kAllreduce);
  EXPECT_EQ(PlanOf(one, model, "conv1").cost.allreduce, 0);
  EXPECT_EQ(one.total_bytes, 0);
}

TEST(Sacp, PerLayerOverridesWin) {
  const Model alexnet = LoadModel("alexnet");
  SacpInput in = Input(8, 8, true, 256);
  EXPECT_EQ(PlanOf(PlanSchemes(alexnet, in), alexnet, "fc6").scheme, Scheme::kSfb);
  in.per_layer["fc6"] = SchemeRequest::kPs;
  in.per_layer["conv1"] = SchemeRequest::kAllreduce;
  in.per_layer["fc8"] = SchemeRequest::kSfb;
  const Plan plan = PlanSchemes(alexnet, in);
  EXPECT_EQ(PlanOf(plan, alexnet, "fc6").scheme, Scheme::kPs);
  EXPECT_FALSE(PlanOf(plan, alexnet, "fc6").requested_auto);
  EXPECT_EQ(PlanOf(plan, alexnet, "conv1").scheme, Scheme::kAllreduce);
  EXPECT_EQ(PlanOf(plan, alexnet, "fc8").scheme, Scheme::kSfb);
  EXPECT_EQ(PlanOf(plan, alexnet, "fc7").scheme, Scheme::kSfb);  // still auto: 8 <= 16
  EXPECT_TRUE(PlanOf(plan, alexnet, "fc7").requested_auto);
  // Per-layer auto over a fixed default.
  SacpInput fixed = Input(8, 8, true, 256, SchemeRequest::kPs);
  fixed.per_layer["fc7"] = SchemeRequest::kAuto;
  const Plan p2 = PlanSchemes(alexnet, fixed);
  EXPECT_EQ(PlanOf(p2, alexnet, "fc7").scheme, Scheme::kSfb);
  EXPECT_EQ(PlanOf(p2, alexnet, "fc6").scheme, Scheme::kPs);
}

TEST(Sacp, PlanShapeAndTotals) {
  const Model alexnet = LoadModel("alexnet");
  const Plan plan = PlanSchemes(alexnet, Input(8, 8, true, 256));
  ASSERT_EQ(plan.scheme_of_layer.size(), alexnet.layers().size());
  ASSERT_EQ(plan.layers.size(), alexnet.param_layers().size());
  int64_t chosen = 0, ps = 0;
  int count = 0;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerPlan& lp = plan.layers[i];
    EXPECT_EQ(lp.layer, alexnet.param_layers()[i]);  // forward order
    EXPECT_EQ(plan.scheme_of_layer[lp.layer], lp.scheme);
    EXPECT_FALSE(lp.reason.empty());
    chosen += lp.cost.of(lp.scheme);
    ps += lp.cost.ps;
  }
  for (const Layer& l : alexnet.layers()) {
    if (l.params == 0) {
      EXPECT_EQ(plan.scheme_of_layer[l.id], Scheme::kPs) << l.name;
    }
  }
  for (int s = 0; s < kNumSchemes; ++s) count += plan.layers_by_scheme[s];
  EXPECT_EQ(count, static_cast<int>(plan.layers.size()));
  EXPECT_EQ(plan.layers_by_scheme[static_cast<int>(Scheme::kSfb)], 2);  // fc6, fc7 (fc8: 8 > 6.28)
  // Co-located: the same machine is the busiest for every layer, so totals are sums (up to the
  // per-layer rounding to whole bytes).
  EXPECT_NEAR(static_cast<double>(plan.total_bytes), static_cast<double>(chosen), 8.0);
  EXPECT_NEAR(static_cast<double>(plan.all_ps_bytes), static_cast<double>(ps), 8.0);
  // All PS: 4 S (P-1)/P for the whole model.
  EXPECT_EQ(plan.all_ps_bytes, 4 * 4 * alexnet.total_params() * 7 / 8);
  EXPECT_LT(plan.total_bytes, plan.all_ps_bytes);
}

TEST(Sacp, DedicatedTotalIsBusiestMachineOverTheModel) {
  // fc1 by allreduce loads only worker machines, conv1 by PS loads mostly shard machines: the
  // model total is the busier machine over both, not the sum of the two layers' maxima.
  const Model model = SmallNet();
  SacpInput in = Input(8, 2, false, 4, SchemeRequest::kPs);
  in.per_layer["fc1"] = SchemeRequest::kAllreduce;
  const Plan plan = PlanSchemes(model, in);
  const int64_t s_conv = 4 * model.FindLayer("conv1")->params;
  const int64_t s_fc1 = 4 * model.FindLayer("fc1")->params;
  const int64_t s_fc2 = 4 * model.FindLayer("fc2")->params;
  const int64_t worker = 2 * s_conv + 4 * s_fc1 * 7 / 8 + 2 * s_fc2;
  const int64_t shard = 2 * 8 * (s_conv + s_fc2) / 2;
  EXPECT_EQ(plan.total_bytes, std::max(worker, shard));
  EXPECT_EQ(plan.all_ps_bytes, 8 * (s_conv + s_fc1 + s_fc2));
  int64_t sum = 0;
  for (const auto& lp : plan.layers) sum += lp.cost.of(lp.scheme);
  EXPECT_LT(plan.total_bytes, sum);
}

// Expects std::invalid_argument whose message contains every one of `parts`.
void ExpectInvalid(const Model& model, const SacpInput& in, const std::vector<std::string>& parts) {
  try {
    PlanSchemes(model, in);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    for (const auto& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
    }
  }
}

TEST(Sacp, Errors) {
  const Model model = SmallNet();
  SacpInput in = Input(4, 4, true, 8);
  in.per_layer["conv1"] = SchemeRequest::kSfb;
  ExpectInvalid(model, in, {"conv1", "sfb", "fc"});
  in.per_layer.clear();
  in.per_layer["fc9"] = SchemeRequest::kPs;
  ExpectInvalid(model, in, {"fc9", "conv1, fc1, fc2"});  // lists the layers that can be named
  in.per_layer.clear();
  in.per_layer["relu1"] = SchemeRequest::kSfb;
  ExpectInvalid(model, in, {"relu1", "no parameters"});
  ExpectInvalid(model, Input(0, 1, true, 8), {"workers"});
  ExpectInvalid(model, Input(2, 0, false, 8), {"servers"});
  ExpectInvalid(model, Input(2, 2, true, 0), {"batch"});
  EXPECT_THROW(LayerCost(*model.FindLayer("fc1"), Input(2, 2, true, 0)), std::invalid_argument);
}


// ---------------------------------------------------------------------------------------------
// `auto` in time (core/sacp_time.h), on hand-made times: the mechanisms, one at a time.

namespace timed {

// AlexNet, K20-like: forward 1/3, backward 2/3 of 0.66 s, spread by parameters so that the FC
// layers weigh what they do; one peer's fc rebuild GEMM 2 M N K flops at 1.75 TFLOP/s.
SacpTiming AlexNetTimes(const Model& m, double gbit, int64_t batch) {
  SacpTiming t;
  t.nic_Bps = gbit * 1e9 / 8;
  t.message_s = 5e-6;
  const size_t n = m.layers().size();
  t.fwd_s.assign(n, 0.0);
  t.bwd_s.assign(n, 0.0);
  t.sfb_rebuild_s.assign(n, 0.0);
  for (size_t l = 0; l < n; ++l) {
    const Layer& layer = m.layers()[l];
    t.fwd_s[l] = 0.22 / static_cast<double>(n);
    t.bwd_s[l] = 0.44 / static_cast<double>(n);
    if (layer.kind == LayerKind::kFc) {
      t.sfb_rebuild_s[l] = 2.0 * static_cast<double>(layer.fc_in * layer.fc_out * batch) / 1.75e12;
    }
  }
  t.update_s_per_byte = 1.0 / 10e9;
  return t;
}

Plan Timed(const Model& m, SacpInput in, const SacpTiming& t) {
  in.timing = t;
  return PlanSchemes(m, in);
}

TEST(SacpTime, AtTenGbitTheRebuildsCostMoreThanTheBytesSave) {
  const Model alexnet = LoadModel("alexnet");
  const SacpInput in = Input(8, 8, true, 256);
  const Plan paper = PlanSchemes(alexnet, in);  // no timing: the byte rule
  EXPECT_EQ(paper.scheme_of_layer[alexnet.FindLayer("fc6")->id], Scheme::kSfb);
  const Plan timed = Timed(alexnet, in, AlexNetTimes(alexnet, 10, 256));
  for (const char* fc : {"fc6", "fc7", "fc8"}) {
    EXPECT_NE(timed.scheme_of_layer[alexnet.FindLayer(fc)->id], Scheme::kSfb) << fc;
  }
  const LayerPlan& fc6 = timed.layers[5];
  EXPECT_TRUE(fc6.timed);
  EXPECT_NE(fc6.reason.find("auto: iteration "), std::string::npos) << fc6.reason;
  EXPECT_NE(fc6.reason.find("sfb "), std::string::npos) << fc6.reason;
}

TEST(SacpTime, AtOneGbitSfbStillWinsTheBigFcLayer) {
  const Model alexnet = LoadModel("alexnet");
  const Plan timed = Timed(alexnet, Input(8, 8, true, 256), AlexNetTimes(alexnet, 1, 256));
  EXPECT_EQ(timed.scheme_of_layer[alexnet.FindLayer("fc6")->id], Scheme::kSfb);
}

TEST(SacpTime, PaperKeepsTheByteRuleWithTiming) {
  const Model alexnet = LoadModel("alexnet");
  const SacpInput paper_in = Input(8, 8, true, 256, SchemeRequest::kPaper);
  const Plan timed = Timed(alexnet, paper_in, AlexNetTimes(alexnet, 10, 256));
  EXPECT_EQ(timed.scheme_of_layer, PlanSchemes(alexnet, Input(8, 8, true, 256)).scheme_of_layer);
  EXPECT_FALSE(timed.layers[0].timed);
  SchemeRequest r = SchemeRequest::kPs;
  ASSERT_TRUE(SchemeRequestFromName("paper", &r));
  EXPECT_EQ(r, SchemeRequest::kPaper);
}

TEST(SacpTime, ChunksThatLandWholeOnOneShardMakePsSlowerThanTheBytesSay) {
  // cifar10_quick's layers are one 512 KiB chunk or less each, so on eight shards the byte count
  // (every shard an equal share) says ps = allreduce, while the placement puts each layer on one
  // machine, which carries it to and from seven peers: in time, allreduce wins.
  const Model net = LoadModel("cifar10_quick");
  SacpTiming t = AlexNetTimes(net, 1, 50);
  for (double& f : t.fwd_s) f /= 250;  // 2.6 ms of compute per iteration, as on a K20
  for (double& b : t.bwd_s) b /= 250;
  SacpInput in = Input(8, 8, true, 50);
  const Plan paper = PlanSchemes(net, in);
  for (const LayerPlan& lp : paper.layers) {
    EXPECT_EQ(lp.cost.ps, lp.cost.allreduce) << lp.layer;
    EXPECT_EQ(lp.scheme, Scheme::kPs) << lp.layer;
  }
  in.timing = t;
  const Plan timed = PlanSchemes(net, in);
  EXPECT_EQ(timed.scheme_of_layer[net.FindLayer("ip1")->id], Scheme::kAllreduce);
  EXPECT_LT(EstimateIteration(net, in, timed.scheme_of_layer),
            0.6 * EstimateIteration(net, in, paper.scheme_of_layer));
}

TEST(SacpTime, RestrictionsHold) {
  const Model alexnet = LoadModel("alexnet");
  const SacpTiming t = AlexNetTimes(alexnet, 1, 256);
  for (bool timed : {false, true}) {  // both rules, auto and paper
    SacpInput in = Input(8, 2, true, 256);  // two shards for eight workers: allreduce would win
    if (timed) in.timing = t;
    in.allreduce_allowed = false;  // SSP or ASP
    for (Scheme s : PlanSchemes(alexnet, in).scheme_of_layer) EXPECT_NE(s, Scheme::kAllreduce);
    in.ps_only = true;  // evicting dead workers
    for (Scheme s : PlanSchemes(alexnet, in).scheme_of_layer) EXPECT_EQ(s, Scheme::kPs);
  }
}

TEST(SacpTime, ThePlanIsNeverClearlySlowerThanTheCandidatesItStartsFrom) {
  const Model alexnet = LoadModel("alexnet");
  for (double gbit : {1.0, 10.0, 40.0}) {
    for (int p : {2, 4, 8, 16}) {
      SacpInput in = Input(p, p, true, 256);
      in.timing = AlexNetTimes(alexnet, gbit, 256);
      const Plan plan = PlanSchemes(alexnet, in);
      const double e = EstimateIteration(alexnet, in, plan.scheme_of_layer);
      EXPECT_LE(e, EstimateIteration(alexnet, in, PlanSchemes(alexnet, Input(p, p, true, 256))
                                                      .scheme_of_layer) + 1e-12);
      // One scheme everywhere replaces the paper's plan only when it is 1% faster: the plan is
      // never more than that slower than any of them.
      for (Scheme s : {Scheme::kPs, Scheme::kAllreduce}) {
        std::vector<Scheme> all(alexnet.layers().size(), s);
        EXPECT_LE(e, EstimateIteration(alexnet, in, all) * 1.01) << gbit << " " << p;
      }
    }
  }
}

TEST(SacpTime, WithoutDwbpNothingOverlapsTheBackwardPass) {
  const Model alexnet = LoadModel("alexnet");
  SacpInput in = Input(8, 8, true, 256);
  in.timing = AlexNetTimes(alexnet, 10, 256);
  const std::vector<Scheme> ps(alexnet.layers().size(), Scheme::kPs);
  const double with = EstimateIteration(alexnet, in, ps);
  in.timing->dwbp = false;
  const double without = EstimateIteration(alexnet, in, ps);
  EXPECT_GT(without, with);
  // 853.5 MB through the busiest NIC (sent + received, so half each way) after 0.66 s of compute.
  EXPECT_GT(without, 0.66 + 0.5 * 853.5e6 / (10e9 / 8) * 0.9);
}

// protocol.gradient_wire fp16/bf16: pushes, factors and ring steps cost half as much on the NICs
// (pulls do not change), so the estimate of every plan drops, a ring's most (all of its bytes
// halve), and the plan searched with it is no slower than the fp32 plan under the same estimate.
TEST(SacpTime, ASixteenBitGradientWireHalvesTheGradientBytes) {
  const Model alexnet = LoadModel("alexnet");
  SacpInput in = Input(8, 8, true, 256);
  in.timing = AlexNetTimes(alexnet, 1, 256);
  in.timing->dwbp = false;  // the NICs' totals show, not the overlap
  const std::vector<Scheme> ps(alexnet.layers().size(), Scheme::kPs);
  const std::vector<Scheme> ring(alexnet.layers().size(), Scheme::kAllreduce);
  const double ps32 = EstimateIteration(alexnet, in, ps), ring32 = EstimateIteration(alexnet, in, ring);
  const std::vector<Scheme> plan32 = PlanSchemes(alexnet, in).scheme_of_layer;  // auto
  in.gradient_wire = WireFormat::kFp16;
  const double ps16 = EstimateIteration(alexnet, in, ps), ring16 = EstimateIteration(alexnet, in, ring);
  // 0.66 s of compute, then the bytes: PS's 3/4, the ring's 1/2.
  EXPECT_NEAR((ps16 - 0.66) / (ps32 - 0.66), 0.75, 0.05);
  EXPECT_NEAR((ring16 - 0.66) / (ring32 - 0.66), 0.5, 0.05);
  const std::vector<Scheme> plan16 = PlanSchemes(alexnet, in).scheme_of_layer;
  EXPECT_LE(EstimateIteration(alexnet, in, plan16),
            EstimateIteration(alexnet, in, plan32) * (1 + 1e-9));
}

}  // namespace timed

}  // namespace
}  // namespace poseidon::core
