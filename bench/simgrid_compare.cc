// Our flow model against SimGrid's (CM02, max-min without TCP corrections) on the same flow
// workloads, topologies and routes. Built only when Debian's libsimgrid-dev is installed.
//
//   build/bench/simgrid_compare [hosts=64]
//
// Every workload is a list of waves of flows; a wave starts when the previous one has fully
// arrived (a barrier), so the workload's completion time is a sum of max-min outcomes:
//   one transfer     one 100 MB flow between two hosts on different leaves;
//   incast           every host but 0 sends 1..5 MB (size varies by sender) to host 0;
//   all-to-all       every ordered pair, 0.25..1.25 MB (varies by pair);
//   ps push/pull     4 shards on hosts 0..3 (co-located with workers); every host pushes 2 MB
//                    to every shard, then (next wave) every shard sends 2 MB to every host;
//   ring all-reduce  2(n-1) waves; in each, host i sends 64 MB / n to host i+1 (mod n).
// Topologies: a star (one non-blocking switch, 10 Gbit/s NICs, 5 us) and a leaf-spine (8 hosts
// per leaf, 2 spines, 2:1 oversubscribed, same NICs). The SimGrid platform is generated from our
// Topology: one SimGrid link per directed link of ours (same capacity and latency, SHARED in
// SimGrid's sense = one direction), one explicit route per host pair used, so both models see the
// same graph and the same routes.
//
// SimGrid configuration (CM02 with every correction neutral): network/model:CM02,
// network/latency-factor:1, network/bandwidth-factor:1, network/weight-S:0,
// network/crosstraffic:0, network/TCP-gamma:1e18 (no window bound). Ours: efficiency 1, no
// per-message overhead. A lone flow then takes L + S/B in both.
//
// Output: one row per (topology, workload): completion time in each model, their relative
// difference, the wall time of each (best of 3; SimGrid: the simulated comms only, platform
// loading excluded; ours: building the model and running the waves) and the ratio. Exit status
// 1 when a difference exceeds 2%.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include <simgrid/s4u.hpp>

#include "sim/network/flow_network.h"
#include "sim/network/topology.h"

namespace sg4 = simgrid::s4u;
using poseidon::sim::FlowDone;
using poseidon::sim::FlowNetwork;
using poseidon::sim::Route;
using poseidon::sim::TimeNs;
using poseidon::sim::Topology;

namespace {

struct FlowSpec {
  int src, dst;
  int64_t bytes;
};
using Wave = std::vector<FlowSpec>;
struct Workload {
  std::string name;
  std::vector<Wave> waves;
};

constexpr double kHostBps = 10e9 / 8;
constexpr int64_t kLatencyNs = 5000;

std::vector<Workload> Workloads(int n) {
  std::vector<Workload> w;
  w.push_back({"one transfer", {{{0, n - 1, 100'000'000}}}});
  Wave incast;
  for (int s = 1; s < n; ++s) incast.push_back({s, 0, 1'000'000 * (1 + s % 5)});
  w.push_back({"incast " + std::to_string(n - 1) + "-to-1", {incast}});
  Wave a2a;
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      if (s != d) a2a.push_back({s, d, 250'000 * (1 + (7 * s + 3 * d) % 5)});
    }
  }
  w.push_back({"all-to-all", {a2a}});
  Wave push, pull;
  for (int h = 0; h < n; ++h) {
    for (int sh = 0; sh < 4; ++sh) {
      if (h == sh) continue;  // co-located: local, not on the network
      push.push_back({h, sh, 2'000'000});
      pull.push_back({sh, h, 2'000'000});
    }
  }
  w.push_back({"ps push/pull", {push, pull}});
  Workload ring{"ring all-reduce", {}};
  for (int step = 0; step < 2 * (n - 1); ++step) {
    Wave wave;
    for (int h = 0; h < n; ++h) wave.push_back({h, (h + 1) % n, 64'000'000 / n});
    ring.waves.push_back(wave);
  }
  w.push_back(ring);
  return w;
}

struct Case {
  std::string topo_name;
  const Topology* topo;
  std::string prefix;  // SimGrid names of this topology's hosts and links
  Workload work;
  double ours_s = 0, sg_s = 0;
  double ours_wall = 0, sg_wall = 0;
};

double WallNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs the workload in our flow model; returns the completion time in seconds.
double RunOurs(const Topology& topo, const Workload& w) {
  poseidon::config::NetworkSpec spec;
  spec.efficiency = 1;
  spec.per_message_overhead_ns = 0;
  FlowNetwork net(topo, spec);
  std::vector<FlowDone> done;
  TimeNs t = 0;
  for (const Wave& wave : w.waves) {
    for (size_t i = 0; i < wave.size(); ++i) {
      net.StartFlow(t, wave[i].src, wave[i].dst, wave[i].bytes, i);
    }
    size_t arrived = 0;
    TimeNs end = t;
    while (arrived < wave.size()) {
      done.clear();
      net.AdvanceTo(net.NextEventTime(), &done);
      for (const FlowDone& d : done) end = std::max(end, d.delivered_at);
      arrived += done.size();
    }
    t = end;
  }
  return static_cast<double>(t) * 1e-9;
}

// The SimGrid platform: both topologies side by side in one Full-routing zone.
std::string Platform(const std::vector<Case>& cases) {
  std::string x =
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n<zone id=\"world\" routing=\"Full\">\n";
  std::set<std::string> done_topo;
  std::map<std::string, std::set<std::pair<int, int>>> pairs;
  for (const Case& c : cases) {
    for (const Wave& wave : c.work.waves) {
      for (const FlowSpec& f : wave) pairs[c.prefix].insert({f.src, f.dst});
    }
  }
  // The DTD wants every host and link of a zone before its routes.
  std::string routes;
  for (const Case& c : cases) {
    if (!done_topo.insert(c.prefix).second) continue;
    const Topology& t = *c.topo;
    for (int h = 0; h < t.num_hosts(); ++h) {
      x += "<host id=\"" + c.prefix + "h" + std::to_string(h) + "\" speed=\"1Gf\"/>\n";
    }
    for (int l = 0; l < t.num_links(); ++l) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "<link id=\"%sl%d\" bandwidth=\"%.17gBps\" latency=\"%lldns\"/>\n",
                    c.prefix.c_str(), l, t.link(l).capacity_Bps,
                    static_cast<long long>(t.link(l).latency_ns));
      x += buf;
    }
    for (const auto& [s, d] : pairs[c.prefix]) {
      routes += "<route src=\"" + c.prefix + "h" + std::to_string(s) + "\" dst=\"" + c.prefix +
                "h" + std::to_string(d) + "\" symmetrical=\"NO\">";
      const Route r = t.RouteBetween(s, d);
      for (int32_t l : r) routes += "<link_ctn id=\"" + c.prefix + "l" + std::to_string(l) + "\"/>";
      routes += "</route>\n";
    }
  }
  x += routes;
  x += "</zone>\n</platform>\n";
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 64;
  if (argc > 1) n = std::atoi(argv[1]);
  if (n < 16 || n % 8 != 0) {
    std::fprintf(stderr, "simgrid_compare: error: hosts must be a multiple of 8, >= 16 (got %s)\n",
                 argc > 1 ? argv[1] : "");
    return 2;
  }
  const Topology star = Topology::Star(n, kHostBps, kLatencyNs);
  const Topology ls = Topology::LeafSpine(n, 8, 2, kHostBps, 2.0, kLatencyNs);
  std::vector<Case> cases;
  for (const auto& w : Workloads(n)) cases.push_back({"star", &star, "a", w});
  for (const auto& w : Workloads(n)) cases.push_back({"leaf-spine 2:1", &ls, "b", w});

  // Ours first (best of 3 wall times; the result is deterministic).
  for (Case& c : cases) {
    c.ours_wall = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const double t0 = WallNow();
      c.ours_s = RunOurs(*c.topo, c.work);
      c.ours_wall = std::min(c.ours_wall, WallNow() - t0);
    }
  }

  const std::string platform_file = "/tmp/poseidon_simgrid_" + std::to_string(::getpid()) + ".xml";
  std::ofstream(platform_file) << Platform(cases);
  int sg_argc = 1;
  char* sg_argv[] = {argv[0], nullptr};
  sg4::Engine e(&sg_argc, sg_argv);
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/latency-factor:1");
  sg4::Engine::set_config("network/bandwidth-factor:1");
  sg4::Engine::set_config("network/weight-S:0");
  sg4::Engine::set_config("network/crosstraffic:0");
  sg4::Engine::set_config("network/TCP-gamma:1e18");
  e.load_platform(platform_file);
  std::remove(platform_file.c_str());

  // Each case three times in SimGrid too (best wall time; the first run also pays SimGrid's
  // warm-up); the completion time must come out the same every time.
  for (Case& c : cases) c.sg_wall = 1e30;
  sg4::Actor::create("driver", e.host_by_name("ah0"), [&]() {
    for (int rep = 0; rep < 3; ++rep) for (Case& c : cases) {
      const double wall0 = WallNow();
      const double t0 = sg4::Engine::get_clock();
      for (const Wave& wave : c.work.waves) {
        std::vector<sg4::CommPtr> comms;
        comms.reserve(wave.size());
        for (const FlowSpec& f : wave) {
          comms.push_back(sg4::Comm::sendto_async(
              e.host_by_name(c.prefix + "h" + std::to_string(f.src)),
              e.host_by_name(c.prefix + "h" + std::to_string(f.dst)), static_cast<uint64_t>(f.bytes)));
        }
        sg4::Comm::wait_all(comms);
      }
      const double took = sg4::Engine::get_clock() - t0;
      if (rep > 0 && std::abs(took - c.sg_s) > 1e-9 * c.sg_s) {
        std::fprintf(stderr, "simgrid_compare: SimGrid gave %.9g s then %.9g s for %s\n", c.sg_s,
                     took, c.work.name.c_str());
      }
      c.sg_s = took;
      c.sg_wall = std::min(c.sg_wall, WallNow() - wall0);
    }
  });
  e.run();

  std::printf("%d hosts, 10 Gbit/s NICs, 5 us; leaf-spine: 8 hosts/leaf, 2 spines, 2:1\n", n);
  std::printf("| topology | workload | flows | SimGrid CM02 (ms) | ours (ms) | difference | "
              "SimGrid wall (ms) | ours wall (ms) | speed-up |\n|---|---|---|---|---|---|---|---|---|\n");
  double worst = 0, sg_total = 0, ours_total = 0;
  for (const Case& c : cases) {
    sg_total += c.sg_wall;
    ours_total += c.ours_wall;
    size_t flows = 0;
    for (const Wave& w : c.work.waves) flows += w.size();
    const double diff = (c.ours_s - c.sg_s) / c.sg_s;
    worst = std::max(worst, std::abs(diff));
    std::printf("| %s | %s | %zu | %.4f | %.4f | %+.4f%% | %.2f | %.3f | %.0fx |\n",
                c.topo_name.c_str(), c.work.name.c_str(), flows, c.sg_s * 1e3, c.ours_s * 1e3,
                100 * diff, c.sg_wall * 1e3, c.ours_wall * 1e3, c.sg_wall / c.ours_wall);
  }
  std::printf("| all | | | | | | %.2f | %.3f | %.0fx |\n", sg_total * 1e3, ours_total * 1e3,
              sg_total / ours_total);
  std::printf("largest |difference|: %.4f%% (goal: within 2%%); wall times best of 3\n",
              100 * worst);
  return worst <= 0.02 ? 0 : 1;
}
