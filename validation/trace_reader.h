// validation/trace_reader.h: the one reader of the Chrome-trace JSON that core/trace.h writes
// (`poseidon simulate --trace`, `launch --trace-dir`, `trace merge`), returning typed events.
// Everything that reads a trace back (validate's pace and network replay, the tests) goes
// through it; nothing parses a trace with regular expressions or copies the writer's lane
// numbers (the actor comes from core::DecodeTraceThreadId).
//
//   const std::vector<TraceRecord> events = ReadTraceFile("out/validate/config-0/sim.json");
//   for (const TraceRecord& e : events)
//     if (e.kind == TraceRecordKind::kIterationEnd) use(e.thread.actor, e.iteration, e.ts);
//
// The text is parsed as JSON (yaml-cpp reads JSON documents) and then checked against the
// writer's layout: an object with a "traceEvents" array whose events carry "ph", "name", "pid",
// and, but for metadata ("ph":"M"), "cat", "tid", "ts" (and "dur" for a span) and
// "args":{"clock":N[,"bytes":N]}, or for a process's CPU counter ("ph":"C") "args":{"cpu_ns":N}.
// Times are integer nanoseconds: the writer's microseconds with at most three decimals are read
// exactly. A text that is not JSON or not in that layout is one TraceError "SOURCE:LINE:COLUMN:
// error: WHAT; WHAT TO DO" at the first offending place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/yaml_reader.h"
#include "core/trace.h"
#include "core/types.h"

namespace poseidon::validation {

// A trace that cannot be read; what() is the one located line. A config::ConfigError, so that
// the command line reports it as it reports any bad input.
class TraceError : public config::ConfigError {
 public:
  using config::ConfigError::ConfigError;
};

// What an event is, from its phase, category and name (core/trace.cc's EventName).
enum class TraceRecordKind {
  kMetadata,        // "ph":"M": a machine's or a lane's name
  kIterationBegin,  // "iteration N"
  kIterationEnd,    // "iteration end N"
  kLayerSynced,     // "synced LAYER": the layer first holds every update of `clock`
  kClockApplied,    // "applied cN"
  kJobDone,         // "job done"
  kTask,            // a compute span ("cat":"compute")
  kMessage,         // a message in flight ("cat":"network"): "WHAT -> RECEIVER"
  kProcessCpu,      // "ph":"C", "cat":"host": the actor's process had used cpu_ns by ts
  kOther,           // a protocol instant of a name this reader does not know
};

struct TraceRecord {
  char phase = 'X';  // 'X' span, 'i' instant, 'M' metadata, 'C' counter
  TraceRecordKind kind = TraceRecordKind::kOther;
  std::string name, category;
  int64_t pid = 0, tid = 0;
  core::TraceThread thread;  // tid decoded (actor, device, lane); not for metadata
  core::TimeNs ts = 0, dur = 0;
  int64_t clock = 0, bytes = 0;
  int64_t cpu_ns = 0;      // kProcessCpu
  int64_t iteration = -1;  // kIterationBegin, kIterationEnd: N of the name
  std::string layer;       // kLayerSynced: the layer's name
  // kMessage: the receiver as the name gives it, "worker", "shard" or "coordinator", and its
  // index (0 for the coordinator).
  std::string peer_role;
  int peer_index = -1;
  std::string label;  // kMetadata: args.name ("machine 1", "worker 0 compute")
  int line = 0, column = 0;  // where the event starts in the text (1-based)
};

// Every event of `text`, in the text's order. `source` names the text in errors.
std::vector<TraceRecord> ReadTrace(const std::string& text, const std::string& source);
// The same for a file; an unreadable file is a TraceError naming it.
std::vector<TraceRecord> ReadTraceFile(const std::string& path);

// "1234.567" (microseconds) -> 1234567 ns, exactly; false for anything else (a sign is allowed,
// at most three decimals, no exponent).
bool ParseMicrosAsNs(const std::string& text, core::TimeNs* ns);

}  // namespace poseidon::validation
