// sim/window_report.h: the network model's congestion windows over a run, as text.
//
// One block per connection, in the form `analysis/tcp_trace.py episodes` prints a live run's
// (docs/validation.md, "The MLP's two paces"), so that a simulated run's windows can be read
// beside a traced live run's: every loss episode (when, the window before, the window its sender
// had when it heard of the loss, the threshold after, what it lost) and the window at the end,
// in segments.
//
//   worker 1 -> shard 0: 2 loss episodes
//        0.501 s loss: window 1865 (heard 1870) -> threshold 935, 11 segments lost, window down to
//        935
//     at the end: window 932, threshold 932
#pragma once

#include <string>
#include <vector>

#include "config/specs.h"
#include "sim/cluster.h"

namespace poseidon::sim {

// Windows in segments of the network's own (spec.segment_bytes, or Linux's MSS of 1448 bytes for
// a network without losses), counted in wire bytes as the queue model counts them.
std::string WindowReport(const std::vector<ConnectionWindows>& windows,
                         const config::NetworkSpec& spec);

}  // namespace poseidon::sim
