// sim/sweep.h: run every point of a sweep, in parallel, and write one CSV row per point.
//
// Points are simulated by `threads` worker threads (each point is an independent simulation:
// no shared state), and rows are written in point order, so the output is byte-identical
// whatever the thread count.
#pragma once

#include <functional>
#include <string>

#include "config/scenario.h"

namespace poseidon::sim {

// Called after each finished point (from a worker thread, serialised by the runner).
using SweepProgress = std::function<void(int done, int total)>;

// Returns the CSV text: a header with the sweep's axes then the result columns, then one row
// per point. A point that deadlocks or fails gets its error in the `error` column.
std::string RunSweep(const config::SweepSpec& sweep, int threads, const SweepProgress& progress);

}  // namespace poseidon::sim
