// Tests of sim/network/topology.cc: the star and leaf-spine builders, link naming, latency split,
// structural routes checked against Boost BFS shortest paths, and argument checks.
#include "sim/network/topology.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

namespace poseidon::sim {
namespace {

// The route is a chain of links from host src to host dst.
void ExpectChain(const Topology& t, const Route& r, int src, int dst) {
  ASSERT_GT(r.size, 0);
  int at = src;
  for (int32_t l : r) {
    EXPECT_EQ(t.link(l).from, at) << t.LinkName(l);
    at = t.link(l).to;
  }
  EXPECT_EQ(at, dst);
}

TEST(TopologyTest, StarLinksNamesAndLatencySplit) {
  const Topology t = Topology::Star(4, 1.25e9, 5001);
  t.Validate();
  EXPECT_EQ(t.num_hosts(), 4);
  EXPECT_EQ(t.num_nodes(), 5);
  EXPECT_EQ(t.num_links(), 8);
  EXPECT_EQ(t.LinkName(0), "h0->s0");
  EXPECT_EQ(t.LinkName(1), "s0->h0");
  EXPECT_EQ(t.LinkName(7), "s0->h3");
  EXPECT_EQ(t.link(0).latency_ns, 2501);  // up: ceil
  EXPECT_EQ(t.link(1).latency_ns, 2500);  // down: floor
  EXPECT_DOUBLE_EQ(t.link(5).capacity_Bps, 1.25e9);
  const Route r = t.RouteBetween(2, 1);
  ASSERT_EQ(r.size, 2);
  EXPECT_EQ(t.LinkName(r.links[0]), "h2->s0");
  EXPECT_EQ(t.LinkName(r.links[1]), "s0->h1");
  EXPECT_EQ(t.RouteLatency(r), 5001);  // halves sum exactly to L
  EXPECT_DOUBLE_EQ(t.RouteBottleneck(r), 1.25e9);
}

TEST(TopologyTest, StarRoutesMatchBfsShortestPaths) {
  const Topology t = Topology::Star(6, 1e9, 1000);
  for (int s = 0; s < 6; ++s) {
    for (int d = 0; d < 6; ++d) {
      if (s == d) continue;
      const Route r = t.RouteBetween(s, d);
      ExpectChain(t, r, s, d);
      const std::vector<int32_t> bfs = t.ShortestPathLinks(s, d);
      // In a star the shortest path is unique: the same links.
      EXPECT_EQ(std::vector<int32_t>(r.begin(), r.end()), bfs);
    }
  }
}

TEST(TopologyTest, LeafSpineStructureAndCapacities) {
  // 10 hosts, 4 per leaf -> 3 leaves (the last one half full), 2 spines, 2:1 oversubscribed.
  const double bw = 1e9;
  const Topology t = Topology::LeafSpine(10, 4, 2, bw, 2.0, 3001);
  t.Validate();
  EXPECT_EQ(t.num_nodes(), 10 + 3 + 2);
  EXPECT_EQ(t.num_links(), 2 * 10 + 2 * 3 * 2);
  // Uplink per spine = hosts_per_leaf * bw / (oversubscription * spines) = 4e9 / 4.
  const int up = 2 * 10 + 2 * (1 * 2 + 1);  // leaf1 -> spine1
  EXPECT_EQ(t.LinkName(up), "leaf1->spine1");
  EXPECT_EQ(t.LinkName(up + 1), "spine1->leaf1");
  EXPECT_DOUBLE_EQ(t.link(up).capacity_Bps, 1e9);
  EXPECT_EQ(t.link(up).latency_ns, 1501);
  EXPECT_EQ(t.link(up + 1).latency_ns, 1500);
  EXPECT_EQ(t.LinkName(2 * 9), "h9->leaf2");
  EXPECT_DOUBLE_EQ(t.link(2 * 9).capacity_Bps, bw);
}

TEST(TopologyTest, LeafSpineRoutesSameLeafStaysCrossLeafTwiceTheLatency) {
  const int64_t L = 3001;
  const Topology t = Topology::LeafSpine(12, 4, 3, 1e9, 1.0, L);
  // Same leaf: two links, latency L, never reaches a spine.
  const Route same = t.RouteBetween(1, 3);
  ASSERT_EQ(same.size, 2);
  EXPECT_EQ(t.LinkName(same.links[0]), "h1->leaf0");
  EXPECT_EQ(t.LinkName(same.links[1]), "leaf0->h3");
  EXPECT_EQ(t.RouteLatency(same), L);
  // Across leaves: four links via spine (src + dst) % spines, latency exactly 2L.
  const Route cross = t.RouteBetween(1, 9);
  ASSERT_EQ(cross.size, 4);
  EXPECT_EQ(t.LinkName(cross.links[0]), "h1->leaf0");
  EXPECT_EQ(t.LinkName(cross.links[1]), "leaf0->spine1");  // (1 + 9) % 3 = 1
  EXPECT_EQ(t.LinkName(cross.links[2]), "spine1->leaf2");
  EXPECT_EQ(t.LinkName(cross.links[3]), "leaf2->h9");
  EXPECT_EQ(t.RouteLatency(cross), 2 * L);
  // Every pair: a valid chain as short as the BFS shortest path over the Boost graph.
  std::set<int> spines_used;
  for (int s = 0; s < 12; ++s) {
    for (int d = 0; d < 12; ++d) {
      if (s == d) continue;
      const Route r = t.RouteBetween(s, d);
      ExpectChain(t, r, s, d);
      EXPECT_EQ(static_cast<size_t>(r.size), t.ShortestPathLinks(s, d).size()) << s << "->" << d;
      EXPECT_EQ(t.RouteLatency(r), s / 4 == d / 4 ? L : 2 * L);
      if (r.size == 4) spines_used.insert(t.link(r.links[1]).to);
    }
  }
  EXPECT_EQ(spines_used.size(), 3u);  // the hash spreads over all spines
}

TEST(TopologyTest, LargeClustersAreCheapToBuild) {
  // No n^2 route table: 4096 hosts build in O(n) links, and routes come from the structure.
  const Topology star = Topology::Star(4096, 1.25e9, 5000);
  EXPECT_EQ(star.num_links(), 8192);
  EXPECT_EQ(star.RouteLatency(star.RouteBetween(4095, 17)), 5000);
  const Topology ls = Topology::LeafSpine(4096, 32, 8, 1.25e9, 3.0, 5000);
  EXPECT_EQ(ls.num_links(), 8192 + 2 * 128 * 8);
  ls.Validate();
  ExpectChain(ls, ls.RouteBetween(4095, 17), 4095, 17);
}

TEST(TopologyTest, FromSpecPicksTheBuilder) {
  config::NetworkSpec spec;
  spec.topology = config::TopologyKind::kLeafSpine;
  spec.hosts_per_leaf = 2;
  spec.spines = 2;
  spec.latency_ns = 100;
  const Topology t = Topology::FromSpec(spec, 4);
  EXPECT_EQ(t.kind(), config::TopologyKind::kLeafSpine);
  EXPECT_EQ(t.RouteLatency(t.RouteBetween(0, 3)), 200);
  spec.topology = config::TopologyKind::kStar;
  EXPECT_EQ(Topology::FromSpec(spec, 4).num_links(), 8);
}

TEST(TopologyTest, BadArgumentsThrow) {
  EXPECT_THROW(Topology::Star(0, 1e9, 10), std::invalid_argument);
  EXPECT_THROW(Topology::Star(4, 0, 10), std::invalid_argument);
  EXPECT_THROW(Topology::Star(4, 1e9, -1), std::invalid_argument);
  EXPECT_THROW(Topology::LeafSpine(4, 0, 1, 1e9, 1, 10), std::invalid_argument);
  EXPECT_THROW(Topology::LeafSpine(4, 2, 0, 1e9, 1, 10), std::invalid_argument);
  EXPECT_THROW(Topology::LeafSpine(4, 2, 1, 1e9, 0, 10), std::invalid_argument);
  Topology t = Topology::Star(4, 1e9, 10);
  EXPECT_THROW(t.RouteBetween(1, 1), std::invalid_argument);
  EXPECT_THROW(t.RouteBetween(0, 4), std::invalid_argument);
  EXPECT_THROW(t.RouteBetween(-1, 2), std::invalid_argument);
  EXPECT_THROW(t.SetLinkCapacity(0, 0), std::invalid_argument);
  t.SetLinkCapacity(3, 5e8);
  EXPECT_DOUBLE_EQ(t.link(3).capacity_Bps, 5e8);
}

}  // namespace
}  // namespace poseidon::sim
