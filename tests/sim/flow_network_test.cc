// Tests of sim/network/flow_network.cc and alpha_beta.cc: closed-form transfer times, max-min
// sharing, leaf-spine latency and oversubscription, the alpha-beta model, determinism, and a seeded
// property test of the incremental solver against a from-scratch water-filling written here.
#include "sim/network/flow_network.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "sim/network/alpha_beta.h"
#include "sim/network/network_model.h"
#include "sim/network/topology.h"

namespace poseidon::sim {
namespace {

config::NetworkSpec Spec(double bw_Bps, int64_t latency_ns, double efficiency = 1.0,
                         int64_t overhead_ns = 0) {
  config::NetworkSpec s;
  s.host_bandwidth_Bps = bw_Bps;
  s.latency_ns = latency_ns;
  s.efficiency = efficiency;
  s.per_message_overhead_ns = overhead_ns;
  return s;
}

FlowNetwork StarNet(int hosts, double bw, int64_t latency, double eff = 1.0, int64_t ovh = 0) {
  return FlowNetwork(Topology::Star(hosts, bw, latency), Spec(bw, latency, eff, ovh));
}

// Runs the model until nothing is left, collecting every delivery in report order.
std::vector<FlowDone> Drain(NetworkModel& net) {
  std::vector<FlowDone> done;
  for (TimeNs t = net.NextEventTime(); t != kNever; t = net.NextEventTime()) {
    net.AdvanceTo(t, &done);
  }
  return done;
}

// ceil(S * 1e9 / B) for integral B in bytes/s, exactly (S * 1e9 must fit in int64).
int64_t CeilNs(int64_t bytes, int64_t bw_Bps) {
  return (bytes * 1'000'000'000 + bw_Bps - 1) / bw_Bps;
}

// ---- closed forms ------------------------------------------------------------------------------

TEST(FlowNetworkTest, OneTransferTakesLatencyPlusCeilSizeOverBandwidth) {
  const int64_t kL = 5001;
  const TimeNs kStart = 12345;
  for (int64_t bw : {1'000'000'000LL, 1'250'000'000LL, 3'000'000'000LL, 7'000'000'000LL}) {
    for (int64_t size :
         {1LL, 999LL, 1000LL, 1001LL, 123457LL, 1'000'000LL, 7'777'777LL, 1'000'000'000LL}) {
      FlowNetwork net = StarNet(2, static_cast<double>(bw), kL);
      net.StartFlow(kStart, 0, 1, size, 42);
      EXPECT_EQ(net.NextEventTime(), kStart + CeilNs(size, bw));
      const std::vector<FlowDone> done = Drain(net);
      ASSERT_EQ(done.size(), 1u);
      EXPECT_EQ(done[0].tag, 42u);
      EXPECT_EQ(done[0].delivered_at, kStart + kL + CeilNs(size, bw)) << size << " B at " << bw;
      EXPECT_EQ(net.active_flows(), 0);
    }
  }
}

TEST(FlowNetworkTest, EqualIncastSendersFinishTogetherAtNTimesSOverB) {
  // n senders of S bytes into one receiver share its downlink: each gets B/n and all finish at
  // L + n*S/B. Tolerance: exact here (one solve before the common finish), allowed 1 ns.
  const int n = 8;
  const int64_t S = 1'000'000, L = 1000;
  const double B = 1e9;
  FlowNetwork net = StarNet(n + 1, B, L);
  for (int i = 1; i <= n; ++i) net.StartFlow(0, i, 0, S, static_cast<uint64_t>(100 - i));
  const std::vector<FlowDone> done = Drain(net);
  ASSERT_EQ(done.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(static_cast<double>(done[static_cast<size_t>(i)].delivered_at),
                static_cast<double>(L + n * S), 1.0);
    // Same ns: reported in start order, not tag order.
    EXPECT_EQ(done[static_cast<size_t>(i)].tag, static_cast<uint64_t>(100 - (i + 1)));
  }
}

TEST(FlowNetworkTest, UnequalIncastIsProcessorSharing) {
  // Sizes s1 < s2 < ... < sn into one receiver: the k-th finishes at
  // t_k = t_{k-1} + (n - k + 1) * (s_k - s_{k-1}) / B. Tolerance: k ns after k re-solves.
  const double B = 1e9;
  const std::vector<int64_t> sizes = {100'000, 250'000, 400'000, 1'000'000, 1'000'001};
  FlowNetwork net = StarNet(6, B, 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    net.StartFlow(0, static_cast<int>(i) + 1, 0, sizes[i], i);
  }
  const std::vector<FlowDone> done = Drain(net);
  ASSERT_EQ(done.size(), sizes.size());
  double t = 0;
  int64_t prev = 0;
  const int n = static_cast<int>(sizes.size());
  for (int k = 0; k < n; ++k) {
    t += (n - k) * static_cast<double>(sizes[static_cast<size_t>(k)] - prev) / B * 1e9;
    prev = sizes[static_cast<size_t>(k)];
    EXPECT_EQ(done[static_cast<size_t>(k)].tag, static_cast<uint64_t>(k));
    EXPECT_NEAR(static_cast<double>(done[static_cast<size_t>(k)].delivered_at), t, k + 1.0);
  }
}

TEST(FlowNetworkTest, MaxMinGivesTheRestOfALinkToTheUnconstrainedFlow) {
  // Flows a: h0->h2, b: h3->h2, c: h1->h2 share h2's downlink (B/3 each); d: h1->h4 shares h1's
  // uplink with c, which is bottlenecked at B/3 elsewhere, so d gets the rest: 2B/3.
  const double B = 1.2e9;
  FlowNetwork net = StarNet(5, B, 0);
  net.StartFlow(0, 0, 2, 1'000'000'000, 0);
  net.StartFlow(0, 3, 2, 1'000'000'000, 1);
  net.StartFlow(0, 1, 2, 1'000'000'000, 2);
  net.StartFlow(0, 1, 4, 1'000'000'000, 3);
  const auto flows = net.ActiveFlows();
  ASSERT_EQ(flows.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(flows[static_cast<size_t>(i)].rate_Bps, B / 3);
  EXPECT_DOUBLE_EQ(flows[3].rate_Bps, 2 * B / 3);
}

TEST(FlowNetworkTest, SecondFlowJoiningHalfwayHasClosedFormFinishTimes) {
  // S bytes alone at B until S/(2B); then both at B/2: the first ends at 1.5 S/B, the second,
  // alone again from there with S/2 left, at 2 S/B.
  const int64_t S = 1'000'000, L = 700;
  FlowNetwork net = StarNet(3, 1e9, L);
  net.StartFlow(0, 0, 2, S, 1);
  std::vector<FlowDone> done;
  net.AdvanceTo(S / 2, &done);
  EXPECT_TRUE(done.empty());
  net.StartFlow(S / 2, 1, 2, S, 2);
  done = Drain(net);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].tag, 1u);
  EXPECT_EQ(done[0].delivered_at, L + 3 * S / 2);
  EXPECT_EQ(done[1].tag, 2u);
  EXPECT_EQ(done[1].delivered_at, L + 2 * S);
}

TEST(FlowNetworkTest, AlphaFairWarmStartsReachTheSameRatesAsAFreshSolve) {
  // A network that has seen starts and ends (each solve starting from the last prices) and one
  // given only the flows still active must agree on every rate, with or without reverse paths.
  for (double ack_weight : {0.0, 0.4}) {
    const double B = 1e9;
    config::NetworkSpec spec = Spec(B, 0);
    spec.fairness_alpha = 1;
    spec.ack_path_weight = ack_weight;
    std::mt19937 rng(11);
    struct F { int src, dst; int64_t bytes; };
    std::vector<F> fs;
    for (int i = 0; i < 30; ++i) {
      const int src = static_cast<int>(rng() % 6);
      const int dst = (src + 1 + static_cast<int>(rng() % 5)) % 6;
      fs.push_back({src, dst, 100'000 + static_cast<int64_t>(rng() % 5'000'000)});
    }
    FlowNetwork warm(Topology::Star(6, B, 0), spec);
    std::vector<FlowDone> done;
    TimeNs t = 0;
    for (size_t i = 0; i < fs.size(); ++i) {
      t += 200'000;
      warm.AdvanceTo(t, &done);
      warm.StartFlow(t, fs[i].src, fs[i].dst, fs[i].bytes, i);
    }
    const auto left = warm.ActiveFlows();
    ASSERT_GT(left.size(), 5u);
    ASSERT_FALSE(done.empty());
    FlowNetwork fresh(Topology::Star(6, B, 0), spec);
    for (const auto& f : left) fresh.StartFlow(0, f.src, f.dst, 1'000'000'000, f.tag);
    const auto ref = fresh.ActiveFlows();
    ASSERT_EQ(ref.size(), left.size());
    for (size_t i = 0; i < left.size(); ++i) {
      EXPECT_EQ(ref[i].tag, left[i].tag);
      EXPECT_NEAR(left[i].rate_Bps, ref[i].rate_Bps, ref[i].rate_Bps * 1e-6)
          << "flow " << left[i].tag << ", ack_path_weight " << ack_weight;
    }
  }
}

// ---- burst_bytes: a token bucket per link --------------------------------------------------------

// A star of `hosts` at 1 byte per ns whose links have buckets of `burst` bytes.
std::unique_ptr<FlowNetwork> BurstStar(int hosts, int64_t burst) {
  const double B = 1e9;
  config::NetworkSpec spec = Spec(B, 0);
  spec.burst_bytes = burst;
  return std::make_unique<FlowNetwork>(Topology::Star(hosts, B, 0), spec);
}

TEST(FlowNetworkTest, BurstPassesAtOnceOnIdleLinksOnlyAndRefillsAtTheLinkRate) {
  const int64_t S = 1'000'000, kBurst = 100'000;
  const std::unique_ptr<FlowNetwork> owned = BurstStar(4, kBurst);
  FlowNetwork& net = *owned;
  // Idle since the start: the first 100 kB pass at once.
  net.StartFlow(0, 0, 1, S, 1);
  // A flow on a busy link (h0's uplink) gets nothing; it shares from its start.
  net.StartFlow(0, 0, 2, S, 2);
  auto flows = net.ActiveFlows();
  ASSERT_EQ(flows.size(), 2u);
  EXPECT_DOUBLE_EQ(flows[0].remaining_bytes, static_cast<double>(S - kBurst));
  EXPECT_DOUBLE_EQ(flows[1].remaining_bytes, static_cast<double>(S));
  std::vector<FlowDone> done = Drain(net);
  ASSERT_EQ(done.size(), 2u);
  // Both at B/2: flow 1 ends after 2 (S - burst) ns, flow 2 has burst left and ends at 2 S - burst.
  EXPECT_EQ(done[0].delivered_at, 2 * (S - kBurst));
  EXPECT_EQ(done[1].delivered_at, 2 * S - kBurst);
  // Links idle for 30 us have refilled 30 kB of their buckets, not more.
  const TimeNs t = done[1].delivered_at + 30'000;
  net.StartFlow(t, 0, 3, S, 3);
  flows = net.ActiveFlows();
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_NEAR(flows[0].remaining_bytes, static_cast<double>(S - 30'000), 1e-6);
}

// A small flow takes only its bytes from the buckets: the next flow on those links gets the rest.
TEST(FlowNetworkTest, BurstLeavesWhatASmallFlowDidNotTake) {
  const int64_t S = 1'000'000, kBurst = 100'000, kSmall = 30'000;
  const std::unique_ptr<FlowNetwork> owned = BurstStar(3, kBurst);
  FlowNetwork& net = *owned;
  // All but its last byte pass at once: it ends at 1 ns and leaves kBurst - kSmall + 1 behind.
  net.StartFlow(0, 0, 1, kSmall, 1);
  std::vector<FlowDone> done = Drain(net);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].delivered_at, 1);
  // The next flow on those links, 9 ns later, gets that plus 9 bytes refilled.
  net.StartFlow(10, 0, 1, S, 2);
  std::vector<FlowNetwork::FlowInfo> flows = net.ActiveFlows();
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_NEAR(flows[0].remaining_bytes, static_cast<double>(S - (kBurst - kSmall + 1 + 9)), 1e-6);
  done = Drain(net);
  // It used the whole bucket: a flow from another sender to host 1 right after gets only what
  // host 1's receiving link refilled meanwhile (nothing: it starts the instant that link idles).
  net.StartFlow(done[0].delivered_at, 2, 1, S, 3);
  flows = net.ActiveFlows();
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_DOUBLE_EQ(flows[0].remaining_bytes, static_cast<double>(S));
}

// ---- fairness_alpha: alpha-fair sharing -----------------------------------------------------------

// Long flows (src, dst) started together on a star of `hosts` at kShareRate: their rates, in
// units of the link rate, in start order.
constexpr double kShareRate = 1.2e9;
std::vector<double> Shares(int hosts, const config::NetworkSpec& spec,
                           const std::vector<std::pair<int, int>>& flows) {
  FlowNetwork net(Topology::Star(hosts, kShareRate, 0), spec);
  for (size_t i = 0; i < flows.size(); ++i) {
    net.StartFlow(0, flows[i].first, flows[i].second, 1'000'000'000, i);
  }
  std::vector<double> out;
  for (const auto& f : net.ActiveFlows()) out.push_back(f.rate_Bps / kShareRate);
  return out;
}

// The parking lot: A crosses h1's uplink and h0's downlink, B shares the first, C the second.
std::vector<double> ParkingLotRates(double alpha) {
  config::NetworkSpec spec = Spec(kShareRate, 0);
  spec.fairness_alpha = alpha;
  return Shares(4, spec, {{1, 0}, {1, 2}, {3, 0}});  // A, B, C
}

TEST(FlowNetworkTest, AlphaFairParkingLotGivesTheTwoLinkFlowTwoToTheMinusOneOverAlpha) {
  // x_A / x_B = 2^(-1/alpha), x_A + x_B = 1: proportional fairness (alpha 1) gives 1/3, 2/3.
  for (double alpha : {0.5, 1.0, 1.06, 2.0, 4.0}) {
    const std::vector<double> x = ParkingLotRates(alpha);
    ASSERT_EQ(x.size(), 3u);
    const double r = std::pow(2.0, -1.0 / alpha);
    EXPECT_NEAR(x[0], r / (1 + r), 1e-8) << "alpha " << alpha;
    EXPECT_NEAR(x[1], 1 / (1 + r), 1e-8) << "alpha " << alpha;
    EXPECT_NEAR(x[2], 1 / (1 + r), 1e-8) << "alpha " << alpha;
  }
  // Max-min (alpha 0, the default solver) gives everyone half; a large alpha approaches it.
  for (double v : ParkingLotRates(0)) EXPECT_DOUBLE_EQ(v, 0.5);
  for (double v : ParkingLotRates(50)) EXPECT_NEAR(v, 0.5, 0.01);
}

// 40 flows of 1 MB between random hosts of an 8-host star at B bytes/s, started together: no link
// carries more than its capacity, and every flow has a full link on its forward path (nothing
// could go faster without slowing another).
void ExpectRandomTrafficFeasibleAndParetoEfficient(const config::NetworkSpec& spec, double B,
                                                   uint32_t seed) {
  std::mt19937 rng(seed);
  FlowNetwork big(Topology::Star(8, B, 0), spec);
  for (int i = 0; i < 40; ++i) {
    const int src = static_cast<int>(rng() % 8);
    const int dst = (src + 1 + static_cast<int>(rng() % 7)) % 8;
    big.StartFlow(0, src, dst, 1'000'000, static_cast<uint64_t>(i));
  }
  std::vector<double> load(static_cast<size_t>(big.topology().num_links()), 0.0);
  const auto flows = big.ActiveFlows();
  for (const auto& f : flows) {
    for (int32_t l : f.route) load[static_cast<size_t>(l)] += f.rate_Bps;
  }
  for (double l : load) EXPECT_LE(l, B * (1 + 1e-9));
  for (const auto& f : flows) {
    bool full = false;
    for (int32_t l : f.route) full |= load[static_cast<size_t>(l)] > B * (1 - 1e-6);
    EXPECT_TRUE(full) << "flow " << f.tag << " could go faster (seed " << seed << ")";
  }
}

// ---- ack_path_weight: what a busy reverse path costs a flow -------------------------------------

// scripts/fairness-check --reverse: A 0->2 and B 1->2 share h2's downlink; C 3->0 and D 4->0 fill
// h0's downlink, which A's acknowledgements cross. Rates in units of the link rate.
std::vector<double> ReverseRates(double alpha, double ack_weight, bool with_b = true) {
  config::NetworkSpec spec = Spec(kShareRate, 0);
  spec.fairness_alpha = alpha;
  spec.ack_path_weight = ack_weight;
  if (!with_b) return Shares(5, spec, {{0, 2}, {3, 0}, {4, 0}});  // A, C, D
  return Shares(5, spec, {{0, 2}, {1, 2}, {3, 0}, {4, 0}});      // A, B, C, D
}

TEST(FlowNetworkTest, AckPathWeightChargesAFlowForTheBusyLinksItsAcknowledgementsCross) {
  // C and D split h0's downlink: its price is p0 = 2^alpha. A pays p2 + k min(p0, p2), B pays
  // p2, and x_A + x_B = 1: p2 by bisection, independently of the solver.
  for (double alpha : {0.72, 1.0, 2.0}) {
    for (double k : {0.0, 0.3, 0.65, 2.0}) {
      const std::vector<double> x = ReverseRates(alpha, k);
      ASSERT_EQ(x.size(), 4u);
      const double p0 = std::pow(2.0, alpha);
      auto rate = [&](double price) { return std::pow(price, -1 / alpha); };
      double lo = 1e-9, hi = 1e9;
      for (int i = 0; i < 300; ++i) {
        const double p2 = std::sqrt(lo * hi);
        (rate(p2 + k * std::min(p0, p2)) + rate(p2) > 1 ? lo : hi) = p2;
      }
      const double p2 = std::sqrt(lo * hi);
      EXPECT_NEAR(x[0], rate(p2 + k * std::min(p0, p2)), 1e-7) << "alpha " << alpha << " k " << k;
      EXPECT_NEAR(x[1], rate(p2), 1e-7) << "alpha " << alpha << " k " << k;
      EXPECT_NEAR(x[2], 0.5, 1e-9);
      EXPECT_NEAR(x[3], 0.5, 1e-9);
      if (k == 0) {
        EXPECT_NEAR(x[0], 0.5, 1e-9);
      } else {
        EXPECT_LT(x[0], 0.5 - 0.01) << "alpha " << alpha << " k " << k;
      }
    }
  }
  // fairness-check --reverse inverts the same closed form: x_A / x_B = 0.6 at alpha 0.72 is
  // k = 0.6^-0.72 - 1 (p0 > p2, so min(p0, p2) = p2).
  const double k = std::pow(0.6, -0.72) - 1;
  const std::vector<double> x = ReverseRates(0.72, k);
  EXPECT_NEAR(x[0] / x[1], 0.6, 1e-7);
  // Max-min has no prices: the weight changes nothing.
  for (double v : ReverseRates(0, 0.65)) EXPECT_DOUBLE_EQ(v, 0.5);
}

TEST(FlowNetworkTest, AckPathWeightNeverHoldsAFlowBelowAnIdleForwardPath) {
  // Without B, A is alone on its forward links: its window would grow until it fills them,
  // whatever its acknowledgements cross. It gets the whole link, C and D half of h0's each.
  const std::vector<double> x = ReverseRates(0.72, 2.0, /*with_b=*/false);
  ASSERT_EQ(x.size(), 3u);
  EXPECT_NEAR(x[0], 1.0, 1e-9);
  EXPECT_NEAR(x[1], 0.5, 1e-9);
  EXPECT_NEAR(x[2], 0.5, 1e-9);
  // Random traffic: no link above its capacity, every flow has a full forward link.
  const double B = 1e9;
  config::NetworkSpec spec = Spec(B, 0);
  spec.fairness_alpha = 0.72;
  spec.ack_path_weight = 0.5;
  ExpectRandomTrafficFeasibleAndParetoEfficient(spec, B, 5);
}

TEST(FlowNetworkTest, AlphaFairKeepsClosedFormsOfOneBottleneckAndFillsEveryLink) {
  // Flows with one shared link split it evenly whatever alpha is: the incast closed form holds.
  const double B = 1e9;
  const int64_t S = 1'000'000;
  config::NetworkSpec spec = Spec(B, 0);
  spec.fairness_alpha = 1;
  FlowNetwork net(Topology::Star(5, B, 0), spec);
  for (int h = 1; h <= 4; ++h) net.StartFlow(0, h, 0, S, static_cast<uint64_t>(h));
  for (const auto& f : net.ActiveFlows()) EXPECT_NEAR(f.rate_Bps, B / 4, B * 1e-9);
  std::vector<FlowDone> done = Drain(net);
  ASSERT_EQ(done.size(), 4u);
  for (const FlowDone& d : done) EXPECT_NEAR(static_cast<double>(d.delivered_at), 4.0 * S, 2);
  // Random traffic: no link above its capacity, and every flow has a full link on its path
  // (alpha-fair rates are Pareto-efficient).
  ExpectRandomTrafficFeasibleAndParetoEfficient(spec, B, 7);
}

// network.connection_gbps: a machine pair's connection carries at most the cap, so one transfer
// takes S / cap on a faster link, a sender reaches its NIC's rate only through several pairs, and
// the links the cap leaves unused go to the other flows (max-min over links and connections).
TEST(FlowNetworkTest, AConnectionCapLimitsEachMachinePairNotTheMachine) {
  const double B = 1.25e9, cap = 0.5e9;  // a 10 Gbit/s NIC, a 4 Gbit/s single flow
  const int64_t S = 100'000'000, L = 1000;
  config::NetworkSpec spec = Spec(B, L);
  spec.connection_Bps = cap;
  {
    FlowNetwork net(Topology::Star(2, B, L), spec);
    net.StartFlow(0, 0, 1, S, 1);
    const auto done = Drain(net);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].delivered_at, L + CeilNs(S, static_cast<int64_t>(cap)));
    EXPECT_EQ(net.Links(done[0].delivered_at).size(), 4u);  // the topology's links alone
  }
  {
    // One sender to two receivers: each pair at the cap (the NIC is not full); to three: each at
    // B / 3 < cap (the NIC is the bottleneck again).
    FlowNetwork net(Topology::Star(4, B, L), spec);
    net.StartFlow(0, 0, 1, S, 1);
    net.StartFlow(0, 0, 2, S, 2);
    auto flows = net.ActiveFlows();
    ASSERT_EQ(flows.size(), 2u);
    EXPECT_DOUBLE_EQ(flows[0].rate_Bps, cap);
    EXPECT_DOUBLE_EQ(flows[1].rate_Bps, cap);
    net.StartFlow(0, 0, 3, S, 3);
    flows = net.ActiveFlows();
    for (const auto& f : flows) EXPECT_NEAR(f.rate_Bps, B / 3, 1e-9 * B);
  }
  {
    // Three senders into 2 share its downlink at B / 3 each, below the cap; 0 -> 1 leaves from
    // the same NIC as 0 -> 2 and takes the cap, not the B - B / 3 its NIC has left.
    FlowNetwork net(Topology::Star(4, B, L), spec);
    net.StartFlow(0, 0, 1, S, 1);
    net.StartFlow(0, 0, 2, S, 2);
    net.StartFlow(0, 1, 2, S, 3);
    net.StartFlow(0, 3, 2, S, 4);
    const auto flows = net.ActiveFlows();
    ASSERT_EQ(flows.size(), 4u);
    EXPECT_DOUBLE_EQ(flows[0].rate_Bps, cap);
    for (size_t i = 1; i < 4; ++i) EXPECT_NEAR(flows[i].rate_Bps, B / 3, 1e-9 * B);
  }
  {
    // The cap is per connection, whatever its machines: two connections of one machine pair (a
    // process pair each, connections: process_pair) get the cap each; two flows of one connection
    // share it (SimJob never sends them at once; the model still prices it).
    FlowNetwork net(Topology::Star(2, B, L), spec);
    net.StartConnectionFlow(0, 0, 1, S, 1, /*connection=*/7);
    net.StartConnectionFlow(0, 0, 1, S, 2, /*connection=*/8);
    net.StartConnectionFlow(0, 0, 1, S, 3, /*connection=*/8);
    const auto flows = net.ActiveFlows();
    ASSERT_EQ(flows.size(), 3u);
    EXPECT_DOUBLE_EQ(flows[0].rate_Bps, cap);
    EXPECT_DOUBLE_EQ(flows[1].rate_Bps, cap / 2);
    EXPECT_DOUBLE_EQ(flows[2].rate_Bps, cap / 2);
  }
  {
    // Alpha-fair sharing honours the cap as well (a link of its own with one flow).
    spec.fairness_alpha = 1;
    FlowNetwork net(Topology::Star(2, B, L), spec);
    net.StartFlow(0, 0, 1, S, 1);
    const auto flows = net.ActiveFlows();
    ASSERT_EQ(flows.size(), 1u);
    EXPECT_NEAR(flows[0].rate_Bps, cap, 1e-6 * cap);
  }
}

TEST(FlowNetworkTest, EfficiencyScalesTimeAndOverheadIsAdded) {
  const int64_t S = 1'000'000, L = 1000, kOverhead = 777;
  FlowNetwork net = StarNet(2, 1e9, L, 0.8, kOverhead);
  net.StartFlow(0, 0, 1, S, 1);
  const auto done = Drain(net);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].delivered_at, 1'250'000 + L + kOverhead);  // S / 0.8 / B
  // The wire carried S / efficiency bytes.
  const auto links = net.Links(1'250'000);
  EXPECT_DOUBLE_EQ(links[0].bytes, 1.25e6);
  EXPECT_DOUBLE_EQ(links[0].utilisation, 1.0);
}

TEST(FlowNetworkTest, ZeroByteFlowsArriveAfterLatencyAndOverhead) {
  FlowNetwork net = StarNet(3, 1e9, 1001, 1.0, 50);
  net.StartFlow(10, 0, 1, 1000, 1);
  net.StartFlow(10, 2, 1, 0, 2);
  EXPECT_EQ(net.active_flows(), 2);
  EXPECT_EQ(net.NextEventTime(), 10);
  std::vector<FlowDone> done;
  net.AdvanceTo(10, &done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tag, 2u);
  EXPECT_EQ(done[0].delivered_at, 10 + 1001 + 50);
  // The empty message did not slow the real one.
  done = Drain(net);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].delivered_at, 10 + 1000 + 1001 + 50);
}

TEST(FlowNetworkTest, StartFlowLaterRetiresFlowsThatEndedMeanwhile) {
  // Nobody called AdvanceTo between the two starts: the first flow still ends on time, leaves
  // the link before the second starts, and is reported by the next AdvanceTo.
  FlowNetwork net = StarNet(2, 1e9, 0);
  net.StartFlow(0, 0, 1, 1000, 1);
  net.StartFlow(5000, 0, 1, 1000, 2);
  EXPECT_EQ(net.NextEventTime(), 5000);  // the retired flow is due now, with its own time
  const auto done = Drain(net);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].delivered_at, 1000);
  EXPECT_EQ(done[1].delivered_at, 6000);
}

TEST(FlowNetworkTest, LinkStatsCountBytesBusyTimeAndUtilisation) {
  FlowNetwork net = StarNet(2, 1e9, 0);
  net.StartFlow(0, 0, 1, 1'000'000, 1);
  auto mid = net.Links(500'000);
  EXPECT_EQ(mid[0].name, "h0->s0");
  EXPECT_NEAR(mid[0].bytes, 5e5, 1e-6);
  EXPECT_DOUBLE_EQ(mid[0].busy_fraction, 1.0);
  EXPECT_DOUBLE_EQ(mid[2].bytes, 0.0);  // h1->s0 carried nothing
  std::vector<FlowDone> done;
  net.AdvanceTo(2'000'000, &done);
  const auto end = net.Links(2'000'000);
  for (int l : {0, 3}) {  // h0->s0 and s0->h1
    EXPECT_DOUBLE_EQ(end[static_cast<size_t>(l)].bytes, 1e6);
    EXPECT_DOUBLE_EQ(end[static_cast<size_t>(l)].busy_fraction, 0.5);
    EXPECT_DOUBLE_EQ(end[static_cast<size_t>(l)].utilisation, 0.5);
  }
  EXPECT_DOUBLE_EQ(end[1].busy_fraction, 0.0);
}

TEST(FlowNetworkTest, BadCallsThrow) {
  FlowNetwork net = StarNet(3, 1e9, 0);
  EXPECT_THROW(net.StartFlow(0, 1, 1, 10, 0), std::invalid_argument);
  EXPECT_THROW(net.StartFlow(0, 0, 3, 10, 0), std::invalid_argument);
  EXPECT_THROW(net.StartFlow(0, 0, 1, -1, 0), std::invalid_argument);
  net.StartFlow(100, 0, 1, 10, 0);
  EXPECT_THROW(net.StartFlow(99, 0, 1, 10, 0), std::invalid_argument);
  std::vector<FlowDone> done;
  EXPECT_THROW(net.AdvanceTo(50, &done), std::invalid_argument);
  EXPECT_THROW(FlowNetwork(Topology::Star(2, 1e9, 0), Spec(1e9, 0, 0.0)), std::invalid_argument);
  EXPECT_THROW(FlowNetwork(Topology::Star(2, 1e9, 0), Spec(1e9, 0, 1.5)), std::invalid_argument);
  EXPECT_THROW(FlowNetwork(Topology::Star(2, 1e9, 0), Spec(1e9, 0, 1.0, -1)),
               std::invalid_argument);
  for (double bad_weight : {-0.1, 4.5}) {
    config::NetworkSpec spec = Spec(1e9, 0);
    spec.fairness_alpha = 1;
    spec.ack_path_weight = bad_weight;
    EXPECT_THROW(FlowNetwork(Topology::Star(2, 1e9, 0), spec), std::invalid_argument);
  }
}

// ---- leaf-spine ----------------------------------------------------------------------------

TEST(FlowNetworkTest, LeafSpineSameLeafVersusCrossLeafLatency) {
  config::NetworkSpec spec = Spec(1e9, 2001);
  spec.topology = config::TopologyKind::kLeafSpine;
  spec.hosts_per_leaf = 4;
  spec.spines = 2;
  auto net = MakeNetworkModel(spec, 8);
  net->StartFlow(0, 0, 1, 1000, 1);  // same leaf
  net->StartFlow(0, 2, 6, 1000, 2);  // cross leaf, disjoint links
  const auto done = Drain(*net);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].delivered_at, 1000 + 2001);
  EXPECT_EQ(done[1].delivered_at, 1000 + 2 * 2001);
}

TEST(FlowNetworkTest, LeafSpineOversubscriptionLimitsCrossLeafAggregate) {
  // 4 hosts per leaf, 2 spines, 4:1 oversubscribed: each leaf->spine link carries
  // 4B / (4 * 2) = B/2, so all four hosts of leaf 0 sending across get together 4B/4 = B.
  // The pairs hash two per spine ((0+4)%2 = (1+5)%2 = 0, (2+7)%2 = (3+6)%2 = 1): B/4 each.
  const double B = 1e9;
  const int64_t S = 1'000'000;
  config::NetworkSpec spec = Spec(B, 0);
  spec.topology = config::TopologyKind::kLeafSpine;
  spec.hosts_per_leaf = 4;
  spec.spines = 2;
  spec.oversubscription = 4.0;
  FlowNetwork net(Topology::FromSpec(spec, 8), spec);
  const int pairs[4][2] = {{0, 4}, {1, 5}, {2, 7}, {3, 6}};
  for (int i = 0; i < 4; ++i) net.StartFlow(0, pairs[i][0], pairs[i][1], S, i);
  double aggregate = 0;
  for (const auto& f : net.ActiveFlows()) {
    EXPECT_DOUBLE_EQ(f.rate_Bps, B / 4);
    aggregate += f.rate_Bps;
  }
  EXPECT_DOUBLE_EQ(aggregate, 4 * B / spec.oversubscription);
  for (const FlowDone& d : Drain(net)) EXPECT_EQ(d.delivered_at, 4 * S);
  // The same four flows inside one leaf run at full rate.
  FlowNetwork local(Topology::FromSpec(spec, 8), spec);
  const int inner[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  for (int i = 0; i < 4; ++i) local.StartFlow(0, inner[i][0], inner[i][1], S, i);
  for (const FlowDone& d : Drain(local)) EXPECT_EQ(d.delivered_at, S);
}

// ---- alpha-beta ----------------------------------------------------------------------------

TEST(AlphaBetaTest, IgnoresContention) {
  const int n = 8;
  const int64_t S = 1'000'000, L = 1000;
  config::NetworkSpec spec = Spec(1e9, L, 1.0, 30);
  spec.model = config::NetworkModelKind::kAlphaBeta;
  auto net = MakeNetworkModel(spec, n + 1);
  for (int i = 1; i <= n; ++i) net->StartFlow(0, i, 0, S, static_cast<uint64_t>(i));
  EXPECT_EQ(net->active_flows(), n);
  const auto done = Drain(*net);
  ASSERT_EQ(done.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(done[static_cast<size_t>(i)].tag, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(done[static_cast<size_t>(i)].delivered_at, L + 30 + CeilNs(S, 1'000'000'000));
  }
}

TEST(AlphaBetaTest, ClosedFormWithEfficiencyAndLeafSpineLatency) {
  config::NetworkSpec spec = Spec(3e9, 999, 0.5, 0);
  spec.model = config::NetworkModelKind::kAlphaBeta;
  spec.topology = config::TopologyKind::kLeafSpine;
  spec.hosts_per_leaf = 2;
  spec.spines = 1;
  AlphaBetaNetwork net(Topology::FromSpec(spec, 4), spec);
  net.StartFlow(7, 0, 1, 1001, 1);  // same leaf
  net.StartFlow(7, 0, 3, 1001, 2);  // via the spine
  net.StartFlow(8, 2, 3, 0, 3);     // empty
  const auto done = Drain(net);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].tag, 3u);
  EXPECT_EQ(done[0].delivered_at, 8 + 999);
  EXPECT_EQ(done[1].delivered_at, 7 + 999 + CeilNs(2002, 3'000'000'000));
  EXPECT_EQ(done[2].delivered_at, 7 + 2 * 999 + CeilNs(2002, 3'000'000'000));
  const auto links = net.Links(1000);
  EXPECT_DOUBLE_EQ(links[0].bytes, 2 * 2002.0);  // h0->leaf0 carried both
}

TEST(AlphaBetaTest, AgreesWithTheFlowModelWhenFlowsDoNotOverlap) {
  config::NetworkSpec spec = Spec(1.25e9, 5000, 0.9, 100);
  FlowNetwork flow(Topology::Star(4, spec.host_bandwidth_Bps, spec.latency_ns), spec);
  AlphaBetaNetwork ab(Topology::Star(4, spec.host_bandwidth_Bps, spec.latency_ns), spec);
  TimeNs t = 0;
  for (int i = 0; i < 20; ++i) {
    const int64_t size = 1000 + 7919LL * i * i;
    for (NetworkModel* m : std::initializer_list<NetworkModel*>{&flow, &ab}) {
      m->StartFlow(t, i % 4, (i % 4 + 1 + i % 3) % 4, size, static_cast<uint64_t>(i));
    }
    std::vector<FlowDone> a = Drain(flow), b = Drain(ab);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(a[0].delivered_at, b[0].delivered_at);
    t = a[0].delivered_at;
  }
}

// ---- determinism and the incremental solver ------------------------------------------------

// A random script of starts and advances; returns every delivery plus final link bytes.
std::vector<int64_t> RunScript(NetworkModel& net, uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out;
  std::vector<FlowDone> done;
  TimeNs now = 0;
  const int n = net.num_hosts();
  for (int i = 0; i < steps; ++i) {
    if (rng() % 3 != 0 || net.NextEventTime() == kNever) {
      now += static_cast<TimeNs>(rng() % 20000);
      const int src = static_cast<int>(rng() % static_cast<uint64_t>(n));
      int dst = static_cast<int>(rng() % static_cast<uint64_t>(n - 1));
      if (dst >= src) ++dst;
      net.StartFlow(now, src, dst, static_cast<int64_t>(rng() % 3'000'000), rng());
    } else {
      now = std::max(now, net.NextEventTime());
      net.AdvanceTo(now, &done);
    }
  }
  for (TimeNs t = net.NextEventTime(); t != kNever; t = net.NextEventTime()) {
    net.AdvanceTo(std::max(now, t), &done);
  }
  for (const FlowDone& d : done) {
    out.push_back(static_cast<int64_t>(d.tag));
    out.push_back(d.delivered_at);
  }
  for (const LinkStats& l : net.Links(now)) out.push_back(std::llround(l.bytes));
  return out;
}

TEST(FlowNetworkTest, SameCallsGiveIdenticalResults) {
  for (auto kind : {config::TopologyKind::kStar, config::TopologyKind::kLeafSpine}) {
    config::NetworkSpec spec = Spec(1.25e9, 3000, 0.95, 40);
    spec.topology = kind;
    spec.hosts_per_leaf = 4;
    spec.spines = 3;
    spec.oversubscription = 2;
    auto a = MakeNetworkModel(spec, 16);
    auto b = MakeNetworkModel(spec, 16);
    const auto ra = RunScript(*a, 7, 2000);
    const auto rb = RunScript(*b, 7, 2000);
    EXPECT_GT(ra.size(), 1000u);
    EXPECT_EQ(ra, rb);
  }
}

// From-scratch max-min fair rates by progressive filling: saturate the link with the smallest
// fair share (lowest id on ties), freeze its flows, repeat. connection_Bps > 0: each (src, dst)
// pair's flows also share a link of that capacity (network.connection_gbps).
std::vector<double> ReferenceMaxMin(const Topology& topo,
                                    const std::vector<FlowNetwork::FlowInfo>& flows_in,
                                    double connection_Bps = 0) {
  size_t nl = static_cast<size_t>(topo.num_links());
  std::vector<double> rem(nl);
  for (size_t l = 0; l < nl; ++l) rem[l] = topo.link(static_cast<int>(l)).capacity_Bps;
  std::vector<std::vector<int32_t>> routes;
  std::map<std::pair<int, int>, int32_t> pair_link;
  for (const auto& f : flows_in) {
    routes.emplace_back(f.route.begin(), f.route.end());
    if (connection_Bps <= 0) continue;
    auto [it, added] = pair_link.try_emplace({f.src, f.dst}, static_cast<int32_t>(nl));
    if (added) {
      rem.push_back(connection_Bps);
      ++nl;
    }
    routes.back().push_back(it->second);
  }
  const auto& flows = flows_in;
  std::vector<int> cnt(nl, 0);
  for (const auto& r : routes) {
    for (int32_t l : r) ++cnt[static_cast<size_t>(l)];
  }
  std::vector<double> rate(flows.size(), -1);
  size_t left = flows.size();
  while (left > 0) {
    size_t best = nl;
    for (size_t l = 0; l < nl; ++l) {
      if (cnt[l] > 0 && (best == nl || rem[l] / cnt[l] < rem[best] / cnt[best])) best = l;
    }
    const double level = rem[best] / cnt[best];
    for (size_t i = 0; i < flows.size(); ++i) {
      if (rate[i] >= 0) continue;
      const std::vector<int32_t>& r = routes[i];
      if (std::find(r.begin(), r.end(), static_cast<int32_t>(best)) == r.end()) continue;
      rate[i] = level;
      --left;
      for (int32_t l : r) {
        rem[static_cast<size_t>(l)] -= level;
        --cnt[static_cast<size_t>(l)];
      }
    }
  }
  return rate;
}

void CheckAgainstReference(const FlowNetwork& net, int* checks, double connection_Bps = 0) {
  const auto flows = net.ActiveFlows();
  const auto ref = ReferenceMaxMin(net.topology(), flows, connection_Bps);
  for (size_t i = 0; i < flows.size(); ++i) {
    ASSERT_NEAR(flows[i].rate_Bps, ref[i], 1e-9 * ref[i]) << "flow " << i << " of " << flows.size();
  }
  ++*checks;
}

// Random flow sets that come and go; after every call the incremental rates must equal the
// from-scratch ones within 1e-9 relative. Equal capacities (many exact ties) and random ones.
TEST(FlowNetworkTest, IncrementalSolverMatchesFromScratchWaterFilling) {
  int checks = 0;
  const uint64_t kSeeds = 24;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    std::mt19937_64 rng(seed);
    const bool leaf_spine = seed % 2 == 0;
    const bool random_caps = seed % 3 != 0;
    const int hosts = 8 + static_cast<int>(rng() % 24);
    Topology topo = leaf_spine ? Topology::LeafSpine(hosts, 2 + static_cast<int>(rng() % 4),
                                                     1 + static_cast<int>(rng() % 3), 1e9,
                                                     1.0 + static_cast<double>(rng() % 4), 1000)
                               : Topology::Star(hosts, 1e9, 1000);
    if (random_caps) {
      std::uniform_real_distribution<double> cap(2e8, 2e9);
      for (int l = 0; l < topo.num_links(); ++l) topo.SetLinkCapacity(l, cap(rng));
    }
    // Every 5th seed caps each machine pair's flows together (connection_gbps) below the links.
    config::NetworkSpec spec = Spec(1e9, 1000);
    if (seed % 5 == 0) spec.connection_Bps = 3e8;
    FlowNetwork net(std::move(topo), spec);
    TimeNs now = 0;
    std::vector<FlowDone> done;
    // Concurrency: light, or (every 4th seed) dense, far more flows than hosts.
    const int target = 5 + static_cast<int>(rng() % (seed % 4 == 0 ? 250 : 60));
    for (int step = 0; step < 400; ++step) {
      if (net.active_flows() < target && rng() % 4 != 0) {
        const int burst = 1 + static_cast<int>(rng() % 3);  // same-ns starts are batched
        for (int b = 0; b < burst; ++b) {
          const int src = static_cast<int>(rng() % static_cast<uint64_t>(hosts));
          int dst = static_cast<int>(rng() % static_cast<uint64_t>(hosts - 1));
          if (dst >= src) ++dst;
          net.StartFlow(now, src, dst, 1 + static_cast<int64_t>(rng() % 5'000'000), step);
        }
      } else if (net.NextEventTime() != kNever) {
        now = std::max(now, net.NextEventTime());
        net.AdvanceTo(now, &done);
      }
      CheckAgainstReference(net, &checks, spec.connection_Bps);
      if (HasFatalFailure()) return;
      now += static_cast<TimeNs>(rng() % 3000);
    }
  }
  EXPECT_EQ(checks, static_cast<int>(kSeeds) * 400);
}

TEST(FlowNetworkTest, StartsAndEndsAtTheSameNsShareOneSolve) {
  FlowNetwork net = StarNet(8, 1e9, 0);
  for (int i = 1; i < 8; ++i) net.StartFlow(5, i, 0, 1000, static_cast<uint64_t>(i));
  EXPECT_EQ(net.NextEventTime(), 5 + 7000);
  EXPECT_EQ(net.solver_stats().solves, 1u);
  std::vector<FlowDone> done;
  net.AdvanceTo(5 + 7000, &done);  // all seven end together: one more solve
  EXPECT_EQ(done.size(), 7u);
  EXPECT_EQ(net.solver_stats().solves, 2u);
}

// ---- completion order (groups per bottleneck, flow_network.h) ---------------------------------

TEST(FlowNetworkTest, ManyFlowsOnOneBottleneckEndBySizeThenStartOrder) {
  // 120 senders into h0 with sizes from a few values, started in a shuffled order: processor
  // sharing ends them by size, and equal sizes (one ns) in start order. One group holds them all;
  // some ns end a few of its entries, others many.
  const int n = 120;
  const double B = 1e9;
  FlowNetwork net = StarNet(n + 1, B, 0);
  std::mt19937_64 rng(5);
  std::vector<int64_t> size(n);
  for (int i = 0; i < n; ++i) {
    // Mostly distinct sizes (one end at a time), and runs of equal ones (many at one ns).
    size[static_cast<size_t>(i)] =
        i % 3 == 0 ? 100'000 * (1 + i % 4) : 50'000 + 1'000 * static_cast<int64_t>(rng() % 500);
  }
  for (int i = 0; i < n; ++i) net.StartFlow(0, i + 1, 0, size[static_cast<size_t>(i)], i);
  std::vector<int> expect(n);
  for (int i = 0; i < n; ++i) expect[static_cast<size_t>(i)] = i;
  std::stable_sort(expect.begin(), expect.end(), [&](int a, int b) {
    return size[static_cast<size_t>(a)] < size[static_cast<size_t>(b)];
  });
  const std::vector<FlowDone> done = Drain(net);
  ASSERT_EQ(done.size(), static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(done[static_cast<size_t>(k)].tag, static_cast<uint64_t>(expect[static_cast<size_t>(k)]))
        << "end " << k;
    if (k > 0) {
      const auto& prev = done[static_cast<size_t>(k - 1)];
      const auto& cur = done[static_cast<size_t>(k)];
      // Equal sizes end at the same ns, different ones not.
      EXPECT_EQ(cur.delivered_at == prev.delivered_at,
                size[cur.tag] == size[prev.tag]) << "end " << k;
    }
  }
  // The last flow ends when the receiver has taken every byte.
  int64_t total = 0;
  for (int64_t s : size) total += s;
  EXPECT_NEAR(static_cast<double>(done.back().delivered_at), static_cast<double>(total), n);
}

TEST(FlowNetworkTest, SameNsEndsOnDifferentBottlenecksComeInStartOrder) {
  // Two incasts of 20 (into h0 and into h1: busy links, a completion group each) started
  // interleaved, all the same size: every flow ends at the same ns and is reported in start order.
  const int64_t S = 1'000'000;
  const int n = 40;
  FlowNetwork net = StarNet(n + 2, 1e9, 0);
  for (int i = 0; i < n; ++i) net.StartFlow(0, 2 + i, i % 2, S, static_cast<uint64_t>(100 + i));
  const std::vector<FlowDone> done = Drain(net);
  ASSERT_EQ(done.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(done[static_cast<size_t>(i)].tag, static_cast<uint64_t>(100 + i));
    EXPECT_EQ(done[static_cast<size_t>(i)].delivered_at, n / 2 * S);
  }
}

TEST(FlowNetworkTest, SameNsEndsDetachInStartOrderAcrossGroups) {
  // h2 sends p->h0, q->h1, r->h0, s->h1 (in that start order) and three long flows z1..z3 to h3.
  // 20 other senders into each of h0 and h1 make p, r and q, s bottlenecked at two different busy
  // downlinks (two completion groups) at one rate: all of them end at one ns. Each end removes
  // its flow from h2's uplink list by moving the last entry into its place, so the list left
  // shows the detach order: start order leaves z3, z2, z1; group by group (p, r, q, s) would
  // leave z3, z1, z2.
  const int64_t S = 1'000'000;
  FlowNetwork net = StarNet(44, 1e9, 0);
  net.StartFlow(0, 2, 0, S, 'p');
  net.StartFlow(0, 2, 1, S, 'q');
  net.StartFlow(0, 2, 0, S, 'r');
  net.StartFlow(0, 2, 1, S, 's');
  for (int i = 1; i <= 3; ++i) net.StartFlow(0, 2, 3, 10 * S, static_cast<uint64_t>(i));
  for (int i = 0; i < 20; ++i) {
    net.StartFlow(0, 4 + i, 0, S, static_cast<uint64_t>(100 + i));
    net.StartFlow(0, 24 + i, 1, S, static_cast<uint64_t>(200 + i));
  }
  const int uplink = net.topology().RouteBetween(2, 3).links[0];
  EXPECT_EQ(net.LinkFlowTags(uplink),
            (std::vector<uint64_t>{'p', 'q', 'r', 's', 1, 2, 3}));
  const auto flows = net.ActiveFlows();
  EXPECT_DOUBLE_EQ(flows[0].rate_Bps, 1e9 / 22);
  EXPECT_EQ(flows[0].finish, flows[1].finish);
  std::vector<FlowDone> done;
  net.AdvanceTo(net.NextEventTime(), &done);
  ASSERT_EQ(done.size(), 44u);
  EXPECT_EQ(net.LinkFlowTags(uplink), (std::vector<uint64_t>{3, 2, 1}));
}

TEST(FlowNetworkTest, AFlowWhoseBottleneckChangesMovesAndEndsOnTime) {
  // A: h1->h0 shares h0's downlink with 17 others (B/18, bottleneck there, a busy link: a
  // completion group). Then 19 flows leave h1 too: h1's uplink (20 flows) becomes A's
  // bottleneck at B/20, and A's entry moves to that link's group. Every end then comes at the
  // finish the model predicted for it, in (finish, start) order, A last.
  const double B = 1e9;
  const int64_t S = 1'000'000;
  FlowNetwork net = StarNet(38, B, 0);
  net.StartFlow(0, 1, 0, 4 * S, 0);  // A
  for (int i = 0; i < 17; ++i) net.StartFlow(0, 2 + i, 0, S, static_cast<uint64_t>(1 + i));
  auto flows = net.ActiveFlows();
  ASSERT_EQ(flows.size(), 18u);
  EXPECT_DOUBLE_EQ(flows[0].rate_Bps, B / 18);
  const uint64_t moves_before = net.solver_stats().group_moves;
  std::vector<FlowDone> done;
  net.AdvanceTo(100'000, &done);
  for (int i = 0; i < 19; ++i) net.StartFlow(100'000, 1, 19 + i, S, static_cast<uint64_t>(100 + i));
  flows = net.ActiveFlows();
  ASSERT_EQ(flows.size(), 37u);
  EXPECT_DOUBLE_EQ(flows[0].rate_Bps, B / 20);              // A, now limited by h1's uplink
  EXPECT_DOUBLE_EQ(flows[1].rate_Bps, (B - B / 20) / 17);  // the other 17 share the rest
  EXPECT_EQ(net.solver_stats().group_moves, moves_before + 1);
  // Every end at the finish the model predicted for it, in (finish, start) order.
  std::vector<std::pair<TimeNs, uint64_t>> expect;
  TimeNs now = 100'000;
  for (;;) {
    const TimeNs t = net.NextEventTime();
    if (t == kNever) break;
    flows = net.ActiveFlows();  // start order, with their finish at the current rates
    TimeNs first = kNever;
    for (const auto& f : flows) first = std::min(first, f.finish);
    ASSERT_EQ(t, first);
    std::vector<uint64_t> ending;
    for (const auto& f : flows) {
      if (f.finish == first) ending.push_back(f.tag);
    }
    done.clear();
    net.AdvanceTo(t, &done);
    ASSERT_GE(done.size(), ending.size());
    for (size_t k = 0; k < ending.size(); ++k) EXPECT_EQ(done[k].tag, ending[k]);
    now = t;
  }
  EXPECT_EQ(net.active_flows(), 0);
  EXPECT_EQ(done.back().tag, 0u);
  EXPECT_GT(now, 4 * S);  // A (4 S bytes) never had the whole B
}

// Random scripts with sizes from a few values (so many ends share a ns) and bottlenecks that
// move: before every AdvanceTo, the flows the model reports first are exactly those whose
// predicted finish (ActiveFlows) is the earliest, in start order. A 16-host leaf-spine (busy
// links: most flows in their bottleneck's group) and a 64-host star (lightly shared: most in
// group 0, whose ends leave the others' keys as they were).
TEST(FlowNetworkTest, CompletionOrderIsFinishThenStartOrderUnderChurn) {
  uint64_t moves = 0, rebuilds = 0;
  int batches = 0, multi = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    std::mt19937_64 rng(seed);
    config::NetworkSpec spec = Spec(1e9, 1000);
    const bool star = seed % 2 == 0;
    if (!star) {
      spec.topology = config::TopologyKind::kLeafSpine;
      spec.hosts_per_leaf = 4;
      spec.spines = 2;
      spec.oversubscription = 2;
    }
    const int hosts = star ? 64 : 16;
    FlowNetwork net(Topology::FromSpec(spec, hosts), spec);
    TimeNs now = 0;
    std::vector<FlowDone> done;
    for (int step = 0; step < 600; ++step) {
      if (net.active_flows() < 150 && rng() % 3 != 0) {
        // Not past the next end: a start would retire the flows that ended before it unreported.
        now = std::min(now, net.NextEventTime());
        const int burst = 1 + static_cast<int>(rng() % 12);  // same-ns starts
        for (int b = 0; b < burst; ++b) {
          const int src = static_cast<int>(rng() % static_cast<uint64_t>(hosts));
          int dst = static_cast<int>(rng() % static_cast<uint64_t>(hosts - 1));
          if (dst >= src) ++dst;
          const int64_t size = rng() % 4 == 0 ? 0 : 100'000 * (1 + static_cast<int64_t>(rng() % 3));
          net.StartFlow(now, src, dst, size, static_cast<uint64_t>(step) * 100 + b);
        }
      } else if (net.NextEventTime() != kNever) {
        const TimeNs t = std::max(now, net.NextEventTime());
        const auto flows = net.ActiveFlows();
        TimeNs first = kNever;
        for (const auto& f : flows) first = std::min(first, f.finish);
        ASSERT_EQ(net.NextEventTime(), first);
        std::vector<uint64_t> ending;
        for (const auto& f : flows) {
          if (f.finish == first) ending.push_back(f.tag);
        }
        done.clear();
        net.AdvanceTo(t, &done);
        ASSERT_GE(done.size(), ending.size()) << "seed " << seed << " step " << step;
        for (size_t k = 0; k < ending.size(); ++k) {
          ASSERT_EQ(done[k].tag, ending[k]) << "seed " << seed << " step " << step << " end " << k;
        }
        ++batches;
        multi += ending.size() > 1;
        now = t;
      }
      now += static_cast<TimeNs>(rng() % 2000);
    }
    moves += net.solver_stats().group_moves;
    rebuilds += net.solver_stats().heap_rebuilds;
  }
  // The script did exercise what it is meant to: ties, moves between groups, group rebuilds.
  EXPECT_GT(batches, 500);
  EXPECT_GT(multi, 50);
  EXPECT_GT(moves, 0u);
  EXPECT_GT(rebuilds, 0u);
}

// Under churn, with and without a cap per connection, every link's bytes (Links(), summed from
// the link's list of flows) agree with the flows' own rates and finish times (ActiveFlows), and
// every link's list (LinkFlowTags) holds exactly the active flows whose route crosses it: a guard
// for any change to how the solver keeps its per-link state.
TEST(FlowNetworkTest, LinkBytesAndListsFollowEveryRateChangeUnderChurn) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    config::NetworkSpec spec = Spec(1e9, 1000);
    if (seed % 2 == 0) spec.connection_Bps = 3e8;
    const int hosts = 12;
    FlowNetwork net(Topology::Star(hosts, 1e9, 1000), spec);
    const int nlinks = net.topology().num_links();
    std::map<uint64_t, std::pair<Route, int64_t>> started;  // tag: route, size
    std::vector<double> finished_bytes(static_cast<size_t>(nlinks), 0.0);
    TimeNs now = 0;
    std::vector<FlowDone> done;
    uint64_t tag = 0;
    for (int step = 0; step < 300; ++step) {
      if (net.active_flows() < 80 && rng() % 3 != 0) {
        const int burst = 1 + static_cast<int>(rng() % 6);
        for (int b = 0; b < burst; ++b) {
          const int src = static_cast<int>(rng() % static_cast<uint64_t>(hosts));
          int dst = static_cast<int>(rng() % static_cast<uint64_t>(hosts - 1));
          if (dst >= src) ++dst;
          const int64_t size = 1 + static_cast<int64_t>(rng() % 2'000'000);
          started[tag] = {net.topology().RouteBetween(src, dst), size};
          net.StartFlow(now, src, dst, size, tag++);
        }
      } else if (net.NextEventTime() != kNever) {
        now = std::max(now, net.NextEventTime());
        done.clear();
        net.AdvanceTo(now, &done);
        for (const FlowDone& d : done) {
          const auto& [route, size] = started.at(d.tag);
          for (int i = 0; i < route.size; ++i) {
            finished_bytes[static_cast<size_t>(route.links[static_cast<size_t>(i)])] +=
                static_cast<double>(size);
          }
        }
      }
      now += static_cast<TimeNs>(rng() % 3000);
      if (net.NextEventTime() != kNever && net.NextEventTime() < now) {
        now = net.NextEventTime();  // Links() at a time no flow has ended by yet
      }
      // A flow's bytes left now, from its own rate: it reaches 0 at its finish (rounded up to a
      // whole ns, so within one ns of transmission, ~1 byte).
      const auto flows = net.ActiveFlows();
      std::vector<double> expect = finished_bytes;
      std::vector<double> slack(static_cast<size_t>(nlinks), 1e-6);
      std::vector<std::vector<uint64_t>> on(static_cast<size_t>(nlinks));
      for (const auto& f : flows) {
        const double size = static_cast<double>(started.at(f.tag).second);
        const double left = f.rate_Bps * static_cast<double>(f.finish - now) * 1e-9;
        for (int i = 0; i < f.route.size; ++i) {
          const size_t l = static_cast<size_t>(f.route.links[static_cast<size_t>(i)]);
          on[l].push_back(f.tag);
          expect[l] += std::clamp(size - left, 0.0, size);
          slack[l] += 2 + f.rate_Bps * 1e-9;
        }
      }
      const auto links = net.Links(now);
      for (int l = 0; l < nlinks; ++l) {
        const size_t lu = static_cast<size_t>(l);
        std::vector<uint64_t> tags = net.LinkFlowTags(l);
        std::sort(tags.begin(), tags.end());
        std::sort(on[lu].begin(), on[lu].end());
        ASSERT_EQ(tags, on[lu]) << "seed " << seed << " step " << step << " link " << l;
        ASSERT_NEAR(links[lu].bytes, expect[lu], slack[lu] + 1e-9 * expect[lu])
            << "seed " << seed << " step " << step << " link " << l;
      }
    }
  }
}

TEST(FlowNetworkTest, SolverStaysLocalOnSparseTraffic) {
  // 300 random pairs among 1024 hosts: components are tiny, so a start or an end should visit
  // a handful of flows, not all of them (work counts, not wall-clock time).
  FlowNetwork net = StarNet(1024, 1.25e9, 5000);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 300; ++i) {
    const int src = static_cast<int>(rng() % 1024);
    int dst = static_cast<int>(rng() % 1023);
    if (dst >= src) ++dst;
    net.StartFlow(0, src, dst, 1 + static_cast<int64_t>(rng() % 10'000'000), i);
    net.NextEventTime();  // one solve per start
  }
  const auto before = net.solver_stats();
  std::vector<FlowDone> done;
  for (int i = 0; i < 100; ++i) net.AdvanceTo(net.NextEventTime(), &done);
  const auto after = net.solver_stats();
  const double per_solve = static_cast<double>(after.flow_visits - before.flow_visits) /
                           static_cast<double>(after.solves - before.solves);
  EXPECT_LT(per_solve, 30.0);
  EXPECT_EQ(done.size(), 100u);
}

TEST(FlowNetworkTest, AnIncastEndDoesNotVisitTheSendersLightlyLoadedUplinks) {
  // A parameter server's pattern: 64 workers each push to 4 shards, so every shard's downlink
  // carries an incast of 64 flows at C/64 and every worker's uplink 4 of them (1/16 of its
  // capacity). An end re-shares the 63 others of its shard; their uplinks stay far below
  // capacity, so they constrain no one and are not visited: about 2 visits per flow of the
  // incast, where bringing in every sender's uplink would add 4 visits per sender (~380).
  constexpr int kWorkers = 64, kShards = 4;
  FlowNetwork net = StarNet(kWorkers + kShards, 1.25e9, 5000);
  std::mt19937_64 rng(11);
  for (int w = 0; w < kWorkers; ++w) {
    for (int s = 0; s < kShards; ++s) {
      net.StartFlow(0, kShards + w, s, 1'000'000 + static_cast<int64_t>(rng() % 1'000'000),
                    static_cast<uint64_t>(w * kShards + s));
    }
  }
  net.NextEventTime();
  const auto before = net.solver_stats();
  std::vector<FlowDone> done;
  for (int i = 0; i < 40; ++i) net.AdvanceTo(net.NextEventTime(), &done);
  const auto after = net.solver_stats();
  ASSERT_EQ(done.size(), 40u);  // random sizes: one end per solve
  const double per_solve = static_cast<double>(after.flow_visits - before.flow_visits) /
                           static_cast<double>(after.solves - before.solves);
  EXPECT_LT(per_solve, 3.0 * kWorkers);
}

}  // namespace
}  // namespace poseidon::sim
