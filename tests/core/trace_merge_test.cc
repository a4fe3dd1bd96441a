// Merging per-process Chrome traces: every event once, metadata once, foreign text refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/model.h"
#include "core/trace.h"

namespace poseidon::core {
namespace {

TEST(TraceMerge, KeepsEveryEventAndNamesEachLaneOnce) {
  ModelSpec spec;
  spec.name = "tiny";
  spec.input_c = 1;
  spec.input_h = 2;
  spec.input_w = 2;
  spec.num_classes = 2;
  LayerSpec fc;
  fc.name = "fc";
  fc.kind = LayerKind::kFc;
  fc.num_output = 2;
  spec.layers.push_back(fc);
  const Model model = Model::Build(spec);
  const JobLayout layout = JobLayout::Colocated(2, 1);
  auto trace = [&](ActorId actor, TimeNs ts) {
    TraceEvent e;
    e.kind = TraceKind::kTask;
    e.task = TaskKind::kForward;
    e.actor = actor;
    e.layer = 0;
    e.ts = ts;
    e.dur = 5;
    std::string out;
    AppendChromeTrace({e, e}, layout, model, &out);
    return out;
  };
  std::string merged, error;
  ASSERT_TRUE(MergeChromeTraces({trace(1, 10), trace(2, 20), trace(1, 10)}, &merged, &error))
      << error;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t p = merged.find(what); p != std::string::npos; p = merged.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("\"ph\":\"X\""), 6u) << merged;  // events are never deduplicated
  EXPECT_EQ(count("\"thread_name\""), 2u) << merged;  // one lane per worker, named once
  EXPECT_EQ(merged.substr(merged.size() - 4), "\n]}\n");
  std::string again;
  ASSERT_TRUE(MergeChromeTraces({merged}, &again, &error));
  EXPECT_EQ(again, merged);
  EXPECT_FALSE(MergeChromeTraces({trace(1, 1), "{\"traceEvents\":[]}"}, &merged, &error));
  EXPECT_NE(error.find("input 2"), std::string::npos) << error;
}

}  // namespace
}  // namespace poseidon::core
