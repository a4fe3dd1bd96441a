// config/worker_job.cc: the job worker 1 describes for a `model: torch` scenario (poseidon.torch)
// survives its text, and every process applies the gradient wire it names.
#include "config/worker_job.h"

#include <string>

#include <gtest/gtest.h>

#include "config/yaml_reader.h"

namespace poseidon::config {
namespace {

const char* kTable =
    "schema_version: 1\n"
    "name: torch\n"
    "input: {channels: 1, height: 1, width: 20}\n"
    "layers:\n"
    "  - {name: fc1, type: fc, num_output: 8}\n"
    "  - {name: loss, type: softmax_loss}\n";

WorkerJob Job(const std::string& wire) {
  WorkerJob job;
  job.model_yaml = kTable;
  job.schemes = {{"fc1", "sfb"}};
  job.consistency = "ssp";
  job.staleness = 2;
  job.batch = 6;
  job.gradient_wire = wire;
  return job;
}

TEST(WorkerJob, RoundTripsWithItsGradientWire) {
  for (const char* wire : {"fp32", "fp16", "bf16"}) {
    const WorkerJob back = DecodeWorkerJob(EncodeWorkerJob(Job(wire)), "worker 1");
    EXPECT_EQ(back.gradient_wire, wire);
    EXPECT_EQ(back.schemes, Job(wire).schemes);
    EXPECT_EQ(back.consistency, "ssp");
    EXPECT_EQ(back.staleness, 2);
    EXPECT_EQ(back.batch, 6);
    EXPECT_EQ(back.model_yaml, kTable);
  }
}

TEST(WorkerJob, ATextWithoutTheWireMeansFp32) {
  std::string text = EncodeWorkerJob(Job("fp32"));
  const size_t at = text.find("gradient_wire: fp32\n");
  ASSERT_NE(at, std::string::npos) << text;
  text.erase(at, std::string("gradient_wire: fp32\n").size());
  EXPECT_EQ(DecodeWorkerJob(text, "worker 1").gradient_wire, "fp32");
}

TEST(WorkerJob, AnUnknownWireIsALocatedError) {
  std::string text = EncodeWorkerJob(Job("fp32"));
  text.replace(text.find("gradient_wire: fp32"), 19, "gradient_wire: fp8");
  try {
    DecodeWorkerJob(text, "worker 1");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the job worker 1 described"), std::string::npos) << what;
    EXPECT_NE(what.find("fp8"), std::string::npos) << what;
    EXPECT_NE(what.find("fp16"), std::string::npos) << what;
  }
}

TEST(WorkerJob, ApplyingItSetsTheScenariosGradientWire) {
  ScenarioSpec s;
  s.gradient_wire = "fp32";  // what this process's scenario said
  ApplyWorkerJob(Job("bf16"), "worker 1", &s);
  EXPECT_EQ(s.gradient_wire, "bf16");
  EXPECT_EQ(s.consistency, "ssp");
  EXPECT_EQ(s.batch_per_worker, 6);
  ApplyWorkerJob(Job("fp32"), "worker 1", &s);
  EXPECT_EQ(s.gradient_wire, "fp32");
}

}  // namespace
}  // namespace poseidon::config
