// sim/network/topology.h: hosts, switches and directed links of a simulated cluster network.
//
// A Topology is the physical description the network models run on. Nodes 0..num_hosts-1 are the
// hosts; switches follow. Every full-duplex cable is two DIRECTED links, each with its own capacity
// (bytes/s) and latency (ns), so traffic in one direction never competes with the other.
//
//   Topology t = Topology::Star(8, 10e9 / 8, 5000);
//   Route r = t.RouteBetween(2, 5);     // {link "h2->s0", link "s0->h5"}
//   t.RouteLatency(r);                  // 5000 ns (2500 up + 2500 down)
//   t.LinkName(r.links[0]);             // "h2->s0"
//
// Two builders:
//   - Star: one non-blocking switch s0; host h has link 2h (h->s0) and 2h+1 (s0->h).
//   - LeafSpine: hosts_per_leaf hosts per leaf switch, `spines` spine switches, every leaf
//     linked to every spine. Host links as in the star (to its leaf); leaf l, spine s: link
//     2*num_hosts + 2*(l*spines + s) goes up (leaf->spine), the next one down. A leaf's uplink to
//     one spine carries hosts_per_leaf * host_bw / (oversubscription * spines) bytes/s. Traffic
//     between two hosts of the same leaf stays in the leaf; across leaves it goes through spine
//     (src + dst) % spines (a deterministic ECMP-like hash).
// Each link takes half of the spec's latency: links leaving a host or going up take ceil(L/2),
// links going down take floor(L/2), so a same-switch route sums to exactly L and a route over a
// spine to exactly 2L.
//
// Routes are computed from the structure on demand (O(1), no n^2 table): a 4096-host cluster costs
// a few hundred KiB. The Boost.Graph adjacency list holds the same nodes and links; it names them,
// validates the builders (Validate) and gives BFS shortest paths (ShortestPathLinks) against which
// the structural routes are checked.
//
// Thread-safety: a built Topology is immutable except for SetLinkCapacity (not thread-safe) and may
// be shared for reading.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "config/specs.h"

namespace poseidon::sim {

// Longest route of the built topologies: host->leaf->spine->leaf->host.
inline constexpr int kMaxRouteLinks = 4;

// A route: the directed links from source host to destination host, in order.
struct Route {
  int32_t size = 0;
  std::array<int32_t, kMaxRouteLinks> links{};
  const int32_t* begin() const { return links.data(); }
  const int32_t* end() const { return links.data() + size; }
};

enum class NodeKind : uint8_t { kHost, kSwitch, kLeaf, kSpine };

struct Link {
  int32_t from = 0;         // node id
  int32_t to = 0;           // node id
  double capacity_Bps = 0;  // bytes per second, > 0
  int64_t latency_ns = 0;   // propagation + switching delay, >= 0
};

class Topology {
 public:
  struct VertexProps {
    NodeKind kind = NodeKind::kHost;
    int32_t index = 0;  // host number, switch/leaf/spine number
  };
  struct EdgeProps {
    int32_t link = 0;  // index into links()
  };
  using Graph =
      boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, VertexProps, EdgeProps>;

  // All builders throw std::invalid_argument on non-positive sizes or rates, negative latency.
  static Topology Star(int num_hosts, double host_bandwidth_Bps, int64_t latency_ns);
  static Topology LeafSpine(int num_hosts, int hosts_per_leaf, int spines,
                            double host_bandwidth_Bps, double oversubscription, int64_t latency_ns);
  // The topology named by spec.topology.
  static Topology FromSpec(const config::NetworkSpec& spec, int num_hosts);

  int num_hosts() const { return num_hosts_; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  int num_links() const { return static_cast<int>(links_.size()); }
  config::TopologyKind kind() const { return kind_; }
  const Link& link(int id) const { return links_[static_cast<size_t>(id)]; }
  const std::vector<Link>& links() const { return links_; }
  NodeKind node_kind(int node) const { return nodes_[static_cast<size_t>(node)].kind; }
  const Graph& graph() const { return *graph_; }

  // "h3", "s0", "leaf1", "spine0".
  std::string NodeName(int node) const;
  // "h3->s0", "leaf1->spine0".
  std::string LinkName(int link) const;

  // The route the models use from host src to host dst (src != dst, both < num_hosts). O(1).
  Route RouteBetween(int src, int dst) const;
  int64_t RouteLatency(const Route& route) const;
  // Smallest capacity on the route (the uncontended rate), bytes/s.
  double RouteBottleneck(const Route& route) const;

  // A shortest path (fewest links) by breadth-first search over the Boost graph, as link ids.
  // Empty when dst is unreachable. O(nodes + links): for validation and tests, not hot paths.
  std::vector<int32_t> ShortestPathLinks(int src, int dst) const;

  // Checks the link table against the Boost graph (every link is exactly one edge with matching
  // endpoints) and that every host has one link out and one in. Throws std::logic_error.
  void Validate() const;

  // Changes one link's capacity (e.g. a degraded cable in a what-if study, or tests that need
  // unequal capacities). Call before a model is built from this topology. Throws on bps <= 0.
  void SetLinkCapacity(int link, double capacity_Bps);

 private:
  Topology() = default;
  int AddNode(NodeKind kind, int32_t index);
  int AddLink(int from, int to, double capacity_Bps, int64_t latency_ns);
  int HostLeaf(int host) const { return host / hosts_per_leaf_; }

  config::TopologyKind kind_ = config::TopologyKind::kStar;
  int num_hosts_ = 0;
  // Leaf-spine structure (unused for the star).
  int hosts_per_leaf_ = 1;
  int spines_ = 0;
  int leaves_ = 0;
  std::vector<VertexProps> nodes_;
  std::vector<Link> links_;
  // Built once by the builders and never changed afterwards, so copies share it (copying a Boost
  // adjacency list is also what trips GCC 12's -Wmaybe-uninitialized inside Boost 1.74).
  std::shared_ptr<Graph> graph_ = std::make_shared<Graph>();
};

}  // namespace poseidon::sim
