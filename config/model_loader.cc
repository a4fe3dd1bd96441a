#include "config/model_loader.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
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
      add({"method", "global", "round"});
      add(kWindow);
      break;
    case core::LayerKind::kLrn: add({"local_size", "alpha", "beta", "k"}); break;
    case core::LayerKind::kFc: add({"num_output", "bias"}); break;
    case core::LayerKind::kDropout: add({"ratio"}); break;
    case core::LayerKind::kBatchNorm: add({"affine"}); break;
    case core::LayerKind::kEmbedding: add({"vocab", "num_output"}); break;
    case core::LayerKind::kPosEmbedding: add({"max_len"}); break;
    case core::LayerKind::kLinear: add({"num_output", "bias", "tie"}); break;
    case core::LayerKind::kAttention:
      add({"heads", "causal", "bias", "memory", "relative"});
      break;
    case core::LayerKind::kPatchEmbed: add({"num_output", "patch", "bias"}); break;
    case core::LayerKind::kTokenPool: add({"method"}); break;
    case core::LayerKind::kModule: add({"params", "linear"}); break;
    case core::LayerKind::kConcat:
    case core::LayerKind::kAdd:
    case core::LayerKind::kMul:
    case core::LayerKind::kRelu:
    case core::LayerKind::kSoftmaxLoss:
    case core::LayerKind::kLayerNorm:
    case core::LayerKind::kGelu:
    case core::LayerKind::kTanh:
    case core::LayerKind::kSoftmax:
    case core::LayerKind::kClsToken: break;
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

// A module layer's `params: [{name: weight, dims: [64, 784]}, ...]` and, for a module that
// applies its first parameter as a GEMM weight, `linear: {in: M, out: N, rows: R}`.
void ReadModuleParams(MapReader& r, core::LayerSpec* l) {
  YAML::Node params = r.Node("params");
  if (!params.IsSequence() || params.size() == 0) {
    FailAt(params, r.file(), r.what() + ": params: expected a list of {name, dims}");
  }
  for (const auto& p : params) {
    if (!p.IsMap()) FailAt(p, r.file(), r.what() + ": params: expected {name: N, dims: [...]}");
    MapReader pr(p, r.file(), r.what() + " parameter");
    CheckKeys(p, r.file(), pr.what(), {"name", "dims"});
    core::ModuleParam mp;
    mp.name = pr.String("name");
    YAML::Node dims = pr.Node("dims");
    if (!dims.IsSequence()) FailAt(dims, r.file(), pr.what() + ": dims: expected a list");
    for (const auto& d : dims) {
      int64_t v = 0;
      const std::string t = d.IsScalar() ? d.Scalar() : "";
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec != std::errc() || end != t.data() + t.size() || v <= 0) {
        FailAt(d, r.file(), pr.what() + " '" + mp.name + "': dims: expected positive integers, got '" +
                                t + "'");
      }
      mp.dims.push_back(v);
    }
    l->module_params.push_back(std::move(mp));
  }
  if (r.Has("linear")) {
    YAML::Node lin = r.Node("linear");
    CheckKeys(lin, r.file(), r.what() + " linear", {"in", "out", "rows"});
    MapReader lr(lin, r.file(), r.what() + " linear");
    l->linear_in = lr.PositiveInt("in");
    l->linear_out = lr.PositiveInt("out");
    l->linear_rows = lr.PositiveInt("rows", 1);
  }
}

// `pos` names the layer by its place ("layer #3") until its name is known.
core::LayerSpec ReadLayer(const YAML::Node& node, const std::string& file, const std::string& pos) {
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
    for (int k = 0; k <= static_cast<int>(core::kLastLayerKind); ++k) {
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
      l.round_given = r.Has("round");
      l.pool_round = r.Choice("round", {"ceil", "floor"}, "ceil") == "floor"
                         ? core::PoolRound::kFloor
                         : core::PoolRound::kCeil;
      bool has_kernel = ReadHW(r, "kernel", true, &l.kernel_h, &l.kernel_w);
      ReadHW(r, "stride", true, &l.stride_h, &l.stride_w);
      ReadHW(r, "pad", false, &l.pad_h, &l.pad_w);
      if (l.global_pool) {
        for (const char* k : {"kernel", "kernel_h", "kernel_w", "stride", "stride_h", "stride_w",
                              "pad", "pad_h", "pad_w", "round"}) {
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
    case core::LayerKind::kMul:
      if (l.bottoms.empty()) {
        r.Fail(fmt::format("{} is missing required key 'bottom' (the list of layers to {}); add it",
                           r.what(),
                           l.kind == core::LayerKind::kAdd   ? "add"
                           : l.kind == core::LayerKind::kMul ? "multiply"
                                                             : "concatenate"));
      }
      break;
    case core::LayerKind::kEmbedding:
      l.vocab = r.PositiveInt("vocab");
      l.num_output = r.PositiveInt("num_output");
      break;
    case core::LayerKind::kPosEmbedding:
      l.max_len = r.PositiveInt("max_len", 0);
      break;
    case core::LayerKind::kLinear:
      l.num_output = r.PositiveInt("num_output");
      l.bias = r.Bool("bias", true);
      l.tie = r.String("tie", "");
      break;
    case core::LayerKind::kAttention:
      l.heads = r.PositiveInt("heads");
      l.causal = r.Bool("causal", false);
      l.bias = r.Bool("bias", true);
      l.memory = NonNegativeInt(r, "memory", 0);
      l.relative = r.Bool("relative", false);
      break;
    case core::LayerKind::kPatchEmbed:
      l.num_output = r.PositiveInt("num_output");
      l.patch = r.PositiveInt("patch");
      l.bias = r.Bool("bias", true);
      break;
    case core::LayerKind::kTokenPool:
      l.pool_first = r.Choice("method", {"mean", "first"}, "mean") == "first";
      break;
    case core::LayerKind::kModule:
      ReadModuleParams(r, &l);
      break;
    case core::LayerKind::kRelu:
    case core::LayerKind::kSoftmaxLoss:
    case core::LayerKind::kLayerNorm:
    case core::LayerKind::kGelu:
    case core::LayerKind::kTanh:
    case core::LayerKind::kSoftmax:
    case core::LayerKind::kClsToken:
      break;
  }
  r.Finish();
  return l;
}

// ---- repeat blocks ---------------------------------------------------------------------------
//
//   - repeat: 3          # copies (a positive integer)
//     start: 1           # first value of {i} (default 0)
//     layers:            # the block, one layer mapping per entry, as in the top-level list
//       - {name: "res{i}_conv", type: conv, num_output: 64, kernel: 3, pad: 1}
//       - {name: "res{i}", type: add, bottom: ["{prev}", "res{i}_conv"]}
//
// In `name`, `bottom` and `group`: {i} is the copy's index (start .. start + N - 1), {i+K} and
// {i-K} that index plus or minus K, {i:a} the index as a letter (0 = a, 1 = b, ..., 25 = z; for
// Caffe's res2a, res2b, ...), {prev} the last layer of the previous copy (for the first
// copy, the layer before the block, or `data` when the block comes first); {{ and }} are literal
// braces. A block's first layer without `bottom` reads the previous layer in the file, as
// everywhere: the previous copy's last layer. Outside repeat blocks braces are plain characters.

// Bounds that keep a typo (`repeat: 10000000000`) from exhausting memory, and index arithmetic
// from overflowing; far beyond any real network.
constexpr int64_t kMaxLayers = 1'000'000;
constexpr int64_t kMaxIndex = 1'000'000'000;

// Where an expanded layer came from, for collision messages.
struct Origin {
  core::SourceLoc name_loc;  // the `name` value (of the template, for a repeated layer)
  std::string what;          // "copy {i}=2 of the repeat block at F:L:C", or empty
};

// `{i}` etc. of one copy.
struct Copy {
  int64_t index = 0;
  std::string prev;
};

// Replaces the placeholders of `text` (read from `at`, for error locations).
std::string Substitute(const std::string& text, const YAML::Node& at, const std::string& file,
                       const Copy& copy) {
  const std::string known = "{i} (the copy's index), {i+K} or {i-K} (that index plus or minus K), "
                            "{i:a} (the index as a letter, 0 = a) and {prev} (the last layer of "
                            "the previous copy)";
  std::string out;
  for (size_t k = 0; k < text.size(); ++k) {
    const char ch = text[k];
    if (ch == '}') {
      if (k + 1 < text.size() && text[k + 1] == '}') {
        out += '}';
        ++k;
        continue;
      }
      FailAt(at, file, fmt::format("unmatched '}}' in '{}'; a repeat block's placeholders are {}; "
                                   "write '}}}}' for a literal '}}'",
                                   text, known));
    }
    if (ch != '{') {
      out += ch;
      continue;
    }
    if (k + 1 < text.size() && text[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    const size_t close = text.find('}', k);
    if (close == std::string::npos) {
      FailAt(at, file, fmt::format("unclosed '{{' in '{}'; a repeat block's placeholders are {}; "
                                   "write '{{{{' for a literal '{{'",
                                   text, known));
    }
    const std::string ph = text.substr(k + 1, close - k - 1);
    k = close;
    if (ph == "prev") {
      out += copy.prev;
      continue;
    }
    if (ph == "i") {
      out += std::to_string(copy.index);
      continue;
    }
    if (ph == "i:a") {
      if (copy.index > 25) {
        FailAt(at, file, fmt::format("'{{i:a}}' in '{}' writes the index as a letter (0 = a ... "
                                     "25 = z), but this copy's index is {}; use {{i}} for more "
                                     "than 26 copies",
                                     text, copy.index));
      }
      out += static_cast<char>('a' + copy.index);
      continue;
    }
    if (ph.size() > 2 && ph[0] == 'i' && (ph[1] == '+' || ph[1] == '-')) {
      int64_t offset = 0;
      const char* begin = ph.data() + 2;
      const char* end = ph.data() + ph.size();
      auto [p, ec] = std::from_chars(begin, end, offset);
      if (ec == std::errc() && p == end && offset >= 0 && offset <= kMaxIndex) {
        out += std::to_string(ph[1] == '+' ? copy.index + offset : copy.index - offset);
        continue;
      }
    }
    const std::string hint = ClosestName(ph, {"i", "prev"});
    FailAt(at, file, fmt::format("unknown placeholder '{{{}}}' in '{}'{}; a repeat block knows {}; "
                                 "write '{{{{' and '}}}}' for literal braces",
                                 ph, text, hint.empty() ? "" : " (did you mean '{" + hint + "}'?)",
                                 known));
  }
  return out;
}

// The `repeat:` value: a positive integer.
int64_t RepeatCount(const YAML::Node& n, const std::string& file) {
  const std::string got = n.IsScalar() ? "'" + n.Scalar() + "'" : "a list or mapping";
  int64_t v = 0;
  bool ok = false;
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    ok = ec == std::errc() && p == s.data() + s.size() && v > 0;
  }
  if (!ok) {
    FailAt(n, file, fmt::format("'repeat' is the number of copies of the block and must be a "
                                "positive integer, got {}; write e.g. 'repeat: 3'",
                                got));
  }
  return v;
}

// Appends the N copies of a repeat block to `out` (and their origins to `origins`).
void ExpandRepeat(const YAML::Node& block, const std::string& file, size_t index,
                  std::vector<core::LayerSpec>* out, std::vector<Origin>* origins) {
  const std::string block_loc = LocOf(block, file).ToString();
  CheckKeys(block, file, "the repeat block", {"repeat", "start", "layers"});
  MapReader r(block, file, "the repeat block");
  const int64_t count = RepeatCount(block["repeat"], file);
  r.Ignore("repeat");
  const int64_t start = NonNegativeInt(r, "start", 0);
  if (start > kMaxIndex) {
    r.FailKey("start", fmt::format("'start' is the first copy's {{i}} and must be at most {}, "
                                   "got {}",
                                   kMaxIndex, start));
  }
  YAML::Node layers = r.Node("layers");
  if (!layers.IsSequence() || layers.size() == 0) {
    FailAt(layers, file,
           fmt::format("layers of the repeat block (entry #{} of the model's layers): expected a "
                       "non-empty list of layers ('- {{name: \"blk{{i}}_conv\", type: conv, "
                       "...}}')",
                       index + 1));
  }
  std::vector<YAML::Node> nodes;
  std::vector<core::LayerSpec> templates;
  for (const auto& node : layers) {
    if (node.IsMap() && node["repeat"].IsDefined()) {
      FailAt(node["repeat"], file, fmt::format("repeat blocks do not nest (this one is inside the "
                                               "repeat block at {}); write the inner layers out, "
                                               "or repeat the outer block's layers in one block",
                                               block_loc));
    }
    const std::string pos =
        fmt::format("layer #{} of the repeat block at {}", nodes.size() + 1, block_loc);
    templates.push_back(ReadLayer(node, file, pos));
    nodes.push_back(node);
  }
  r.Finish();
  const int64_t block_layers = static_cast<int64_t>(templates.size());
  if (count > kMaxLayers || static_cast<int64_t>(out->size()) + count * block_layers > kMaxLayers) {
    FailAt(block["repeat"], file, fmt::format("'repeat: {}' of a {}-layer block makes the model "
                                              "longer than {} layers; is the count a typo?",
                                              count, templates.size(), kMaxLayers));
  }
  Copy copy;
  copy.prev = out->empty() ? std::string("data") : out->back().name;
  for (int64_t c = 0; c < count; ++c) {
    copy.index = start + c;
    const std::string what = fmt::format("copy {{i}}={} of the repeat block at {}", copy.index,
                                         block_loc);
    for (size_t t = 0; t < templates.size(); ++t) {
      const YAML::Node& node = nodes[t];
      core::LayerSpec l = templates[t];
      l.name = Substitute(templates[t].name, node["name"], file, copy);
      if (l.name.empty()) {
        FailAt(node["name"], file, "layer name is empty after expanding the repeat block; give "
                                   "every layer a unique name");
      }
      const YAML::Node b = node["bottom"];
      for (size_t k = 0; k < l.bottoms.size(); ++k) {
        l.bottoms[k] = Substitute(templates[t].bottoms[k], b.IsSequence() ? b[k] : b, file, copy);
      }
      if (!l.group.empty()) l.group = Substitute(templates[t].group, node["group"], file, copy);
      origins->push_back({LocOf(node["name"], file), what});
      out->push_back(std::move(l));
    }
    copy.prev = out->back().name;
  }
}

// A layer name given twice where a repeat block is involved; Model::Build reports the others.
void CheckRepeatCollisions(const std::vector<core::LayerSpec>& layers,
                           const std::vector<Origin>& origins) {
  std::map<std::string, size_t> first;
  auto where = [&origins](size_t i) {
    return origins[i].what.empty() ? origins[i].name_loc.ToString()
                                   : fmt::format("{}, {}", origins[i].name_loc.ToString(),
                                                 origins[i].what);
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    auto [it, inserted] = first.emplace(layers[i].name, i);
    if (inserted) continue;
    const size_t j = it->second;
    if (origins[i].what.empty() && origins[j].what.empty()) continue;
    FailAt(origins[i].name_loc,
           fmt::format("layer name '{}' is given twice after expanding repeat blocks: by {} and "
                       "before by {}; make the names differ (put {{i}} in a repeated name)",
                       layers[i].name, where(i), where(j)));
  }
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
            {"schema_version", "name", "description", "input", "num_classes", "value_words",
             "layers"});
  spec.name = r.String("name", Stem(file));
  spec.description = r.String("description", "");
  {
    // An image {channels, height, width}, a sequence {shape: [S, D]}, or token ids {tokens: S}.
    MapReader in(r.Node("input"), file, "input");
    if (in.Has("tokens")) {
      CheckKeys(r.Node("input"), file, "input (token ids)", {"tokens"});
      spec.input_c = spec.input_h = 1;
      spec.input_w = in.PositiveInt("tokens");
      spec.input_rank = 1;
    } else if (in.Has("shape")) {
      CheckKeys(r.Node("input"), file, "input (a sequence)", {"shape"});
      YAML::Node sh = in.Node("shape");
      std::vector<int64_t> dims;
      if (sh.IsSequence()) {
        for (const auto& d : sh) {
          int64_t v = 0;
          const std::string t = d.IsScalar() ? d.Scalar() : "";
          auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
          if (ec != std::errc() || p != t.data() + t.size() || v <= 0) {
            FailAt(d, file, "input: shape: expected a positive integer, got '" + t + "'");
          }
          dims.push_back(v);
        }
      }
      if (dims.size() != 2) {
        FailAt(sh, file, "input: shape: expected [S, D] (tokens, width); for an image write "
                         "{channels: C, height: H, width: W}, for token ids {tokens: S}");
      }
      spec.input_c = 1;
      spec.input_h = dims[0];
      spec.input_w = dims[1];
      spec.input_rank = 2;
    } else {
      spec.input_c = in.PositiveInt("channels");
      spec.input_h = in.PositiveInt("height");
      spec.input_w = in.PositiveInt("width");
    }
    in.Finish();
  }
  spec.num_classes = NonNegativeInt(r, "num_classes", 0);
  spec.value_words = static_cast<int>(r.PositiveInt("value_words", 1));
  if (spec.value_words > 2) {
    r.FailKey("value_words", "value_words is the 32-bit words of one parameter value: 1 (fp32) "
                             "or 2 (fp64)");
  }
  YAML::Node layers = r.Node("layers");
  if (!layers.IsSequence()) {
    FailAt(layers, file, "layers: expected a list of layers ('- {name: conv1, type: conv, ...}')");
  }
  if (layers.size() == 0) FailAt(layers, file, "layers: the list is empty; add at least one layer");
  std::vector<Origin> origins;
  size_t i = 0;
  for (const auto& node : layers) {
    if (node.IsMap() && node["repeat"].IsDefined()) {
      ExpandRepeat(node, file, i, &spec.layers, &origins);
    } else {
      spec.layers.push_back(ReadLayer(node, file, fmt::format("layer #{}", i + 1)));
      origins.push_back({LocOf(node["name"].IsDefined() ? node["name"] : node, file), ""});
    }
    ++i;
  }
  CheckRepeatCollisions(spec.layers, origins);
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

bool SetSequenceLength(core::ModelSpec* spec, int64_t tokens) {
  if (spec->input_rank == 1) {
    spec->input_w = tokens;
  } else if (spec->input_rank == 2) {
    spec->input_h = tokens;
  } else {
    return false;
  }
  return true;
}

}  // namespace poseidon::config
