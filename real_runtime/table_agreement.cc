#include "real_runtime/table_agreement.h"

#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace poseidon::rt {
namespace {

struct TableLayer {
  std::string name;
  std::string text;  // the layer as one line of YAML (flow style)
};

// The layers of a table, or the reason it is not one.
bool ReadTable(const std::string& table, std::vector<TableLayer>* out, std::string* why) {
  try {
    const YAML::Node root = YAML::Load(table);
    const YAML::Node layers = root["layers"];
    if (!layers || !layers.IsSequence()) {
      *why = "it has no list of layers";
      return false;
    }
    // First the model's value type (fp32 or fp64 parameters), then one entry per module.
    YAML::Emitter h;
    h << YAML::Flow << YAML::BeginMap << YAML::Key << "value_words" << YAML::Value
      << (root["value_words"] ? root["value_words"].as<std::string>() : "1") << YAML::EndMap;
    out->push_back({"(the parameters' dtype)", h.c_str()});
    for (const YAML::Node& l : layers) {
      YAML::Emitter e;
      e << YAML::Flow << l;
      out->push_back({l["name"] ? l["name"].as<std::string>() : "?", e.c_str()});
    }
    return true;
  } catch (const YAML::Exception& e) {
    *why = std::string("it is not YAML: ") + e.what();
    return false;
  }
}

}  // namespace

TableAgreement::TableAgreement(int workers, std::function<std::string(int rank)> name)
    : workers_(workers), name_(std::move(name)) {}

std::optional<std::string> TableAgreement::Add(int rank, const std::string& table) {
  if (decided_) return std::nullopt;
  if (!tables_.emplace(rank, table).second) {
    decided_ = true;
    return fmt::format("{} sent its layer table twice", name_(rank));
  }
  if (static_cast<int>(tables_.size()) < workers_) return std::nullopt;
  decided_ = true;
  return Compare();
}

std::string TableAgreement::Compare() const {
  auto first = tables_.begin();
  std::vector<TableLayer> want;
  std::string why;
  if (!ReadTable(first->second, &want, &why)) {
    return fmt::format("{}'s layer table cannot be read: {}", name_(first->first), why);
  }
  const std::string what_to_do =
      "every rank must build the same model (the same modules with the same parameter shapes "
      "and dtypes, requiring gradients alike) before wrapping it in "
      "poseidon.torch.DistributedDataParallel";
  for (auto it = std::next(first); it != tables_.end(); ++it) {
    std::vector<TableLayer> got;
    if (!ReadTable(it->second, &got, &why)) {
      return fmt::format("{}'s layer table cannot be read: {}", name_(it->first), why);
    }
    const size_t n = std::min(want.size(), got.size());
    for (size_t i = 0; i < n; ++i) {
      if (want[i].text == got[i].text) continue;
      if (want[i].name != got[i].name) {
        return fmt::format(
            "{} and {} built different models: module #{} is '{}' on {} but '{}' on {}; {}",
            name_(first->first), name_(it->first), i, want[i].name, name_(first->first),
            got[i].name, name_(it->first), what_to_do);
      }
      return fmt::format("{} and {} built different models at module '{}': {} has {}, {} has {}; {}",
                         name_(first->first), name_(it->first), want[i].name, name_(first->first),
                         want[i].text, name_(it->first), got[i].text, what_to_do);
    }
    if (want.size() != got.size()) {
      const bool shorter = got.size() < want.size();
      const TableLayer& extra = shorter ? want[n] : got[n];
      return fmt::format(
          "{} and {} built different models: {} has {} modules with parameters, {} has {} (the "
          "first one only {} has: '{}'); {}",
          name_(first->first), name_(it->first), name_(first->first), want.size() - 1,
          name_(it->first), got.size() - 1, shorter ? name_(first->first) : name_(it->first),
          extra.name, what_to_do);
    }
  }
  return "";
}

}  // namespace poseidon::rt
