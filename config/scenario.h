// config/scenario.h: a scenario (one simulated or live job) and a sweep (many scenarios).
//
// A scenario file names a model, a per-worker batch, a cluster (workers, shards, device or
// measured profile, network) and a protocol. Everything it refers to by name (model, device,
// profile) is resolved and loaded here, so the returned ScenarioSpec is self-contained.
//
//   schema_version: 1
//   name: alexnet-8x-40g
//   model: alexnet                 # or {name: googlenet, without: [aux]}, a path, or torch
//                                  # (the workers bring it: poseidon.torch, docs/torch.md)
//   batch_per_worker: 256
//   iterations: 10                 # clocks each worker runs
//   warmup_iterations: 1           # excluded from the reported statistics
//   seed: 1
//   cluster:
//     machines: 8                  # worker machines (`workers: 8`, its older name, says the same)
//     devices_per_machine: 1       # devices (GPUs, or CPU worker threads) per worker machine
//                                  # (or `devices: N`, all of them: a multiple of the machines)
//     client: machine              # machine: one process per machine whose client combines its
//                                  # devices (Poseidon's three-level hybrid) | device: one
//                                  # process per device, each a worker of its own (the baseline)
//     interconnect: dgx_a100       # how a machine's devices are joined (devices_per_machine > 1;
//                                  # scenarios/interconnects/, or a mapping of its keys, with
//                                  # `file:` to start from one: config/interconnect_loader.h);
//                                  # CPU devices default to host memory at server_update_gbs
//     compute_scale: 1.25          # optional: every device's compute times this (> 0; default 1)
//     input_samples_per_s: 2800    # optional: what a machine's input pipeline (CPU decoding and
//                                  # augmentation) delivers to its devices together (>= 0;
//                                  # default 0: as fast as they take them)
//     servers: 8                   # default: one shard per worker machine
//     servers_per_machine: 1       # colocated: shards on each worker machine (instead of servers)
//     placement: colocated         # colocated (shard j on worker machine j) | dedicated
//     device: k20                  # datasheet estimate from scenarios/devices/k20.yaml ...
//     compute_model: cudnn         # optional: cudnn | roofline | framework, overrides the device
//                                  # file's
//     precision: bf16              # optional: fp32 | tf32 | fp16 | bf16 (fp16/bf16: mixed
//                                  # precision); picks the framework model (cost/framework_model.h)
//     optimizer: adamw             # optional, framework model: sgd | adam | adamw | rmsprop | lamb
//     memory_format: nhwc          # optional, framework model: nchw (default) | nhwc
//                                  # (channels_last): CNN activations' layout
//     batchnorm_fusion: bn_add_relu  # optional, framework model: none (default) | bn_relu |
//                                  # bn_add_relu: what the framework fuses into batch norm
//     cuda_version: "11.8"         # optional, framework model: the CUDA release of the
//                                  # framework's libraries (default: a current one)
//     cudnn_version: "2.0"         # optional: the cuDNN release whose algorithms cudnn may use
//     profile: ../profiles/x.yaml  # ... or measured per-layer times (wins when given)
//     server_update_gbs: 10        # host memory bandwidth for the shards' SGD update
//     network:
//       model: flow                # flow (links shared, max-min or alpha-fair) | alpha_beta
//                                  # (no contention) | queue (sending NICs shared, receiving
//                                  # links FIFO; star only)
//       topology: star             # star | leaf_spine
//       bandwidth_gbps: 40         # every host NIC, full duplex, 1e9 bit/s
//       latency_us: 5              # one-way, host to host through one switch
//       efficiency: 1.0            # payload / wire bytes
//       per_message_overhead_us: 0
//       connections: machine_pair  # machine_pair (one in-order stream per pair of machines) |
//                                  # process_pair (one per pair of processes, sharing links)
//       fairness_alpha: 0          # 0 = max-min; > 0 alpha-fair (1 = proportional, TCP-like)
//       ack_path_weight: 0         # alpha-fair: weight of the busy links acknowledgements cross
//       burst_bytes: 0             # per-link token bucket (tc tbf's burst); 0 = none
//       sender_queue_bytes: 0      # queued per sending connection at the NIC (TCP small queues)
//       queue_limit_bytes: 0       # queue model: most bytes a receiving link queues; 0 = none
//       congested_flow_weight: 1   # queue model: a flow's weight at its sender when its
//                                  # receiver is congested (0 < x <= 1); 1 = an equal split
//       initial_window_bytes: 0    # queue model: TCP's first window per connection (slow
//                                  # start, round trips through the queues); 0 = none
//       segment_bytes: 0           # with initial_window_bytes: Reno's losses at a full
//                                  # queue (windows halve; +1 segment per round trip)
//       send_buffer_bytes: 0       # with initial_window_bytes: the most a connection has
//                                  # in flight (its socket's send buffer); 0 = no limit
//       loss_packet_bytes: 0       # with segment_bytes: losses drawn a packet at a time
//                                  # (by the seed); 0 = every sender into a full queue halves
//       hosts_per_leaf: 16         # leaf_spine only
//       spines: 2
//       oversubscription: 1
//       # or: network: {file: networks/NAME.yaml, topology: star}: bandwidth, latency, efficiency,
//       # overhead and the sharing keys (model included) from a network file
//       # (config/network_loader.h); keys here override it
//   protocol:
//     dwbp: true
//     chunk_kib: 512
//     placement_policy: balanced   # balanced (chunks on the lightest shard) | round_robin |
//                                  # by_size (whole tensors, the papers' baselines; placement.h)
//     scheme: auto                 # ps | sfb (FC weights) | allreduce | auto (SACP in time,
//                                  # core/sacp_time.h) | paper (SACP's byte rule, as published)
//     layer_schemes: {fc6: sfb}    # per-layer overrides
//     consistency: {model: ssp, staleness: 2}   # bsp | ssp | asp
//     gate: all                    # all (wait for every layer) | per_layer
//     priority_window_kib: 0       # > 0: send by clock, then layer; this much in flight per peer
//     gradient_wire: fp32          # fp32 | fp16 | bf16: gradients (pushes, factors, ring steps)
//                                  # on the wire as 16-bit values, half the bytes; parameters
//                                  # stay fp32; fp32 models only (core/messages.h WireFormat)
//     baseline: ddp                # optional: run what users run instead, every layer by fused
//                                  # ring all-reduces one at a time (core/collectives.h):
//                                  # ddp (PyTorch DDP's buckets) | horovod (tensor fusion,
//                                  # simulator only); needs bsp and scheme absent or allreduce
//     ddp: {bucket_cap_mib: 25, first_bucket_mib: 1}          # baseline ddp (DDP's defaults)
//     horovod: {fusion_threshold_mib: 128, cycle_ms: 1}        # baseline horovod (Horovod's)
//     allreduce_algorithm: ring    # a baseline's collectives: ring | tree (NCCL's double binary
//                                  # tree across machines, a chain inside one; 2+ machines;
//                                  # core/tree.h) | auto (each as NCCL's tuning model chooses;
//                                  # core/nccl_tuning.h)
//   stragglers:                    # per-worker compute slowdown
//     - {worker: 3, slowdown: 1.5}
//   jitter: {distribution: lognormal, cv: 0.05}   # per-task compute variability (seeded)
//
// Names are looked up next to the scenario first (a `models/`, `devices/` or `profiles/`
// folder in the scenario's folder or any folder above it), then in the built-in data folder
// (POSEIDON_DATA_DIR, the repository's scenarios/).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/specs.h"
#include "config/yaml_reader.h"
#include "core/model.h"

namespace poseidon::config {

inline constexpr int64_t kScenarioSchemaVersion = 1;

enum class ServerPlacement { kColocated, kDedicated };

// `model: torch`: the workers bring the model (poseidon.torch) and their loop decides how long
// the job runs (iterations is then kUnboundedIterations, a bound no loop reaches).
inline constexpr const char* kModelFromWorkers = "torch";
inline constexpr int64_t kUnboundedIterations = int64_t{1} << 40;

struct ScenarioSpec {
  std::string file;  // where it was read from
  std::string name;
  std::string description;
  std::string model_file;
  std::set<std::string> model_without;
  core::ModelSpec model;               // empty until the workers send it (model_from_workers)
  bool model_from_workers = false;     // model: torch
  int64_t batch_per_worker = 0;
  int64_t iterations = 10;
  int64_t warmup_iterations = 1;
  uint64_t seed = 1;
  // cluster
  int workers = 1;  // worker machines (YAML: workers or machines)
  // Devices per worker machine, and who hosts them: the machine's one client (the three-level
  // hybrid) or one process per device (client: device, each its own worker; ProtocolWorkers).
  int devices_per_machine = 1;
  bool client_per_device = false;
  // cluster.local_copies: how messages between the processes of one machine (client: device) are
  // timed. false (free, the default): not at all, as before; true (interconnect): as copies over
  // the machine's interconnect (cost/intra_machine.h: device to device, device to host).
  bool local_copies_timed = false;
  // cluster.compute_scale: every device's compute (forward, backward, SFB rebuild) times this
  // factor (> 0; 1 exactly when absent, which leaves every output as it was). What `poseidon
  // reproduce` calibrates from a published 1-GPU figure (sim/reproduce.h).
  double compute_scale = 1;
  // cluster.input_samples_per_s: what one machine's input pipeline (reading, decoding and
  // augmenting samples on its CPU) delivers to all its devices together, samples per second; a
  // device's forward pass waits for its batch (sim/cluster.h SimJobConfig). 0 (the default): as
  // fast as the devices take them, which leaves every output as it was.
  double input_samples_per_s = 0;
  // How a machine's devices are joined (devices_per_machine > 1; kind host for CPU devices when
  // the scenario says nothing).
  InterconnectSpec interconnect;
  std::string interconnect_file;  // set when it came from a file
  int servers = 1;
  ServerPlacement placement = ServerPlacement::kColocated;
  std::string device_file;              // empty when a profile is given without a device
  std::optional<DeviceSpec> device;
  std::string profile_file;
  std::optional<ProfileSpec> profile;
  double server_update_Bps = 10e9;
  NetworkSpec network;
  std::string network_file;  // set when `network: {file: ...}` named a network file
  // protocol
  bool dwbp = true;
  int64_t chunk_bytes = 512 * 1024;
  std::string placement_policy = "balanced";           // balanced | round_robin | by_size
  std::string scheme = "ps";                           // ps | sfb | allreduce | auto | paper
  std::map<std::string, std::string> layer_schemes;    // layer name -> scheme
  std::string consistency = "bsp";                     // bsp | ssp | asp
  int64_t staleness = 0;                               // for ssp
  std::string gate = "all";                            // all | per_layer
  int64_t priority_window_bytes = 0;                   // 0 = no priorities
  std::string gradient_wire = "fp32";                  // fp32 | fp16 | bf16 (core WireFormat)
  // protocol.baseline (core/collectives.h): "" for Poseidon's own protocol, ddp or horovod, and
  // their settings in MiB (2^20 bytes, as DDP's bucket_cap_mb means) and milliseconds.
  std::string baseline;
  double ddp_bucket_cap_mib = 25;
  double ddp_first_bucket_mib = 1;
  double horovod_fusion_threshold_mib = 128;
  double horovod_cycle_ms = 1;
  std::string allreduce_algorithm = "ring";  // ring | tree | auto (core AllreduceAlgorithm)
  bool allreduce_algorithm_given = false;    // the scenario named one (`poseidon compare`)
  core::SourceLoc fusion_threshold_loc;  // where the threshold was given (or the baseline)
  // protocol.fault_tolerance (core/job.h FaultConfig); all off unless the section is present
  struct FaultTolerance {
    bool enabled = false;
    double heartbeat_ms = 200;
    double timeout_ms = 3000;
    std::string on_worker_failure;  // wait | evict; empty: wait for bsp, evict for ssp/asp
    int64_t checkpoint_every = 0;   // clocks; 0 = no checkpoints
  } fault;
  // variability
  struct Straggler {
    int worker = 0;
    double slowdown = 1;
  };
  std::vector<Straggler> stragglers;
  core::SourceLoc protocol_loc;  // where the protocol section (or the file) starts
  std::string jitter = "none";                         // none | lognormal | uniform
  double jitter_cv = 0;
};

// The folder the built-in models, devices and profiles live in.
std::string DefaultDataDir();

// The core's workers of a scenario: one per machine, or with client: device one per device.
inline int ProtocolWorkers(const ScenarioSpec& s) {
  return s.client_per_device ? s.workers * s.devices_per_machine : s.workers;
}
// The devices each of the core's workers holds (ProtocolConfig::devices_per_machine).
inline int DevicesPerWorker(const ScenarioSpec& s) {
  return s.client_per_device ? 1 : s.devices_per_machine;
}

ScenarioSpec LoadScenarioFile(const std::string& path);
// Same, with KEY=VALUE overrides applied first (dotted paths, e.g. "cluster.machines=64"; the
// value is read as YAML, so lists and mappings work too). A malformed override is a ConfigError.
// A renamed key set by either name replaces the file's under either name (cluster.machines,
// older name cluster.workers); setting it by both names is a ConfigError, as the file giving
// both is. A sweep's values (LoadSweepFile) are set the same way.
ScenarioSpec LoadScenarioFile(const std::string& path, const std::vector<std::string>& overrides);
// Parses an already loaded document; `file` names it in messages and anchors relative paths.
ScenarioSpec ParseScenario(const YAML::Node& root, const std::string& file);

// A sweep: a base scenario and the values to vary, one cartesian product.
//
//   schema_version: 1
//   name: alexnet-scaling
//   base: alexnet.yaml             # relative to the sweep file
//   vary:                          # first key varies slowest; any scenario key by dotted path
//     cluster.workers: [1, 2, 4, 8]
//     cluster.network.bandwidth_gbps: [1, 10, 40]
//
// A `variant` axis names bundles of settings instead of one key's values; its CSV column holds
// the names (for plot legends):
//     variant:
//       - {name: PS, set: {protocol.dwbp: false}}
//       - {name: Poseidon, set: {protocol.dwbp: true, protocol.scheme: auto}}
// Any other axis whose values are all such bundles is one too, named by its key (which need not
// be a scenario key), so that bundles cross bundles:
//     workload:
//       - {name: ResNet-50, set: {model: resnet50, batch_per_worker: 64}}
struct SweepAxis {
  std::string path;               // "cluster.network.bandwidth_gbps", or a bundle axis's name
  std::vector<YAML::Node> values;
  // For a variant axis: per value, its name and its (path, value) settings.
  std::vector<std::string> variant_names;
  std::vector<std::vector<std::pair<std::string, YAML::Node>>> variant_sets;
};

struct SweepPoint {
  int index = 0;
  std::vector<std::pair<std::string, std::string>> values;  // (path, value as written)
  ScenarioSpec scenario;
  // Canonical text of the point's merged scenario document (maps sorted by key): two points
  // with equal keys have identical inputs (the sweep runner computes them once).
  std::string input_key;
};

struct SweepSpec {
  std::string file;
  std::string name;
  std::string base_file;
  std::vector<SweepAxis> axes;
  std::vector<SweepPoint> points;  // every combination, validated, in row-major order
};

SweepSpec LoadSweepFile(const std::string& path);

}  // namespace poseidon::config
