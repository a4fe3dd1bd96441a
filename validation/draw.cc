#include "validation/draw.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "real_runtime/node.h"

namespace poseidon::validation {
namespace {

namespace fs = std::filesystem;

struct Profile {
  std::string name, model;
  int64_t batch = 0;
};

// scenarios/profiles/MODEL_cpu_bBATCH.yaml, sorted by name.
std::vector<Profile> CpuProfiles(const std::string& dir) {
  std::vector<Profile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string stem = e.path().stem().string();
    const size_t at = stem.rfind("_cpu_b");
    if (e.path().extension() != ".yaml" || at == std::string::npos) continue;
    Profile p;
    p.name = stem;
    p.model = stem.substr(0, at);
    try {
      p.batch = std::stoll(stem.substr(at + 6));
    } catch (const std::exception&) {
      continue;
    }
    out.push_back(p);
  }
  if (ec || out.empty()) {
    throw config::ConfigError(fmt::format(
        "{}: error: no CPU profiles (MODEL_cpu_bBATCH.yaml) to draw configurations from; run "
        "`poseidon calibrate` for a model first",
        dir));
  }
  std::sort(out.begin(), out.end(), [](const Profile& a, const Profile& b) { return a.name < b.name; });
  return out;
}

class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed) {}
  // 0..n-1. mt19937_64 is the same sequence everywhere; the modulo's bias is below 1e-18.
  int Pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  int Between(int lo, int hi) { return lo + Pick(hi - lo + 1); }
  bool OneIn(int n) { return Pick(n) == 0; }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

std::string DrawConfigurations(int count, uint64_t seed, const std::string& profiles_dir,
                               const std::string& base) {
  const std::vector<Profile> profiles = CpuProfiles(profiles_dir);
  Draw d(seed);
  std::string yaml = fmt::format(
      "# {} configurations drawn at random by `poseidon validate --draw {} --seed {}`\n"
      "# (validation/draw.h says from what). Run: poseidon validate THIS_FILE "
      "--repeat 3\n"
      "schema_version: 1\nname: validation-draw-seed-{}\nbase: {}\nvary:\n  variant:\n",
      count, count, seed, seed, base);
  for (int i = 0; i < count; ++i) {
    const Profile& p = profiles[static_cast<size_t>(d.Pick(static_cast<int>(profiles.size())))];
    const int workers = d.Between(2, 8);
    const bool dedicated = d.OneIn(2);
    const int servers = d.Between(1, workers);
    const int c = d.Pick(6);
    const std::string consistency = c < 3 ? "bsp" : c < 5 ? "ssp" : "asp";
    const int staleness = consistency == "ssp" ? d.Between(1, 3) : 0;
    static const char* const kSchemes[] = {"ps", "sfb", "allreduce", "auto", "paper"};
    const int n_schemes = consistency == "bsp" ? 5 : 4;
    std::string scheme = kSchemes[d.Pick(n_schemes)];
    // All-reduce is not valid outside BSP: drawn there it becomes paper, so that the four valid
    // schemes stay equally likely.
    if (consistency != "bsp" && scheme == "allreduce") scheme = "paper";
    const bool per_layer = d.OneIn(2);
    const bool dwbp = !d.OneIn(5);
    const int w = d.Pick(4);
    const int window_kib = w < 2 ? 0 : w == 2 ? 64 : 256;
    const bool straggler = d.OneIn(4);
    const int straggler_worker = d.Pick(workers);
    const double slowdown = 1.2 + 0.1 * d.Pick(9);
    const bool jitter = d.OneIn(4);
    static const double kCv[] = {0.05, 0.1, 0.2};
    const double cv = kCv[d.Pick(3)];
    const bool slow_net = d.OneIn(2);

    std::string cons = consistency == "ssp"
                           ? fmt::format("{{model: ssp, staleness: {}}}", staleness)
                           : fmt::format("{{model: {}}}", consistency);
    std::string set = fmt::format(
        "model: {}, batch_per_worker: {}, cluster.profile: {}, cluster.workers: {}, "
        "cluster.servers: {}, cluster.placement: {}, cluster.network.file: {}, "
        "protocol.scheme: {}, protocol.consistency: {}, protocol.gate: {}, protocol.dwbp: {}, "
        "protocol.priority_window_kib: {}",
        p.model, p.batch, p.name, workers, servers, dedicated ? "dedicated" : "colocated",
        slow_net ? "emulated_100mbit" : "emulated_1gbit", scheme, cons,
        per_layer ? "per_layer" : "all", dwbp ? "true" : "false", window_kib);
    if (straggler) {
      set += fmt::format(", stragglers: [{{worker: {}, slowdown: {:.1f}}}]", straggler_worker,
                         slowdown);
    }
    if (jitter) set += fmt::format(", jitter: {{distribution: lognormal, cv: {}}}", cv);
    const std::string name = fmt::format(
        "d{:02} {} w{} s{}{} {} {}{}{}{}{}{} {}", i + 1, p.model, workers, servers,
        dedicated ? "d" : "c", scheme,
        consistency == "ssp" ? fmt::format("ssp{}", staleness) : consistency,
        per_layer ? " per-layer" : "", dwbp ? "" : " no-dwbp",
        window_kib ? fmt::format(" prio{}", window_kib) : "",
        straggler ? fmt::format(" strag{:.1f}", slowdown) : "", jitter ? " jitter" : "",
        slow_net ? "100m" : "1g");
    yaml += fmt::format("    - {{name: \"{}\", set: {{{}}}}}\n", name, set);
  }
  return yaml;
}

int RunDraw(int count, uint64_t seed, const std::string& out, const std::string& data_dir) {
  if (count < 1) {
    throw config::ConfigError(
        fmt::format("error: --draw {}: draw at least one configuration", count));
  }
  const fs::path file = fs::absolute(out);
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const fs::path base = fs::path(data_dir) / "validation" / "mlp_1g.yaml";
  const std::string rel = fs::relative(base, file.parent_path(), ec).string();
  const std::string yaml =
      DrawConfigurations(count, seed, data_dir + "/profiles", ec || rel.empty() ? base.string() : rel);
  {
    std::ofstream f(file, std::ios::binary);
    f << yaml;
    if (!f) {
      throw config::ConfigError(
          fmt::format("{}: error: cannot write the drawn configurations; check the folder", out));
    }
  }
  // Every configuration must load (LoadSweepFile checks each point) and be able to run live.
  const config::SweepSpec sweep = config::LoadSweepFile(file.string());
  for (const config::SweepPoint& p : sweep.points) {
    try {
      rt::CheckLiveScenario(p.scenario);
    } catch (const config::ConfigError& e) {
      throw config::ConfigError(fmt::format("{}: configuration {} ({}) cannot run live: {}", out,
                                            p.index + 1, p.values.front().second, e.what()));
    }
  }
  fmt::print(stderr,
             "wrote {} configurations to {} (seed {}); run them live and simulated with:\n"
             "  poseidon validate {} --repeat 3\n",
             sweep.points.size(), out, seed, out);
  return 0;
}

}  // namespace poseidon::validation
