// config/worker_job.h: the job a scenario with `model: torch` runs, as its first worker describes
// it (poseidon.torch), and what every process of the job makes of it.
//
// The workers bring the model: their layer table (one `module` layer per PyTorch module with
// parameters, in the order the first forward pass ran them; core/model.h) and the protocol their
// wrapper asked for. The first worker plans the schemes (SACP's auto with the times it measured)
// and sends this description; every process (workers, shards) applies it to its scenario and then
// builds its part of the job exactly as for a model file (real_runtime/live_job.h).
//
//   WorkerJob job;
//   job.model_yaml = "...";                           // a model file's text
//   job.schemes = {{"fc1", "sfb"}, {"conv1", "ps"}};  // every layer with parameters
//   std::string text = EncodeWorkerJob(job);          // a control frame's body
//   ApplyWorkerJob(DecodeWorkerJob(text, "worker 1"), &scenario);   // ConfigError when malformed
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "config/scenario.h"

namespace poseidon::config {

struct WorkerJob {
  std::string model_yaml;                      // the layer table as a model file
  std::map<std::string, std::string> schemes;  // layer -> ps | sfb | allreduce (each param layer)
  std::string consistency = "bsp";             // bsp | ssp | asp
  int64_t staleness = 0;
  int64_t batch = 1;  // examples per worker per iteration the plan assumed (factor rows / fc_rows)
  // protocol.gradient_wire (fp32 | fp16 | bf16) as worker 1's wrapper asked for it; a text without
  // the key means fp32.
  std::string gradient_wire = "fp32";
};

// YAML text; DecodeWorkerJob(EncodeWorkerJob(j)) == j.
std::string EncodeWorkerJob(const WorkerJob& job);
// Throws ConfigError naming `source` (who sent it) and what is malformed.
WorkerJob DecodeWorkerJob(const std::string& text, const std::string& source);

// The scenario the job runs: its model, schemes, consistency, batch and gradient wire replaced by
// the job's.
// Throws ConfigError (a model that does not load) naming the model as `source`'s.
void ApplyWorkerJob(const WorkerJob& job, const std::string& source, ScenarioSpec* s);

}  // namespace poseidon::config
