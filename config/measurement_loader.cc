#include "config/measurement_loader.h"

#include <cmath>

#include <fmt/format.h>

#include "config/compute_loader.h"
#include "config/yaml_reader.h"

namespace poseidon::config {
namespace {

// fwd_ms and bwd_ms, or a whole iteration (samples_per_s or iteration_ms) with its precision.
void ReadRowTime(MapReader& m, PublishedTiming* row) {
  const bool per_pass = m.Has("fwd_ms") || m.Has("bwd_ms");
  const bool iteration = m.Has("samples_per_s") || m.Has("iteration_ms");
  if (per_pass && iteration) {
    m.Fail("a measurement gives fwd_ms and bwd_ms, or a whole iteration (samples_per_s or "
           "iteration_ms), not both");
  }
  if (!iteration) {
    row->fwd_ms = m.PositiveNumber("fwd_ms");
    row->bwd_ms = m.PositiveNumber("bwd_ms");
    return;
  }
  if (m.Has("samples_per_s") && m.Has("iteration_ms")) {
    m.Fail("give 'samples_per_s' or 'iteration_ms', not both");
  }
  row->iteration_ms = m.Has("iteration_ms")
                          ? m.PositiveNumber("iteration_ms")
                          : 1e3 * static_cast<double>(row->batch) / m.PositiveNumber("samples_per_s");
  row->precision = ReadPrecision(m, "precision");
  row->optimizer = OptimizerFromName(
      m.Choice("optimizer", {"sgd", "adam", "adamw", "rmsprop", "lamb", "unknown"}, "sgd"));
  row->tokens = m.Has("tokens") ? m.PositiveInt("tokens") : 0;
  row->ref = m.String("ref", "");
}

PublishedTimings Read(const YamlFile& f) {
  MapReader r(f.root(), f.path(), "measurement file");
  if (!r.Has("schema_version")) {
    r.Fail("measurement file has no 'schema_version'; add 'schema_version: 1' as its first key");
  }
  if (r.Int("schema_version") != 1) {
    r.FailKey("schema_version", "unsupported schema_version for a measurement file; this build "
                                "reads version 1");
  }
  PublishedTimings t;
  t.loc = r.Loc();
  if (!r.Has("source")) {
    r.Fail("measurement file has no 'source'; add 'source: \"...\"' naming the publication, "
           "repository and commit the numbers come from");
  }
  t.source = r.String("source");
  if (t.source.empty()) r.FailKey("source", "'source' must not be empty");
  t.url = r.String("url", "");
  t.framework = r.String("framework", "");
  t.fp32_runs_tf32 = r.Bool("fp32_runs_tf32", false);
  if (r.Has("memory_format")) t.memory_format = ReadMemoryFormat(r, "memory_format");
  if (r.Has("batchnorm_fusion")) t.batchnorm_fusion = ReadBatchNormFusion(r, "batchnorm_fusion");
  if (r.Has("cuda_version")) t.cuda_version = ReadCudaVersion(r, "cuda_version");
  const YAML::Node rows = r.Node("measurements");
  if (!rows.IsSequence() || rows.size() == 0) {
    FailAt(rows, f.path(), "'measurements' must be a non-empty list of rows; add one mapping "
                           "per model and device");
  }
  r.Finish();
  for (const YAML::Node& n : rows) {
    MapReader m(n, f.path(), "measurement");
    PublishedTiming row;
    row.loc = m.Loc();
    row.model = m.String("model");
    row.device = m.String("device");
    row.library = m.String("cudnn", "");
    row.batch = m.PositiveInt("batch");
    row.input = m.Has("input") ? m.PositiveInt("input") : 0;
    row.memory_format =
        m.Has("memory_format") ? ReadMemoryFormat(m, "memory_format") : t.memory_format;
    row.batchnorm_fusion =
        m.Has("batchnorm_fusion") ? ReadBatchNormFusion(m, "batchnorm_fusion") : t.batchnorm_fusion;
    row.cuda_version = m.Has("cuda_version") ? ReadCudaVersion(m, "cuda_version") : t.cuda_version;
    ReadRowTime(m, &row);
    if (m.Has("bwd_from_total")) {
      const double total = m.PositiveNumber("bwd_from_total");
      if (std::abs(total - row.fwd_ms - row.bwd_ms) > 0.011) {
        m.FailKey("bwd_from_total",
                  fmt::format("bwd_from_total {} is not fwd_ms + bwd_ms ({}); write bwd_ms as "
                              "the published total minus the forward time",
                              total, row.fwd_ms + row.bwd_ms));
      }
    }
    if (!m.Has("set")) m.Fail("measurement has no 'set'; add 'set: fit' or 'set: heldout'");
    row.fit = m.Choice("set", {"fit", "heldout"}, "fit") == "fit";
    const YAML::Node without = m.OptionalNode("without");
    if (!without.IsNull()) {
      if (!without.IsSequence()) FailAt(without, f.path(), "'without' must be a list of groups");
      for (const YAML::Node& g : without) {
        if (!g.IsScalar()) FailAt(g, f.path(), "'without' must list group names");
        row.without.insert(g.Scalar());
      }
    }
    m.Finish();
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace

PublishedTimings LoadPublishedTimings(const std::string& path) {
  return Read(YamlFile::Load(path));
}

PublishedTimings ParsePublishedTimings(const std::string& text, const std::string& name) {
  return Read(YamlFile::Parse(text, name));
}

}  // namespace poseidon::config
