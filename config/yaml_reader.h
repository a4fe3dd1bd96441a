// config/yaml_reader.h: strict, located reading of YAML files.
//
// Every user-facing YAML file (models, devices, profiles, scenarios, sweeps) is read through
// MapReader, so that every error has one shape:
//   FILE:LINE:COL: error: WHAT WAS WRONG; WHAT TO DO
// and never aborts. MapReader tracks which keys were read; Finish() rejects any other key and
// suggests the closest known one (a misspelt or unit-less key such as `bandwidth` gets
// "did you mean 'bandwidth_gbps'?").
//
//   YamlFile f = YamlFile::Load("scenarios/demo.yaml");
//   MapReader r(f.root(), f.path(), "scenario");
//   int64_t it = r.Int("iterations", 10);
//   r.Finish();
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/model.h"
#include "core/names.h"

namespace poseidon::config {

// Bad user input in a configuration file. what() is the full one-line message.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& msg) : std::runtime_error(msg) {}
};

// Where `node` is: `file` with the node's line and column, or, while a NodeFileScope naming a
// tree that holds the node is alive on this thread, that scope's file.
core::SourceLoc LocOf(const YAML::Node& node, const std::string& file);

// A sweep sets nodes of its own file into a copy of its base scenario; those keep the sweep
// file's line and column, and while this scope lives, LocOf names the sweep file for them (and
// for anything under them) instead of the base's. Scopes nest; the innermost holder wins.
class NodeFileScope {
 public:
  NodeFileScope(std::vector<YAML::Node> roots, std::string file);
  ~NodeFileScope();
  NodeFileScope(const NodeFileScope&) = delete;
  NodeFileScope& operator=(const NodeFileScope&) = delete;
  // The file of the innermost scope whose roots hold `node`, or nullptr.
  static const std::string* FileOf(const YAML::Node& node);

 private:
  std::vector<YAML::Node> roots_;
  std::string file_;
  NodeFileScope* outer_;
};
[[noreturn]] void FailAt(const YAML::Node& node, const std::string& file, const std::string& msg);
[[noreturn]] void FailAt(const core::SourceLoc& loc, const std::string& msg);

// The largest YAML file Load reads: 16 MiB, or POSEIDON_MAX_FILE_MIB (inherited by every
// process of a job). Throws ConfigError for a value that is not a size.
int64_t MaxYamlFileBytes();

// A parsed YAML document with the path it came from.
class YamlFile {
 public:
  // Throws ConfigError for an unreadable file ("cannot read FILE: reason"), one larger than
  // MaxYamlFileBytes(), or a syntax error ("FILE:LINE:COL: error: YAML syntax: ...").
  static YamlFile Load(const std::string& path);
  static YamlFile Parse(const std::string& text, const std::string& name);
  const YAML::Node& root() const { return root_; }
  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }

 private:
  YAML::Node root_;
  std::string path_;
  std::string text_;
};

// Reads one YAML mapping; `what` names it in messages ("scenario", "layer 'conv1'").
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string file, std::string what);

  bool Has(const std::string& key) const;
  // Required values: a missing key is an error naming the key and what it holds.
  std::string String(const std::string& key);
  int64_t Int(const std::string& key);
  double Number(const std::string& key);
  bool Bool(const std::string& key);
  // Optional values with a default.
  std::string String(const std::string& key, const std::string& def);
  int64_t Int(const std::string& key, int64_t def);
  double Number(const std::string& key, double def);
  bool Bool(const std::string& key, bool def);
  // Checked variants: value must be > 0 (or >= 0).
  double PositiveNumber(const std::string& key);
  double PositiveNumber(const std::string& key, double def);
  double NonNegativeNumber(const std::string& key, double def);
  int64_t PositiveInt(const std::string& key);
  int64_t PositiveInt(const std::string& key, int64_t def);
  // One of `choices` (e.g. {"star", "leaf_spine"}).
  std::string Choice(const std::string& key, const std::vector<std::string>& choices,
                     const std::string& def);
  // Sub-nodes (marked as read). Required: missing is an error. Optional: a Null node if missing
  // (test with IsNull()).
  YAML::Node Node(const std::string& key);
  YAML::Node OptionalNode(const std::string& key);
  // Marks a key as known without reading it (handled elsewhere).
  void Ignore(const std::string& key);

  // Rejects keys that were never read: "unknown key 'X' in WHAT; did you mean 'Y'? known keys: ...".
  void Finish() const;

  const YAML::Node& node() const { return node_; }
  const std::string& file() const { return file_; }
  const std::string& what() const { return what_; }
  core::SourceLoc Loc() const { return LocOf(node_, file_); }
  core::SourceLoc Loc(const std::string& key) const;
  [[noreturn]] void Fail(const std::string& msg) const;
  [[noreturn]] void FailKey(const std::string& key, const std::string& msg) const;

 private:
  YAML::Node Get(const std::string& key, const char* expected);
  YAML::Node node_;
  std::string file_;
  std::string what_;
  mutable std::set<std::string> used_;
};

// Scalar conversions with located errors ("expected an integer, got 'ten'").
int64_t AsInt(const YAML::Node& n, const std::string& file, const std::string& what);
double AsNumber(const YAML::Node& n, const std::string& file, const std::string& what);
bool AsBool(const YAML::Node& n, const std::string& file, const std::string& what);
std::string AsString(const YAML::Node& n, const std::string& file, const std::string& what);

// A mapping of strings (a file's provenance or measurements); a value that is not a scalar is kept
// as its YAML flow text. A node that is not a mapping is a located error naming `what`.
std::map<std::string, std::string> ReadStringMap(const YAML::Node& node, const std::string& file,
                                                 const std::string& what);

// "Did you mean" suggestions (core/names.h).
using core::ClosestName;

// Resolves `relative` against the directory of `base_file` (absolute paths are kept).
std::string ResolvePath(const std::string& base_file, const std::string& relative);

}  // namespace poseidon::config
