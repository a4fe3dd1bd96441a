// The one trace reader (validation/trace_reader.h) against the one writer (core/trace.cc): what
// the writer writes comes back typed and exact; text that is not a trace is one located error.
#include "validation/trace_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/model.h"
#include "core/trace.h"

namespace poseidon::validation {
namespace {

core::Model TinyModel() {
  core::ModelSpec spec;
  spec.name = "tiny";
  spec.input_c = 1;
  spec.input_h = 2;
  spec.input_w = 2;
  spec.num_classes = 2;
  core::LayerSpec fc;
  fc.name = "fc";
  fc.kind = core::LayerKind::kFc;
  fc.num_output = 2;
  spec.layers.push_back(fc);
  return core::Model::Build(spec);
}

TEST(TraceThreadId, DecodesWhatTheWriterEncodes) {
  for (core::ActorId actor : {0, 1, 7, 300}) {
    for (int32_t device : {0, 1, 3, 1023}) {
      for (int lane = core::kLaneCompute; lane <= core::kLaneBroadcast; ++lane) {
        core::TraceThread t;
        ASSERT_TRUE(core::DecodeTraceThreadId(core::TraceThreadId(actor, device, lane), &t));
        EXPECT_EQ(t.actor, actor);
        EXPECT_EQ(t.device, device);
        EXPECT_EQ(t.lane, lane);
      }
    }
  }
  core::TraceThread t;
  EXPECT_FALSE(core::DecodeTraceThreadId(-1, &t));
  EXPECT_FALSE(core::DecodeTraceThreadId(7, &t));  // lane 7 is no lane
}

TEST(TraceReader, ReadsBackEveryEventTheWriterWrites) {
  const core::Model model = TinyModel();
  const core::JobLayout layout = core::JobLayout::Colocated(2, 2);
  std::vector<core::TraceEvent> in;
  core::TraceEvent begin;
  begin.kind = core::TraceKind::kIterationBegin;
  begin.actor = layout.worker(1);
  begin.ts = 1'234'567;
  in.push_back(begin);
  core::TraceEvent end = begin;
  end.kind = core::TraceKind::kIterationEnd;
  end.clock = 4;
  end.ts = -2'001;  // a live process may start before the job's time base
  in.push_back(end);
  core::TraceEvent synced = begin;
  synced.kind = core::TraceKind::kLayerSynced;
  synced.layer = 0;
  synced.clock = 3;
  synced.ts = 9'000'000'001;
  in.push_back(synced);
  core::ComputeTask task;
  task.kind = core::TaskKind::kBackward;
  task.layer = 0;
  task.clock = 2;
  task.device = 2;
  in.push_back(core::TaskEvent(layout.worker(0), task, 10, 1'010));
  core::Message push;
  push.type = core::MsgType::kPushGrad;
  push.from = layout.worker(0);
  push.to = layout.server(1);
  push.layer = 0;
  push.chunk = 1;
  push.clock = 5;
  push.payload_bytes = 4096;
  in.push_back(core::MessageEvent(push, 100, 350));
  core::Message to_coordinator = push;
  to_coordinator.to = core::JobLayout::coordinator();
  to_coordinator.payload_bytes = 0;
  in.push_back(core::MessageEvent(to_coordinator, 400, 400));
  in.push_back(core::ProcessCpuEvent(layout.server(1), 500, 12'345'678'901));
  std::string text;
  core::AppendChromeTrace(in, layout, model, &text);

  const std::vector<TraceRecord> all = ReadTrace(text, "t.json");
  std::vector<TraceRecord> out;
  int metadata = 0;
  for (const TraceRecord& r : all) {
    if (r.kind == TraceRecordKind::kMetadata) {
      ++metadata;
    } else {
      out.push_back(r);
    }
  }
  EXPECT_GT(metadata, 0);
  ASSERT_EQ(out.size(), in.size());
  EXPECT_EQ(out[0].kind, TraceRecordKind::kIterationBegin);
  EXPECT_EQ(out[0].iteration, 0);
  EXPECT_EQ(out[0].thread.actor, layout.worker(1));
  EXPECT_EQ(out[0].thread.lane, core::kLaneProtocol);
  EXPECT_EQ(out[0].ts, 1'234'567);
  EXPECT_EQ(out[0].phase, 'i');
  EXPECT_EQ(out[1].kind, TraceRecordKind::kIterationEnd);
  EXPECT_EQ(out[1].iteration, 4);
  EXPECT_EQ(out[1].ts, -2'001);
  EXPECT_EQ(out[2].kind, TraceRecordKind::kLayerSynced);
  EXPECT_EQ(out[2].layer, "fc");
  EXPECT_EQ(out[2].clock, 3);
  EXPECT_EQ(out[2].ts, 9'000'000'001);
  EXPECT_EQ(out[3].kind, TraceRecordKind::kTask);
  EXPECT_EQ(out[3].thread.actor, layout.worker(0));
  EXPECT_EQ(out[3].thread.device, 2);
  EXPECT_EQ(out[3].ts, 10);
  EXPECT_EQ(out[3].dur, 1'000);
  EXPECT_EQ(out[3].clock, 2);
  EXPECT_EQ(out[4].kind, TraceRecordKind::kMessage);
  EXPECT_EQ(out[4].thread.actor, layout.worker(0));
  EXPECT_EQ(out[4].thread.lane, core::kLaneSend);
  EXPECT_EQ(out[4].peer_role, "shard");
  EXPECT_EQ(out[4].peer_index, 1);
  EXPECT_EQ(out[4].ts, 100);
  EXPECT_EQ(out[4].dur, 250);
  EXPECT_EQ(out[4].bytes, 4096);
  EXPECT_EQ(out[4].clock, 5);
  EXPECT_EQ(out[5].peer_role, "coordinator");
  EXPECT_EQ(out[5].peer_index, 0);
  EXPECT_EQ(out[5].bytes, 0);
  // A process's CPU counter: a Chrome counter on its protocol lane, exact to the nanosecond.
  EXPECT_EQ(out[6].kind, TraceRecordKind::kProcessCpu);
  EXPECT_EQ(out[6].phase, 'C');
  EXPECT_EQ(out[6].category, "host");
  EXPECT_EQ(out[6].name, layout.ActorName(layout.server(1)) + " cpu");
  EXPECT_EQ(out[6].thread.actor, layout.server(1));
  EXPECT_EQ(out[6].thread.lane, core::kLaneProtocol);
  EXPECT_EQ(out[6].ts, 500);
  EXPECT_EQ(out[6].cpu_ns, 12'345'678'901);
  // It names no lane of its own: the metadata are those of the other events alone.
  std::vector<core::TraceEvent> without_cpu(in.begin(), in.end() - 1);
  std::string text_without;
  core::AppendChromeTrace(without_cpu, layout, model, &text_without);
  int metadata_without = 0;
  for (const TraceRecord& r : ReadTrace(text_without, "t.json")) {
    metadata_without += r.kind == TraceRecordKind::kMetadata ? 1 : 0;
  }
  EXPECT_EQ(metadata_without, metadata);
  // Merged traces are read the same way.
  std::string merged, error;
  ASSERT_TRUE(core::MergeChromeTraces({text, text}, &merged, &error)) << error;
  EXPECT_EQ(ReadTrace(merged, "m.json").size(), static_cast<size_t>(metadata) + 2 * in.size());
}

// The error of `text`, which must be one line.
std::string ErrorOf(const std::string& text) {
  try {
    ReadTrace(text, "bad.json");
  } catch (const TraceError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

const std::string kHead = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
const std::string kGood =
    "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"iteration 0\",\"cat\":\"protocol\",\"pid\":0,\"tid\":12,"
    "\"ts\":1.000,\"args\":{\"clock\":0}}";

TEST(TraceReader, AMalformedTraceIsOneLocatedError) {
  // Cut short: not JSON.
  EXPECT_EQ(ErrorOf(kHead + kGood).rfind("bad.json:", 0), 0u);
  EXPECT_NE(ErrorOf(kHead + kGood).find("error: not JSON"), std::string::npos);
  // The second event lacks its time: named at that event (line 3, column 1).
  std::string no_ts = kGood;
  no_ts.replace(no_ts.find(",\"ts\":1.000"), 11, "");
  const std::string e1 = ErrorOf(kHead + kGood + ",\n" + no_ts + "\n]}\n");
  EXPECT_EQ(e1.rfind("bad.json:3:1: error: event without \"ts\"; read a trace as", 0), 0u) << e1;
  // A time with more than nanoseconds: named at the value.
  std::string fine = kGood;
  fine.replace(fine.find("1.000"), 5, "1.0005");
  const std::string e2 = ErrorOf(kHead + fine + "\n]}\n");
  EXPECT_NE(e2.find("bad.json:2:"), std::string::npos) << e2;
  EXPECT_NE(e2.find("\"ts\" is '1.0005', not microseconds with at most three decimals"),
            std::string::npos)
      << e2;
  // A lane the writer never writes.
  std::string lane = kGood;
  lane.replace(lane.find("\"tid\":12"), 8, "\"tid\":15");
  EXPECT_NE(ErrorOf(kHead + lane + "\n]}\n").find("\"tid\" 15 is not a lane core/trace.h writes"),
            std::string::npos);
  // Not a trace at all.
  EXPECT_NE(ErrorOf("{\"a\":1}").find("bad.json:1:1: error: no \"traceEvents\" array"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[1, 2]").find("expected a JSON object at the top"), std::string::npos);
  EXPECT_THROW(ReadTraceFile("/nonexistent/rank-1.json"), TraceError);
  // A counter without its CPU figure, or of a category the writer does not write.
  const std::string counter =
      "{\"ph\":\"C\",\"name\":\"worker 0 cpu\",\"cat\":\"host\",\"pid\":0,\"tid\":12,"
      "\"ts\":1.000,\"args\":{\"cpu_ns\":7}}";
  EXPECT_EQ(ReadTrace(kHead + counter + "\n]}\n", "good.json")[0].cpu_ns, 7);
  std::string no_cpu = counter;
  no_cpu.replace(no_cpu.find("\"cpu_ns\":7"), 10, "\"clock\":0");
  EXPECT_NE(ErrorOf(kHead + no_cpu + "\n]}\n").find("event without \"cpu_ns\""), std::string::npos);
  std::string other = counter;
  other.replace(other.find("\"host\""), 6, "\"disk\"");
  EXPECT_NE(ErrorOf(kHead + other + "\n]}\n").find("a counter of category 'disk'"),
            std::string::npos);
}

TEST(TraceReader, MicrosecondsAreReadAsExactNanoseconds) {
  core::TimeNs ns = 0;
  ASSERT_TRUE(ParseMicrosAsNs("887920.122", &ns));
  EXPECT_EQ(ns, 887'920'122);
  ASSERT_TRUE(ParseMicrosAsNs("-0.001", &ns));
  EXPECT_EQ(ns, -1);
  ASSERT_TRUE(ParseMicrosAsNs("12", &ns));
  EXPECT_EQ(ns, 12'000);
  ASSERT_TRUE(ParseMicrosAsNs("12.5", &ns));
  EXPECT_EQ(ns, 12'500);
  for (const char* bad : {"", "-", "1.", ".5", "1.2345", "1e3", "1.2.3", "abc", "+1", "99999999999999999"}) {
    EXPECT_FALSE(ParseMicrosAsNs(bad, &ns)) << bad;
  }
}

}  // namespace
}  // namespace poseidon::validation
