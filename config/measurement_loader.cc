#include "config/measurement_loader.h"

#include <cmath>

#include <fmt/format.h>

#include "config/compute_loader.h"
#include "config/yaml_reader.h"

namespace poseidon::config {
namespace {

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
    row.fwd_ms = m.PositiveNumber("fwd_ms");
    row.bwd_ms = m.PositiveNumber("bwd_ms");
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
