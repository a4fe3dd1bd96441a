#include "config/compute_loader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>

namespace poseidon::config {
namespace {

// Reads and checks `schema_version` (required in every file).
void CheckSchemaVersion(MapReader& r, int supported, const char* kind) {
  if (!r.Has("schema_version")) {
    r.Fail(fmt::format("{} file has no 'schema_version'; add 'schema_version: {}' as its first key",
                       kind, supported));
  }
  int64_t v = r.Int("schema_version");
  if (v != supported) {
    r.FailKey("schema_version",
              fmt::format("unsupported schema_version {} for a {} file; this build reads version "
                          "{}",
                          v, kind, supported));
  }
}

double RequiredNonNegative(MapReader& r, const std::string& key) {
  double v = r.Number(key);
  if (v < 0) r.FailKey(key, fmt::format("'{}' must not be negative, got {}", key, v));
  return v;
}

// A fraction of a datasheet figure: 0 < x <= 1.
double RequiredFraction(MapReader& r, const std::string& key) {
  double v = r.Number(key);
  if (!(v > 0 && v <= 1)) {
    r.FailKey(key, fmt::format("'{}' must be in (0, 1] (the fraction of the datasheet figure that "
                               "kernels reach), got {}",
                               key, v));
  }
  return v;
}

std::string RequiredName(MapReader& r, const std::string& key) {
  std::string v = r.String(key);
  if (v.empty()) r.FailKey(key, fmt::format("'{}' must not be empty", key));
  return v;
}

std::optional<double> OptionalNonNegative(MapReader& r, const std::string& key) {
  if (!r.Has(key)) {
    r.Ignore(key);
    return std::nullopt;
  }
  return RequiredNonNegative(r, key);
}

void CheckPercentiles(MapReader& r, const std::optional<double>& p10,
                      const std::optional<double>& p90, const std::string& p10_key,
                      const std::string& p90_key) {
  if (p10 && p90 && *p10 > *p90) {
    r.FailKey(p90_key, fmt::format("'{}' ({}) is smaller than '{}' ({}); the 90th percentile "
                                   "cannot be below the 10th",
                                   p90_key, *p90, p10_key, *p10));
  }
}

// A misspelt or unit-less key standing for a required one (`pcie: 6` for `pcie_gbs: 6`) is
// reported at its own place with a "did you mean", rather than as "missing required key" at the
// top of the mapping. Keys close to a key that is present are left to MapReader::Finish.
void CheckMisspeltKeys(const MapReader& r, const std::vector<std::string>& keys) {
  for (auto it = r.node().begin(); it != r.node().end(); ++it) {
    if (!it->first.IsScalar()) continue;
    const std::string& key = it->first.Scalar();
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    std::string hint = ClosestName(key, keys);
    if (!hint.empty() && !r.Has(hint)) {
      FailAt(it->first, r.file(),
             fmt::format("unknown key '{}' in {}; did you mean '{}'? (units go in the key name)",
                         key, r.what(), hint));
    }
  }
}

}  // namespace

int ParseMajorMinor(const std::string& text) {
  int major = 0, minor = 0;
  const char* p = text.data();
  const char* end = p + text.size();
  auto r = std::from_chars(p, end, major);
  if (r.ec != std::errc() || major <= 0) return 0;
  if (r.ptr != end) {
    if (*r.ptr != '.') return 0;
    auto r2 = std::from_chars(r.ptr + 1, end, minor);
    if (r2.ec != std::errc() || minor < 0) return 0;
    // "5.1.05": the patch level does not change the algorithms.
    if (r2.ptr != end && *r2.ptr != '.') return 0;
  }
  return major * 10 + std::min(minor, 9);
}

DeviceComputeModel ReadComputeModel(MapReader& r) {
  const std::string m = r.Choice("compute_model", {"cudnn", "roofline", "framework"}, "cudnn");
  return m == "roofline"    ? DeviceComputeModel::kRoofline
         : m == "framework" ? DeviceComputeModel::kFramework
                            : DeviceComputeModel::kCudnn;
}

Precision ReadPrecision(MapReader& r, const std::string& key) {
  return PrecisionFromName(r.Choice(key, {"fp32", "tf32", "fp16", "bf16"}, "fp32"));
}

OptimizerKind ReadOptimizer(MapReader& r, const std::string& key) {
  return OptimizerFromName(r.Choice(key, {"sgd", "adam", "adamw", "rmsprop", "lamb"}, "sgd"));
}

MemoryFormat ReadMemoryFormat(MapReader& r, const std::string& key) {
  return MemoryFormatFromName(r.Choice(key, {"nchw", "nhwc"}, "nchw"));
}

BatchNormFusion ReadBatchNormFusion(MapReader& r, const std::string& key) {
  return BatchNormFusionFromName(r.Choice(key, {"none", "bn_relu", "bn_add_relu"}, "none"));
}

int ReadCudnnVersion(MapReader& r) {
  const std::string v = r.String("cudnn_version");
  const int version = ParseMajorMinor(v);
  if (version == 0) {
    r.FailKey("cudnn_version", fmt::format("cudnn_version '{}' is not MAJOR.MINOR (for example "
                                           "\"5.1\", or \"2.0\" for cuDNN R2)",
                                           v));
  }
  return version;
}

std::string MajorMinorName(int version) {
  return version == 0 ? "" : fmt::format("{}.{}", version / 10, version % 10);
}

int ReadCudaVersion(MapReader& r, const std::string& key) {
  const std::string v = r.String(key);
  const int version = ParseMajorMinor(v);
  if (version == 0) {
    r.FailKey(key, fmt::format("{} '{}' is not a CUDA release MAJOR.MINOR (for example \"10.2\" "
                               "or \"11.8\"); write the CUDA version the framework was built "
                               "with",
                               key, v));
  }
  return version;
}

namespace {

// kernel_model: {NAME: value, ...} with NAME one of config::kKernelParamNames.
std::map<std::string, double> ReadKernelModelOverrides(const YAML::Node& node,
                                                       const std::string& file) {
  MapReader r(node, file, "kernel_model");
  std::map<std::string, double> out;
  for (int i = 0; i < kNumKernelParams; ++i) {
    const std::string key = kKernelParamNames[i];
    if (!r.Has(key)) {
      r.Ignore(key);
      continue;
    }
    const double v = r.Number(key);
    const bool fraction = key == "gemm_efficiency" || key == "fft_efficiency" ||
                          key == "memory_efficiency" || key == "kepler_efficiency";
    if (fraction && !(v > 0 && v <= 1)) {
      r.FailKey(key, fmt::format("'{}' must be in (0, 1], got {}", key, v));
    }
    if (key == "winograd_gain" && !(v >= 1 && v <= 4)) {
      r.FailKey(key, fmt::format("'winograd_gain' must be in [1, 4] (F(4x4,3x3) saves at most "
                                 "4x the multiplies), got {}",
                                 v));
    }
    if (key == "tile_alpha" && !(v >= 0 && v <= 2)) {
      r.FailKey(key, fmt::format("'tile_alpha' must be in [0, 2], got {}", v));
    }
    if (key == "launch_us" && !(v >= 0)) {
      r.FailKey(key, fmt::format("'launch_us' must not be negative, got {}", v));
    }
    out[key] = v;
  }
  r.Finish();
  return out;
}

// tensor_tflops and the other figures only the framework model reads.
void ReadTensorFigures(MapReader& r, const std::string& file, DeviceSpec* d) {
  const YAML::Node tt = r.OptionalNode("tensor_tflops");
  if (!tt.IsNull()) {
    MapReader t(tt, file, "tensor_tflops");
    CheckMisspeltKeys(t, {"tf32", "fp16", "bf16", "fp8"});
    for (int i = 1; i < 4; ++i) {
      if (t.Has(kPrecisionNames[i])) {
        d->tensor_flops[static_cast<Precision>(i)] = t.PositiveNumber(kPrecisionNames[i]) * 1e12;
      }
    }
    // fp8 is recorded for the reader; no precision of a scenario prices it yet.
    if (t.Has("fp8")) t.PositiveNumber("fp8");
    t.Finish();
    if (!r.Has("tensor_source")) {
      r.FailKey("tensor_tflops", "'tensor_tflops' needs 'tensor_source' naming the datasheet its "
                                 "figures come from (and whether they are dense)");
    }
  }
  if (r.Has("tensor_source")) d->tensor_source = RequiredName(r, "tensor_source");
  if (r.Has("fp16_tflops")) d->fp16_flops = r.PositiveNumber("fp16_tflops") * 1e12;
  if (r.Has("boost_clock_mhz")) d->boost_clock_mhz = r.PositiveNumber("boost_clock_mhz");
  if (r.Has("base_clock_mhz")) d->base_clock_mhz = r.PositiveNumber("base_clock_mhz");
  if (r.Has("l2_cache_mb")) d->l2_cache_bytes = r.PositiveNumber("l2_cache_mb") * 1e6;
  if (r.Has("memory_gb")) d->memory_bytes = r.PositiveNumber("memory_gb") * 1e9;
  const YAML::Node fm = r.OptionalNode("framework_model");
  if (!fm.IsNull()) {
    MapReader m(fm, file, "framework_model");
    for (const char* name : kFrameworkParamNames) {
      if (m.Has(name)) d->framework_model[name] = m.PositiveNumber(name);
    }
    m.Finish();
  }
}

DeviceSpec ReadDevice(const YamlFile& f) {
  MapReader r(f.root(), f.path(), "device file");
  CheckMisspeltKeys(
      r, {"schema_version", "name", "description", "peak_tflops", "memory_bandwidth_gbs",
          "compute_efficiency", "memory_efficiency", "pcie_gbs", "launch_overhead_us", "source",
          "compute_model", "kernel_model", "sm_count", "architecture", "cudnn_version",
          "tensor_tflops", "tensor_source", "fp16_tflops", "boost_clock_mhz", "base_clock_mhz",
          "l2_cache_mb", "memory_gb", "framework_model"});
  CheckSchemaVersion(r, kDeviceSchemaVersion, "device");
  DeviceSpec d;
  d.loc = r.Loc();
  d.name = RequiredName(r, "name");
  d.description = r.String("description");
  d.peak_flops = r.PositiveNumber("peak_tflops") * 1e12;
  d.memory_bandwidth_Bps = r.PositiveNumber("memory_bandwidth_gbs") * 1e9;
  // The roofline's flat fractions (compute_model: roofline only); the defaults of DeviceSpec.
  if (r.Has("compute_efficiency")) d.compute_efficiency = RequiredFraction(r, "compute_efficiency");
  if (r.Has("memory_efficiency")) d.memory_efficiency = RequiredFraction(r, "memory_efficiency");
  d.pcie_bandwidth_Bps = RequiredNonNegative(r, "pcie_gbs") * 1e9;
  d.kernel_launch_ns = std::llround(RequiredNonNegative(r, "launch_overhead_us") * 1e3);
  if (!r.Has("source")) {
    r.Fail("device file has no 'source'; add 'source: \"...\"' naming the datasheet (or "
           "measurement) its figures come from");
  }
  d.source = RequiredName(r, "source");
  if (r.Has("compute_model")) d.compute_model = ReadComputeModel(r);
  if (r.Has("sm_count")) d.sm_count = static_cast<int>(r.PositiveInt("sm_count"));
  static const std::vector<std::string> kArchitectures = {
      "kepler", "maxwell", "pascal", "volta", "turing", "ampere", "hopper", "ada", "blackwell"};
  if (r.Has("architecture")) {
    const std::string a = r.Choice("architecture", kArchitectures, "kepler");
    d.architecture = static_cast<GpuArchitecture>(
        1 + (std::find(kArchitectures.begin(), kArchitectures.end(), a) - kArchitectures.begin()));
  }
  if (r.Has("cudnn_version")) d.cudnn_version = ReadCudnnVersion(r);
  if (d.compute_model != DeviceComputeModel::kRoofline) {
    if (d.sm_count == 0) {
      r.Fail("device file has no 'sm_count', which the cudnn compute model needs; add the "
             "number of streaming multiprocessors from the datasheet, or set "
             "'compute_model: roofline'");
    }
    if (d.architecture == GpuArchitecture::kUnknown) {
      r.Fail("device file has no 'architecture', which the cudnn compute model needs; add one "
             "of kepler, maxwell, pascal, volta, turing, ampere, hopper, or set "
             "'compute_model: roofline'");
    }
  }
  const YAML::Node km = r.OptionalNode("kernel_model");
  if (!km.IsNull()) d.kernel_model = ReadKernelModelOverrides(km, f.path());
  ReadTensorFigures(r, f.path(), &d);
  if (d.compute_model == DeviceComputeModel::kFramework && d.boost_clock_mhz <= 0) {
    r.Fail(
        "device file has no 'boost_clock_mhz', which the framework compute model needs "
        "(batch norm runs at values per SM per clock); add the datasheet boost clock");
  }
  r.Finish();
  return d;
}

LayerTiming ReadLayerTiming(MapReader& r) {
  LayerTiming t;
  t.loc = r.Loc();
  t.fwd_ms = RequiredNonNegative(r, "fwd_ms");
  t.bwd_ms = RequiredNonNegative(r, "bwd_ms");
  t.fwd_p10_ms = OptionalNonNegative(r, "fwd_p10_ms");
  t.fwd_p90_ms = OptionalNonNegative(r, "fwd_p90_ms");
  t.bwd_p10_ms = OptionalNonNegative(r, "bwd_p10_ms");
  t.bwd_p90_ms = OptionalNonNegative(r, "bwd_p90_ms");
  t.sfb_rebuild_ms = OptionalNonNegative(r, "sfb_rebuild_ms");
  CheckPercentiles(r, t.fwd_p10_ms, t.fwd_p90_ms, "fwd_p10_ms", "fwd_p90_ms");
  CheckPercentiles(r, t.bwd_p10_ms, t.bwd_p90_ms, "bwd_p10_ms", "bwd_p90_ms");
  return t;
}

ProfileSpec ReadProfile(const YamlFile& f) {
  const std::string& file = f.path();
  MapReader r(f.root(), file, "profile file");
  CheckMisspeltKeys(
      r, {"schema_version", "model", "batch", "device", "backend", "provenance", "layers"});
  CheckSchemaVersion(r, kProfileSchemaVersion, "profile");
  ProfileSpec p;
  p.loc = r.Loc();
  p.model = RequiredName(r, "model");
  p.batch = r.PositiveInt("batch");
  p.device = RequiredName(r, "device");
  if (!r.Has("backend")) r.String("backend");  // the "missing required key" message
  p.backend = r.Choice("backend", {"cpu", "cuda", "reference", "synthetic"}, "");
  p.update_ms_per_mb = r.NonNegativeNumber("update_ms_per_mb", 0.0);
  p.pcie_bandwidth_Bps = r.NonNegativeNumber("pcie_gbs", 0.0) * 1e9;

  YAML::Node prov = r.Node("provenance");
  if (!prov.IsMap()) {
    FailAt(prov, file,
           "'provenance' must be a mapping of strings (date, command, commit, libraries, ...); "
           "write it as 'provenance: {date: \"...\", command: \"...\"}'");
  }
  for (auto it = prov.begin(); it != prov.end(); ++it) {
    std::string key = AsString(it->first, file, "provenance key");
    p.provenance[key] = AsString(it->second, file, fmt::format("provenance '{}'", key));
  }

  YAML::Node layers = r.Node("layers");
  if (!layers.IsSequence()) {
    FailAt(layers, file,
           "'layers' must be a list with one entry per layer, e.g. "
           "'- {name: conv1, fwd_ms: 1.5, bwd_ms: 3.0}'");
  }
  if (layers.size() == 0) FailAt(layers, file, "'layers' is empty; list every layer of the model");
  for (size_t i = 0; i < layers.size(); ++i) {
    YAML::Node entry = layers[i];
    MapReader lr(entry, file, fmt::format("layers entry {}", i + 1));
    std::string name = RequiredName(lr, "name");
    MapReader named(entry, file, fmt::format("layer '{}'", name));
    CheckMisspeltKeys(named, {"name", "fwd_ms", "bwd_ms"});
    named.Ignore("name");
    LayerTiming t = ReadLayerTiming(named);
    named.Finish();
    auto [it, inserted] = p.layers.emplace(name, t);
    if (!inserted) {
      lr.FailKey("name",
                 fmt::format("layer '{}' is listed twice (first at line {}); keep one entry", name,
                             it->second.loc.line));
    }
    p.layer_order.push_back(name);
  }
  r.Finish();
  return p;
}

// --- writing -------------------------------------------------------------------------------

bool IsReservedWord(const std::string& s) {
  static const std::set<std::string> kWords = {"true", "false", "yes", "no", "on",
                                               "off",  "null",  "y",   "n",  "~"};
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return kWords.count(lower) > 0;
}

bool LooksNumeric(const std::string& s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

// A string as a YAML scalar: plain when that is unambiguous in block and flow context, else
// double-quoted with escapes.
std::string YamlString(const std::string& s) {
  bool plain = !s.empty() && !IsReservedWord(s) && !LooksNumeric(s);
  for (size_t i = 0; plain && i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    // A leading digit or sign is quoted too, so that no YAML reader (Python's included) takes
    // "2025-01-01" or "0x10" for a date or a number.
    bool ok = std::isalpha(c) || c == '_' ||
              (i > 0 && (std::isdigit(c) || c == '.' || c == '-' || c == '+' || c == '/'));
    if (!ok) plain = false;
  }
  if (plain) return s;
  std::string q = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        q += "\\\"";
        break;
      case '\\':
        q += "\\\\";
        break;
      case '\n':
        q += "\\n";
        break;
      case '\t':
        q += "\\t";
        break;
      case '\r':
        q += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          q += fmt::format("\\x{:02x}", c);
        } else {
          q += ch;  // printable ASCII and UTF-8 bytes go through
        }
    }
  }
  return q + "\"";
}

// Shortest text that reads back to exactly `v` (fmt's default for doubles).
std::string YamlNumber(double v) { return fmt::format("{}", v); }

}  // namespace

std::string YamlScalarString(const std::string& s) { return YamlString(s); }
std::string YamlScalarNumber(double v) { return YamlNumber(v); }

DeviceSpec LoadDeviceFile(const std::string& path) { return ReadDevice(YamlFile::Load(path)); }

DeviceSpec ParseDeviceYaml(const std::string& text, const std::string& name) {
  return ReadDevice(YamlFile::Parse(text, name));
}

ProfileSpec LoadProfileFile(const std::string& path) { return ReadProfile(YamlFile::Load(path)); }

ProfileSpec ParseProfileYaml(const std::string& text, const std::string& name) {
  return ReadProfile(YamlFile::Parse(text, name));
}

std::string FindDeviceFile(const std::string& name_or_path, const std::string& devices_dir,
                           const core::SourceLoc& where) {
  namespace fs = std::filesystem;
  std::string prefix = where.file.empty() ? "" : where.ToString() + ": ";
  auto ends_with = [&](const std::string& suffix) {
    return name_or_path.size() >= suffix.size() &&
           name_or_path.compare(name_or_path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml")) {
    if (!fs::is_regular_file(name_or_path, ec)) {
      throw ConfigError(
          fmt::format("{}error: device file '{}' does not exist; check the path, or "
                      "give a device name from {}",
                      prefix, name_or_path, devices_dir));
    }
    return name_or_path;
  }
  fs::path candidate = fs::path(devices_dir) / (name_or_path + ".yaml");
  if (fs::is_regular_file(candidate, ec)) return candidate.string();

  std::vector<std::string> known;
  if (fs::is_directory(devices_dir, ec)) {
    for (const auto& e : fs::directory_iterator(devices_dir, ec)) {
      if (e.is_regular_file(ec) && e.path().extension() == ".yaml") {
        known.push_back(e.path().stem().string());
      }
    }
  }
  std::sort(known.begin(), known.end());
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  std::string hint = ClosestName(name_or_path, known);
  throw ConfigError(fmt::format(
      "{}error: unknown device '{}'{}; known devices (in {}): {}; add {} or give a path to a "
      "device file",
      prefix, name_or_path, hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
      devices_dir, list.empty() ? "none" : list, candidate.string()));
}

void WriteProfileYaml(const ProfileSpec& profile, std::ostream& out) {
  out << "# Per-layer compute profile: times in ms for one pass over the whole batch.\n"
      << "# Format: config/compute_loader.h.\n";
  out << "schema_version: " << kProfileSchemaVersion << "\n";
  out << "model: " << YamlString(profile.model) << "\n";
  out << "batch: " << profile.batch << "\n";
  out << "device: " << YamlString(profile.device) << "\n";
  out << "backend: " << YamlString(profile.backend) << "\n";
  if (profile.update_ms_per_mb > 0) {
    out << "update_ms_per_mb: " << YamlNumber(profile.update_ms_per_mb) << "\n";
  }
  if (profile.pcie_bandwidth_Bps > 0) {
    out << "pcie_gbs: " << YamlNumber(profile.pcie_bandwidth_Bps / 1e9) << "\n";
  }
  if (profile.provenance.empty()) {
    out << "provenance: {}\n";
  } else {
    out << "provenance:\n";
    for (const auto& [k, v] : profile.provenance) {
      out << "  " << YamlString(k) << ": " << YamlString(v) << "\n";
    }
  }

  std::vector<std::string> order;
  std::set<std::string> seen;
  for (const auto& name : profile.layer_order) {
    if (profile.layers.count(name) && seen.insert(name).second) order.push_back(name);
  }
  for (const auto& [name, t] : profile.layers) {
    if (seen.insert(name).second) order.push_back(name);
  }
  if (order.empty()) {
    out << "layers: []\n";
    return;
  }
  out << "layers:\n";
  for (const auto& name : order) {
    const LayerTiming& t = profile.layers.at(name);
    out << "  - {name: " << YamlString(name) << ", fwd_ms: " << YamlNumber(t.fwd_ms)
        << ", bwd_ms: " << YamlNumber(t.bwd_ms);
    auto opt = [&](const char* key, const std::optional<double>& v) {
      if (v) out << ", " << key << ": " << YamlNumber(*v);
    };
    opt("fwd_p10_ms", t.fwd_p10_ms);
    opt("fwd_p90_ms", t.fwd_p90_ms);
    opt("bwd_p10_ms", t.bwd_p10_ms);
    opt("bwd_p90_ms", t.bwd_p90_ms);
    opt("sfb_rebuild_ms", t.sfb_rebuild_ms);
    out << "}\n";
  }
}

std::string FrameworkFiguresMissing(const DeviceSpec& d) {
  std::string missing;
  if (d.sm_count <= 0) missing += " 'sm_count'";
  if (d.architecture == GpuArchitecture::kUnknown) missing += " 'architecture'";
  if (d.boost_clock_mhz <= 0) missing += " 'boost_clock_mhz'";
  if (missing.empty()) return "";
  return fmt::format(
      "the framework compute model needs{} in device '{}' (batch norm runs at "
      "values per SM per clock); add them from the datasheet",
      missing, d.name);
}

std::string PrecisionUnsupported(const DeviceSpec& d, Precision precision) {
  if (precision == Precision::kFp32) return "";
  if (d.tensor_flops.count(precision)) return "";
  // Without fast half arithmetic, fp16 runs as fp16 storage with fp32 arithmetic (cuDNN's
  // pseudo-half configuration), as frameworks do on such GPUs.
  if (precision == Precision::kFp16) return "";
  std::string has;
  for (const auto& [p, flops] : d.tensor_flops) has += fmt::format(" {}", PrecisionName(p));
  const std::string what =
      d.tensor_flops.empty()
          ? (d.fp16_flops > 0 ? std::string("only fp16 on CUDA cores (fp16_tflops)")
                              : std::string("no tensor-core figure (tensor_tflops)"))
          : fmt::format("tensor cores for{} only", has);
  const char* hint = precision == Precision::kFp16
                         ? "add tensor_tflops: {fp16: ...} (or fp16_tflops) from the datasheet"
                         : "tf32 and bf16 run on the tensor cores of Ampere and later; add "
                           "tensor_tflops from the datasheet if this device has them";
  return fmt::format("device '{}' cannot run precision {}: its file gives {}; {}, or use a "
                     "precision it runs",
                     d.name, PrecisionName(precision), what, hint);
}

std::string CudaVersionUnsupported(const DeviceSpec& d) {
  if (d.cuda_version == 0) return "";
  // The first CUDA release of each architecture (NVIDIA's CUDA toolkit release notes), as
  // major * 10 + minor. (tf32 and bf16 need 11.0 too, but only Ampere and later have them.)
  struct FirstRelease {
    GpuArchitecture arch;
    int first;
  };
  constexpr FirstRelease kFirst[] = {
      {GpuArchitecture::kVolta, 90},   {GpuArchitecture::kTuring, 100},
      {GpuArchitecture::kAmpere, 110}, {GpuArchitecture::kAda, 118},
      {GpuArchitecture::kHopper, 118}, {GpuArchitecture::kBlackwell, 128}};
  int first = 0;
  for (const FirstRelease& f : kFirst) {
    if (f.arch == d.architecture) first = f.first;
  }
  if (d.cuda_version >= first) return "";
  return fmt::format(
      "device '{}' needs CUDA {} or later, but cuda_version is {}; write the release "
      "the run used",
      d.name, MajorMinorName(first), MajorMinorName(d.cuda_version));
}

}  // namespace poseidon::config
