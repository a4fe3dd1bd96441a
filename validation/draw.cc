#include "validation/draw.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "real_runtime/node.h"
#include "validation/host_load.h"

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

// One configuration's choices, in the order they are drawn.
struct Drawn {
  const Profile* p = nullptr;
  int workers = 0, servers = 0;
  bool dedicated = false;
  std::string consistency, scheme;
  int staleness = 0;
  bool per_layer = false, dwbp = true;
  int window_kib = 0;
  bool straggler = false;
  int straggler_worker = 0;
  double slowdown = 1;
  bool jitter = false;
  double cv = 0;
  bool slow_net = false;
};

Drawn DrawOne(Draw& d, const std::vector<Profile>& profiles) {
  Drawn x;
  x.p = &profiles[static_cast<size_t>(d.Pick(static_cast<int>(profiles.size())))];
  x.workers = d.Between(2, 8);
  x.dedicated = d.OneIn(2);
  x.servers = d.Between(1, x.workers);
  const int c = d.Pick(6);
  x.consistency = c < 3 ? "bsp" : c < 5 ? "ssp" : "asp";
  x.staleness = x.consistency == "ssp" ? d.Between(1, 3) : 0;
  static const char* const kSchemes[] = {"ps", "sfb", "allreduce", "auto", "paper"};
  const int n_schemes = x.consistency == "bsp" ? 5 : 4;
  x.scheme = kSchemes[d.Pick(n_schemes)];
  // All-reduce is not valid outside BSP: drawn there it becomes paper, so that the four valid
  // schemes stay equally likely.
  if (x.consistency != "bsp" && x.scheme == "allreduce") x.scheme = "paper";
  x.per_layer = d.OneIn(2);
  x.dwbp = !d.OneIn(5);
  const int w = d.Pick(4);
  x.window_kib = w < 2 ? 0 : w == 2 ? 64 : 256;
  x.straggler = d.OneIn(4);
  x.straggler_worker = d.Pick(x.workers);
  x.slowdown = 1.2 + 0.1 * d.Pick(9);
  x.jitter = d.OneIn(4);
  static const double kCv[] = {0.05, 0.1, 0.2};
  x.cv = kCv[d.Pick(3)];
  x.slow_net = d.OneIn(2);
  return x;
}

}  // namespace

int DrawBound::MaxProcesses() const {
  if (max_processes_per_core <= 0) return 0;
  return static_cast<int>(std::floor(max_processes_per_core * cores + 1e-9));
}

std::string DrawConfigurations(int count, uint64_t seed, const std::string& profiles_dir,
                               const std::string& base, const DrawBound& bound) {
  const std::vector<Profile> profiles = CpuProfiles(profiles_dir);
  const int max_processes = bound.MaxProcesses();
  if (bound.max_processes_per_core > 0 && max_processes < 4) {
    throw config::ConfigError(fmt::format(
        "error: --max-processes-per-core {:g} on {} cores allows {} processes; the smallest "
        "configuration (a coordinator, 2 workers, 1 shard) has 4: allow at least {:g} per core",
        bound.max_processes_per_core, bound.cores, max_processes, 4.0 / bound.cores));
  }
  Draw d(seed);
  std::string yaml = fmt::format(
      "# {} configurations drawn at random by `poseidon validate --draw {} --seed {}{}`\n"
      "# (validation/draw.h says from what). Run: poseidon validate THIS_FILE "
      "--repeat 3\n",
      count, count, seed,
      max_processes > 0 ? fmt::format(" --max-processes-per-core {:g} --cores {}",
                                      bound.max_processes_per_core, bound.cores)
                        : std::string());
  if (max_processes > 0) {
    yaml += fmt::format(
        "# Bounded to what this host can emulate faithfully: at most {:g} processes per core on {} "
        "cores,\n# so 1 + workers + shards <= {} in every configuration (one beyond it was drawn "
        "again).\n# A run whose job keeps more than {:g}% of the host's cores busy is judged not "
        "faithful all the same\n# (docs/validation.md, \"Faithful runs\"): on a small host the "
        "busiest configurations may keep no faithful run.\n",
        bound.max_processes_per_core, bound.cores, max_processes, kMaxJobPct);
  }
  yaml += fmt::format("schema_version: 1\nname: validation-draw-seed-{}\nbase: {}\nvary:\n  variant:\n",
                      seed, base);
  for (int i = 0; i < count; ++i) {
    Drawn x = DrawOne(d, profiles);
    while (max_processes > 0 && 1 + x.workers + x.servers > max_processes) x = DrawOne(d, profiles);
    const Profile& p = *x.p;
    const int workers = x.workers, servers = x.servers;
    const bool dedicated = x.dedicated;
    const std::string consistency = x.consistency, scheme = x.scheme;
    const int staleness = x.staleness;
    const bool per_layer = x.per_layer, dwbp = x.dwbp;
    const int window_kib = x.window_kib;
    const bool straggler = x.straggler;
    const int straggler_worker = x.straggler_worker;
    const double slowdown = x.slowdown;
    const bool jitter = x.jitter;
    const double cv = x.cv;
    const bool slow_net = x.slow_net;

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

int RunDraw(int count, uint64_t seed, const std::string& out, const std::string& data_dir,
            const DrawBound& bound) {
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
      DrawConfigurations(count, seed, data_dir + "/profiles", ec || rel.empty() ? base.string() : rel,
                         bound);
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
  if (bound.MaxProcesses() > 0) {
    fmt::print(stderr, "every configuration has at most {} processes ({:g} per core on {} cores)\n",
               bound.MaxProcesses(), bound.max_processes_per_core, bound.cores);
  }
  fmt::print(stderr,
             "wrote {} configurations to {} (seed {}); run them live and simulated with:\n"
             "  poseidon validate {} --repeat 3\n",
             sweep.points.size(), out, seed, out);
  return 0;
}

}  // namespace poseidon::validation
