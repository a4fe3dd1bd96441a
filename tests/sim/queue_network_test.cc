// Tests of sim/network/queue_network.cc: closed forms of the queue model (sending NICs shared
// equally, receiving links FIFO), where it parts from max-min sharing, report order, statistics
// and its refusal of topologies other than a star.
#include "sim/network/queue_network.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "sim/network/flow_network.h"
#include "sim/network/network_model.h"
#include "sim/network/topology.h"

namespace poseidon::sim {
namespace {

constexpr int64_t kB = 1'000'000'000;  // bytes/s: 1 byte per ns, so times are easy to read

config::NetworkSpec QueueSpec(int64_t latency_ns, double efficiency = 1.0,
                              int64_t overhead_ns = 0) {
  config::NetworkSpec s;
  s.model = config::NetworkModelKind::kQueue;
  s.host_bandwidth_Bps = static_cast<double>(kB);
  s.latency_ns = latency_ns;
  s.efficiency = efficiency;
  s.per_message_overhead_ns = overhead_ns;
  return s;
}

// The queue model with TCP's windows and Reno's losses: initial window, tbf's limit, a segment
// (0: no losses).
config::NetworkSpec WindowedSpec(int64_t latency_ns, int64_t window, int64_t queue_limit,
                                 int64_t segment) {
  config::NetworkSpec s = QueueSpec(latency_ns);
  s.initial_window_bytes = window;
  s.queue_limit_bytes = queue_limit;
  s.segment_bytes = segment;
  return s;
}

std::vector<FlowDone> Drain(NetworkModel& net) {
  std::vector<FlowDone> done;
  for (TimeNs t = net.NextEventTime(); t != kNever; t = net.NextEventTime())
    net.AdvanceTo(t, &done);
  return done;
}

TimeNs DeliveryOf(const std::vector<FlowDone>& done, uint64_t tag) {
  for (const FlowDone& d : done) {
    if (d.tag == tag) return d.delivered_at;
  }
  ADD_FAILURE() << "tag " << tag << " not delivered";
  return -1;
}

TEST(QueueNetworkTest, LoneTransferTakesLatencyOverheadAndSizeOverRate) {
  auto net = MakeNetworkModel(QueueSpec(5001, 0.5, 30), 2);
  net->StartFlow(100, 0, 1, 1'000'001, 9);
  EXPECT_EQ(net->NextEventTime(), 100 + 2'000'002);
  const auto done = Drain(*net);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].delivered_at, 100 + 2'000'002 + 5001 + 30);
}

TEST(QueueNetworkTest, EmptyMessageIsDeliveredAfterTheLatency) {
  QueueNetwork net(Topology::Star(2, kB, 700), QueueSpec(700));
  net.StartFlow(5, 1, 0, 0, 1);
  EXPECT_EQ(net.NextEventTime(), 5);
  const auto done = Drain(net);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].delivered_at, 5 + 700);
}

// Two senders, each alone on its NIC, to one receiver: both leave their senders at S/B, half of
// the bytes still queued at the receiver, which is done at 2S/B (FIFO or not, the link is busy).
TEST(QueueNetworkTest, IncastQueuesAtTheReceiver) {
  const int64_t S = 1'000'000;
  QueueNetwork net(Topology::Star(3, kB, 0), QueueSpec(0));
  net.StartFlow(0, 1, 0, S, 1);
  net.StartFlow(0, 2, 0, S, 2);
  EXPECT_EQ(net.NextEventTime(), S);
  std::vector<FlowDone> done;
  net.AdvanceTo(S, &done);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].tag, 1u);  // same end: start order
  EXPECT_EQ(done[0].delivered_at, 2 * S);
  EXPECT_EQ(done[1].delivered_at, 2 * S);
  EXPECT_DOUBLE_EQ(net.backlog_bytes(0), static_cast<double>(S));
}

// Where the model parts from max-min: host 1 sends to 0 alone on its NIC; host 2 sends to 0 and
// to 3. Max-min gives every flow half a link, all done at 2S/B. Here 1->0 arrives at B and 2->0 at
// B/2, so 1->0 has two thirds of host 0's link and is delivered at 1.5 S/B; the other two still
// end at 2S/B (host 2's NIC was busy throughout, host 0's queue drains exactly then).
TEST(QueueNetworkTest, AFlowAloneOnItsSenderTakesMoreOfABusyReceiver) {
  const int64_t S = 1'000'000;
  QueueNetwork q(Topology::Star(4, kB, 0), QueueSpec(0));
  config::NetworkSpec flow_spec = QueueSpec(0);
  flow_spec.model = config::NetworkModelKind::kFlow;
  FlowNetwork f(Topology::Star(4, kB, 0), flow_spec);
  for (NetworkModel* net : {static_cast<NetworkModel*>(&q), static_cast<NetworkModel*>(&f)}) {
    net->StartFlow(0, 1, 0, S, 1);
    net->StartFlow(0, 2, 0, S, 2);
    net->StartFlow(0, 2, 3, S, 3);
  }
  const auto dq = Drain(q);
  const auto df = Drain(f);
  EXPECT_EQ(DeliveryOf(dq, 1), 3 * S / 2);
  EXPECT_EQ(DeliveryOf(dq, 2), 2 * S);
  EXPECT_EQ(DeliveryOf(dq, 3), 2 * S);
  for (uint64_t tag : {1u, 2u, 3u}) EXPECT_EQ(DeliveryOf(df, tag), 2 * S) << tag;
}

// congested_flow_weight c: a sender's link goes to its flows in proportion to weights, c for a
// flow whose receiver is congested (a queue stands on it, or at an equal split its senders would
// bring more than its rate), 1 for the others. Host 2 sends 2S to 0 and 2S to 1, host 1 S to 0:
// at an equal split host 0 would take B/2 + B, so 2->0 is weighted c = 1/2 and gets B/3 of host
// 2's link, 2->1 2B/3. At S 1->0 has left host 1, and host 0's queue grew at (B + B/3 - B): 1->0
// is delivered S/3 later. The S/3 still queued keeps 2->0 at B/3 until it drains at 2B/3, at
// 3S/2; then the two split host 2's link equally: 2->1, S from its end, ends at 7S/2, and 2->0
// sends its last S/2 alone, by 4S.
// Flows (src, dst, bytes), tagged 1, 2, ... in order, all started at 0 on a star of `hosts`
// with congested_flow_weight c; what the queue model delivers.
struct Sized {
  int src, dst;
  int64_t bytes;
};
std::vector<FlowDone> RunWeighted(int hosts, double c, const std::vector<Sized>& flows) {
  config::NetworkSpec spec = QueueSpec(0);
  spec.congested_flow_weight = c;
  QueueNetwork net(Topology::Star(hosts, kB, 0), spec);
  uint64_t tag = 0;
  for (const Sized& f : flows) net.StartFlow(0, f.src, f.dst, f.bytes, ++tag);
  return Drain(net);
}

TEST(QueueNetworkTest, ASenderGivesLessToAFlowWhoseReceiverIsCongested) {
  const int64_t S = 6'000'000;  // S/3 queued: 2 ms of host 0's rate, a standing queue
  const std::vector<Sized> flows = {{2, 0, 2 * S}, {2, 1, 2 * S}, {1, 0, S}};
  const auto weighted = RunWeighted(3, 0.5, flows);
  EXPECT_EQ(DeliveryOf(weighted, 3), 4 * S / 3);
  EXPECT_EQ(DeliveryOf(weighted, 2), 7 * S / 2);
  EXPECT_EQ(DeliveryOf(weighted, 1), 4 * S);
  // An equal split, the model as before: 1->0 behind S/2, both of host 2's at 4S.
  const auto equal = RunWeighted(3, 1.0, flows);
  EXPECT_EQ(DeliveryOf(equal, 3), 3 * S / 2);
  EXPECT_EQ(DeliveryOf(equal, 2), 4 * S);
  EXPECT_EQ(DeliveryOf(equal, 1), 4 * S);
}

// When every flow of a sender goes into a congested receiver they are weighted alike: an equal
// split, whatever c. Host 2 sends to 0 and 1, hosts 3 and 4 fill them.
TEST(QueueNetworkTest, FlowsWeightedAlikeSplitTheirSenderEqually) {
  const int64_t S = 1'000'000;
  const std::vector<Sized> flows = {{2, 0, S}, {2, 1, S}, {3, 0, S}, {4, 1, S}};
  const auto weighted = RunWeighted(5, 0.3, flows);
  const auto equal = RunWeighted(5, 1.0, flows);
  ASSERT_EQ(weighted.size(), 4u);
  for (uint64_t tag : {1u, 2u, 3u, 4u}) {
    EXPECT_EQ(DeliveryOf(weighted, tag), DeliveryOf(equal, tag)) << tag;
  }
  EXPECT_EQ(DeliveryOf(weighted, 3), 3 * S / 2);  // behind host 2's S/2 in host 0's queue
}

TEST(QueueNetworkTest, RejectsACongestedFlowWeightOutsideZeroToOne) {
  for (const double c : {0.0, -0.5, 1.5}) {
    config::NetworkSpec spec = QueueSpec(0);
    spec.congested_flow_weight = c;
    EXPECT_THROW(MakeNetworkModel(spec, 3), std::invalid_argument) << c;
  }
}

// initial_window_bytes w: a flow has at most its connection's window in flight, so it sends at
// most w / round trip, and each round trip it spends held to its window adds what it sent (slow
// start doubles it). On idle links with latency L the round trip is 2L: a flow of 3w sends w in
// the first (at w / 2L), 2w in the second, and leaves its sender at 4L; it is delivered L later.
// Without windows it takes 3w at the link's rate.
TEST(QueueNetworkTest, SlowStartDoublesTheWindowEachRoundTrip) {
  const int64_t L = 1000, w = 10'000;
  config::NetworkSpec spec = QueueSpec(L);
  spec.host_bandwidth_Bps = 1e12;  // 1000 bytes per ns: the window, not the link, decides
  spec.initial_window_bytes = w;
  QueueNetwork net(Topology::Star(2, spec.host_bandwidth_Bps, L), spec);
  net.StartFlow(0, 0, 1, 3 * w, 1);
  EXPECT_EQ(net.NextEventTime(), 2 * L);  // the first round trip ends
  const auto done = Drain(net);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].delivered_at, 4 * L + L);
  spec.initial_window_bytes = 0;
  QueueNetwork plain(Topology::Star(2, spec.host_bandwidth_Bps, L), spec);
  plain.StartFlow(0, 0, 1, 3 * w, 1);
  EXPECT_EQ(Drain(plain)[0].delivered_at, 3 * w / 1000 + L);
}

// A connection keeps its window from one message to the next (no slow start after idle): the
// second message of a connection goes faster than the same message on a new connection.
TEST(QueueNetworkTest, AConnectionKeepsItsWindowBetweenMessages) {
  const int64_t L = 1000, w = 10'000;
  config::NetworkSpec spec = QueueSpec(L);
  spec.host_bandwidth_Bps = 1e12;
  spec.initial_window_bytes = w;
  QueueNetwork net(Topology::Star(2, spec.host_bandwidth_Bps, L), spec);
  net.StartConnectionFlow(0, 0, 1, 7 * w, 1, /*connection=*/5);  // rounds of w, 2w, 4w
  auto done = Drain(net);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].delivered_at, 6 * L + L);
  const TimeNs t = 100 * L;  // idle meanwhile; the window (8w) is kept
  net.StartConnectionFlow(t, 0, 1, 7 * w, 2, /*connection=*/5);
  net.StartConnectionFlow(t, 1, 0, 7 * w, 3, /*connection=*/6);  // a new connection: w again
  done = Drain(net);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(DeliveryOf(done, 2), t + 2 * L * 7 / 8 + L);  // 7w at 8w / 2L
  EXPECT_EQ(DeliveryOf(done, 3), t + 6 * L + L);
}

// The round trip of a flow includes the queue its acknowledgements wait in: its sender's own
// receiving link. Hosts 2 and 3 push into host 0 from 0 on, and its queue grows; at 1 ms host 0
// starts a flow to host 1 on a new connection. With windows that flow's round trip is as long as
// host 0's queue, so its window grows slowly and it takes several times as long as on quiet links
// (a parameter server's pulls while its workers' pushes queue at its link); without windows the
// reverse queue does not matter.
TEST(QueueNetworkTest, AQueueOnTheSendersOwnLinkLengthensItsRoundTrip) {
  const int64_t S = 1'000'000, w = 14'480;
  auto run = [&](int64_t window, bool incast) {
    config::NetworkSpec spec = QueueSpec(10'000);  // a round trip of 20 us on idle links
    spec.initial_window_bytes = window;
    QueueNetwork net(Topology::Star(4, kB, 10'000), spec);
    if (incast) {
      net.StartFlow(0, 2, 0, 10 * S, 2);
      net.StartFlow(0, 3, 0, 10 * S, 3);
    }
    std::vector<FlowDone> done;
    net.AdvanceTo(S, &done);
    net.StartFlow(S, 0, 1, S, 1);
    done = Drain(net);
    return DeliveryOf(done, 1) - S;
  };
  EXPECT_EQ(run(0, true), run(0, false));  // without windows: S / B + L either way
  const TimeNs alone = run(w, false), behind = run(w, true);
  EXPECT_LT(alone, S + 10 * 20'000);  // on quiet links slow start costs a few round trips
  EXPECT_GT(behind, 3 * alone) << alone << " " << behind;
}

// An acknowledgement waits behind its sender's receiving queue as that queue stands when the
// acknowledgement joins it, a forward trip after the send. Hosts 2 and 3 push into host 0 and
// hosts 4 and 5 into host 1, each at its link's rate B (windows of 10 MB never hold them back), so
// both queues grow at B and hold 1 MB (1 ms) at 1 ms. A byte host 0 sends to host 1 then waits 1
// ms behind host 1's queue and crosses the route (L); its acknowledgement joins host 0's queue,
// grown by B (1 ms + L) meanwhile to 2 MB + LB: a round trip of 2L + 1 ms + (2 ms + L), where the
// queue as it stood at the send would give 2L + 2 ms. Within tbf's limit (1.5 MB): at most that.
// From host 2, whose own queue is empty and stays so: 2L + host 0's 1 ms.
TEST(QueueNetworkTest, AnAcknowledgementWaitsBehindTheQueueItsSenderHasWhenItArrives) {
  const int64_t L = 1000, S = 1'000'000;
  for (const int64_t limit : {int64_t{0}, 3 * S / 2}) {
    config::NetworkSpec spec = WindowedSpec(L, 10 * S, limit, /*segment=*/0);
    QueueNetwork net(Topology::Star(6, kB, L), spec);
    net.StartFlow(0, 2, 0, 100 * S, 2);
    net.StartFlow(0, 3, 0, 100 * S, 3);
    net.StartFlow(0, 4, 1, 100 * S, 4);
    net.StartFlow(0, 5, 1, 100 * S, 5);
    std::vector<FlowDone> done;
    net.AdvanceTo(S, &done);
    ASSERT_NEAR(net.backlog_bytes(0), static_cast<double>(S), 1e-3);
    ASSERT_NEAR(net.backlog_bytes(1), static_cast<double>(S), 1e-3);
    const double ack_queue = limit > 0 ? 1.5 * S : 2.0 * S + L;
    EXPECT_NEAR(net.round_trip_s(0, 1) * 1e9, 2.0 * L + S + ack_queue, 1e-3) << limit;
    EXPECT_NEAR(net.round_trip_s(2, 0) * 1e9, 2.0 * L + S, 1e-3) << limit;
    EXPECT_TRUE(done.empty());
  }
}

// A window holds a flow back as soon as the queues on its round trip have grown enough, not only
// at the next event: hosts 1 and 2 send into host 0 at their links' rate B, so host 0's queue,
// and with it their round trip 2L + t, grows at B; a window of w carries B until the round trip
// is w / B, at t = w / B - 2L, when the model re-solves (and their windows start growing).
TEST(QueueNetworkTest, AWindowHoldsAFlowBackOnceItsQueueHasGrown) {
  const int64_t L = 1000, w = 10'000;
  config::NetworkSpec spec = QueueSpec(L);
  spec.initial_window_bytes = w;
  QueueNetwork net(Topology::Star(3, kB, L), spec);
  net.StartFlow(0, 1, 0, 1'000'000, 1);
  net.StartFlow(0, 2, 0, 1'000'000, 2);
  EXPECT_EQ(net.NextEventTime(), w - 2 * L);
  spec.initial_window_bytes = 0;
  QueueNetwork plain(Topology::Star(3, kB, L), spec);
  plain.StartFlow(0, 1, 0, 1'000'000, 1);
  plain.StartFlow(0, 2, 0, 1'000'000, 2);
  EXPECT_EQ(plain.NextEventTime(), 1'000'000);  // nothing happens before the flows end
}

TEST(QueueNetworkTest, RejectsANegativeInitialWindow) {
  config::NetworkSpec spec = QueueSpec(0);
  spec.initial_window_bytes = -1;
  EXPECT_THROW(MakeNetworkModel(spec, 3), std::invalid_argument);
}

// segment_bytes: TCP Reno's losses at a full queue. Hosts 1 and 2 send into host 0 at their links'
// rate B, on windows w each (slow start) whose sum exceeds what host 0's queue and links hold,
// C = Q + 2LB, so the queue fills. Each sender hears of the loss a round trip (2L + Q / B) later,
// its window grown meanwhile by what it had acknowledged in it, half of the C bytes the round trip
// carries, and halves that: thresholds (w + C / 2) / 2 = 5C / 8, the windows dropping to them.
// Their sum, 5C / 4, still overfills the queue: a round trip later both halve again, from 5C / 8
// and the segment congestion avoidance added, to (5C / 8 + seg) / 2 each, whose sum is below C:
// the queue drains, and from then on each window grows by about a segment per round trip
// (congestion avoidance), not by what it sent (slow start). Without segment_bytes the windows keep
// growing and the queue stays full.
TEST(QueueNetworkTest, AFullQueueHalvesItsSendersWindows) {
  const int64_t L = 1000, Q = 100'000, seg = 1000;
  const int64_t C = Q + 2 * L;
  const int64_t w = 3 * C / 4;  // 2w > C > w (B = 1 byte per ns)
  auto run = [&](int64_t segment, std::vector<double>* thresholds, double* w1,
                 double* backlog_after, double* growth_per_round) {
    config::NetworkSpec spec = WindowedSpec(L, w, Q, segment);
    QueueNetwork net(Topology::Star(3, kB, L), spec);
    const uint64_t c1 = 11, c2 = 12;
    net.StartConnectionFlow(0, 1, 0, 10'000'000, 1, c1);
    net.StartConnectionFlow(0, 2, 0, 10'000'000, 2, c2);
    std::vector<FlowDone> done;
    TimeNs full_at = kNever;
    for (TimeNs t = net.NextEventTime(); t != kNever && full_at == kNever;
         t = net.NextEventTime()) {
      net.AdvanceTo(t, &done);
      if (net.backlog_bytes(0) >= static_cast<double>(Q) - 1) full_at = t;
    }
    EXPECT_NE(full_at, kNever);
    thresholds->push_back(net.threshold_bytes(c1));
    *w1 = net.window_bytes(c1);
    // A round trip of the full queue later: the second episode.
    const TimeNs second = full_at + C + 1;
    for (TimeNs t = net.NextEventTime(); t <= second; t = net.NextEventTime())
      net.AdvanceTo(t, &done);
    net.AdvanceTo(second, &done);
    thresholds->push_back(net.threshold_bytes(c1));
    EXPECT_DOUBLE_EQ(net.window_bytes(c1), net.window_bytes(c2));  // symmetric
    // Ten round trips of a full queue later (2L + Q / B each, at most).
    const TimeNs later = second + 10 * C;
    const double before = net.window_bytes(c1);
    *backlog_after = net.backlog_bytes(0);  // its least, over the events until then
    for (TimeNs t = net.NextEventTime(); t <= later; t = net.NextEventTime()) {
      net.AdvanceTo(t, &done);
      *backlog_after = std::min(*backlog_after, net.backlog_bytes(0));
    }
    net.AdvanceTo(later, &done);
    *growth_per_round = (net.window_bytes(c1) - before) / 10;
  };
  std::vector<double> thresholds;
  double w1 = 0, after = 0, growth = 0;
  run(seg, &thresholds, &w1, &after, &growth);
  ASSERT_EQ(thresholds.size(), 2u);
  EXPECT_DOUBLE_EQ(thresholds[0], 5.0 * C / 8);
  EXPECT_DOUBLE_EQ(w1, 5.0 * C / 8);
  EXPECT_DOUBLE_EQ(thresholds[1], (5.0 * C / 8 + seg) / 2);
  // Drained to where the halved windows fill the links: 2 (5C / 8 + seg) / 2 - 2LB (0.63 Q) in the
  // fluid.
  EXPECT_LT(after, Q * 0.7);
  // Round trips there are 2L + backlog / B < 2L + Q: more than ten of them, each adding about a
  // segment (slow start would add a window per round trip).
  EXPECT_GT(growth, 0.8 * seg);
  EXPECT_LT(growth, 3.0 * seg);
  thresholds.clear();
  run(0, &thresholds, &w1, &after, &growth);
  EXPECT_GE(w1, static_cast<double>(w));  // no losses: the window never shrinks
  EXPECT_TRUE(std::isinf(thresholds[0]));
  EXPECT_TRUE(std::isinf(thresholds[1]));
  EXPECT_GE(after, Q - 1.0);  // full it stays at every event
}

// loss_packet_bytes: the connections a loss hits are drawn as drop-tail drops packets. Hosts 1, 2
// and 3 send into host 0 on windows of C / 2 each, C = Q + 2LB being what host 0's queue and links
// hold. Slow start's overshoot (the windows' growth in a round trip, 1.5 C, is some forty packets
// of P) costs every connection its window: all three halve what they have when they hear of it,
// C / 2 and the third of C each acknowledged in the round trip, to 5C / 12. Their sum still
// overfills the queue, and once that episode is over (a round trip) the windows have grown a
// segment each; that growth, three segments, is under one packet, so one packet is dropped and one
// connection halves, drawn by the seed. With every sender halving (P = 0) the second episode
// halves all three. Returns the connections halved in the second episode.
std::vector<int> SecondEpisodeVictims(int64_t loss_packet, uint64_t seed,
                                      std::vector<double>* windows = nullptr) {
  const int64_t L = 1000, Q = 100'000, seg = 1000;
  const int64_t C = Q + 2 * L;
  config::NetworkSpec spec = WindowedSpec(L, C / 2, Q, seg);
  spec.loss_packet_bytes = loss_packet;
  QueueNetwork net(Topology::Star(4, kB, L), spec, seed);
  for (int h = 1; h <= 3; ++h) net.StartConnectionFlow(0, h, 0, 50'000'000, h, 10 + h);
  std::vector<FlowDone> done;
  auto thresholds = [&] {
    std::vector<double> t;
    for (int h = 1; h <= 3; ++h) t.push_back(net.threshold_bytes(10 + h));
    return t;
  };
  std::vector<double> seen = thresholds();
  int episode = 0;
  std::vector<int> victims;
  for (TimeNs t = net.NextEventTime(); t != kNever && episode < 2; t = net.NextEventTime()) {
    net.AdvanceTo(t, &done);
    const std::vector<double> now = thresholds();
    if (now == seen) continue;
    ++episode;
    if (episode == 1) {
      for (int h = 0; h < 3; ++h) {
        EXPECT_DOUBLE_EQ(now[h], 5.0 * C / 12) << "connection " << h + 1;
      }
    } else {
      for (int h = 0; h < 3; ++h)
        if (now[h] != seen[h]) victims.push_back(h + 1);
    }
    seen = now;
  }
  EXPECT_EQ(episode, 2);
  if (windows != nullptr) {
    windows->clear();
    for (int h = 1; h <= 3; ++h) windows->push_back(net.window_bytes(10 + h));
  }
  return victims;
}

TEST(QueueNetworkTest, DrawnLossesHalveEveryWindowInSlowStartAndOneInCongestionAvoidance) {
  const int64_t P = 3500;  // a packet: more than three segments' growth
  std::set<int> chosen;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::vector<double> w1, w2;
    const std::vector<int> v = SecondEpisodeVictims(P, seed, &w1);
    ASSERT_EQ(v.size(), 1u) << "seed " << seed;
    chosen.insert(v[0]);
    // The same seed draws the same: same victim, same windows to the byte.
    EXPECT_EQ(SecondEpisodeVictims(P, seed, &w2), v);
    EXPECT_EQ(w1, w2);
  }
  EXPECT_GE(chosen.size(), 2u);  // the draw, not start order, picks the victim
  // Every sender halving: the second episode halves all three.
  EXPECT_EQ(SecondEpisodeVictims(0, 1), (std::vector<int>{1, 2, 3}));
}

// RecordWindowLosses: the loss log reports each halving as it happened, and only observes. In
// SecondEpisodeVictims' job, the first episode halves all three connections to 5C / 12 (their
// heard windows 5C / 6), the second the one drawn; with the log on, the deliveries are the same to
// the nanosecond, and Windows() holds what window_bytes says.
TEST(QueueNetworkTest, TheLossLogReportsEveryHalvingAndOnlyObserves) {
  const int64_t L = 1000, Q = 100'000, seg = 1000, P = 3500;
  const int64_t C = Q + 2 * L;
  config::NetworkSpec spec = WindowedSpec(L, C / 2, Q, seg);
  spec.loss_packet_bytes = P;
  auto run = [&](std::vector<WindowLoss>* log, std::vector<ConnectionWindow>* windows) {
    QueueNetwork net(Topology::Star(4, kB, L), spec, /*seed=*/1);
    net.RecordWindowLosses(log);
    for (int h = 1; h <= 3; ++h) net.StartConnectionFlow(0, h, 0, 5'000'000, h, 10 + h);
    std::vector<FlowDone> done = Drain(net);
    if (windows != nullptr) {
      *windows = net.Windows();
      for (const ConnectionWindow& w : *windows) {
        EXPECT_DOUBLE_EQ(w.window_bytes, net.window_bytes(w.connection));
        EXPECT_DOUBLE_EQ(w.threshold_bytes, net.threshold_bytes(w.connection));
      }
    }
    return done;
  };
  std::vector<WindowLoss> log;
  std::vector<ConnectionWindow> windows;
  const std::vector<FlowDone> logged = run(&log, &windows);
  const std::vector<FlowDone> plain = run(nullptr, nullptr);
  ASSERT_EQ(logged.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(logged[i].tag, plain[i].tag);
    EXPECT_EQ(logged[i].delivered_at, plain[i].delivered_at);
  }
  ASSERT_GE(log.size(), 4u);
  std::set<uint64_t> first;
  for (size_t i = 0; i < 3; ++i) {
    const WindowLoss& l = log[i];
    first.insert(l.connection);
    EXPECT_EQ(l.at, log[0].at);  // one episode
    EXPECT_EQ(l.dst, 0);
    EXPECT_EQ(l.src, static_cast<int>(l.connection) - 10);
    EXPECT_DOUBLE_EQ(l.threshold_bytes, 5.0 * C / 12) << "connection " << l.connection;
    EXPECT_DOUBLE_EQ(l.heard_bytes, 2 * l.threshold_bytes);
    EXPECT_DOUBLE_EQ(l.window_after_bytes, std::min(l.window_bytes, l.threshold_bytes));
    EXPECT_GT(l.lost_bytes, 0);
    EXPECT_DOUBLE_EQ(std::fmod(l.lost_bytes, static_cast<double>(P)), 0.0);  // whole packets
  }
  EXPECT_EQ(first, (std::set<uint64_t>{11, 12, 13}));
  EXPECT_GT(log[3].at, log[0].at);
  EXPECT_EQ(log[3].connection, 10 + static_cast<uint64_t>(SecondEpisodeVictims(P, 1).at(0)));
  EXPECT_EQ(windows.size(), 3u);
}

// TCP delivers in order: what a connection sends after a loss reaches its receiver only once the
// lost packet's retransmission has. Hosts 1, 2 and 3 send into host 0 at B each, their windows
// too large to bind, so host 0's queue grows at 2B and is full (Q) at t = Q / 2B; every sender
// halves there (no loss_packet_bytes) having lost a segment. The sender hears of it from what it
// sends next, seg / B later, a round trip (2L + Q / B) on, and the retransmission waits Q / B
// more and the latency: t + seg / B + 2L + 2Q / B + L. Host 3's flow of 60 kB has sent 50 kB by
// then and the rest at B / 3 (the full queue's share), ending at 80 us: behind the queue it would
// arrive at 80 us + Q / B + L, but the hole holds it until the retransmission is in.
TEST(QueueNetworkTest, ALossHoldsBackWhatItsConnectionSendsUntilTheRetransmissionArrives) {
  const int64_t L = 1000, Q = 100'000, seg = 1000;
  auto deliver = [&](int64_t segment) {
    config::NetworkSpec spec = WindowedSpec(L, 100'000'000, Q, segment);
    QueueNetwork net(Topology::Star(4, kB, L), spec);
    net.StartConnectionFlow(0, 1, 0, 10'000'000, 1, 11);
    net.StartConnectionFlow(0, 2, 0, 10'000'000, 2, 12);
    net.StartConnectionFlow(0, 3, 0, 60'000, 3, 13);
    std::vector<FlowDone> done;
    net.AdvanceTo(Q / 2 + 1, &done);  // just past the first loss
    for (uint64_t c : {11, 12, 13}) {
      if (segment > 0) {
        EXPECT_NEAR(net.hole_until(c), Q / 2 + seg + 2 * L + 2 * Q + L, 3) << c;
      } else {
        EXPECT_EQ(net.hole_until(c), 0) << c;
      }
    }
    for (const FlowDone& d : Drain(net)) done.push_back(d);
    return DeliveryOf(done, 3);
  };
  EXPECT_NEAR(deliver(seg), Q / 2 + seg + 2 * L + 2 * Q + L, 3);
  EXPECT_NEAR(deliver(0), 80'000 + Q + L, 3);  // no losses: FIFO behind the full queue
}

// loss_packet_bytes: slow start's overshoot is what the senders bring over the queue's rate in
// the round trip before they hear of a loss, not the windows' growth when their own links hold
// them back. As above, hosts 1 to 3 bring 3B into host 0's B: over a round trip of 2L + Q / B they
// bring 3 (2L + Q) bytes, two thirds of it more than the queue takes, 204 000 bytes: 12 packets of
// 16 384 (the windows, 100 MB each, would have been thousands). Each connection hit waits for its
// lost packets to be sent again at B before it hears of the loss: the holes add up to 12 packets.
TEST(QueueNetworkTest, ASlowStartOvershootLosesWhatItsSendersBringOverTheQueuesRate) {
  const int64_t L = 1000, Q = 100'000, P = 16'384;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    config::NetworkSpec spec = WindowedSpec(L, 100'000'000, Q, 1000);
    spec.loss_packet_bytes = P;
    QueueNetwork net(Topology::Star(4, kB, L), spec, seed);
    for (int h = 1; h <= 3; ++h) net.StartConnectionFlow(0, h, 0, 10'000'000, h, 10 + h);
    std::vector<FlowDone> done;
    net.AdvanceTo(Q / 2 + 1, &done);                // just past the first overflow
    const TimeNs base = Q / 2 + 2 * L + 2 * Q + L;  // a hole with nothing lost to send again
    int64_t lost = 0;
    for (int h = 1; h <= 3; ++h) {
      const TimeNs hole = net.hole_until(10 + h);
      if (hole == 0) continue;  // not hit
      EXPECT_GE(hole, base + P - 3) << "seed " << seed;
      lost += hole - base;
    }
    EXPECT_NEAR(static_cast<double>(lost), 12.0 * P, 9) << "seed " << seed;
  }
}

// Losses do not idle the receiving link while the halved windows still exceed what its links
// hold (about C / 3 each after two episodes, as above, summing above 2LB): both flows' bytes pass
// host 0's link at its rate, with or without losses, so the later delivery is the same (2S / B + L,
// to within rounding). (The windows grow back and fill the queue again at about 1.84 ms, and that
// episode's holes end before 2S / B; at 2S = 4 MB a third episode's would end after it.)
TEST(QueueNetworkTest, LossesKeepAReceiverBusyWhileTheWindowsExceedItsLinks) {
  const int64_t L = 1000, Q = 100'000, S = 1'500'000;
  const int64_t w = 3 * (Q + 2 * L) / 4;
  auto last = [&](int64_t segment) {
    config::NetworkSpec spec = WindowedSpec(L, w, Q, segment);
    QueueNetwork net(Topology::Star(3, kB, L), spec);
    net.StartFlow(0, 1, 0, S, 1);
    net.StartFlow(0, 2, 0, S, 2);
    const auto done = Drain(net);
    EXPECT_EQ(done.size(), 2u);
    return std::max(DeliveryOf(done, 1), DeliveryOf(done, 2));
  };
  EXPECT_NEAR(static_cast<double>(last(1000)), 2.0 * S + L, 4);
  EXPECT_NEAR(static_cast<double>(last(0)), 2.0 * S + L, 4);
}

// A flow whose acknowledgements wait in a full queue has a longer round trip, so after a loss its
// halved window carries less than the other's: host 0's queue is full of host 2's and host 3's
// pushes while host 0 and host 1 each send to host 4 (whose link both share); host 0's round trip
// includes its own full queue, host 1's does not, and with losses host 0's flow ends last, by
// far; without losses (a full queue holds its senders max-min) both end together.
TEST(QueueNetworkTest, AfterALossAFlowWhoseAcksWaitInAFullQueueGetsLess) {
  const int64_t L = 1000, Q = 100'000, S = 4'000'000;
  auto ends = [&](int64_t segment) {
    config::NetworkSpec spec = WindowedSpec(L, 60'000, Q, segment);
    QueueNetwork net(Topology::Star(5, kB, L), spec);
    net.StartFlow(0, 2, 0, 4 * S, 2);  // keep host 0's queue full
    net.StartFlow(0, 3, 0, 4 * S, 3);
    net.StartFlow(0, 0, 4, S, 10);
    net.StartFlow(0, 1, 4, S, 11);
    const auto done = Drain(net);
    return std::make_pair(DeliveryOf(done, 10), DeliveryOf(done, 11));
  };
  const auto [lossy0, lossy1] = ends(1000);
  EXPECT_GT(lossy0, lossy1 + S / 4) << lossy0 << " " << lossy1;
  const auto [plain0, plain1] = ends(0);
  EXPECT_LT(std::abs(plain0 - plain1), S / 20) << plain0 << " " << plain1;
}

// send_buffer_bytes b: a connection has at most b in flight whatever its window, and a window
// held back by it does not grow. With w = 10 000 and b = 2w on idle links (round trip 2L), a flow
// of 5w sends w, then 2w, then 2w per round trip, leaving at 6L (delivered at 7L); without the
// buffer the third round trip's window is 4w and the last 2w leave in L, at 5L.
TEST(QueueNetworkTest, ASendBufferCapsWhatAConnectionHasInFlight) {
  const int64_t L = 1000, w = 10'000;
  auto delivered = [&](int64_t buffer) {
    config::NetworkSpec spec = QueueSpec(L);
    spec.host_bandwidth_Bps = 1e12;  // the window, not the link, decides
    spec.initial_window_bytes = w;
    spec.send_buffer_bytes = buffer;
    QueueNetwork net(Topology::Star(2, spec.host_bandwidth_Bps, L), spec);
    net.StartConnectionFlow(0, 0, 1, 5 * w, 1, /*connection=*/3);
    const auto done = Drain(net);
    EXPECT_EQ(done.size(), 1u);
    // Without the buffer the window grew by what each round trip sent: w + w + 2w + 2w.
    EXPECT_DOUBLE_EQ(net.window_bytes(3), buffer > 0 ? 2.0 * w : 6.0 * w);
    return done.empty() ? kNever : done[0].delivered_at;
  };
  EXPECT_EQ(delivered(2 * w), 6 * L + L);
  EXPECT_EQ(delivered(0), 5 * L + L);
}

TEST(QueueNetworkTest, RejectsSegmentsOrASendBufferWithoutWindows) {
  config::NetworkSpec spec = QueueSpec(0);
  spec.segment_bytes = 1448;
  EXPECT_THROW(MakeNetworkModel(spec, 3), std::invalid_argument);
  spec.initial_window_bytes = 14480;
  spec.segment_bytes = -1;
  EXPECT_THROW(MakeNetworkModel(spec, 3), std::invalid_argument);
  spec.segment_bytes = 0;
  spec.send_buffer_bytes = -1;
  EXPECT_THROW(MakeNetworkModel(spec, 3), std::invalid_argument);
  spec.initial_window_bytes = 0;
  spec.send_buffer_bytes = 2'600'000;
  EXPECT_THROW(MakeNetworkModel(spec, 3), std::invalid_argument);
  // loss_packet_bytes needs the losses it draws, and is not negative.
  spec.initial_window_bytes = 14480;
  spec.send_buffer_bytes = 0;
  spec.loss_packet_bytes = 16384;
  EXPECT_THROW(MakeNetworkModel(spec, 3), std::invalid_argument);
  spec.segment_bytes = 1448;
  EXPECT_NO_THROW(MakeNetworkModel(spec, 3));
  spec.loss_packet_bytes = -1;
  EXPECT_THROW(MakeNetworkModel(spec, 3), std::invalid_argument);
}

// A flow that starts while the receiver's queue holds bytes waits for them (FIFO), however fast
// its own sender is.
TEST(QueueNetworkTest, ALaterFlowWaitsBehindTheReceiversQueue) {
  const int64_t S = 1'000'000;
  QueueNetwork net(Topology::Star(4, kB, 0), QueueSpec(0));
  net.StartFlow(0, 1, 0, S, 1);
  net.StartFlow(0, 2, 0, S, 2);  // by S/B: S bytes queued at host 0
  std::vector<FlowDone> done;
  net.AdvanceTo(S, &done);
  net.StartFlow(S, 3, 0, 1000, 3);  // 1000 bytes: leaves host 3 at S + 1000 ns
  net.AdvanceTo(S + 1000, &done);
  ASSERT_EQ(done.size(), 3u);
  // Queue at S + 1000: S + 1000 (arrived) - 1000 (served) = S bytes: delivered S/B later.
  EXPECT_EQ(done[2].tag, 3u);
  EXPECT_EQ(done[2].delivered_at, S + 1000 + S);
}

TEST(QueueNetworkTest, LinkStatisticsCountWhatEachWayCarried) {
  const int64_t S = 1'000'000;
  QueueNetwork net(Topology::Star(3, kB, 0), QueueSpec(0));
  net.StartFlow(0, 1, 0, S, 1);
  net.StartFlow(0, 2, 0, S, 2);
  const auto at_s = net.Links(S);  // senders done; host 0 has received S of 2S
  const Topology t = Topology::Star(3, kB, 0);
  ASSERT_EQ(at_s.size(), static_cast<size_t>(t.num_links()));
  EXPECT_EQ(at_s[2].name, "h1->s0");
  EXPECT_DOUBLE_EQ(at_s[2].bytes, static_cast<double>(S));
  EXPECT_DOUBLE_EQ(at_s[1].bytes, static_cast<double>(S));  // s0->h0, half of the incast
  EXPECT_DOUBLE_EQ(at_s[1].busy_fraction, 1.0);
  Drain(net);
  const auto at_end = net.Links(4 * S);
  EXPECT_DOUBLE_EQ(at_end[1].bytes, 2.0 * S);
  EXPECT_DOUBLE_EQ(at_end[1].busy_fraction, 0.5);  // busy 2S of 4S ns
  EXPECT_DOUBLE_EQ(at_end[2].busy_fraction, 0.25);
  EXPECT_DOUBLE_EQ(at_end[4].bytes, static_cast<double>(S));  // h2->s0
}

// With a limit, a full receiving queue holds its senders to its rate. Hosts 1 and 2 send S to
// host 0, host 1 also S to host 3: host 1 sends at B/2 on each flow, host 2 at B, so host 0's
// queue grows at B/2 and holds the limit Q at 2Q/B. From then host 0 takes B in, max-min over
// its senders: 1->0 keeps B/2 (its NIC's share), 2->0 drops to B/2.
TEST(QueueNetworkTest, AFullQueueHoldsItsSendersToItsRate) {
  const int64_t S = 1'000'000, Q = 100'000;
  config::NetworkSpec spec = QueueSpec(0);
  spec.queue_limit_bytes = Q;
  QueueNetwork net(Topology::Star(4, kB, 0), spec);
  net.StartFlow(0, 1, 0, S, 1);
  net.StartFlow(0, 2, 0, S, 2);
  net.StartFlow(0, 1, 3, S, 3);
  EXPECT_EQ(net.NextEventTime(), 2 * Q);  // queue full: (B + B/2 - B) t = Q
  std::vector<FlowDone> done;
  net.AdvanceTo(2 * Q - 1, &done);
  EXPECT_FALSE(net.queue_overflowed());
  net.AdvanceTo(2 * Q, &done);
  EXPECT_TRUE(done.empty());
  EXPECT_DOUBLE_EQ(net.backlog_bytes(0), static_cast<double>(Q));
  EXPECT_TRUE(net.queue_overflowed());
  // 2->0 sent 2Q by then, S - 2Q left at B/2; 1->0 and 1->3 sent Q each, S - Q left at B/2.
  const auto rest = Drain(net);
  ASSERT_EQ(rest.size(), 3u);
  // 2->0 ends at 2Q + 2(S - 2Q) = 2S - 2Q; 1->0 and 1->3 at 2Q + 2(S - Q) = 2S.
  EXPECT_EQ(rest[0].tag, 2u);
  EXPECT_EQ(rest[0].delivered_at, 2 * S - 2 * Q + Q);  // behind the full queue: Q / B
  EXPECT_EQ(DeliveryOf(rest, 3), 2 * S);
  // When 2->0 ends host 0's queue (Q) drains while 1->0 still sends at B/2: it empties Q / (B/2)
  // later, before 1->0 ends at 2S, so 1->0 is delivered on arrival.
  EXPECT_EQ(DeliveryOf(rest, 1), 2 * S);
  EXPECT_DOUBLE_EQ(net.backlog_bytes(0), 0.0);
  EXPECT_TRUE(net.queue_overflowed());  // remembered once drained (model auto asks at the end)
}

// The same incast with a queue that can hold what piles up never reaches its limit.
TEST(QueueNetworkTest, AQueueThatHoldsTheBacklogNeverOverflows) {
  const int64_t S = 1'000'000;
  config::NetworkSpec spec = QueueSpec(0);
  spec.queue_limit_bytes = 2 * S;  // two senders at B into one receiver at B: S queued at most
  QueueNetwork net(Topology::Star(3, kB, 0), spec);
  net.StartFlow(0, 1, 0, S, 1);
  net.StartFlow(0, 2, 0, S, 2);
  const auto done = Drain(net);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].delivered_at, 2 * S);
  EXPECT_FALSE(net.queue_overflowed());
}

// burst_bytes: a flow starting on idle links passes the bucket at once; one starting while its
// sender is busy, or after too short an idle gap to refill, passes no more than was refilled.
TEST(QueueNetworkTest, TokenBucketsLetABurstPassOnIdleLinks) {
  const int64_t S = 1'000'000, burst = 50'000;
  config::NetworkSpec spec = QueueSpec(0);
  spec.burst_bytes = burst;
  QueueNetwork net(Topology::Star(3, kB, 0), spec);
  net.StartFlow(0, 1, 0, S, 1);  // idle since ever: S - burst at B
  EXPECT_EQ(net.NextEventTime(), S - burst);
  net.StartFlow(10, 1, 2, S, 2);  // host 1 is sending: no burst
  auto done = Drain(net);
  ASSERT_EQ(done.size(), 2u);
  // 1->0 had S - burst - 10 left at 10 ns, then half of host 1's NIC.
  EXPECT_EQ(done[0].delivered_at, 10 + 2 * (S - burst - 10));
  const TimeNs end = done[1].delivered_at;  // 1->2 ends alone at full rate
  EXPECT_EQ(end, done[0].delivered_at + (S - (done[0].delivered_at - 10) / 2));
  // Idle for 20 us: the buckets hold 20 000 bytes, not the full 50 000.
  net.StartFlow(end + 20'000, 1, 0, S, 3);
  EXPECT_EQ(net.NextEventTime(), end + 20'000 + S - 20'000);
}

// A small flow takes only its bytes from the buckets, as in the flow model.
TEST(QueueNetworkTest, BurstLeavesWhatASmallFlowDidNotTake) {
  const int64_t S = 1'000'000, burst = 50'000, small = 20'000;
  config::NetworkSpec spec = QueueSpec(0);
  spec.burst_bytes = burst;
  QueueNetwork net(Topology::Star(3, kB, 0), spec);
  net.StartFlow(0, 0, 1, small, 1);  // all but its last byte at once: ends at 1 ns
  auto done = Drain(net);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].delivered_at, 1);
  // 9 ns later: burst - small + 1 left, plus 9 bytes refilled.
  net.StartFlow(10, 0, 1, S, 2);
  EXPECT_EQ(net.NextEventTime(), 10 + S - (burst - small + 1 + 9));
  done = Drain(net);
  ASSERT_EQ(done.size(), 1u);
  // Host 1's receiving bucket is spent: a flow from host 2 starting as it idles passes nothing.
  net.StartFlow(done[0].delivered_at, 2, 1, S, 3);
  EXPECT_EQ(net.NextEventTime(), done[0].delivered_at + S);
}

TEST(QueueNetworkTest, NeedsAStarTopology) {
  config::NetworkSpec spec = QueueSpec(1000);
  spec.topology = config::TopologyKind::kLeafSpine;
  spec.hosts_per_leaf = 2;
  spec.spines = 1;
  EXPECT_THROW(MakeNetworkModel(spec, 4), std::invalid_argument);
}

TEST(QueueNetworkTest, RejectsTimeGoingBackwards) {
  QueueNetwork net(Topology::Star(2, kB, 0), QueueSpec(0));
  net.StartFlow(10, 0, 1, 100, 1);
  EXPECT_THROW(net.StartFlow(9, 1, 0, 100, 2), std::invalid_argument);
  std::vector<FlowDone> done;
  EXPECT_THROW(net.AdvanceTo(5, &done), std::invalid_argument);
  EXPECT_THROW(net.StartFlow(10, 0, 1, -1, 3), std::invalid_argument);
}

}  // namespace
}  // namespace poseidon::sim
