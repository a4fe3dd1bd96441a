// Flow-level network model throughput: flow updates (a start or an end, each followed by the
// incremental max-min re-solve it causes) per second, reported as items_per_second.
//
//   build-net/bench/flow_benchmark --benchmark_min_time=2
//
// Workloads, all in steady state (every iteration ends the next flow(s) to finish and starts as
// many new ones at that instant, so the number of concurrent flows stays put):
//   - Random/N/H: N concurrent flows between random host pairs of an H-host star, sizes uniform in
//     [10 KB, 10 MB]. Sparse pairs give small sharing components; dense ones (N >> H) one big one.
//   - LeafSpine/N: the same on 1024 hosts, 32 per leaf, 4 spines, 2:1 oversubscribed.
//   - Incast/N: N senders into one receiver, random sizes; every end changes all N rates, so the
//     cost per update is O(N) by nature.
// Counters: visits/solve = flow-on-link entries the solver scanned per re-solve; changes/solve =
// flows whose rate (and finish time) moved.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "sim/network/flow_network.h"
#include "sim/network/topology.h"

namespace poseidon::sim {
namespace {

config::NetworkSpec Spec() {
  config::NetworkSpec s;
  s.host_bandwidth_Bps = 1.25e9;  // 10 Gbit/s
  s.latency_ns = 5000;
  return s;
}

struct Workload {
  std::mt19937_64 rng{12345};
  int hosts = 0;
  int incast_dst = -1;  // >= 0: every flow goes there, from the sender that just finished
  int64_t Size() { return 10'000 + static_cast<int64_t>(rng() % 9'990'000); }
  void Start(FlowNetwork& net, TimeNs now, uint64_t tag) {
    if (incast_dst >= 0) {
      net.StartFlow(now, static_cast<int>(tag % static_cast<uint64_t>(hosts - 1)) + 1, incast_dst,
                    Size(), tag);
      return;
    }
    const int src = static_cast<int>(rng() % static_cast<uint64_t>(hosts));
    int dst = static_cast<int>(rng() % static_cast<uint64_t>(hosts - 1));
    if (dst >= src) ++dst;
    net.StartFlow(now, src, dst, Size(), tag);
  }
};

void RunSteady(benchmark::State& state, FlowNetwork& net, Workload& w, int concurrent) {
  for (int i = 0; i < concurrent; ++i) w.Start(net, 0, static_cast<uint64_t>(i));
  std::vector<FlowDone> done;
  // Warm up: let the initial burst mix before measuring.
  for (int i = 0; i < concurrent; ++i) {
    const TimeNs t = net.NextEventTime();
    done.clear();
    net.AdvanceTo(t, &done);
    for (const FlowDone& d : done) w.Start(net, t, d.tag);
  }
  const auto before = net.solver_stats();
  int64_t updates = 0;
  for (auto _ : state) {
    const TimeNs t = net.NextEventTime();
    done.clear();
    net.AdvanceTo(t, &done);
    for (const FlowDone& d : done) w.Start(net, t, d.tag);
    updates += 2 * static_cast<int64_t>(done.size());
  }
  const auto after = net.solver_stats();
  const double solves = static_cast<double>(after.solves - before.solves);
  state.SetItemsProcessed(updates);
  state.counters["active"] = net.active_flows();
  state.counters["visits/solve"] =
      static_cast<double>(after.flow_visits - before.flow_visits) / solves;
  state.counters["changes/solve"] =
      static_cast<double>(after.rate_changes - before.rate_changes) / solves;
  state.counters["links/solve"] =
      static_cast<double>(after.link_visits - before.link_visits) / solves;
  state.counters["rounds/solve"] = static_cast<double>(after.rounds - before.rounds) / solves;
}

void BM_Random(benchmark::State& state) {
  const int concurrent = static_cast<int>(state.range(0));
  Workload w;
  w.hosts = static_cast<int>(state.range(1));
  FlowNetwork net(Topology::Star(w.hosts, Spec().host_bandwidth_Bps, Spec().latency_ns), Spec());
  RunSteady(state, net, w, concurrent);
}
BENCHMARK(BM_Random)
    ->ArgNames({"flows", "hosts"})
    ->Args({100, 1024})
    ->Args({1000, 1024})
    ->Args({10000, 1024})
    ->Args({10000, 16384});

void BM_LeafSpine(benchmark::State& state) {
  const int concurrent = static_cast<int>(state.range(0));
  Workload w;
  w.hosts = 1024;
  config::NetworkSpec spec = Spec();
  FlowNetwork net(
      Topology::LeafSpine(w.hosts, 32, 4, spec.host_bandwidth_Bps, 2.0, spec.latency_ns), spec);
  RunSteady(state, net, w, concurrent);
}
BENCHMARK(BM_LeafSpine)->ArgName("flows")->Arg(1000)->Arg(10000);

void BM_Incast(benchmark::State& state) {
  const int concurrent = static_cast<int>(state.range(0));
  Workload w;
  w.hosts = concurrent + 1;
  w.incast_dst = 0;
  FlowNetwork net(Topology::Star(w.hosts, Spec().host_bandwidth_Bps, Spec().latency_ns), Spec());
  RunSteady(state, net, w, concurrent);
}
BENCHMARK(BM_Incast)->ArgName("flows")->Arg(100)->Arg(1000)->Arg(10000);

}  // namespace
}  // namespace poseidon::sim

BENCHMARK_MAIN();
