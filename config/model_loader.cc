#include "config/model_loader.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace poseidon::config {
namespace {

std::string Stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

int64_t NonNegativeInt(MapReader& r, const std::string& key, int64_t def) {
  int64_t v = r.Int(key, def);
  if (v < 0) r.FailKey(key, fmt::format("'{}' must not be negative, got {}", key, v));
  return v;
}

// A window parameter given either as one value for both axes (`kernel: 3`) or per axis
// (`kernel_h: 1, kernel_w: 7`). `positive` selects > 0 (kernel, stride) or >= 0 (pad).
// Returns false when neither form is present.
bool ReadHW(MapReader& r, const std::string& key, bool positive, int64_t* h, int64_t* w) {
  const std::string kh = key + "_h", kw = key + "_w";
  auto read = [&](const std::string& k) {
    return positive ? r.PositiveInt(k) : NonNegativeInt(r, k, 0);
  };
  if (r.Has(key)) {
    if (r.Has(kh) || r.Has(kw)) {
      r.FailKey(key, fmt::format("give either '{}' or '{}' and '{}', not both", key, kh, kw));
    }
    *h = *w = read(key);
    r.Ignore(kh);
    r.Ignore(kw);
    return true;
  }
  if (r.Has(kh) || r.Has(kw)) {
    if (!r.Has(kh) || !r.Has(kw)) {
      r.FailKey(r.Has(kh) ? kh : kw,
                fmt::format("'{}' and '{}' go together; give both (or '{}' for both)", kh, kw, key));
    }
    *h = read(kh);
    *w = read(kw);
    r.Ignore(key);
    return true;
  }
  r.Ignore(key);
  r.Ignore(kh);
  r.Ignore(kw);
  return false;
}

std::vector<std::string> ReadBottoms(MapReader& r) {
  std::vector<std::string> out;
  YAML::Node n = r.OptionalNode("bottom");
  if (!n.IsDefined() || n.IsNull()) return out;
  if (n.IsScalar()) {
    out.push_back(n.Scalar());
  } else if (n.IsSequence()) {
    for (const auto& item : n) out.push_back(AsString(item, r.file(), "bottom"));
    if (out.empty()) {
      r.FailKey("bottom", "'bottom' is an empty list; name at least one layer, or leave the key "
                          "out to read the previous layer");
    }
  } else {
    FailAt(n, r.file(), "bottom: expected a layer name or a list of layer names, got a mapping");
  }
  return out;
}

// Keys every layer may have, then the keys of each kind. Checked before any value is read, so
// that a misspelt key is reported as such (with a suggestion) rather than as the required key
// it was meant to be.
const std::vector<std::string> kCommonLayerKeys = {"name", "type", "bottom", "group"};

std::vector<std::string> LayerKeys(core::LayerKind kind) {
  static const std::vector<std::string> kWindow = {"kernel", "kernel_h", "kernel_w",
                                                   "stride", "stride_h", "stride_w",
                                                   "pad",    "pad_h",    "pad_w"};
  std::vector<std::string> keys = kCommonLayerKeys;
  auto add = [&keys](const std::vector<std::string>& more) {
    keys.insert(keys.end(), more.begin(), more.end());
  };
  switch (kind) {
    case core::LayerKind::kConv:
      add({"num_output"});
      add(kWindow);
      add({"groups", "bias"});
      break;
    case core::LayerKind::kPool:
      add({"method", "global"});
      add(kWindow);
      break;
    case core::LayerKind::kLrn: add({"local_size", "alpha", "beta", "k"}); break;
    case core::LayerKind::kFc: add({"num_output", "bias"}); break;
    case core::LayerKind::kDropout: add({"ratio"}); break;
    case core::LayerKind::kBatchNorm: add({"affine"}); break;
    case core::LayerKind::kConcat:
    case core::LayerKind::kAdd:
    case core::LayerKind::kRelu:
    case core::LayerKind::kSoftmaxLoss: break;
  }
  return keys;
}

// Rejects any key of `node` not in `known`: "unknown key 'X' in WHAT; did you mean 'Y'? ...".
void CheckKeys(const YAML::Node& node, const std::string& file, const std::string& what,
               const std::vector<std::string>& known) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string hint = ClosestName(key, known);
    FailAt(it->first, file,
           fmt::format("unknown key '{}' in {}{}; known keys: {}", key, what,
                       hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint), Join(known)));
  }
}

core::LayerSpec ReadLayer(const YAML::Node& node, const std::string& file, size_t index) {
  const std::string pos = fmt::format("layer #{}", index + 1);
  if (!node.IsMap()) {
    FailAt(node, file, fmt::format("expected a mapping for {} (name, type, ...), got {}", pos,
                                   node.IsSequence() ? "a list" : "'" + node.Scalar() + "'"));
  }
  // Peek at name and type so that every later message names the layer.
  auto peek = [&node](const char* key) {
    YAML::Node v = node[key];
    return v.IsDefined() && v.IsScalar() ? v.Scalar() : std::string();
  };
  std::string name = peek("name");
  if (name.empty()) name = pos;
  std::string type = peek("type");
  MapReader r(node, file, fmt::format("layer '{}'{}", name, type.empty() ? "" : " (" + type + ")"));

  core::LayerSpec l;
  l.loc = r.Loc();
  l.name = r.String("name");
  if (l.name.empty()) r.FailKey("name", "layer name is empty; give every layer a unique name");
  type = r.String("type");
  if (!core::LayerKindFromName(type, &l.kind)) {
    std::vector<std::string> known;
    for (int k = 0; k <= static_cast<int>(core::LayerKind::kAdd); ++k) {
      known.push_back(core::LayerKindName(static_cast<core::LayerKind>(k)));
    }
    std::string hint = ClosestName(type, known);
    r.FailKey("type", fmt::format("unknown layer type '{}' for layer '{}'{}; known types: {}", type,
                                  l.name, hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
                                  core::KnownLayerKinds()));
  }
  CheckKeys(node, file, r.what(), LayerKeys(l.kind));
  l.bottoms = ReadBottoms(r);
  l.group = r.String("group", "");

  switch (l.kind) {
    case core::LayerKind::kConv:
      l.num_output = r.PositiveInt("num_output");
      if (!ReadHW(r, "kernel", true, &l.kernel_h, &l.kernel_w)) {
        r.Fail(fmt::format("{} is missing required key 'kernel' (window size in pixels, or "
                           "kernel_h and kernel_w); add it",
                           r.what()));
      }
      ReadHW(r, "stride", true, &l.stride_h, &l.stride_w);
      ReadHW(r, "pad", false, &l.pad_h, &l.pad_w);
      l.groups = r.PositiveInt("groups", 1);
      l.bias = r.Bool("bias", true);
      break;
    case core::LayerKind::kPool: {
      l.pool = r.Choice("method", {"max", "avg"}, "max") == "max" ? core::PoolMethod::kMax
                                                                 : core::PoolMethod::kAvg;
      l.global_pool = r.Bool("global", false);
      bool has_kernel = ReadHW(r, "kernel", true, &l.kernel_h, &l.kernel_w);
      ReadHW(r, "stride", true, &l.stride_h, &l.stride_w);
      ReadHW(r, "pad", false, &l.pad_h, &l.pad_w);
      if (l.global_pool) {
        for (const char* k : {"kernel", "kernel_h", "kernel_w", "stride", "stride_h", "stride_w",
                              "pad", "pad_h", "pad_w"}) {
          if (r.Has(k)) {
            r.FailKey(k, fmt::format("a global pool covers the whole input plane; remove '{}' or "
                                     "set 'global: false'",
                                     k));
          }
        }
      } else if (!has_kernel) {
        r.Fail(fmt::format("{} is missing required key 'kernel' (window size in pixels, or "
                           "kernel_h and kernel_w); add it, or set 'global: true'",
                           r.what()));
      }
      break;
    }
    case core::LayerKind::kLrn:
      l.local_size = r.PositiveInt("local_size", 5);
      l.alpha = r.Number("alpha", 1e-4);
      l.beta = r.Number("beta", 0.75);
      l.k = r.Number("k", 1.0);
      break;
    case core::LayerKind::kFc:
      l.num_output = r.PositiveInt("num_output");
      l.bias = r.Bool("bias", true);
      break;
    case core::LayerKind::kDropout:
      l.dropout_ratio = r.Number("ratio", 0.5);
      if (!(l.dropout_ratio >= 0.0 && l.dropout_ratio < 1.0)) {
        r.FailKey("ratio", fmt::format("'ratio' is the fraction of values dropped and must be in "
                                       "[0, 1), got {}",
                                       l.dropout_ratio));
      }
      break;
    case core::LayerKind::kBatchNorm:
      l.bn_affine = r.Bool("affine", true);
      break;
    case core::LayerKind::kConcat:
    case core::LayerKind::kAdd:
      if (l.bottoms.empty()) {
        r.Fail(fmt::format("{} is missing required key 'bottom' (the list of layers to {}); add it",
                           r.what(), l.kind == core::LayerKind::kAdd ? "add" : "concatenate"));
      }
      break;
    case core::LayerKind::kRelu:
    case core::LayerKind::kSoftmaxLoss:
      break;
  }
  r.Finish();
  return l;
}

core::ModelSpec ReadModel(const YamlFile& f) {
  const std::string& file = f.path();
  MapReader r(f.root(), file, "model file");
  core::ModelSpec spec;
  spec.loc = core::SourceLoc{file, 0, 0};

  if (!r.Has("schema_version")) {
    FailAt(core::SourceLoc{file, 1, 1},
           fmt::format("model file has no 'schema_version'; add 'schema_version: {}' as its first "
                       "line",
                       kModelSchemaVersion));
  }
  int64_t version = r.Int("schema_version");
  if (version != kModelSchemaVersion) {
    r.FailKey("schema_version", fmt::format("unsupported schema_version {}; this build reads model "
                                            "files of schema_version {}",
                                            version, kModelSchemaVersion));
  }
  CheckKeys(f.root(), file, "the model file",
            {"schema_version", "name", "description", "input", "num_classes", "layers"});
  spec.name = r.String("name", Stem(file));
  spec.description = r.String("description", "");
  {
    MapReader in(r.Node("input"), file, "input");
    spec.input_c = in.PositiveInt("channels");
    spec.input_h = in.PositiveInt("height");
    spec.input_w = in.PositiveInt("width");
    in.Finish();
  }
  spec.num_classes = NonNegativeInt(r, "num_classes", 0);
  YAML::Node layers = r.Node("layers");
  if (!layers.IsSequence()) {
    FailAt(layers, file, "layers: expected a list of layers ('- {name: conv1, type: conv, ...}')");
  }
  if (layers.size() == 0) FailAt(layers, file, "layers: the list is empty; add at least one layer");
  size_t i = 0;
  for (const auto& node : layers) spec.layers.push_back(ReadLayer(node, file, i++));
  r.Finish();
  return spec;
}

}  // namespace

core::ModelSpec LoadModelFile(const std::string& path) { return ReadModel(YamlFile::Load(path)); }

core::ModelSpec LoadModelText(const std::string& yaml, const std::string& name) {
  return ReadModel(YamlFile::Parse(yaml, name));
}

std::vector<std::string> ListModelNames(const std::string& models_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(models_dir, ec)) {
    if (e.path().extension() == ".yaml" && e.is_regular_file(ec)) {
      names.push_back(e.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string FindModelFile(const std::string& name_or_path, const std::string& models_dir) {
  const std::string ext = ".yaml";
  if (name_or_path.size() >= ext.size() &&
      name_or_path.compare(name_or_path.size() - ext.size(), ext.size(), ext) == 0) {
    return name_or_path;
  }
  std::filesystem::path p = std::filesystem::path(models_dir) / (name_or_path + ext);
  std::error_code ec;
  if (!name_or_path.empty() && std::filesystem::is_regular_file(p, ec)) return p.string();
  std::vector<std::string> known = ListModelNames(models_dir);
  std::string hint = ClosestName(name_or_path, known);
  throw ConfigError(fmt::format(
      "{}: error: unknown model '{}'{}; known models: {}; or give the path of a .yaml file",
      models_dir, name_or_path, hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
      known.empty() ? "(none found in " + models_dir + ")" : Join(known)));
}

}  // namespace poseidon::config
