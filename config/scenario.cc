#include "config/scenario.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "config/compute_loader.h"
#include "config/interconnect_loader.h"
#include "config/model_loader.h"
#include "config/network_loader.h"

namespace poseidon::config {
namespace fs = std::filesystem;

#ifndef POSEIDON_DATA_DIR
#define POSEIDON_DATA_DIR "scenarios"
#endif

std::string DefaultDataDir() { return POSEIDON_DATA_DIR; }

namespace {

bool LooksLikePath(const std::string& v) {
  return v.find('/') != std::string::npos || v.ends_with(".yaml") || v.ends_with(".yml");
}

std::vector<std::string> YamlStems(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Resolves `value` of kind "models" | "devices" | "profiles" | "networks" for the scenario in `file`.
std::string FindData(const std::string& kind, const std::string& value, const std::string& file,
                     const core::SourceLoc& where) {
  // The non-throwing overloads throughout: a name the file system refuses (longer than
  // NAME_MAX, say) is just "not found", not a filesystem_error escaping the parser (found by
  // fuzz/scenario_fuzz; see fuzz/regressions/scenario_fuzz/).
  std::error_code ec;
  if (LooksLikePath(value)) {
    std::string p = ResolvePath(file, value);
    if (!fs::is_regular_file(p, ec)) {
      FailAt(where, fmt::format("{} file '{}' not found (resolved to {}); check the path", kind,
                                value, p));
    }
    return p;
  }
  fs::path dir = fs::absolute(fs::path(file), ec).parent_path();
  for (int depth = 0; depth < 8 && !dir.empty(); ++depth) {
    fs::path candidate = dir / kind / (value + ".yaml");
    if (fs::is_regular_file(candidate, ec)) return candidate.lexically_normal().string();
    if (dir == dir.parent_path()) break;
    dir = dir.parent_path();
  }
  fs::path builtin = fs::path(DefaultDataDir()) / kind / (value + ".yaml");
  if (fs::is_regular_file(builtin, ec)) return builtin.string();
  std::vector<std::string> known = YamlStems((fs::path(DefaultDataDir()) / kind).string());
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  std::string hint = ClosestName(value, known);
  FailAt(where, fmt::format("unknown {} '{}'{}; known {}: {} (or give a path to a .yaml file)",
                            kind.substr(0, kind.size() - 1), value,
                            hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), kind,
                            list));
}

// `network:` of a scenario. With `file:` (a network file written by `poseidon calibrate-net`,
// config/network_loader.h) the file's figures are the defaults and keys given here override them.
void ReadNetwork(MapReader& r, NetworkSpec* n, const std::string& scenario_file,
                 std::string* network_file) {
  n->loc = r.Loc();
  const bool from_file = r.Has("file");
  if (from_file) {
    *network_file = FindData("networks", r.String("file"), scenario_file, r.Loc("file"));
    *n = LoadNetworkFile(*network_file).network;
    n->loc = r.Loc();
  }
  n->model = NetworkModelFromName(
      r.Choice("model", {"flow", "alpha_beta", "queue", "auto"}, NetworkModelName(n->model)));
  n->topology = r.Choice("topology", {"star", "leaf_spine"}, "star") == "star"
                    ? TopologyKind::kStar
                    : TopologyKind::kLeafSpine;
  n->host_bandwidth_Bps = (from_file ? r.PositiveNumber("bandwidth_gbps", n->host_bandwidth_Bps * 8 / 1e9)
                                     : r.PositiveNumber("bandwidth_gbps")) *
                          1e9 / 8;
  if (!from_file || r.Has("latency_us")) {
    n->latency_ns = std::llround(r.NonNegativeNumber("latency_us", 5) * 1e3);
  }
  n->efficiency = r.PositiveNumber("efficiency", from_file ? n->efficiency : 1.0);
  if (n->efficiency > 1) r.FailKey("efficiency", "efficiency is payload/wire bytes and must be <= 1");
  if (!from_file || r.Has("per_message_overhead_us")) {
    n->per_message_overhead_ns =
        std::llround(r.NonNegativeNumber("per_message_overhead_us", 0) * 1e3);
  }
  ReadNetworkSharing(r, n);
  const bool leaf = n->topology == TopologyKind::kLeafSpine;
  if (!leaf) {
    for (const char* k : {"hosts_per_leaf", "spines", "oversubscription"}) {
      if (r.Has(k)) r.FailKey(k, fmt::format("'{}' applies to topology: leaf_spine only", k));
    }
  }
  n->hosts_per_leaf = static_cast<int>(r.PositiveInt("hosts_per_leaf", 16));
  n->spines = static_cast<int>(r.PositiveInt("spines", 2));
  n->oversubscription = r.PositiveNumber("oversubscription", 1.0);
  if (n->oversubscription < 1) {
    r.FailKey("oversubscription", "oversubscription must be >= 1 (1 = non-blocking)");
  }
  r.Finish();
}

// A key a newer name replaced; the older name still reads. One file gives one of them (both is
// a located error); a --set or a sweep's value of either replaces the file's, whichever name the
// file used (SetOverride).
struct RenamedKey {
  const char* map;    // dotted path of the mapping that holds it
  const char* name;   // today's name
  const char* older;  // the name it replaced
};
constexpr RenamedKey kRenamedKeys[] = {
    {"cluster", "machines", "workers"},
};

std::string BothNamesMessage(const RenamedKey& k) {
  return fmt::format("give '{}' or its older name '{}', not both", k.name, k.older);
}

// The renamed key `path` (a dotted path) spells, under either name, or nullptr.
const RenamedKey* RenamedKeyAt(const std::string& path) {
  for (const RenamedKey& k : kRenamedKeys) {
    const std::string map = std::string(k.map) + ".";
    if (path == map + k.name || path == map + k.older) return &k;
  }
  return nullptr;
}

// The key `r`'s mapping names: today's name, or the older one. Both is an error at today's.
std::string RenamedKeyIn(const MapReader& r, const RenamedKey& k) {
  if (r.Has(k.name) && r.Has(k.older)) r.FailKey(k.name, BothNamesMessage(k));
  return r.Has(k.name) ? k.name : k.older;
}

// The worker machines, their devices and the shards: machines (or workers), devices_per_machine
// (or devices), client, servers (or servers_per_machine).
void ReadMachines(MapReader& c, ScenarioSpec* s) {
  const std::string machines_key = RenamedKeyIn(c, kRenamedKeys[0]);
  s->workers = static_cast<int>(c.PositiveInt(machines_key));
  if (c.Has("devices") && c.Has("devices_per_machine")) {
    c.FailKey("devices", "give 'devices' (all of them) or 'devices_per_machine', not both");
  }
  if (c.Has("devices")) {
    const int64_t total = c.PositiveInt("devices");
    if (total % s->workers != 0) {
      c.FailKey("devices",
                fmt::format("{} devices do not divide over {} machines: every machine holds the "
                            "same number of devices (each machine's reduction and the machines' "
                            "ring need it); give a multiple of {}, or devices_per_machine",
                            total, s->workers, s->workers));
    }
    s->devices_per_machine = static_cast<int>(total / s->workers);
  } else {
    s->devices_per_machine = static_cast<int>(c.PositiveInt("devices_per_machine", 1));
  }
  constexpr int kMaxDevices = 1024;
  if (s->devices_per_machine > kMaxDevices) {
    c.FailKey(c.Has("devices") ? "devices" : "devices_per_machine",
              fmt::format("{} devices per machine; at most {}", s->devices_per_machine,
                          kMaxDevices));
  }
  s->client_per_device = c.Choice("client", {"machine", "device"}, "machine") == "device";
  s->local_copies_timed =
      c.Choice("local_copies", {"free", "interconnect"}, "free") == "interconnect";
  if (s->local_copies_timed && (!s->client_per_device || s->devices_per_machine < 2)) {
    c.FailKey("local_copies",
              fmt::format("'local_copies: interconnect' times the messages between the processes "
                          "of one machine's devices: it needs client: device and 2 or more "
                          "devices_per_machine (this scenario: client: {}, {} per machine); with "
                          "client: machine the machine's reduction already crosses the "
                          "interconnect",
                          s->client_per_device ? "device" : "machine", s->devices_per_machine));
  }
  s->compute_scale = c.PositiveNumber("compute_scale", 1);
  s->input_samples_per_s = c.NonNegativeNumber("input_samples_per_s", 0);
  s->placement = c.Choice("placement", {"colocated", "dedicated"}, "colocated") == "colocated"
                     ? ServerPlacement::kColocated
                     : ServerPlacement::kDedicated;
  if (c.Has("servers") && c.Has("servers_per_machine")) {
    c.FailKey("servers_per_machine", "give 'servers' or 'servers_per_machine', not both");
  }
  if (c.Has("servers_per_machine")) {
    if (s->placement != ServerPlacement::kColocated) {
      c.FailKey("servers_per_machine", "'servers_per_machine' places shards on the worker "
                                       "machines (placement: colocated); with dedicated "
                                       "shard machines give 'servers'");
    }
    s->servers = static_cast<int>(c.PositiveInt("servers_per_machine") * s->workers);
  } else {
    s->servers = static_cast<int>(c.PositiveInt("servers", s->workers));
  }
  if (s->placement == ServerPlacement::kColocated && s->servers > s->workers &&
      !c.Has("servers_per_machine")) {
    c.FailKey("servers",
              fmt::format("{} co-located shards on {} worker machines: more shards than machines "
                          "are placed with servers_per_machine (that many on every machine), or "
                          "on machines of their own with placement: dedicated",
                          s->servers, s->workers));
  }
}

// cluster.interconnect (after the device and profile): how a machine's devices are joined, and
// whether that fits them.
void ReadInterconnect(MapReader& c, ScenarioSpec* s) {
  const std::string& file = c.file();
  const bool given = c.Has("interconnect");
  if (given) {
    const YAML::Node ic = c.Node("interconnect");
    if (ic.IsScalar()) {
      s->interconnect_file =
          FindData("interconnects", AsString(ic, file, "interconnect"), file, LocOf(ic, file));
      s->interconnect = LoadInterconnectFile(s->interconnect_file);
    } else {
      MapReader ir(ic, file, "interconnect");
      if (ir.Has("file")) {
        s->interconnect_file = FindData("interconnects", ir.String("file"), file, ir.Loc("file"));
        s->interconnect = LoadInterconnectFile(s->interconnect_file);
      }
      s->interconnect.loc = ir.Loc();
      ReadInterconnectFigures(ir, &s->interconnect);
      ir.Finish();
    }
  }
  InterconnectSpec& ic = s->interconnect;
  if (ic.host_memory_Bps <= 0) ic.host_memory_Bps = s->server_update_Bps;
  if (s->devices_per_machine == 1 || (s->client_per_device && !s->local_copies_timed)) return;
  // What moves a device's data to the host: the profile's measured copies, else the device's.
  double device_pcie = 0;
  if (s->profile && s->profile->pcie_bandwidth_Bps > 0) {
    device_pcie = s->profile->pcie_bandwidth_Bps;
  } else if (s->device) {
    device_pcie = s->device->pcie_bandwidth_Bps;
  }
  const bool gpu = device_pcie > 0;
  if (gpu && !given) {
    c.FailKey("devices_per_machine",
              fmt::format("{} GPUs per machine need 'interconnect' (how they are joined): a name "
                          "from {}/interconnects (e.g. dgx_a100) or a mapping {{kind: nvlink, "
                          "link_gbs: ..., pcie_gbs: ..., host_memory_gbs: ...}}",
                          s->devices_per_machine, DefaultDataDir()));
  }
  if (gpu && ic.kind == InterconnectKind::kHost) {
    FailAt(ic.loc, "GPU devices are joined by kind: nvlink or kind: pcie; kind: host is for CPU "
                   "devices (worker threads sharing host memory)");
  }
  if (!gpu && ic.kind != InterconnectKind::kHost) {
    FailAt(ic.loc, fmt::format("the devices here are CPU devices (no pcie_gbs in the device or "
                               "profile): worker threads sharing host memory; use kind: host "
                               "(not {})",
                               InterconnectKindName(ic.kind)));
  }
  if (!gpu) return;
  if (ic.pcie_Bps <= 0) ic.pcie_Bps = device_pcie;
  if (s->device) {
    const double memory = s->device->memory_bandwidth_Bps;
    auto check = [&](double bps, const core::SourceLoc& loc, const char* key) {
      if (bps <= memory) return;
      FailAt(loc.file.empty() ? ic.loc : loc,
             fmt::format("{} {:g} is faster than the device's memory ({:g} GB/s, {}): a link "
                         "cannot move data faster than the memory it reads; check the figure "
                         "(1e9 bytes/s per device, each direction)",
                         key, bps / 1e9, memory / 1e9, s->device_file));
    };
    if (ic.kind == InterconnectKind::kNvlink) check(ic.link_Bps, ic.link_loc, "link_gbs");
    check(ic.pcie_Bps, ic.pcie_loc, "pcie_gbs");
  }
}

// cluster.precision, cluster.optimizer, cluster.memory_format, cluster.batchnorm_fusion and
// cluster.cuda_version: what the `framework` compute model prices (any of them implies that model;
// another model named with it is an error, as is a precision the device cannot run, or a CUDA
// release it or the precision cannot have run with).
void ReadPrecisionKeys(MapReader& c, ScenarioSpec* s) {
  const std::string key = c.Has("precision")          ? "precision"
                          : c.Has("optimizer")        ? "optimizer"
                          : c.Has("memory_format")    ? "memory_format"
                          : c.Has("batchnorm_fusion") ? "batchnorm_fusion"
                                                      : "cuda_version";
  if (!s->device) {
    c.FailKey(key, fmt::format("'{}' prices a 'device' without a profile; add 'device: NAME' or "
                               "remove '{}'",
                               key, key));
  }
  if (c.Has("compute_model") && s->device->compute_model != DeviceComputeModel::kFramework) {
    c.FailKey(key, fmt::format("'{}' is priced by the framework compute model, but this scenario "
                               "names 'compute_model: {}'; remove 'compute_model' or set it to "
                               "'framework'",
                               key, s->device->compute_model == DeviceComputeModel::kRoofline
                                        ? "roofline"
                                        : "cudnn"));
  }
  s->device->compute_model = DeviceComputeModel::kFramework;
  const std::string missing = FrameworkFiguresMissing(*s->device);
  if (!missing.empty()) c.FailKey(key, fmt::format("{} ({})", missing, s->device_file));
  if (c.Has("precision")) {
    s->device->precision = ReadPrecision(c, "precision");
    const std::string why = PrecisionUnsupported(*s->device, s->device->precision);
    if (!why.empty()) c.FailKey("precision", fmt::format("{} ({})", why, s->device_file));
  }
  if (c.Has("optimizer")) s->device->optimizer = ReadOptimizer(c, "optimizer");
  if (c.Has("memory_format")) s->device->memory_format = ReadMemoryFormat(c, "memory_format");
  if (c.Has("batchnorm_fusion")) {
    s->device->batchnorm_fusion = ReadBatchNormFusion(c, "batchnorm_fusion");
  }
  if (c.Has("cuda_version")) {
    s->device->cuda_version = ReadCudaVersion(c, "cuda_version");
    const std::string why = CudaVersionUnsupported(*s->device);
    if (!why.empty()) c.FailKey("cuda_version", fmt::format("{} ({})", why, s->device_file));
  }
}

// protocol.baseline and its settings (core/collectives.h gives each default's source). Whether a
// fusion threshold reaches the model's smallest tensor needs the built model: BuildProtocol
// (config/job_config.cc) checks it, naming fusion_threshold_loc.
void ReadBaseline(MapReader& p, ScenarioSpec* s) {
  if (p.Has("baseline")) {
    s->baseline = p.Choice("baseline", {"ddp", "horovod"}, "ddp");
    s->fusion_threshold_loc = p.Loc("baseline");
  } else {
    p.Ignore("baseline");  // `baseline: null` (--set protocol.baseline=null): none, as absent
  }
  auto section = [&](const char* key) {
    YAML::Node n = p.OptionalNode(key);
    if (!n.IsDefined() || n.IsNull()) return n;
    if (s->baseline != key) {
      p.FailKey(key, fmt::format("protocol.{} sets baseline {}'s parameters, but the scenario "
                                 "{}; add 'baseline: {}' to protocol or remove '{}'",
                                 key, key,
                                 s->baseline.empty() ? std::string("runs no baseline")
                                                     : "runs baseline " + s->baseline,
                                 key, key));
    }
    return n;
  };
  auto positive = [](MapReader& r, const char* key, double def, const char* what) {
    const double v = r.Number(key, def);
    if (!(v > 0)) {
      r.FailKey(key, fmt::format("{} must be > 0, got {}: {}", key, v, what));
    }
    return v;
  };
  if (YAML::Node d = section("ddp"); d.IsDefined() && !d.IsNull()) {
    MapReader r(d, p.file(), "protocol.ddp");
    s->ddp_bucket_cap_mib = positive(
        r, "bucket_cap_mib", 25,
        "DDP's bucket_cap_mb (in MiB, 25 by default) bounds every bucket after the first");
    s->ddp_first_bucket_mib = positive(
        r, "first_bucket_mib", 1,
        "DDP's first bucket after iteration 0 holds 1 MiB by default "
        "(torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)");
    r.Finish();
  }
  if (YAML::Node h = section("horovod"); h.IsDefined() && !h.IsNull()) {
    MapReader r(h, p.file(), "protocol.horovod");
    if (r.Has("fusion_threshold_mib")) s->fusion_threshold_loc = r.Loc("fusion_threshold_mib");
    s->horovod_fusion_threshold_mib = r.NonNegativeNumber("fusion_threshold_mib", 128);
    s->horovod_cycle_ms = positive(
        r, "cycle_ms", 1, "Horovod negotiates once per HOROVOD_CYCLE_TIME (1 ms by default)");
    r.Finish();
  }
  p.Ignore("allreduce_algorithm");  // a null one (compare's other systems) is an absent one
  if (p.Has("allreduce_algorithm")) {
    s->allreduce_algorithm = p.Choice("allreduce_algorithm", {"ring", "tree", "auto"}, "ring");
    s->allreduce_algorithm_given = true;
    if (s->baseline.empty()) {
      p.FailKey("allreduce_algorithm",
                "protocol.allreduce_algorithm chooses how a baseline's collectives all-reduce "
                "(NCCL_ALGO), but the scenario runs no baseline; add 'baseline: ddp' (or horovod) "
                "or remove it");
    }
    if (s->allreduce_algorithm == "tree" && s->workers < 2) {
      p.FailKey("allreduce_algorithm",
                fmt::format("allreduce_algorithm: tree joins machines by NCCL's double binary "
                            "tree, but the cluster has {} machine (NCCL uses no tree inside one "
                            "machine); use ring, or 2 or more machines",
                            s->workers));
    }
  }
  if (s->baseline.empty()) return;
  const std::string why =
      fmt::format("baseline {} all-reduces every layer's gradient", s->baseline);
  if (p.Has("scheme") && s->scheme != "allreduce") {
    p.FailKey("scheme", fmt::format("{}, so protocol.scheme {} does not apply; remove it (or say "
                                    "allreduce)",
                                    why, s->scheme));
  }
  if (!s->layer_schemes.empty()) {
    p.FailKey("layer_schemes", why + ", so per-layer schemes do not apply; remove layer_schemes");
  }
  if (s->consistency != "bsp") {
    p.FailKey("consistency", why + " synchronously: it needs consistency bsp");
  }
  if (s->model_from_workers) {
    p.FailKey("baseline",
              "a job whose workers bring the model (model: torch) runs Poseidon's protocol; to "
              "run DDP or Horovod, run them (docs/torch.md compares them)");
  }
}

}  // namespace

ScenarioSpec ParseScenario(const YAML::Node& root, const std::string& file) {
  ScenarioSpec s;
  s.file = file;
  MapReader r(root, file, "scenario");
  if (!r.Has("schema_version")) {
    r.Fail(fmt::format("scenario has no schema_version; add 'schema_version: {}' at the top",
                       kScenarioSchemaVersion));
  }
  if (r.Int("schema_version") != kScenarioSchemaVersion) {
    r.FailKey("schema_version", fmt::format("unsupported schema_version; this poseidon reads {}",
                                            kScenarioSchemaVersion));
  }
  s.name = r.String("name", fs::path(file).stem().string());
  s.description = r.String("description", "");

  // model: NAME | PATH | {name: NAME, without: [GROUP, ...]} | torch
  YAML::Node model = r.Node("model");
  std::string model_name;
  if (model.IsScalar() && model.Scalar() == kModelFromWorkers) {
    // A PyTorch job (poseidon.torch): the workers bring the model; the file says how many, on
    // what network, with which protocol defaults. Its loop decides how long it runs.
    s.model_from_workers = true;
    s.model.name = kModelFromWorkers;
    if (r.Has("iterations")) {
      r.FailKey("iterations", "a job whose model comes from its workers ('model: torch') runs as "
                              "long as their training loop; remove 'iterations'");
    }
  } else if (model.IsMap()) {
    MapReader m(model, file, "model");
    model_name = m.String("name");
    YAML::Node without = m.OptionalNode("without");
    if (without.IsDefined() && !without.IsNull()) {
      if (!without.IsSequence()) FailAt(without, file, "'without' must be a list of layer groups");
      for (const auto& g : without) s.model_without.insert(AsString(g, file, "without"));
    }
    m.Finish();
  } else {
    model_name = AsString(model, file, "model");
  }
  if (!s.model_from_workers) {
    s.model_file = FindData("models", model_name, file, LocOf(model, file));
    s.model = LoadModelFile(s.model_file);
  }

  // A torch job's batch is its data loader's (the workers report the rows they send).
  s.batch_per_worker = s.model_from_workers ? r.PositiveInt("batch_per_worker", 1)
                                            : r.PositiveInt("batch_per_worker");
  s.iterations = s.model_from_workers ? kUnboundedIterations : r.PositiveInt("iterations", 10);
  s.warmup_iterations = r.Int("warmup_iterations", 1);
  if (s.warmup_iterations < 0 || s.warmup_iterations >= s.iterations) {
    r.FailKey("warmup_iterations",
              fmt::format("warmup_iterations must be between 0 and iterations-1 ({})",
                          s.iterations - 1));
  }
  const int64_t seed = r.Int("seed", 1);
  if (seed < 0) r.FailKey("seed", "seed must not be negative");
  s.seed = static_cast<uint64_t>(seed);

  MapReader c(r.Node("cluster"), file, "cluster");
  ReadMachines(c, &s);
  if (c.Has("device")) {
    s.device_file = FindData("devices", c.String("device"), file, c.Loc("device"));
    s.device = LoadDeviceFile(s.device_file);
  }
  if (c.Has("compute_model")) {
    if (!s.device) {
      c.FailKey("compute_model", "'compute_model' prices a 'device' without a profile; add "
                                 "'device: NAME' or remove 'compute_model'");
    }
    s.device->compute_model = ReadComputeModel(c);
    if (s.device->compute_model != DeviceComputeModel::kRoofline && !HasCudnnFigures(*s.device)) {
      c.FailKey("compute_model",
                fmt::format("the cudnn compute model needs 'sm_count' and 'architecture' in "
                            "device file {}; add them from the datasheet, or use "
                            "'compute_model: roofline'",
                            s.device_file));
    }
  }
  if (c.Has("precision") || c.Has("optimizer") || c.Has("memory_format") ||
      c.Has("batchnorm_fusion") || c.Has("cuda_version")) {
    ReadPrecisionKeys(c, &s);
  }
  if (c.Has("cudnn_version")) {
    if (!s.device) {
      c.FailKey("cudnn_version", "'cudnn_version' applies to a 'device'; add 'device: NAME' or "
                                 "remove 'cudnn_version'");
    }
    s.device->cudnn_version = ReadCudnnVersion(c);
  }
  if (c.Has("profile")) {
    s.profile_file = FindData("profiles", c.String("profile"), file, c.Loc("profile"));
    s.profile = LoadProfileFile(s.profile_file);
  }
  if (!s.device && !s.profile && !s.model_from_workers) {
    c.Fail("cluster needs a 'device' (datasheet estimate, e.g. device: k20) or a measured "
           "'profile' (e.g. profile: profiles/NAME.yaml)");
  }
  s.server_update_Bps = c.PositiveNumber("server_update_gbs", 10) * 1e9;
  ReadInterconnect(c, &s);
  MapReader n(c.Node("network"), file, "network");
  ReadNetwork(n, &s.network, file, &s.network_file);
  c.Finish();

  s.protocol_loc = r.Loc();
  YAML::Node proto = r.OptionalNode("protocol");
  if (proto.IsDefined() && !proto.IsNull()) {
    MapReader p(proto, file, "protocol");
    s.protocol_loc = p.Loc();
    s.dwbp = p.Bool("dwbp", true);
    s.chunk_bytes = p.PositiveInt("chunk_kib", 512) * 1024;
    s.placement_policy = p.Choice("placement_policy", {"balanced", "round_robin", "by_size"},
                                  "balanced");
    s.scheme = p.Choice("scheme", {"ps", "sfb", "allreduce", "auto", "paper"}, "ps");
    YAML::Node ls = p.OptionalNode("layer_schemes");
    if (ls.IsDefined() && !ls.IsNull()) {
      MapReader lr(ls, file, "layer_schemes");
      for (YAML::const_iterator it = ls.begin(); it != ls.end(); ++it) {
        const std::string layer = AsString(it->first, file, "layer name");
        s.layer_schemes[layer] = lr.Choice(layer, {"ps", "sfb", "allreduce", "auto", "paper"}, "ps");
      }
      lr.Finish();
    }
    YAML::Node cons = p.OptionalNode("consistency");
    if (cons.IsDefined() && !cons.IsNull()) {
      MapReader cr(cons, file, "consistency");
      s.consistency = cr.Choice("model", {"bsp", "ssp", "asp"}, "bsp");
      if (s.consistency == "ssp") {
        s.staleness = cr.Int("staleness");
        if (s.staleness < 0) cr.FailKey("staleness", "staleness must be >= 0 (0 is BSP)");
      } else if (cr.Has("staleness")) {
        cr.FailKey("staleness", "staleness applies to model: ssp only");
      }
      cr.Finish();
    }
    YAML::Node ft = p.OptionalNode("fault_tolerance");
    if (ft.IsDefined() && !ft.IsNull()) {
      MapReader fr(ft, file, "fault_tolerance");
      s.fault.enabled = true;
      s.fault.heartbeat_ms = fr.PositiveNumber("heartbeat_ms", 200);
      s.fault.timeout_ms = fr.PositiveNumber("timeout_ms", 3000);
      if (s.fault.timeout_ms < 2 * s.fault.heartbeat_ms) {
        fr.FailKey("timeout_ms", "timeout_ms must be at least twice heartbeat_ms, or every late "
                                 "heartbeat declares a process dead");
      }
      if (fr.Has("on_worker_failure")) {
        s.fault.on_worker_failure = fr.Choice("on_worker_failure", {"wait", "evict"}, "wait");
      }
      s.fault.checkpoint_every = fr.Int("checkpoint_every", 0);
      if (s.fault.checkpoint_every < 0) {
        fr.FailKey("checkpoint_every", "checkpoint_every must be >= 0 clocks (0: no checkpoints)");
      }
      fr.Finish();
    }
    s.gate = p.Choice("gate", {"all", "per_layer"}, "all");
    const double window_kib = p.NonNegativeNumber("priority_window_kib", 0);
    s.priority_window_bytes = std::llround(window_kib * 1024);
    s.gradient_wire = p.Choice("gradient_wire", {"fp32", "fp16", "bf16"}, "fp32");
    if (s.gradient_wire != "fp32" && !s.model_from_workers && s.model.value_words != 1) {
      p.FailKey("gradient_wire",
                fmt::format("gradient_wire {} sends gradients as 16-bit values, which needs an "
                            "fp32 model, but model '{}' holds fp64 values (value_words: {}); use "
                            "gradient_wire: fp32",
                            s.gradient_wire, s.model.name, s.model.value_words));
    }
    ReadBaseline(p, &s);
    if (s.consistency != "bsp" && (s.scheme == "allreduce" ||
                                   std::any_of(s.layer_schemes.begin(), s.layer_schemes.end(),
                                               [](const auto& kv) { return kv.second == "allreduce"; }))) {
      p.FailKey("scheme", "ring all-reduce is synchronous: it needs consistency bsp");
    }
    p.Finish();
  }
  YAML::Node strag = r.OptionalNode("stragglers");
  if (strag.IsDefined() && !strag.IsNull()) {
    if (!strag.IsSequence()) FailAt(strag, file, "'stragglers' must be a list of {worker, slowdown}");
    for (size_t i = 0; i < strag.size(); ++i) {
      MapReader sr(strag[i], file, "straggler");
      ScenarioSpec::Straggler st;
      st.worker = static_cast<int>(sr.Int("worker"));
      const int workers = ProtocolWorkers(s);
      if (st.worker < 0 || st.worker >= workers) {
        sr.FailKey("worker", fmt::format("worker must be between 0 and {} (workers - 1{})",
                                         workers - 1,
                                         s.client_per_device ? "; with client: device, a worker "
                                                               "is a device"
                                                             : ""));
      }
      st.slowdown = sr.PositiveNumber("slowdown");
      sr.Finish();
      s.stragglers.push_back(st);
    }
  }
  YAML::Node jit = r.OptionalNode("jitter");
  if (jit.IsDefined() && !jit.IsNull()) {
    MapReader jr(jit, file, "jitter");
    s.jitter = jr.Choice("distribution", {"none", "lognormal", "uniform"}, "lognormal");
    s.jitter_cv = jr.NonNegativeNumber("cv", 0.05);
    if (s.jitter == "uniform" && s.jitter_cv > 1 / std::sqrt(3.0)) {
      jr.FailKey("cv", "a uniform jitter's cv must be <= 0.577 (times would go negative)");
    }
    jr.Finish();
  }
  r.Finish();
  return s;
}

ScenarioSpec LoadScenarioFile(const std::string& path) {
  YamlFile f = YamlFile::Load(path);
  return ParseScenario(f.root(), path);
}

namespace {
void SetPath(YAML::Node root, const std::string& path, const YAML::Node& value);
std::optional<std::string> SetOverride(YAML::Node root, const std::string& path,
                                       const YAML::Node& value, std::set<std::string>* set);
}  // namespace

ScenarioSpec LoadScenarioFile(const std::string& path, const std::vector<std::string>& overrides) {
  // Overrides go into the loaded document itself (not a clone, which would lose every node's
  // line and column), so errors in untouched keys still name their place in the file.
  YamlFile f = YamlFile::Load(path);
  YAML::Node doc = f.root();
  std::set<std::string> given;  // the paths the overrides gave so far, as written
  for (size_t i = 0; i < overrides.size(); ++i) {
    const std::string& o = overrides[i];
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError(fmt::format("--set {}: error: expected KEY=VALUE, e.g. "
                                    "cluster.machines=64",
                                    o));
    }
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw ConfigError(fmt::format("--set {}: error: the value is not valid YAML: {}", o, e.msg));
    }
    if (const auto other = SetOverride(doc, o.substr(0, eq), value, &given)) {
      std::string earlier;
      for (size_t j = 0; j < i; ++j) {
        if (overrides[j].rfind(*other + "=", 0) == 0) earlier = overrides[j];
      }
      throw ConfigError(fmt::format("--set {}: error: {} (--set {} gave it)", o,
                                    BothNamesMessage(*RenamedKeyAt(*other)), earlier));
    }
  }
  try {
    return ParseScenario(doc, path);
  } catch (const ConfigError& e) {
    if (overrides.empty()) throw;
    std::string list;
    for (const auto& o : overrides) list += (list.empty() ? "" : ", ") + o;
    throw ConfigError(fmt::format("{} (with --set {})", e.what(), list));
  }
}

namespace {

// Sets `path` to `value` in `root`, as SetPath, and records `path` in `set` (the paths this
// file's overrides gave so far). For a renamed key the value replaces the file's under either
// name: the other name is dropped from its mapping (and where the file itself gives both,
// nothing is set, so that ParseScenario reports that where the file says it). Returns the other
// name's path, setting nothing, when an earlier override in `set` gave it: two overrides of one
// key by its two names are a mistake, as both names in one file are.
std::optional<std::string> SetOverride(YAML::Node root, const std::string& path,
                                       const YAML::Node& value, std::set<std::string>* set) {
  if (const RenamedKey* k = RenamedKeyAt(path)) {
    const std::string map = std::string(k->map) + ".";
    const bool is_new = path == map + k->name;
    const std::string other = is_new ? k->older : k->name;
    if (set->count(map + other) > 0) return map + other;
    // The holding mapping, looked up without creating anything (a const Node's [] does not).
    YAML::Node holder = root;
    for (size_t start = 0; holder.IsMap();) {
      const size_t dot = map.find('.', start);
      if (dot == std::string::npos) break;
      const YAML::Node up = holder;
      holder.reset(up[map.substr(start, dot - start)]);
      start = dot + 1;
    }
    const YAML::Node h = holder;
    if (h.IsMap() && h[k->name].IsDefined() && h[k->older].IsDefined()) {
      // The file gives both: ParseScenario says so at the file's line, which setting either
      // would lose.
      return std::nullopt;
    }
    if (h.IsMap()) holder.remove(other);
  }
  // A path set replaces all under it that earlier overrides gave.
  for (auto it = set->lower_bound(path + "."); it != set->end() && it->rfind(path + ".", 0) == 0;) {
    it = set->erase(it);
  }
  set->insert(path);
  SetPath(root, path, value);
  return std::nullopt;
}

void SetPath(YAML::Node root, const std::string& path, const YAML::Node& value) {
  YAML::Node node = root;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) {
      node[key] = value;
      return;
    }
    YAML::Node child = node[key];
    if (!child.IsMap()) {
      node[key] = YAML::Node(YAML::NodeType::Map);
      child = node[key];
    }
    node.reset(child);
    start = dot + 1;
  }
}

std::string ScalarText(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// Canonical text of a YAML document: maps sorted by key, every scalar with its length (so no
// scalar text can fake structure). Equal texts mean equal documents.
void CanonicalText(const YAML::Node& n, std::string* out) {
  if (n.IsMap()) {
    // Sort (key text, index) pairs, never YAML::Node values: assigning a Node writes through to
    // the document it refers to.
    std::vector<YAML::Node> values;
    std::vector<std::pair<std::string, size_t>> keys;
    for (YAML::const_iterator it = n.begin(); it != n.end(); ++it) {
      std::string k;
      CanonicalText(it->first, &k);
      keys.emplace_back(std::move(k), values.size());
      values.push_back(it->second);
    }
    std::sort(keys.begin(), keys.end());
    *out += "{";
    for (const auto& [k, i] : keys) {
      *out += k;
      *out += ":";
      CanonicalText(values[i], out);
    }
    *out += "}";
  } else if (n.IsSequence()) {
    *out += "[";
    for (size_t i = 0; i < n.size(); ++i) CanonicalText(n[i], out);
    *out += "]";
  } else if (n.IsScalar()) {
    *out += fmt::format("s{}:{}", n.Scalar().size(), n.Scalar());
  } else {
    *out += "~";
  }
}

}  // namespace

SweepSpec LoadSweepFile(const std::string& path) {
  YamlFile f = YamlFile::Load(path);
  SweepSpec sw;
  sw.file = path;
  MapReader r(f.root(), path, "sweep");
  if (!r.Has("schema_version") || r.Int("schema_version") != kScenarioSchemaVersion) {
    r.Fail(fmt::format("sweep needs 'schema_version: {}'", kScenarioSchemaVersion));
  }
  sw.name = r.String("name", fs::path(path).stem().string());
  std::string base = r.String("base");
  sw.base_file = ResolvePath(path, base);
  YAML::Node vary = r.Node("vary");
  if (!vary.IsMap() || vary.size() == 0) {
    FailAt(vary, path, "'vary' must map scenario keys (dotted paths) to lists of values");
  }
  for (YAML::const_iterator it = vary.begin(); it != vary.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node values = it->second;
    SweepAxis axis;
    axis.path = AsString(key, path, "vary key");
    if (!values.IsSequence() || values.size() == 0) {
      FailAt(values, path, fmt::format("'{}' must be a non-empty list of values", axis.path));
    }
    for (size_t i = 0; i < values.size(); ++i) axis.values.push_back(values[i]);
    // A bundle axis: `variant`, or any axis whose values are all {name, set} bundles (several
    // bundle axes cross, e.g. a workload and a protocol; the axis's name heads its CSV column).
    size_t bundles = 0;
    for (const YAML::Node& v : axis.values) bundles += v.IsMap() && v["set"] ? 1 : 0;
    if (bundles > 0 && bundles < axis.values.size()) {
      FailAt(values, path, fmt::format("'{}' mixes {{name, set}} bundles and plain values; give "
                                       "every value as a bundle, or none",
                                       axis.path));
    }
    if (axis.path == "variant" || bundles == axis.values.size()) {
      for (const YAML::Node& v : axis.values) {
        MapReader vr(v, path, "variant");
        axis.variant_names.push_back(vr.String("name"));
        YAML::Node set = vr.Node("set");
        if (!set.IsMap()) FailAt(set, path, "a variant's 'set' maps scenario keys to values");
        std::vector<std::pair<std::string, YAML::Node>> sets;
        for (YAML::const_iterator si = set.begin(); si != set.end(); ++si) {
          sets.emplace_back(AsString(si->first, path, "variant key"), YAML::Node(si->second));
        }
        axis.variant_sets.push_back(std::move(sets));
        vr.Finish();
      }
    }
    sw.axes.push_back(std::move(axis));
  }
  r.Finish();

  YamlFile base_doc = [&] {
    try {
      return YamlFile::Load(sw.base_file);
    } catch (const ConfigError& e) {
      // "BASE: error: WHY" -> "base 'B' (BASE): WHY", at the sweep's 'base' line.
      std::string why = e.what();
      const std::string prefix = sw.base_file + ": error: ";
      if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
      FailAt(f.root()["base"], path, fmt::format("base '{}' ({}): {}", base, sw.base_file, why));
    }
  }();
  // The values the sweep sets keep its line and column; errors in them name the sweep file.
  std::vector<YAML::Node> own;
  for (const SweepAxis& a : sw.axes) {
    for (const YAML::Node& v : a.values) own.push_back(v);
  }
  const NodeFileScope own_file(std::move(own), path);
  size_t total = 1;
  for (const auto& a : sw.axes) total *= a.values.size();
  if (total > 100000) r.Fail(fmt::format("sweep has {} points; at most 100000", total));
  std::vector<size_t> idx(sw.axes.size(), 0);
  for (size_t p = 0; p < total; ++p) {
    size_t rest = p;
    for (size_t a = sw.axes.size(); a-- > 0;) {
      idx[a] = rest % sw.axes[a].values.size();
      rest /= sw.axes[a].values.size();
    }
    // A fresh parse per point keeps line and column of every node the point does not change.
    YAML::Node doc = YamlFile::Parse(base_doc.text(), sw.base_file).root();
    SweepPoint point;
    point.index = static_cast<int>(p);
    // As --set: a renamed key's value replaces the base's under either name; the point giving
    // it by both names is an error at the second.
    std::set<std::string> given;
    auto set = [&](const std::string& key, const YAML::Node& value, const YAML::Node& at) {
      if (const auto other = SetOverride(doc, key, value, &given)) {
        FailAt(at, path, fmt::format("'{}' and '{}' in one point: {}", *other, key,
                                     BothNamesMessage(*RenamedKeyAt(key))));
      }
    };
    for (size_t a = 0; a < sw.axes.size(); ++a) {
      const SweepAxis& axis = sw.axes[a];
      if (!axis.variant_names.empty()) {
        for (const auto& [key, value] : axis.variant_sets[idx[a]]) set(key, value, value);
        point.values.emplace_back(axis.path, axis.variant_names[idx[a]]);
        continue;
      }
      const YAML::Node& v = axis.values[idx[a]];
      set(axis.path, v, v);
      point.values.emplace_back(axis.path, ScalarText(v));
    }
    CanonicalText(doc, &point.input_key);
    try {
      point.scenario = ParseScenario(doc, sw.base_file);
    } catch (const ConfigError& e) {
      std::string vals;
      for (const auto& [k, v] : point.values) vals += fmt::format("{}{}={}", vals.empty() ? "" : ", ", k, v);
      throw ConfigError(fmt::format("{} (sweep {} point {}: {})", e.what(), path, p, vals));
    }
    sw.points.push_back(std::move(point));
  }
  return sw;
}

}  // namespace poseidon::config
