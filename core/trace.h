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

#include <cstdint>
#include <string>
#include <vector>

#include "core/host.h"
#include "core/job.h"
#include "core/model.h"

namespace poseidon::core {

// The lanes of an actor (Chrome "threads"), and how an (actor, device, lane) is written as the
// event's "tid": on device 0 (the actor's own lanes) tid = actor * kTraceLanesPerActor + lane;
// on device d > 0 of its machine, tid = kTraceDeviceTidBase + (actor *
// kTraceMaxDevicesPerMachine + d) * kTraceLanesPerActor + lane. A reader recovers the actor
// with DecodeTraceThreadId, never by copying these numbers.
enum TraceLane : int {
  kLaneCompute = 0, kLaneCopy = 1, kLaneServer = 2, kLaneSend = 3, kLaneProtocol = 4,
  kLaneReduce = 5, kLaneBroadcast = 6
};
inline constexpr int kTraceLanesPerActor = 8;
inline constexpr int64_t kTraceDeviceTidBase = 1'000'000'000;
inline constexpr int64_t kTraceMaxDevicesPerMachine = 1024;

struct TraceThread {
  ActorId actor = -1;
  int32_t device = 0;
  int lane = kLaneCompute;
};
int64_t TraceThreadId(ActorId actor, int32_t device, int lane);
// The inverse of TraceThreadId: false for a tid this formatter never writes (negative, or a
// lane number without a lane).
bool DecodeTraceThreadId(int64_t tid, TraceThread* out);

// The event both hosts record for a message in flight from `sent` to `delivered`.
TraceEvent MessageEvent(const Message& m, TimeNs sent, TimeNs delivered);
// The event both hosts record for a compute task of `actor` that ran [begin, end).
TraceEvent TaskEvent(ActorId actor, const ComputeTask& task, TimeNs begin, TimeNs end);
// The event a host records for `actor`'s process having used `cpu_ns` of CPU by `ts`. It is
// written as a Chrome counter ("ph":"C", "cat":"host", named "ACTOR cpu", "args":{"cpu_ns":N})
// on the actor's protocol lane, which it does not name (no thread_name of its own).
TraceEvent ProcessCpuEvent(ActorId actor, TimeNs ts, int64_t cpu_ns);

void AppendChromeTrace(const std::vector<TraceEvent>& events, const JobLayout& layout,
                       const Model& model, std::string* out);

// Joins traces this formatter wrote (one per live process; they share the job's time base) into
// one: every event once, the metadata naming machines and lanes once. Returns false and says
// which input and why in *error when a text is not in this formatter's layout.
bool MergeChromeTraces(const std::vector<std::string>& traces, std::string* out,
                       std::string* error);

}  // namespace poseidon::core
