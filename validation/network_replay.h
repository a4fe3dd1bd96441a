// validation/network_replay.h: the scenario's network model on a live run's own traffic.
//
// Every message a live run sent between actors on different machines is sent again through the
// simulator's network (sim::ReplayNetwork: the same connections, queues and model) at the moment
// it was sent live; the model's time in flight is then compared with the live one. Near zero
// while the iteration time is off, the simulated schedule is what differs; far from zero, the
// network model.
//
//   const double err = NetworkReplayError(scenario, ReadTraceFile(dir + "/live.json"), dir);
#pragma once

#include <string>
#include <vector>

#include "config/scenario.h"
#include "core/job.h"
#include "sim/cluster.h"
#include "validation/trace_reader.h"

namespace poseidon::validation {

// A network message of a live trace: when it was sent and delivered (ns, from the first send),
// by whom, to whom, its payload and clock.
struct LiveMessage {
  sim::SimJob::ReplayMessage sent;
  core::TimeNs delivered = 0;
  int64_t clock = 0;
};

// The messages of `events` between actors of `layout` on different machines, in send order (a
// connection's messages then in delivery order, which is theirs); a message to or from an actor
// the layout does not have is left out.
std::vector<LiveMessage> LiveMessagesFromTrace(const std::vector<TraceRecord>& events,
                                               const core::JobLayout& layout);

// The error, in percent, of the messages' summed time in flight in the model against live, over
// the clocks after warm-up; writes every message to DIR/net-replay.csv. NAN if there is none.
double NetworkReplayError(const config::ScenarioSpec& sim_scenario,
                          const std::vector<TraceRecord>& live_events, const std::string& dir);

}  // namespace poseidon::validation
