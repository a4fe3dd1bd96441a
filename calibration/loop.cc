#include "calibration/loop.h"

#include <filesystem>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "calibration/compute_profiler.h"
#include "config/scenario.h"
#include "sim/simulation.h"

namespace poseidon::calibration {

double PredictOneNodeIterationMs(const std::string& model_file, const std::string& profile_file,
                                 int64_t batch) {
  namespace fs = std::filesystem;
  const std::string model = fs::absolute(model_file).lexically_normal().string();
  const std::string profile = fs::absolute(profile_file).lexically_normal().string();
  const std::string text = fmt::format(
      "schema_version: 1\n"
      "name: calibration-loop\n"
      "model: \"{}\"\n"
      "batch_per_worker: {}\n"
      "iterations: 5\n"
      "warmup_iterations: 1\n"
      "cluster:\n"
      "  workers: 1\n"
      "  servers: 1\n"
      "  placement: colocated\n"
      "  profile: \"{}\"\n"
      "  network: {{bandwidth_gbps: 10, latency_us: 5}}\n"
      "protocol: {{dwbp: false}}\n",
      model, batch, profile);
  config::ScenarioSpec s = config::ParseScenario(YAML::Load(text), "<calibration loop>");
  sim::SimOptions opts;
  opts.baseline = false;
  return sim::SimulateScenario(s, opts).iteration_ms;
}

}  // namespace poseidon::calibration
