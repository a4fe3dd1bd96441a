// Event-queue throughput in the classic "hold" model: the queue holds N pending events; each
// step pops the earliest and pushes one a random distance later, as a simulation does.
//   build/bench/engine_benchmark
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "sim/engine.h"

namespace {

void BM_EventQueueHold(benchmark::State& state) {
  const int64_t pending = state.range(0);
  poseidon::sim::EventQueue q;
  q.Reserve(static_cast<size_t>(pending) + 1);
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int64_t> delay(1, 1'000'000);
  for (int64_t i = 0; i < pending; ++i) q.Push(delay(rng), 0, static_cast<uint32_t>(i), 0);
  // Delays are drawn up front (a ring of 4096) so that the figure is the queue's, not the RNG's.
  std::vector<int64_t> delays(4096);
  for (auto& d : delays) d = delay(rng);
  size_t k = 0;
  poseidon::sim::Event e;
  for (auto _ : state) {
    q.Pop(&e);
    q.Push(e.time + delays[k++ & 4095], e.kind, e.target, e.arg);
  }
  benchmark::DoNotOptimize(e);
  state.SetItemsProcessed(state.iterations());  // one event = one pop + one push
}
BENCHMARK(BM_EventQueueHold)->Arg(100)->Arg(10'000)->Arg(1'000'000);

}  // namespace

BENCHMARK_MAIN();
