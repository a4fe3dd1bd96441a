#include "config/worker_job.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include "config/model_loader.h"
#include "config/yaml_reader.h"

namespace poseidon::config {

std::string EncodeWorkerJob(const WorkerJob& job) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "consistency" << YAML::Value << job.consistency;
  out << YAML::Key << "staleness" << YAML::Value << job.staleness;
  out << YAML::Key << "batch" << YAML::Value << job.batch;
  out << YAML::Key << "gradient_wire" << YAML::Value << job.gradient_wire;
  out << YAML::Key << "schemes" << YAML::Value << YAML::BeginMap;
  for (const auto& [layer, scheme] : job.schemes) out << YAML::Key << layer << YAML::Value << scheme;
  out << YAML::EndMap;
  out << YAML::Key << "model" << YAML::Value << YAML::Literal << job.model_yaml;
  out << YAML::EndMap;
  return out.c_str();
}

WorkerJob DecodeWorkerJob(const std::string& text, const std::string& source) {
  const std::string name = "the job " + source + " described";
  const YamlFile f = YamlFile::Parse(text, name);
  MapReader r(f.root(), name, "the job");
  WorkerJob job;
  job.consistency = r.Choice("consistency", {"bsp", "ssp", "asp"}, "bsp");
  job.staleness = r.Int("staleness", 0);
  if (job.staleness < 0) r.FailKey("staleness", "staleness must not be negative");
  job.batch = r.PositiveInt("batch");
  job.gradient_wire = r.Choice("gradient_wire", {"fp32", "fp16", "bf16"}, "fp32");
  YAML::Node schemes = r.Node("schemes");
  if (!schemes.IsMap()) FailAt(schemes, name, "schemes: expected a mapping layer -> scheme");
  for (auto it = schemes.begin(); it != schemes.end(); ++it) {
    const std::string scheme = AsString(it->second, name, "schemes");
    if (scheme != "ps" && scheme != "sfb" && scheme != "allreduce") {
      FailAt(it->second, name, "schemes: '" + scheme + "' is not ps, sfb or allreduce");
    }
    job.schemes[AsString(it->first, name, "schemes")] = scheme;
  }
  job.model_yaml = r.String("model");
  r.Finish();
  return job;
}

void ApplyWorkerJob(const WorkerJob& job, const std::string& source, ScenarioSpec* s) {
  s->model = LoadModelText(job.model_yaml, "the model " + source + " described");
  s->model_without.clear();
  s->scheme = "ps";
  s->layer_schemes = job.schemes;
  s->consistency = job.consistency;
  s->staleness = job.staleness;
  s->batch_per_worker = job.batch;
  s->gradient_wire = job.gradient_wire;
}

}  // namespace poseidon::config
