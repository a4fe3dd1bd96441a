// sim/parallel.h: runs independent simulations on a few threads (sweep, compare, reproduce).
//
//   ParallelFor(n, threads, [&](int i) { results[i] = SimulateScenario(specs[i], {}); });
//
// fn(i) runs once for every i in [0, n), on up to `threads` threads (this one included), each
// taking the next unclaimed index; results must be written per index (the order they finish in
// is not fixed), so the caller's output is the same whatever `threads`.
#pragma once

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace poseidon::sim {

template <typename Fn>
void ParallelFor(int n, int threads, Fn fn) {
  std::atomic<int> next{0};
  auto work = [&] {
    for (int i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, std::min(threads, n)); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace poseidon::sim
