#include "sim/sweep.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "sim/parallel.h"
#include "sim/simulation.h"
#include "sim/text_escape.h"

namespace poseidon::sim {
namespace {

using config::ConfigError;

constexpr const char* kShardTag = "# poseidon-sweep-shard ";

}  // namespace

std::string RunSweep(const config::SweepSpec& sweep, int threads, const SweepProgress& progress) {
  SweepOptions o;
  o.threads = threads;
  o.progress = progress;
  return RunSweep(sweep, o);
}

std::string RunSweep(const config::SweepSpec& sweep, const SweepOptions& options) {
  const int64_t total = static_cast<int64_t>(sweep.points.size());
  const int n_shards = std::max(1, options.shard_count);
  const int shard = options.shard_index;
  if (shard < 0 || shard >= n_shards) {
    throw ConfigError(fmt::format("--shard {}/{}: error: the index must be in 0..{}", shard, n_shards,
                                  n_shards - 1));
  }
  const int64_t first = total * shard / n_shards;
  const int64_t last = total * (shard + 1) / n_shards;  // exclusive

  // Points with identical inputs are simulated once: `unique` lists the first point of each
  // distinct input, `source[i]` the unique job whose result point i shows.
  std::vector<int64_t> unique;
  std::vector<size_t> source(static_cast<size_t>(last - first));
  std::map<std::string, size_t> seen;
  for (int64_t i = first; i < last; ++i) {
    const std::string& key = sweep.points[static_cast<size_t>(i)].input_key;
    auto [it, inserted] = seen.emplace(key, unique.size());
    if (key.empty() && !inserted) {  // no key (a spec built in code): never merge
      it->second = unique.size();
      inserted = true;
    }
    if (inserted) unique.push_back(i);
    source[static_cast<size_t>(i - first)] = it->second;
  }

  const int jobs = static_cast<int>(unique.size());
  std::vector<std::string> results(unique.size());
  std::mutex mu;
  int done = 0;
  ParallelFor(jobs, options.threads, [&](int j) {
    const config::SweepPoint& p = sweep.points[static_cast<size_t>(unique[static_cast<size_t>(j)])];
    std::string error;
    ScenarioResult r;
    try {
      r = SimulateScenario(p.scenario, {});
      if (r.deadlocked) error = "deadlock: " + r.deadlock_report;
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::string row = CsvRow(r) + "," + CsvField(error);
    std::lock_guard<std::mutex> lock(mu);
    results[static_cast<size_t>(j)] = std::move(row);
    ++done;
    if (options.progress) options.progress(done, jobs);
  });

  std::string out;
  if (n_shards > 1) {
    out += fmt::format("{}{}/{} points {}-{} of {} name={}\n", kShardTag, shard, n_shards, first,
                       last, total, sweep.name);
  }
  for (const auto& axis : sweep.axes) out += CsvField(axis.path) + ",";
  out += CsvHeader() + ",error\n";
  for (int64_t i = first; i < last; ++i) {
    for (const auto& [path, value] : sweep.points[static_cast<size_t>(i)].values) {
      out += CsvField(value) + ",";
    }
    out += results[source[static_cast<size_t>(i - first)]] + "\n";
  }
  return out;
}

void ParseShard(const std::string& text, int* index, int* count) {
  const std::string what = fmt::format(
      "--shard {}: error: expected I/N with 0 <= I < N (e.g. --shard 0/4 ... --shard 3/4; under Slurm "
      "--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)",
      text);
  const size_t slash = text.find('/');
  if (slash == std::string::npos) throw ConfigError(what);
  try {
    size_t a = 0, b = 0;
    const std::string si = text.substr(0, slash), sn = text.substr(slash + 1);
    const long i = std::stol(si, &a), nn = std::stol(sn, &b);
    if (a != si.size() || b != sn.size() || nn < 1 || nn > 1000000 || i < 0 || i >= nn) {
      throw ConfigError(what);
    }
    *index = static_cast<int>(i);
    *count = static_cast<int>(nn);
  } catch (const std::logic_error&) {
    throw ConfigError(what);
  }
}

std::string MergeSweepShards(const std::vector<std::pair<std::string, std::string>>& files) {
  struct Shard {
    std::string file;
    int index = 0, count = 0;
    int64_t first = 0, last = 0, total = 0;
    std::string name, header, rows;
  };
  if (files.empty()) throw ConfigError("sweep --merge: give the shards' CSV files");
  std::vector<Shard> shards;
  for (const auto& [file, text] : files) {
    Shard s;
    s.file = file;
    const size_t eol = text.find('\n');
    const std::string line = text.substr(0, eol);
    char name[512] = {};
    long long first = 0, last = 0, total = 0;
    if (line.rfind(kShardTag, 0) != 0 ||
        std::sscanf(line.c_str() + std::char_traits<char>::length(kShardTag),
                    "%d/%d points %lld-%lld of %lld name=%511[^\n]", &s.index, &s.count, &first,
                    &last, &total, name) != 6) {
      throw ConfigError(fmt::format(
          "{}:1: error: not a sweep shard (its first line must be '{}I/N points ...'); give the "
          "files written by 'poseidon sweep --shard I/N'",
          file, kShardTag));
    }
    s.first = first;
    s.last = last;
    s.total = total;
    s.name = name;
    const size_t eoh = eol == std::string::npos ? std::string::npos : text.find('\n', eol + 1);
    if (eoh == std::string::npos) {
      throw ConfigError(fmt::format("{}:2: error: the CSV header is missing; the shard file is "
                                    "truncated, run that shard again",
                                    file));
    }
    s.header = text.substr(eol + 1, eoh - eol);
    s.rows = text.substr(eoh + 1);
    shards.push_back(std::move(s));
  }
  std::sort(shards.begin(), shards.end(),
            [](const Shard& a, const Shard& b) { return a.index < b.index; });
  const Shard& s0 = shards.front();
  for (size_t k = 0; k < shards.size(); ++k) {
    const Shard& s = shards[k];
    if (s.count != s0.count || s.total != s0.total || s.name != s0.name || s.header != s0.header) {
      throw ConfigError(fmt::format(
          "{}: error: shard of a different sweep ({}/{} of '{}', {} points) than {} ({}/{} of "
          "'{}', {} points); merge the shards of one sweep only",
          s.file, s.index, s.count, s.name, s.total, s0.file, s0.index, s0.count, s0.name,
          s0.total));
    }
    if (k > 0 && s.index == shards[k - 1].index) {
      throw ConfigError(fmt::format("{}: error: shard {}/{} is given twice (also {}); give each "
                                    "shard once",
                                    s.file, s.index, s.count, shards[k - 1].file));
    }
  }
  for (int i = 0; i < s0.count; ++i) {
    if (i >= static_cast<int>(shards.size()) || shards[static_cast<size_t>(i)].index != i) {
      throw ConfigError(fmt::format("sweep --merge: shard {}/{} of '{}' is missing; run it "
                                    "(poseidon sweep ... --shard {}/{}) and merge again",
                                    i, s0.count, s0.name, i, s0.count));
    }
    const Shard& s = shards[static_cast<size_t>(i)];
    const int64_t rows = std::count(s.rows.begin(), s.rows.end(), '\n');
    if (rows != s.last - s.first) {
      throw ConfigError(fmt::format("{}: error: shard {}/{} holds {} rows, expected {} (points "
                                    "{}-{}); the file is truncated, run that shard again",
                                    s.file, i, s.count, rows, s.last - s.first, s.first, s.last));
    }
  }
  std::string out = s0.header;
  for (const Shard& s : shards) out += s.rows;
  return out;
}

}  // namespace poseidon::sim
