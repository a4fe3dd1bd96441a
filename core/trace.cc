#include "core/trace.h"

#include <algorithm>

#include <charconv>
#include <set>
#include <tuple>
#include <utility>

namespace poseidon::core {
namespace {

void AppendInt(std::string* out, int64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  out->append(buf, p);
}

// Nanoseconds as microseconds with three decimals: 1234567 -> "1234.567".
void AppendMicros(std::string* out, int64_t ns) {
  if (ns < 0) {
    out->push_back('-');
    ns = -ns;
  }
  AppendInt(out, ns / 1000);
  out->push_back('.');
  int64_t frac = ns % 1000;
  out->push_back(static_cast<char>('0' + frac / 100));
  out->push_back(static_cast<char>('0' + frac / 10 % 10));
  out->push_back(static_cast<char>('0' + frac % 10));
}

void AppendJsonString(std::string* out, const std::string& s) {
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out->append("\\u00");
      const char* hex = "0123456789abcdef";
      out->push_back(hex[(c >> 4) & 0xf]);
      out->push_back(hex[c & 0xf]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

int LaneOf(const TraceEvent& e) {
  switch (e.kind) {
    case TraceKind::kTask:
      switch (StreamOf(e.task)) {
        case Stream::kCompute: return kLaneCompute;
        case Stream::kCopy: return kLaneCopy;
        case Stream::kServer: return kLaneServer;
        case Stream::kReduce: return kLaneReduce;
        case Stream::kBroadcast: return kLaneBroadcast;
      }
      return kLaneCompute;
    case TraceKind::kMessage: return kLaneSend;
    default: return kLaneProtocol;
  }
}

const char* LaneName(int lane) {
  switch (lane) {
    case kLaneCompute: return "compute";
    case kLaneCopy: return "copy";
    case kLaneServer: return "update";
    case kLaneSend: return "send";
    case kLaneReduce: return "reduce";
    case kLaneBroadcast: return "broadcast";
    default: return "protocol";
  }
}

std::string LayerName(const Model& model, int32_t layer) {
  if (layer < 0 || layer >= static_cast<int32_t>(model.layers().size())) return "";
  return model.layers()[layer].name;
}

std::string EventName(const TraceEvent& e, const JobLayout& layout, const Model& model) {
  switch (e.kind) {
    case TraceKind::kIterationBegin: return "iteration " + std::to_string(e.clock);
    case TraceKind::kIterationEnd: return "iteration end " + std::to_string(e.clock);
    case TraceKind::kLayerSynced: return "synced " + LayerName(model, e.layer);
    case TraceKind::kClockApplied: return "applied c" + std::to_string(e.chunk);
    case TraceKind::kJobDone: return "job done";
    case TraceKind::kProcessCpu:
      return layout.ActorName(e.actor) + " cpu";
    case TraceKind::kTask: {
      std::string s = TaskKindName(e.task);
      if (e.layer >= 0) s += " " + LayerName(model, e.layer);
      if (e.chunk >= 0) s += " c" + std::to_string(e.chunk);
      return s;
    }
    case TraceKind::kMessage: {
      std::string s = MsgTypeName(e.msg);
      if (e.layer >= 0) s += " " + LayerName(model, e.layer);
      if (e.chunk >= 0) s += " c" + std::to_string(e.chunk);
      s += " -> " + layout.ActorName(e.peer);
      return s;
    }
  }
  return "event";
}

const char* Category(const TraceEvent& e) {
  switch (e.kind) {
    case TraceKind::kTask: return "compute";
    case TraceKind::kMessage: return "network";
    case TraceKind::kProcessCpu:
      return "host";
    default: return "protocol";
  }
}

}  // namespace

int64_t TraceThreadId(ActorId actor, int32_t device, int lane) {
  if (device == 0) return int64_t{actor} * kTraceLanesPerActor + lane;
  return kTraceDeviceTidBase +
         (int64_t{actor} * kTraceMaxDevicesPerMachine + device) * kTraceLanesPerActor + lane;
}

bool DecodeTraceThreadId(int64_t tid, TraceThread* out) {
  if (tid < 0) return false;
  TraceThread t;
  t.lane = static_cast<int>(tid % kTraceLanesPerActor);
  if (tid < kTraceDeviceTidBase) {
    t.actor = static_cast<ActorId>(tid / kTraceLanesPerActor);
  } else {
    const int64_t slot = (tid - kTraceDeviceTidBase) / kTraceLanesPerActor;
    t.actor = static_cast<ActorId>(slot / kTraceMaxDevicesPerMachine);
    t.device = static_cast<int32_t>(slot % kTraceMaxDevicesPerMachine);
    // (kTraceDeviceTidBase is a multiple of kTraceLanesPerActor, so the lane is tid's residue.)
  }
  if (t.lane > kLaneBroadcast) return false;
  *out = t;
  return true;
}

TraceEvent TaskEvent(ActorId actor, const ComputeTask& task, TimeNs begin, TimeNs end) {
  TraceEvent e;
  e.kind = TraceKind::kTask;
  e.ts = begin;
  e.dur = end - begin;
  e.actor = actor;
  e.layer = task.layer;
  e.chunk = task.chunk;
  e.clock = task.clock;
  e.bytes = task.bytes;
  e.task = task.kind;
  e.device = task.device;
  return e;
}

TraceEvent ProcessCpuEvent(ActorId actor, TimeNs ts, int64_t cpu_ns) {
  TraceEvent e;
  e.kind = TraceKind::kProcessCpu;
  e.ts = ts;
  e.actor = actor;
  e.cpu_ns = cpu_ns;
  return e;
}

TraceEvent MessageEvent(const Message& m, TimeNs sent, TimeNs delivered) {
  TraceEvent e;
  e.kind = TraceKind::kMessage;
  e.ts = sent;
  e.dur = delivered > sent ? delivered - sent : 0;
  e.actor = m.from;
  e.peer = m.to;
  e.layer = m.layer;
  e.chunk = m.chunk;
  e.clock = m.clock;
  e.bytes = m.payload_bytes;
  e.msg = m.type;
  return e;
}

void AppendChromeTrace(const std::vector<TraceEvent>& events, const JobLayout& layout,
                       const Model& model, std::string* out) {
  out->append("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
  bool first = true;
  auto begin_event = [&]() {
    if (!first) out->append(",\n");
    first = false;
  };
  // Metadata: name every machine and every (actor, lane) that appears, in a stable order.
  std::set<std::tuple<ActorId, int32_t, int>> lanes;  // (actor, device, lane)
  for (const TraceEvent& e : events) {
    if (e.kind != TraceKind::kProcessCpu) lanes.insert({e.actor, e.device, LaneOf(e)});
  }
  std::set<int> machines;
  for (const auto& [actor, device, lane] : lanes) machines.insert(layout.machine_of[actor]);
  for (int m : machines) {
    begin_event();
    out->append("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":");
    AppendInt(out, m);
    out->append(",\"args\":{\"name\":\"machine ");
    AppendInt(out, m);
    out->append("\"}}");
  }
  for (const auto& [actor, device, lane] : lanes) {
    begin_event();
    out->append("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":");
    AppendInt(out, layout.machine_of[actor]);
    out->append(",\"tid\":");
    AppendInt(out, TraceThreadId(actor, device, lane));
    out->append(",\"args\":{\"name\":");
    const std::string on_device = device > 0 ? " device " + std::to_string(device) : "";
    AppendJsonString(out, layout.ActorName(actor) + on_device + " " + LaneName(lane));
    out->append("}}");
  }
  for (const TraceEvent& e : events) {
    begin_event();
    if (e.kind == TraceKind::kProcessCpu) {
      // A counter: Perfetto draws each process's CPU so far as a line of its own.
      out->append("{\"ph\":\"C\",\"name\":");
      AppendJsonString(out, EventName(e, layout, model));
      out->append(",\"cat\":\"host\",\"pid\":");
      AppendInt(out, layout.machine_of[e.actor]);
      out->append(",\"tid\":");
      AppendInt(out, TraceThreadId(e.actor, 0, kLaneProtocol));
      out->append(",\"ts\":");
      AppendMicros(out, e.ts);
      out->append(",\"args\":{\"cpu_ns\":");
      AppendInt(out, e.cpu_ns);
      out->append("}}");
      continue;
    }
    const bool span = e.kind == TraceKind::kTask || e.kind == TraceKind::kMessage;
    out->append(span ? "{\"ph\":\"X\",\"name\":" : "{\"ph\":\"i\",\"s\":\"t\",\"name\":");
    AppendJsonString(out, EventName(e, layout, model));
    out->append(",\"cat\":\"");
    out->append(Category(e));
    out->append("\",\"pid\":");
    AppendInt(out, layout.machine_of[e.actor]);
    out->append(",\"tid\":");
    AppendInt(out, TraceThreadId(e.actor, e.device, LaneOf(e)));
    out->append(",\"ts\":");
    AppendMicros(out, e.ts);
    if (span) {
      out->append(",\"dur\":");
      AppendMicros(out, e.dur);
    }
    out->append(",\"args\":{\"clock\":");
    AppendInt(out, e.clock);
    if (e.bytes > 0) {
      out->append(",\"bytes\":");
      AppendInt(out, e.bytes);
    }
    out->append("}}");
  }
  out->append("\n]}\n");
}

bool MergeChromeTraces(const std::vector<std::string>& traces, std::string* out,
                       std::string* error) {
  static const std::string kHead = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  static const std::string kTail = "\n]}\n";
  std::vector<std::string> meta, events;
  for (size_t t = 0; t < traces.size(); ++t) {
    const std::string& text = traces[t];
    if (text.size() < kHead.size() + kTail.size() - 1 || text.compare(0, kHead.size(), kHead) != 0 ||
        text.compare(text.size() - 3, 3, "]}\n") != 0) {
      *error = "input " + std::to_string(t + 1) +
               " is not a Poseidon trace (it must start with " + kHead.substr(0, kHead.size() - 1) +
               " and end with ]}, as `poseidon simulate --trace` and `launch --trace-dir` write)";
      return false;
    }
    size_t pos = kHead.size();
    const size_t end = text.size() - 3;
    while (pos < end) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos || nl > end) nl = end;
      std::string line = text.substr(pos, nl - pos);
      pos = nl + 1;
      if (!line.empty() && line.back() == ',') line.pop_back();
      if (line.empty()) continue;
      if (line.front() != '{' || line.back() != '}') {
        *error = "input " + std::to_string(t + 1) + " has a malformed event line near byte " +
                 std::to_string(pos);
        return false;
      }
      if (line.find("\"ph\":\"M\"") != std::string::npos) {
        if (std::find(meta.begin(), meta.end(), line) == meta.end()) meta.push_back(line);
      } else {
        events.push_back(std::move(line));
      }
    }
  }
  out->append(kHead);
  bool first = true;
  for (const auto* group : {&meta, &events}) {
    for (const std::string& l : *group) {
      if (!first) out->append(",\n");
      first = false;
      out->append(l);
    }
  }
  out->append(kTail);
  return true;
}

}  // namespace poseidon::core
