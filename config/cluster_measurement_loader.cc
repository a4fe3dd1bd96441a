#include "config/cluster_measurement_loader.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/specs.h"
#include "config/yaml_reader.h"

namespace poseidon::config {

namespace fs = std::filesystem;

bool IsCalibrationSystem(const std::string& s) {
  return s == "single_gpu" || s == "single_machine";
}

namespace {

// One entry of a setup's `settings`.
struct Setting {
  std::vector<std::string> models, precisions, systems;  // empty: every one
  std::vector<std::string> keys;
  bool Matches(const MeasurementRow& m) const {
    auto in = [](const std::vector<std::string>& v, const std::string& x) {
      return v.empty() || std::find(v.begin(), v.end(), x) != v.end();
    };
    return in(models, m.model) && in(precisions, m.precision) && in(systems, m.system);
  }
};

// An optional list of strings under `key` (a lone string is a list of one).
std::vector<std::string> StringList(MapReader& r, const std::string& key) {
  const YAML::Node n = r.OptionalNode(key);
  std::vector<std::string> out;
  if (n.IsNull()) return out;
  if (n.IsScalar()) return {AsString(n, r.file(), r.what() + " " + key)};
  if (!n.IsSequence() || n.size() == 0) {
    FailAt(n, r.file(), r.what() + ": '" + key + "' must be a non-empty list of names");
  }
  for (const YAML::Node& x : n) out.push_back(AsString(x, r.file(), r.what() + " " + key));
  return out;
}

// One entry of a setup's `settings`: the keys (`set`, each KEY=VALUE as `--set` takes it) that
// the rows of the listed models, precisions and systems run with, and where they were read.
Setting ReadSetting(const YAML::Node& node, const std::string& path, const std::string& what,
                    const std::vector<std::string>& setup_systems) {
  MapReader r(node, path, what);
  Setting out;
  out.models = StringList(r, "models");
  out.precisions = StringList(r, "precisions");
  for (const std::string& p : out.precisions) {
    if (std::find(std::begin(kPrecisionNames), std::end(kPrecisionNames), p) ==
        std::end(kPrecisionNames)) {
      r.FailKey("precisions", fmt::format("precision '{}'; expected one of {}", p,
                                          fmt::join(kPrecisionNames, ", ")));
    }
  }
  out.systems = StringList(r, "systems");
  for (const std::string& sys : out.systems) {
    if (std::find(setup_systems.begin(), setup_systems.end(), sys) == setup_systems.end() &&
        !IsCalibrationSystem(sys)) {
      r.FailKey("systems", fmt::format("system '{}' is not one of the setup's systems", sys));
    }
  }
  if (!r.Has("set")) {
    r.Fail("a setting without 'set': give the keys, e.g. set: [protocol.gradient_wire=fp16]");
  }
  out.keys = StringList(r, "set");
  for (const std::string& k : out.keys) {
    const size_t eq = k.find('=');
    if (eq == std::string::npos || eq == 0) {
      r.FailKey("set", fmt::format("'{}' is not KEY=VALUE (as --set takes it)", k));
    }
  }
  const std::string source = r.String("source");
  if (source.empty()) r.FailKey("source", "say where the setting was read (file, commit, line)");
  r.Finish();
  return out;
}

}  // namespace

std::vector<MeasurementRow> LoadClusterMeasurementFile(const std::string& path) {
  const YamlFile f = YamlFile::Load(path);
  if (!f.root().IsMap()) {
    FailAt(f.root(), path,
                   "a measurement file is a mapping with schema_version, sources, setups and "
                   "measurements (scenarios/measurements/README.md)");
  }
  MapReader top(f.root(), path, "measurement file");
  const int64_t version = top.Int("schema_version");
  if (version != 1) top.FailKey("schema_version", fmt::format("schema_version {}; only 1 is known", version));
  const YAML::Node sources = top.Node("sources");
  if (!sources.IsMap()) FailAt(sources, path, "'sources' must be a mapping ID: {title, url, ...}");
  const YAML::Node setups = top.Node("setups");
  if (!setups.IsMap()) FailAt(setups, path, "'setups' must be a mapping ID: {scenario, ...}");
  const YAML::Node rows = top.Node("measurements");
  if (!rows.IsSequence()) FailAt(rows, path, "'measurements' must be a list of rows");
  top.Finish();

  struct Setup {
    std::string scenario, no_scenario;
    std::vector<std::string> systems;
    std::vector<Setting> settings;
  };
  std::map<std::string, Setup> known_setups;
  for (const auto& kv : setups) {
    const std::string id = kv.first.as<std::string>();
    MapReader s(kv.second, path, "setup '" + id + "'");
    const std::string scenario = s.String("scenario");
    Setup st;
    const bool file_like = scenario.size() > 5 && scenario.substr(scenario.size() - 5) == ".yaml" &&
                           scenario.find(' ') == std::string::npos;
    if (file_like) {
      st.scenario = ResolvePath(path, scenario);
      std::error_code ec;
      if (!fs::is_regular_file(st.scenario, ec)) {
        s.FailKey("scenario", fmt::format("scenario '{}' not found (resolved to {}); check the path",
                                          scenario, st.scenario));
      }
    } else {
      st.no_scenario = scenario;
    }
    const YAML::Node systems = s.OptionalNode("systems");
    if (systems.IsMap()) {
      for (const auto& sys : systems) st.systems.push_back(sys.first.as<std::string>());
    }
    const YAML::Node settings = s.OptionalNode("settings");
    if (!settings.IsNull()) {
      if (!settings.IsSequence()) {
        FailAt(settings, path,
               "setup '" + id + "': 'settings' must be a list of {models, precisions, systems, "
                                "set, source} (scenarios/measurements/README.md)");
      }
      int n = 0;
      for (const YAML::Node& e : settings) {
        st.settings.push_back(
            ReadSetting(e, path, fmt::format("setup '{}' setting {}", id, ++n), st.systems));
      }
    }
    for (const char* k : {"device", "device_published", "gpus_per_machine_max", "intra_machine",
                          "network"}) {
      s.Ignore(k);
    }
    s.Finish();
    known_setups[id] = st;
  }

  std::vector<MeasurementRow> out;
  int index = 0;
  for (const YAML::Node& row : rows) {
    ++index;
    MapReader r(row, path, fmt::format("measurement row {}", index));
    MeasurementRow m;
    m.file = path;
    m.line = r.Loc().line;
    m.set = r.String("set");
    if (m.set != "calibration" && m.set != "fit" && m.set != "heldout") {
      r.FailKey("set", fmt::format("set '{}'; expected calibration, fit or heldout", m.set));
    }
    m.model = r.String("model");
    m.setup = r.String("setup");
    const auto st = known_setups.find(m.setup);
    if (st == known_setups.end()) {
      std::vector<std::string> ids;
      std::string list;
      for (const auto& [id, _] : known_setups) {
        ids.push_back(id);
        list += (list.empty() ? "" : ", ") + id;
      }
      const std::string hint = ClosestName(m.setup, ids);
      r.FailKey("setup", fmt::format("unknown setup '{}'{}; this file's setups: {}", m.setup,
                                     hint.empty() ? "" : " (did you mean '" + hint + "'?)", list));
    }
    m.scenario = st->second.scenario;
    m.no_scenario = st->second.no_scenario;
    m.system = r.String("system");
    m.system_loc = r.Loc("system");
    const auto& systems = st->second.systems;
    const bool listed = std::find(systems.begin(), systems.end(), m.system) != systems.end() ||
                        IsCalibrationSystem(m.system);
    if (!listed) {
      r.FailKey("system", fmt::format("system '{}' is not one of setup '{}''s systems (nor "
                                      "single_gpu / single_machine)",
                                      m.system, m.setup));
    }
    m.machines = static_cast<int>(r.PositiveInt("machines"));
    m.gpus_per_machine = static_cast<int>(r.PositiveInt("gpus_per_machine"));
    m.gpus = static_cast<int>(r.PositiveInt("gpus"));
    if (m.gpus != m.machines * m.gpus_per_machine) {
      r.FailKey("gpus", fmt::format("gpus {} is not machines {} x gpus_per_machine {}", m.gpus,
                                    m.machines, m.gpus_per_machine));
    }
    m.batch_per_gpu = r.PositiveInt("batch_per_gpu");
    m.precision = r.Choice("precision", {"fp32", "fp16", "bf16", "tf32"}, "fp32");
    m.variant = r.String("variant", "");
    m.transport = r.String("transport", "");
    m.servers = r.Has("servers") ? static_cast<int>(r.PositiveInt("servers")) : 0;
    m.source = r.String("source");
    const bool has_rate = r.Has("samples_per_s");
    const bool has_speedup = r.Has("speedup");
    if (has_rate == has_speedup) {
      r.Fail(has_rate ? "a row gives one figure: samples_per_s or speedup, not both"
                      : "a row without a figure: give samples_per_s (whole job) or speedup (over "
                        "one machine)");
    }
    m.is_speedup = has_speedup;
    m.published = has_rate ? r.PositiveNumber("samples_per_s") : r.PositiveNumber("speedup");
    for (const char* k : {"ref", "transcribed_from", "note"}) r.Ignore(k);
    r.Finish();
    for (const Setting& setting : st->second.settings) {
      if (!setting.Matches(m)) continue;
      m.setting_keys.insert(m.setting_keys.end(), setting.keys.begin(), setting.keys.end());
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace poseidon::config
