// sim/sweep.h: run every point of a sweep (or one shard of it), in parallel, and write one CSV
// row per point; join shards' CSVs back into the whole sweep's.
//
// Points are simulated by `threads` worker threads (each point is an independent simulation:
// no shared state), and rows are written in point order, so the output is byte-identical
// whatever the thread count. Points whose inputs are identical (same canonical merged scenario
// document, config::SweepPoint::input_key) are simulated once and their row repeated.
//
// Sharding, for sweeps spread over many machines (a Slurm job array, GNU parallel):
//   shard I of N (0 <= I < N) runs the contiguous block of points [I*P/N, (I+1)*P/N) and writes
//   a first line "# poseidon-sweep-shard I/N points A-B of P name=NAME" before the header;
//   MergeSweepShards() checks that exactly the shards 0..N-1 of one sweep are given (in any
//   order), drops those lines and joins the rows in point order, giving byte for byte the CSV of
//   the sweep run whole.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/scenario.h"

namespace poseidon::sim {

// Called after each finished point (from a worker thread, serialised by the runner); `total` is
// the number of points this run computes (the shard's, duplicates counted once).
using SweepProgress = std::function<void(int done, int total)>;

struct SweepOptions {
  int threads = 1;
  int shard_index = 0;  // 0 <= shard_index < shard_count
  int shard_count = 1;  // 1: the whole sweep, no shard line
  SweepProgress progress;
};

// Returns the CSV text: a header with the sweep's axes then the result columns, then one row
// per point. A point that deadlocks or fails gets its error in the `error` column.
std::string RunSweep(const config::SweepSpec& sweep, const SweepOptions& options);
std::string RunSweep(const config::SweepSpec& sweep, int threads, const SweepProgress& progress);

// Parses "I/N" (0 <= I < N); throws config::ConfigError naming the flag on anything else.
void ParseShard(const std::string& text, int* index, int* count);

// Joins shard CSVs (texts with the names they were read from, for errors). Throws
// config::ConfigError naming the file when a shard line is missing or malformed, the shards
// belong to different sweeps, one is missing or given twice, or the headers differ.
std::string MergeSweepShards(const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace poseidon::sim
