#include "sim/sweep.h"

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "sim/simulation.h"

namespace poseidon::sim {
namespace {

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c == '\n' ? ' ' : c;
  }
  return o + "\"";
}

}  // namespace

std::string RunSweep(const config::SweepSpec& sweep, int threads, const SweepProgress& progress) {
  const int total = static_cast<int>(sweep.points.size());
  std::vector<std::string> rows(total);
  std::atomic<int> next{0};
  std::mutex mu;
  int done = 0;
  auto work = [&]() {
    for (;;) {
      const int i = next.fetch_add(1);
      if (i >= total) return;
      const config::SweepPoint& p = sweep.points[i];
      std::string row;
      for (const auto& [path, value] : p.values) row += CsvField(value) + ",";
      std::string error;
      ScenarioResult r;
      try {
        r = SimulateScenario(p.scenario, {});
        if (r.deadlocked) error = "deadlock: " + r.deadlock_report;
      } catch (const std::exception& e) {
        error = e.what();
      }
      row += CsvRow(r) + "," + CsvField(error);
      std::lock_guard<std::mutex> lock(mu);
      rows[i] = std::move(row);
      ++done;
      if (progress) progress(done, total);
    }
  };
  std::vector<std::thread> pool;
  const int n = std::max(1, std::min(threads, total));
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  std::string out;
  for (const auto& axis : sweep.axes) out += CsvField(axis.path) + ",";
  out += CsvHeader() + ",error\n";
  for (const auto& row : rows) out += row + "\n";
  return out;
}

}  // namespace poseidon::sim
