#include "sim/network/topology.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <boost/graph/breadth_first_search.hpp>

namespace poseidon::sim {
namespace {

// Uplink/downlink halves of a one-way latency that sum exactly to it.
int64_t UpHalf(int64_t latency_ns) { return latency_ns - latency_ns / 2; }
int64_t DownHalf(int64_t latency_ns) { return latency_ns / 2; }

void CheckCommon(int num_hosts, double host_bandwidth_Bps, int64_t latency_ns) {
  if (num_hosts < 1) {
    throw std::invalid_argument(fmt::format("topology: need at least 1 host, got {}", num_hosts));
  }
  if (!(host_bandwidth_Bps > 0) || !std::isfinite(host_bandwidth_Bps)) {
    throw std::invalid_argument(
        fmt::format("topology: host bandwidth must be > 0 bytes/s, got {}", host_bandwidth_Bps));
  }
  if (latency_ns < 0) {
    throw std::invalid_argument(
        fmt::format("topology: latency must be >= 0 ns, got {}", latency_ns));
  }
}

}  // namespace

int Topology::AddNode(NodeKind kind, int32_t index) {
  nodes_.push_back(VertexProps{kind, index});
  const auto v = boost::add_vertex(VertexProps{kind, index}, *graph_);
  return static_cast<int>(v);
}

int Topology::AddLink(int from, int to, double capacity_Bps, int64_t latency_ns) {
  const int id = static_cast<int>(links_.size());
  links_.push_back(Link{from, to, capacity_Bps, latency_ns});
  boost::add_edge(static_cast<size_t>(from), static_cast<size_t>(to), EdgeProps{id}, *graph_);
  return id;
}

Topology Topology::Star(int num_hosts, double host_bandwidth_Bps, int64_t latency_ns) {
  CheckCommon(num_hosts, host_bandwidth_Bps, latency_ns);
  Topology t;
  t.kind_ = config::TopologyKind::kStar;
  t.num_hosts_ = num_hosts;
  t.nodes_.reserve(static_cast<size_t>(num_hosts) + 1);
  t.links_.reserve(2 * static_cast<size_t>(num_hosts));
  for (int h = 0; h < num_hosts; ++h) t.AddNode(NodeKind::kHost, h);
  const int sw = t.AddNode(NodeKind::kSwitch, 0);
  for (int h = 0; h < num_hosts; ++h) {
    t.AddLink(h, sw, host_bandwidth_Bps, UpHalf(latency_ns));    // id 2h
    t.AddLink(sw, h, host_bandwidth_Bps, DownHalf(latency_ns));  // id 2h+1
  }
  return t;
}

Topology Topology::LeafSpine(int num_hosts, int hosts_per_leaf, int spines,
                             double host_bandwidth_Bps, double oversubscription,
                             int64_t latency_ns) {
  CheckCommon(num_hosts, host_bandwidth_Bps, latency_ns);
  if (hosts_per_leaf < 1 || spines < 1) {
    throw std::invalid_argument(
        fmt::format("leaf-spine: hosts_per_leaf and spines must be >= 1, got {} and {}",
                    hosts_per_leaf, spines));
  }
  if (!(oversubscription > 0) || !std::isfinite(oversubscription)) {
    throw std::invalid_argument(
        fmt::format("leaf-spine: oversubscription must be > 0, got {}", oversubscription));
  }
  Topology t;
  t.kind_ = config::TopologyKind::kLeafSpine;
  t.num_hosts_ = num_hosts;
  t.hosts_per_leaf_ = hosts_per_leaf;
  t.spines_ = spines;
  t.leaves_ = (num_hosts + hosts_per_leaf - 1) / hosts_per_leaf;
  for (int h = 0; h < num_hosts; ++h) t.AddNode(NodeKind::kHost, h);
  const int first_leaf = t.num_nodes();
  for (int l = 0; l < t.leaves_; ++l) t.AddNode(NodeKind::kLeaf, l);
  const int first_spine = t.num_nodes();
  for (int s = 0; s < spines; ++s) t.AddNode(NodeKind::kSpine, s);
  for (int h = 0; h < num_hosts; ++h) {
    const int leaf = first_leaf + t.HostLeaf(h);
    t.AddLink(h, leaf, host_bandwidth_Bps, UpHalf(latency_ns));    // id 2h
    t.AddLink(leaf, h, host_bandwidth_Bps, DownHalf(latency_ns));  // id 2h+1
  }
  // Every leaf gets the full uplink capacity, even a last leaf that is not full: the switch model
  // is the same box, only fewer ports are used.
  const double uplink_Bps = hosts_per_leaf * host_bandwidth_Bps / (oversubscription * spines);
  for (int l = 0; l < t.leaves_; ++l) {
    for (int s = 0; s < spines; ++s) {
      t.AddLink(first_leaf + l, first_spine + s, uplink_Bps, UpHalf(latency_ns));
      t.AddLink(first_spine + s, first_leaf + l, uplink_Bps, DownHalf(latency_ns));
    }
  }
  return t;
}

Topology Topology::FromSpec(const config::NetworkSpec& spec, int num_hosts) {
  switch (spec.topology) {
    case config::TopologyKind::kStar:
      return Star(num_hosts, spec.host_bandwidth_Bps, spec.latency_ns);
    case config::TopologyKind::kLeafSpine:
      return LeafSpine(num_hosts, spec.hosts_per_leaf, spec.spines, spec.host_bandwidth_Bps,
                       spec.oversubscription, spec.latency_ns);
  }
  throw std::invalid_argument("topology: unknown topology kind (known: star, leaf_spine)");
}

std::string Topology::NodeName(int node) const {
  const VertexProps& v = nodes_.at(static_cast<size_t>(node));
  switch (v.kind) {
    case NodeKind::kHost:
      return fmt::format("h{}", v.index);
    case NodeKind::kSwitch:
      return fmt::format("s{}", v.index);
    case NodeKind::kLeaf:
      return fmt::format("leaf{}", v.index);
    case NodeKind::kSpine:
      return fmt::format("spine{}", v.index);
  }
  return "?";
}

std::string Topology::LinkName(int link) const {
  const Link& l = links_.at(static_cast<size_t>(link));
  return NodeName(l.from) + "->" + NodeName(l.to);
}

Route Topology::RouteBetween(int src, int dst) const {
  if (src < 0 || dst < 0 || src >= num_hosts_ || dst >= num_hosts_ || src == dst) {
    throw std::invalid_argument(fmt::format(
        "route: bad host pair {} -> {} (hosts 0..{}, src != dst)", src, dst, num_hosts_ - 1));
  }
  Route r;
  r.links[0] = 2 * src;  // src -> its switch
  if (kind_ == config::TopologyKind::kLeafSpine) {
    const int src_leaf = HostLeaf(src);
    const int dst_leaf = HostLeaf(dst);
    if (src_leaf != dst_leaf) {
      const int spine = (src + dst) % spines_;
      const int up = 2 * num_hosts_ + 2 * (src_leaf * spines_ + spine);
      const int down = 2 * num_hosts_ + 2 * (dst_leaf * spines_ + spine) + 1;
      r.links[1] = up;
      r.links[2] = down;
      r.links[3] = 2 * dst + 1;
      r.size = 4;
      return r;
    }
  }
  r.links[1] = 2 * dst + 1;  // switch -> dst
  r.size = 2;
  return r;
}

int64_t Topology::RouteLatency(const Route& route) const {
  int64_t sum = 0;
  for (int32_t l : route) sum += links_[static_cast<size_t>(l)].latency_ns;
  return sum;
}

double Topology::RouteBottleneck(const Route& route) const {
  double b = std::numeric_limits<double>::infinity();
  for (int32_t l : route) b = std::min(b, links_[static_cast<size_t>(l)].capacity_Bps);
  return b;
}

std::vector<int32_t> Topology::ShortestPathLinks(int src, int dst) const {
  const Graph& g = *graph_;
  const size_t n = boost::num_vertices(g);
  using Edge = Graph::edge_descriptor;
  std::vector<Edge> pred_edge(n);
  std::vector<char> reached(n, 0);
  reached[static_cast<size_t>(src)] = 1;
  // Record, for every discovered vertex, the tree edge that reached it.
  struct Recorder : boost::default_bfs_visitor {
    std::vector<Edge>* pred;
    std::vector<char>* seen;
    void tree_edge(Edge e, const Graph& graph) const {
      const size_t t = boost::target(e, graph);
      (*pred)[t] = e;
      (*seen)[t] = 1;
    }
  };
  Recorder rec;
  rec.pred = &pred_edge;
  rec.seen = &reached;
  boost::breadth_first_search(g, static_cast<size_t>(src), boost::visitor(rec));
  std::vector<int32_t> path;
  if (!reached[static_cast<size_t>(dst)] || src == dst) return path;
  for (size_t v = static_cast<size_t>(dst); v != static_cast<size_t>(src);) {
    const Edge e = pred_edge[v];
    path.push_back(g[e].link);
    v = boost::source(e, g);
  }
  std::reverse(path.begin(), path.end());
  return path;
}

void Topology::Validate() const {
  const Graph& g = *graph_;
  if (boost::num_vertices(g) != nodes_.size() || boost::num_edges(g) != links_.size()) {
    throw std::logic_error("topology: graph and tables disagree on sizes");
  }
  std::vector<int> seen(links_.size(), 0);
  std::vector<int> out_deg(nodes_.size(), 0), in_deg(nodes_.size(), 0);
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    const int id = g[*it].link;
    if (id < 0 || static_cast<size_t>(id) >= links_.size()) {
      throw std::logic_error(fmt::format("topology: edge names unknown link {}", id));
    }
    const Link& l = links_[static_cast<size_t>(id)];
    if (static_cast<int>(boost::source(*it, g)) != l.from ||
        static_cast<int>(boost::target(*it, g)) != l.to) {
      throw std::logic_error(fmt::format("topology: link {} endpoints differ from its edge", id));
    }
    if (!(l.capacity_Bps > 0) || l.latency_ns < 0) {
      throw std::logic_error(fmt::format("topology: link {} has bad capacity or latency", id));
    }
    ++seen[static_cast<size_t>(id)];
    ++out_deg[static_cast<size_t>(l.from)];
    ++in_deg[static_cast<size_t>(l.to)];
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != 1) throw std::logic_error(fmt::format("topology: link {} not one edge", i));
  }
  for (int h = 0; h < num_hosts_; ++h) {
    if (nodes_[static_cast<size_t>(h)].kind != NodeKind::kHost ||
        out_deg[static_cast<size_t>(h)] != 1 || in_deg[static_cast<size_t>(h)] != 1) {
      throw std::logic_error(fmt::format("topology: host {} must have one link out and one in", h));
    }
  }
}

void Topology::SetLinkCapacity(int link, double capacity_Bps) {
  if (!(capacity_Bps > 0) || !std::isfinite(capacity_Bps)) {
    throw std::invalid_argument(
        fmt::format("topology: link capacity must be > 0 bytes/s, got {}", capacity_Bps));
  }
  links_.at(static_cast<size_t>(link)).capacity_Bps = capacity_Bps;
}

}  // namespace poseidon::sim
