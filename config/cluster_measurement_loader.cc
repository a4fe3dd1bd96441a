#include "config/cluster_measurement_loader.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "config/yaml_reader.h"

namespace poseidon::config {

namespace fs = std::filesystem;

bool IsCalibrationSystem(const std::string& s) {
  return s == "single_gpu" || s == "single_machine";
}

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
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace poseidon::config
