// core/trace.h: Chrome-trace JSON (the format Perfetto and chrome://tracing open) for the
// events of a run. Both hosts feed the same TraceEvents through this one formatter, so a
// simulated and a live run of one scenario carry the same event names.
//
// Layout of the timeline: one process per machine ("machine 3"), one thread per actor lane
// ("worker 2 compute", "worker 2 copy", "shard 1 update", "worker 2 send"). Timestamps are
// written in microseconds with exactly three decimals (integer nanoseconds), so output is
// byte-identical for identical events.
//
// This is formatting only: the caller decides where the text goes.
#pragma once

#include <string>
#include <vector>

#include "core/host.h"
#include "core/job.h"
#include "core/model.h"

namespace poseidon::core {

void AppendChromeTrace(const std::vector<TraceEvent>& events, const JobLayout& layout,
                       const Model& model, std::string* out);

}  // namespace poseidon::core
