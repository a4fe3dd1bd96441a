#include "config/yaml_reader.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace poseidon::config {
namespace {

std::string TypeName(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return fmt::format("'{}'", n.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "an undefined value";
  }
}

}  // namespace

namespace {

thread_local NodeFileScope* innermost_scope = nullptr;

// Whether `node` is `root` or lies under it (same node, not an equal copy).
bool Holds(const YAML::Node& root, const YAML::Node& node) {
  if (!root.IsDefined()) return false;
  if (root.is(node)) return true;
  if (root.IsMap()) {
    for (YAML::const_iterator it = root.begin(); it != root.end(); ++it) {
      if (Holds(it->first, node) || Holds(it->second, node)) return true;
    }
  } else if (root.IsSequence()) {
    for (size_t i = 0; i < root.size(); ++i) {
      if (Holds(root[i], node)) return true;
    }
  }
  return false;
}

}  // namespace

NodeFileScope::NodeFileScope(std::vector<YAML::Node> roots, std::string file)
    : roots_(std::move(roots)), file_(std::move(file)), outer_(innermost_scope) {
  innermost_scope = this;
}

NodeFileScope::~NodeFileScope() { innermost_scope = outer_; }

const std::string* NodeFileScope::FileOf(const YAML::Node& node) {
  if (!node.IsDefined()) return nullptr;
  for (const NodeFileScope* s = innermost_scope; s != nullptr; s = s->outer_) {
    for (const YAML::Node& r : s->roots_) {
      if (Holds(r, node)) return &s->file_;
    }
  }
  return nullptr;
}

core::SourceLoc LocOf(const YAML::Node& node, const std::string& file) {
  core::SourceLoc loc;
  const std::string* scoped = NodeFileScope::FileOf(node);
  loc.file = scoped != nullptr ? *scoped : file;
  if (node.IsDefined()) {
    YAML::Mark m = node.Mark();
    if (m.line >= 0) {
      loc.line = m.line + 1;
      loc.column = m.column + 1;
    }
  }
  return loc;
}

void FailAt(const core::SourceLoc& loc, const std::string& msg) {
  throw ConfigError(fmt::format("{}: error: {}", loc.ToString(), msg));
}

void FailAt(const YAML::Node& node, const std::string& file, const std::string& msg) {
  FailAt(LocOf(node, file), msg);
}

int64_t MaxYamlFileBytes() {
  const char* v = std::getenv("POSEIDON_MAX_FILE_MIB");
  double mib = 16;
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(x > 0) || x > 1 << 20) {
      throw ConfigError(fmt::format("error: POSEIDON_MAX_FILE_MIB='{}' is not a size in MiB "
                                    "between 0 and 1048576",
                                    v));
    }
    mib = x;
  }
  return static_cast<int64_t>(mib * 1024 * 1024);
}

YamlFile YamlFile::Load(const std::string& path) {
  {
    // Before anything is read: a YAML file of hundreds of MiB (a wrong path, a generated file
    // gone wrong) would take every process of a job minutes and gigabytes to parse.
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    const int64_t limit = MaxYamlFileBytes();
    if (!ec && static_cast<int64_t>(size) > limit) {
      throw ConfigError(fmt::format(
          "{}: error: {} bytes, more than the {} MiB a scenario, model, device or profile file "
          "may have; is it the right file? (POSEIDON_MAX_FILE_MIB=N raises the limit)",
          path, size, limit / (1024.0 * 1024.0)));
    }
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(fmt::format("{}: error: cannot read file: {}; check the path", path,
                                  std::strerror(errno)));
  }
  if (std::filesystem::is_directory(path)) {
    throw ConfigError(fmt::format("{}: error: is a directory, expected a YAML file", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

YamlFile YamlFile::Parse(const std::string& text, const std::string& name) {
  YamlFile f;
  f.path_ = name;
  f.text_ = text;
  try {
    f.root_ = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}:{}: error: YAML syntax: {}; fix the file's syntax", name,
                                  e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!f.root_.IsMap()) {
    core::SourceLoc loc{name, 1, 1};
    FailAt(loc, fmt::format("expected a YAML mapping at the top of the file, got {}",
                            f.root_.IsDefined() ? TypeName(f.root_) : "an empty file"));
  }
  return f;
}

MapReader::MapReader(const YAML::Node& node, std::string file, std::string what)
    : node_(node), file_(std::move(file)), what_(std::move(what)) {
  if (!node_.IsMap()) {
    FailAt(node_, file_, fmt::format("expected a mapping for {}, got {}", what_, TypeName(node_)));
  }
}

bool MapReader::Has(const std::string& key) const {
  const YAML::Node& n = node_;
  return n[key].IsDefined() && !n[key].IsNull();
}

core::SourceLoc MapReader::Loc(const std::string& key) const {
  const YAML::Node& n = node_;
  if (n[key].IsDefined()) return LocOf(n[key], file_);
  return Loc();
}

void MapReader::Fail(const std::string& msg) const { FailAt(node_, file_, msg); }

void MapReader::FailKey(const std::string& key, const std::string& msg) const {
  FailAt(Loc(key), msg);
}

YAML::Node MapReader::Get(const std::string& key, const char* expected) {
  used_.insert(key);
  const YAML::Node& n = node_;
  YAML::Node v = n[key];
  if (!v.IsDefined() || v.IsNull()) {
    // A misspelt or unit-less key (bandwidth for bandwidth_gbps) is the likelier mistake:
    // name it rather than the missing key.
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
      if (k != key && !used_.count(k) && ClosestName(k, {key}) == key) {
        FailAt(it->first, file_,
               fmt::format("unknown key '{}' in {}; did you mean '{}'?", k, what_, key));
      }
    }
    Fail(fmt::format("{} is missing required key '{}' ({}); add it", what_, key, expected));
  }
  return v;
}

int64_t AsInt(const YAML::Node& n, const std::string& file, const std::string& what) {
  if (!n.IsScalar()) FailAt(n, file, fmt::format("{}: expected an integer, got {}", what, TypeName(n)));
  const std::string& s = n.Scalar();
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) {
    FailAt(n, file, fmt::format("{}: expected an integer, got '{}'", what, s));
  }
  return v;
}

double AsNumber(const YAML::Node& n, const std::string& file, const std::string& what) {
  if (!n.IsScalar()) FailAt(n, file, fmt::format("{}: expected a number, got {}", what, TypeName(n)));
  const std::string& s = n.Scalar();
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    FailAt(n, file,
           fmt::format("{}: expected a number, got '{}' (units go in the key name, e.g. "
                       "bandwidth_gbps: 10)",
                       what, s));
  }
  return v;
}

bool AsBool(const YAML::Node& n, const std::string& file, const std::string& what) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  FailAt(n, file, fmt::format("{}: expected true or false, got {}", what, TypeName(n)));
}

std::string AsString(const YAML::Node& n, const std::string& file, const std::string& what) {
  if (!n.IsScalar()) FailAt(n, file, fmt::format("{}: expected a string, got {}", what, TypeName(n)));
  return n.Scalar();
}

std::map<std::string, std::string> ReadStringMap(const YAML::Node& node, const std::string& file,
                                                 const std::string& what) {
  if (!node.IsMap()) {
    FailAt(node, file,
           fmt::format("'{}' must be a mapping of strings, e.g. '{}: {{date: \"...\"}}'", what,
                       what));
  }
  std::map<std::string, std::string> m;
  for (auto it = node.begin(); it != node.end(); ++it) {
    std::string key = AsString(it->first, file, fmt::format("{} key", what));
    if (it->second.IsScalar()) {
      m[key] = AsString(it->second, file, fmt::format("{} '{}'", what, key));
    } else {
      YAML::Emitter e;
      e << YAML::Flow << it->second;
      m[key] = e.c_str();
    }
  }
  return m;
}

std::string MapReader::String(const std::string& key) {
  return AsString(Get(key, "a string"), file_, key);
}
int64_t MapReader::Int(const std::string& key) { return AsInt(Get(key, "an integer"), file_, key); }
double MapReader::Number(const std::string& key) {
  return AsNumber(Get(key, "a number"), file_, key);
}
bool MapReader::Bool(const std::string& key) { return AsBool(Get(key, "true or false"), file_, key); }

std::string MapReader::String(const std::string& key, const std::string& def) {
  return Has(key) ? String(key) : (used_.insert(key), def);
}
int64_t MapReader::Int(const std::string& key, int64_t def) {
  return Has(key) ? Int(key) : (used_.insert(key), def);
}
double MapReader::Number(const std::string& key, double def) {
  return Has(key) ? Number(key) : (used_.insert(key), def);
}
bool MapReader::Bool(const std::string& key, bool def) {
  return Has(key) ? Bool(key) : (used_.insert(key), def);
}

double MapReader::PositiveNumber(const std::string& key) {
  double v = Number(key);
  if (!(v > 0)) FailKey(key, fmt::format("'{}' must be greater than 0, got {}", key, v));
  return v;
}
double MapReader::PositiveNumber(const std::string& key, double def) {
  return Has(key) ? PositiveNumber(key) : (used_.insert(key), def);
}
double MapReader::NonNegativeNumber(const std::string& key, double def) {
  double v = Number(key, def);
  if (v < 0) FailKey(key, fmt::format("'{}' must not be negative, got {}", key, v));
  return v;
}
int64_t MapReader::PositiveInt(const std::string& key) {
  int64_t v = Int(key);
  if (v <= 0) FailKey(key, fmt::format("'{}' must be a positive integer, got {}", key, v));
  return v;
}
int64_t MapReader::PositiveInt(const std::string& key, int64_t def) {
  return Has(key) ? PositiveInt(key) : (used_.insert(key), def);
}

std::string MapReader::Choice(const std::string& key, const std::vector<std::string>& choices,
                              const std::string& def) {
  std::string v = String(key, def);
  if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    std::string hint = ClosestName(v, choices);
    FailKey(key, fmt::format("unknown {} '{}'{}; known: {}", key, v,
                             hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), list));
  }
  return v;
}

YAML::Node MapReader::Node(const std::string& key) { return Get(key, "a value"); }

YAML::Node MapReader::OptionalNode(const std::string& key) {
  used_.insert(key);
  const YAML::Node& n = node_;
  YAML::Node v = n[key];
  if (!v.IsDefined() || v.IsNull()) return YAML::Node();
  return v;
}

void MapReader::Ignore(const std::string& key) { used_.insert(key); }

void MapReader::Finish() const {
  std::vector<std::string> known(used_.begin(), used_.end());
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
    if (used_.count(key)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    std::string hint = ClosestName(key, known);
    FailAt(it->first, file_,
           fmt::format("unknown key '{}' in {}{}; known keys: {}", key, what_,
                       hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint), list));
  }
}

std::string ResolvePath(const std::string& base_file, const std::string& relative) {
  std::filesystem::path p(relative);
  if (p.is_absolute()) return relative;
  return (std::filesystem::path(base_file).parent_path() / p).lexically_normal().string();
}

}  // namespace poseidon::config
