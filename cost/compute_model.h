// cost/compute_model.h: how long each layer's forward and backward pass takes on one worker.
//
// The simulator replays these times as compute tasks. They come from one of three sources:
//
//   * a measured profile (config::ProfileSpec, written by `poseidon calibrate`): per-layer times
//     replayed as measured, scaled linearly when the scenario's batch differs from the profile's;
//   * when nothing was measured, a device's datasheet figures (config::DeviceSpec) priced by the
//     device's compute_model:
//       - `cudnn` (the default): per kernel, the algorithm cuDNN would pick and a shape-dependent
//         GEMM efficiency, memory-bound layers by bytes moved, a launch cost per kernel; the
//         model and its fitted constants are in cost/gpu_kernel_model.h;
//       - `roofline`: flat fractions of peak and bandwidth, below;
//       - `framework`: a current framework's kernels at the scenario's precision (tensor cores,
//         alignment, fusion, the optimizer step and per-iteration overhead, the latter two
//         charged to the first layer's forward pass); cost/framework_model.h.
//
//   core::Model m = core::Model::Build(config::LoadModelFile("scenarios/models/alexnet.yaml"));
//   config::DeviceSpec k20 = config::LoadDeviceFile("scenarios/devices/k20.yaml");
//   cost::ComputeModel c = cost::ComputeModel::FromDevice(m, k20, 256);
//   c.fwd_ns(0);                           // conv1 forward, ns, whole batch of 256
//   cost::ComputeModel slow = c.ScaledBy(1.5);  // a straggler
//
// ## Roofline (FromDevice with compute_model: roofline)
//
// Per layer l, with batch B and the per-image counts of core::Layer:
//   R = peak_flops * compute_efficiency                  (FLOP/s)
//   W = memory_bandwidth_Bps * memory_efficiency         (bytes/s)
//   Pb = 4 * params                                       (bytes of the layer's parameters)
//   T(F, D) = kernel_launch_ns + 1e9 * max(F / R, D / W)  (ns; one launch per pass)
//
//   forward:  F = B * fwd_flops
//             D = B * (in_bytes + out_bytes) + Pb         (read input and weights, write output)
//   backward, by layer:
//     with parameters (conv, fc, batchnorm):
//       F = 2 * B * fwd_flops                             (data gradient + weight gradient)
//       D = B * (2 * in_bytes + out_bytes) + 2 * Pb       (read output grad and input, write
//                                                          input grad; read weights, write grads)
//       -- fed by the model input (no data gradient, as in Caffe):
//       F = B * fwd_flops,  D = B * (in_bytes + out_bytes) + 2 * Pb
//     softmax_loss (gradient = probabilities - labels, cheap):
//       F = B * in_bytes / 4,  D = 2 * B * in_bytes
//     other layers without parameters (relu, pool, lrn, dropout, concat, add):
//       F = B * fwd_flops,  D = 2 * B * (in_bytes + out_bytes)
//       -- fed by the model input: no backward pass at all (0 ns, no launch).
//
// The efficiencies are flat fractions of the datasheet figures given in the device file; they
// are not fitted per layer. A measured profile is always preferred when one exists.
//
// ## Profile replay (FromProfile)
//
//   fwd = fwd_ms * 1e6 * B / profile.batch   (ns; likewise bwd)
// Every layer of the model must be in the profile (ConfigError otherwise). A batch that differs
// from the profile's, a different model name or extra profile layers give a warning (warnings()).
//
// ## Other costs
//
//   CopyNs(b)   = 1e9 * b / pcie_Bps; 0 when pcie_Bps is 0 (a CPU device: nothing to copy).
//                 pcie_Bps comes from the device (pcie_gbs) or the profile (pcie_gbs, when
//                 given), and set_pcie_bandwidth overrides it.
//   UpdateNs(b) = server-side SGD-with-momentum update of b parameter bytes:
//                 update_ms_per_mb * b when the profile gives it (ms per 1e6 bytes = ns/byte),
//                 else 1e9 * 5 * b / host_Bps (read param, grad, momentum; write param, momentum)
//                 with host_Bps = kDefaultHostMemoryBps unless set_host_memory_bandwidth is used.
//   SfbRebuildNs(l, K) = one sufficient-factor gradient rebuild of FC layer l (N x M weight) from
//                 K factor pairs: K*M*N multiply-adds. Roofline: T(2*K*M*N, 4*(K*(M+N) + 2*M*N))
//                 (read the factors, read-modify-write the gradient). cudnn: the sgemm
//                 GEMM(N, M, K) of cost/gpu_kernel_model.h plus reading and writing the gradient.
//                 Profile: the layer's forward time * K / B (its forward pass is the same
//                 B x M x N GEMM).
//
// Every result is int64 ns rounded with llround from the double value; totals are sums of the
// rounded per-layer values. ScaledBy(s) multiplies the device compute (forward, backward, SFB
// rebuild) by s before rounding; copies and server updates are not scaled.
//
// Pure: no I/O, no clock, no randomness. A ComputeModel is an immutable-after-setup value;
// concurrent const use is safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "config/specs.h"
#include "core/model.h"

namespace poseidon::cost {

// A live run that replays modelled compute (real_runtime ReplayedCompute) credits a task with up
// to this much of the time its stream waited since the previous task's modelled end: a task that
// reaches its stream within this long of that end starts at it, one handed over later starts this
// long before it was handed over. So the hand-off latency of the process's threads does not add
// up along a pass, and a wait costs the same whether it is a little shorter or a little longer
// than this (until 2026-12-06 a wait beyond it cost all of itself, so a lag near 1 ms decided
// between two paces; docs/validation.md, "A wait of 1 ms"). The simulator does the same where it
// models that latency (config::NetworkSpec::host_wakeup_ns).
inline constexpr int64_t kReplayAbsorbNs = 1'000'000;
// When a replayed task handed over at `handed_over` starts, its stream's previous task having
// ended (as modelled) at `previous_end`: continuous in both.
inline int64_t ReplayedTaskStart(int64_t handed_over, int64_t previous_end) {
  return std::max(previous_end, handed_over - kReplayAbsorbNs);
}

class ComputeModel {
 public:
  // Host memory bandwidth for the default server update estimate (bytes/s).
  static constexpr double kDefaultHostMemoryBps = 10e9;

  // Datasheet estimate by the device's compute_model (cudnn or roofline). batch > 0; the device
  // as validated by config::LoadDeviceFile.
  static ComputeModel FromDevice(const core::Model& model, const config::DeviceSpec& device,
                                 int64_t batch);
  // Measured times. Throws config::ConfigError (located at profile.loc, naming profile_file)
  // when a layer of the model is missing from the profile.
  static ComputeModel FromProfile(const core::Model& model, const config::ProfileSpec& profile,
                                  int64_t batch, const std::string& profile_file);

  // A copy whose compute (forward, backward, SFB rebuild) is `slowdown` times slower
  // (slowdown > 0; 1.5 = a straggler at two thirds of the speed). Composes multiplicatively.
  ComputeModel ScaledBy(double slowdown) const;

  // Per layer (layer_id indexes core::Model::layers()), whole batch, ns.
  int64_t fwd_ns(int layer_id) const;
  int64_t bwd_ns(int layer_id) const;
  int64_t total_fwd_ns() const;
  int64_t total_bwd_ns() const;

  int64_t CopyNs(int64_t bytes) const;
  int64_t UpdateNs(int64_t param_bytes) const;
  // layer_id must be an FC layer; K >= 0 (0 gives 0).
  int64_t SfbRebuildNs(int layer_id, int64_t K) const;

  void set_host_memory_bandwidth(double bytes_per_s);  // > 0
  void set_pcie_bandwidth(double bytes_per_s);         // >= 0; 0 = no copies
  double host_memory_bandwidth_Bps() const { return host_memory_Bps_; }
  double pcie_bandwidth_Bps() const { return pcie_Bps_; }

  int num_layers() const { return static_cast<int>(fwd_base_.size()); }
  // The framework model's once-per-iteration work (optimizer step and overhead), unscaled ns,
  // included in fwd_ns(0); 0 for the other sources.
  double iteration_ns() const { return iteration_ns_; }
  int64_t batch() const { return batch_; }
  double slowdown() const { return slowdown_; }
  // "cudnn model k20 (batch 256)", "roofline k20 (batch 256)" or "profile FILE" (with the batch
  // scaling and slowdown, if any).
  const std::string& source() const { return source_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  ComputeModel() = default;
  int64_t Scaled(double base_ns) const;
  void ComputeTotals();

  static ComputeModel FromCudnnModel(const core::Model& model, const config::DeviceSpec& device,
                                     int64_t batch);
  static ComputeModel FromFrameworkModel(const core::Model& model,
                                         const config::DeviceSpec& device, int64_t batch);
  // Appends every layer's times (per_layer(layer) -> LayerCost) and FC shapes.
  template <typename PerLayer>
  void AddLayers(const core::Model& model, const PerLayer& per_layer);

  enum class Kind { kRoofline, kCudnn, kFramework, kProfile };
  Kind kind_ = Kind::kRoofline;
  int64_t batch_ = 0;
  // Unscaled per-layer times in ns, before rounding.
  std::vector<double> fwd_base_, bwd_base_;
  // FC shapes (M inputs, N outputs; 0 for other layers), for SfbRebuildNs.
  std::vector<int64_t> fc_in_, fc_out_;
  std::vector<int64_t> fc_rows_;  // rows per image of the layer's GEMM (Layer::fc_rows)
  int64_t total_fwd_ns_ = 0, total_bwd_ns_ = 0;
  // Roofline rates (used by SfbRebuildNs on the roofline path).
  double effective_flops_ = 0;       // peak_flops * compute_efficiency
  double effective_memory_Bps_ = 0;  // memory_bandwidth_Bps * memory_efficiency
  int64_t launch_ns_ = 0;
  // The cudnn model's device and constants (used by SfbRebuildNs on that path).
  config::DeviceSpec device_;
  config::KernelModelParams kernel_params_;
  // The framework model's constants, and its once-per-iteration work (optimizer step and
  // framework overhead, charged to the first layer's forward pass), ns.
  config::FrameworkModelParams framework_params_;
  double iteration_ns_ = 0;
  double pcie_Bps_ = 0;
  double host_memory_Bps_ = kDefaultHostMemoryBps;
  double update_ms_per_mb_ = 0;
  double slowdown_ = 1.0;
  std::string base_source_;
  std::string source_;
  std::vector<std::string> warnings_;
};

// The compute model a scenario describes: its measured profile, else its device's roofline
// (with the device's PCIe bandwidth when the profile has none), and the shards' update
// bandwidth. Both hosts replay through it: the simulator, and the live runtime's replayed
// compute (a node emulating a GPU by sleeping the profiled time).
ComputeModel BuildComputeModel(const config::ScenarioSpec& s, const core::Model& model);

}  // namespace poseidon::cost
