#include "validation/trace_reader.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace poseidon::validation {
namespace {

constexpr const char* kWhatToDo =
    "read a trace as `poseidon simulate --trace` or `launch --trace-dir` wrote it";

[[noreturn]] void Fail(const std::string& source, const YAML::Mark& mark, const std::string& what) {
  throw TraceError(fmt::format("{}:{}:{}: error: {}; {}", source, mark.line + 1, mark.column + 1,
                               what, kWhatToDo));
}

bool ParseInt(const std::string& s, int64_t* v) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *v);
  return ec == std::errc() && p == end && !s.empty();
}

// The scalar `key` of `event` (an object); fails at the event when it is missing.
std::string Scalar(const YAML::Node& event, const char* key, const std::string& source) {
  const YAML::Node n = event[key];
  if (!n) Fail(source, event.Mark(), fmt::format("event without \"{}\"", key));
  if (!n.IsScalar()) Fail(source, n.Mark(), fmt::format("\"{}\" is not a number or string", key));
  return n.Scalar();
}

int64_t Integer(const YAML::Node& event, const char* key, const std::string& source) {
  int64_t v = 0;
  if (!ParseInt(Scalar(event, key, source), &v)) {
    Fail(source, event[key].Mark(),
         fmt::format("\"{}\" is '{}', not a whole number", key, event[key].Scalar()));
  }
  return v;
}

core::TimeNs Micros(const YAML::Node& event, const char* key, const std::string& source) {
  core::TimeNs ns = 0;
  if (!ParseMicrosAsNs(Scalar(event, key, source), &ns)) {
    Fail(source, event[key].Mark(),
         fmt::format("\"{}\" is '{}', not microseconds with at most three decimals", key,
                     event[key].Scalar()));
  }
  return ns;
}

// "PREFIX N" -> N.
bool NumberAfter(const std::string& name, const std::string& prefix, int64_t* n) {
  return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
         ParseInt(name.substr(prefix.size()), n);
}

void Classify(TraceRecord* r) {
  if (r->category == "compute") {
    r->kind = TraceRecordKind::kTask;
    return;
  }
  if (r->category == "network") {
    r->kind = TraceRecordKind::kMessage;
    // "TYPE [LAYER] [cK] -> worker 2" / "-> shard 0" / "-> coordinator".
    const size_t arrow = r->name.rfind(" -> ");
    if (arrow == std::string::npos) return;
    const std::string peer = r->name.substr(arrow + 4);
    int64_t index = 0;
    if (peer == "coordinator") {
      r->peer_role = peer;
      r->peer_index = 0;
    } else if (NumberAfter(peer, "worker ", &index) || NumberAfter(peer, "shard ", &index)) {
      r->peer_role = peer.substr(0, peer.find(' '));
      r->peer_index = index >= 0 && index <= INT32_MAX ? static_cast<int>(index) : -1;
    }
    return;
  }
  int64_t n = 0;
  if (NumberAfter(r->name, "iteration end ", &n)) {
    r->kind = TraceRecordKind::kIterationEnd;
    r->iteration = n;
  } else if (NumberAfter(r->name, "iteration ", &n)) {
    r->kind = TraceRecordKind::kIterationBegin;
    r->iteration = n;
  } else if (r->name.rfind("synced ", 0) == 0) {
    r->kind = TraceRecordKind::kLayerSynced;
    r->layer = r->name.substr(7);
  } else if (r->name.rfind("applied c", 0) == 0) {
    r->kind = TraceRecordKind::kClockApplied;
  } else if (r->name == "job done") {
    r->kind = TraceRecordKind::kJobDone;
  }
}

}  // namespace

bool ParseMicrosAsNs(const std::string& text, core::TimeNs* ns) {
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) ++i;
  const size_t dot = text.find('.', i);
  const std::string whole = text.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
  const std::string frac = dot == std::string::npos ? "" : text.substr(dot + 1);
  if (whole.empty() || frac.size() > 3 || (dot != std::string::npos && frac.empty())) return false;
  int64_t us = 0, f = 0;
  if (whole.find_first_not_of("0123456789") != std::string::npos || !ParseInt(whole, &us)) return false;
  if (!frac.empty() && (frac.find_first_not_of("0123456789") != std::string::npos || !ParseInt(frac, &f))) {
    return false;
  }
  for (size_t k = frac.size(); k < 3; ++k) f *= 10;
  if (us > (INT64_MAX - 999) / 1000) return false;
  *ns = (negative ? -1 : 1) * (us * 1000 + f);
  return true;
}

std::vector<TraceRecord> ReadTrace(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    Fail(source, e.mark, fmt::format("not JSON: {}", e.msg));
  }
  if (!root.IsMap()) Fail(source, root.Mark(), "expected a JSON object at the top");
  const YAML::Node events = root["traceEvents"];
  if (!events || !events.IsSequence()) {
    Fail(source, root.Mark(), "no \"traceEvents\" array");
  }
  std::vector<TraceRecord> out;
  out.reserve(events.size());
  for (const YAML::Node& e : events) {
    if (!e.IsMap()) Fail(source, e.Mark(), "an event that is not a JSON object");
    TraceRecord r;
    r.line = e.Mark().line + 1;
    r.column = e.Mark().column + 1;
    const std::string ph = Scalar(e, "ph", source);
    if (ph != "X" && ph != "i" && ph != "M" && ph != "C") {
      Fail(source, e["ph"].Mark(), fmt::format("\"ph\" is '{}', expected X, i, C or M", ph));
    }
    r.phase = ph[0];
    r.name = Scalar(e, "name", source);
    r.pid = Integer(e, "pid", source);
    const YAML::Node args = e["args"];
    if (!args || !args.IsMap()) Fail(source, e.Mark(), "event without an \"args\" object");
    if (r.phase == 'M') {
      r.kind = TraceRecordKind::kMetadata;
      r.label = Scalar(args, "name", source);
      if (e["tid"]) r.tid = Integer(e, "tid", source);
      out.push_back(std::move(r));
      continue;
    }
    r.category = Scalar(e, "cat", source);
    r.tid = Integer(e, "tid", source);
    if (!core::DecodeTraceThreadId(r.tid, &r.thread)) {
      Fail(source, e["tid"].Mark(),
           fmt::format("\"tid\" {} is not a lane core/trace.h writes", r.tid));
    }
    r.ts = Micros(e, "ts", source);
    if (r.phase == 'C') {
      if (r.category != "host") {
        Fail(source, e["cat"].Mark(),
             fmt::format("a counter of category '{}'; the writer's are \"host\"", r.category));
      }
      r.kind = TraceRecordKind::kProcessCpu;
      r.cpu_ns = Integer(args, "cpu_ns", source);
      out.push_back(std::move(r));
      continue;
    }
    if (r.phase == 'X') r.dur = Micros(e, "dur", source);
    r.clock = Integer(args, "clock", source);
    if (args["bytes"]) r.bytes = Integer(args, "bytes", source);
    Classify(&r);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<TraceRecord> ReadTraceFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw TraceError(fmt::format("{}: error: cannot read the trace; check the path", path));
  std::stringstream s;
  s << f.rdbuf();
  return ReadTrace(s.str(), path);
}

}  // namespace poseidon::validation
