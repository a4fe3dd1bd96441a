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

#include "sim/cluster.h"

namespace poseidon::sim {

// `segment_wire_bytes`: the network's segment in wire bytes (segment_bytes / efficiency), the
// unit of the windows printed; > 0.
std::string WindowReport(const std::vector<ConnectionWindows>& windows, double segment_wire_bytes);

}  // namespace poseidon::sim
