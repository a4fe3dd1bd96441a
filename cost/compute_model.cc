#include "cost/compute_model.h"

#include "config/scenario.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "config/yaml_reader.h"
#include "core/types.h"
#include "cost/framework_model.h"
#include "cost/gpu_kernel_model.h"
#include "cost/layer_work.h"

namespace poseidon::cost {


ComputeModel ComputeModel::FromDevice(const core::Model& model, const config::DeviceSpec& device,
                                      int64_t batch) {
  POSEIDON_CHECK(batch > 0) << "batch " << batch;
  POSEIDON_CHECK(device.peak_flops > 0 && device.memory_bandwidth_Bps > 0)
      << "device '" << device.name << "' has no peak_flops or memory bandwidth";
  POSEIDON_CHECK(device.compute_efficiency > 0 && device.memory_efficiency > 0)
      << "device '" << device.name << "' efficiencies must be > 0";
  POSEIDON_CHECK(device.pcie_bandwidth_Bps >= 0 && device.kernel_launch_ns >= 0);

  if (device.compute_model == config::DeviceComputeModel::kCudnn) {
    return FromCudnnModel(model, device, batch);
  }
  if (device.compute_model == config::DeviceComputeModel::kFramework) {
    return FromFrameworkModel(model, device, batch);
  }
  ComputeModel c;
  c.kind_ = Kind::kRoofline;
  c.batch_ = batch;
  c.effective_flops_ = device.peak_flops * device.compute_efficiency;
  c.effective_memory_Bps_ = device.memory_bandwidth_Bps * device.memory_efficiency;
  c.launch_ns_ = device.kernel_launch_ns;
  c.pcie_Bps_ = device.pcie_bandwidth_Bps;

  auto roofline = [&c](const Work& w) {
    if (w.none) return 0.0;
    return static_cast<double>(c.launch_ns_) +
           1e9 * std::max(w.flops / c.effective_flops_, w.bytes / c.effective_memory_Bps_);
  };
  const double b = static_cast<double>(batch);
  for (const core::Layer& l : model.layers()) {
    c.fwd_base_.push_back(roofline(ForwardWork(l, b)));
    c.bwd_base_.push_back(roofline(BackwardWork(l, b)));
    c.fc_in_.push_back(core::HasSufficientFactors(l) ? l.fc_in : 0);
    c.fc_out_.push_back(core::HasSufficientFactors(l) ? l.fc_out : 0);
    c.fc_rows_.push_back(l.fc_rows);
  }
  c.base_source_ = fmt::format("roofline {} (batch {})", device.name, batch);
  c.ComputeTotals();
  return c;
}

template <typename PerLayer>
void ComputeModel::AddLayers(const core::Model& model, const PerLayer& per_layer) {
  for (const core::Layer& l : model.layers()) {
    const LayerCost cost = per_layer(l);
    fwd_base_.push_back(cost.fwd.ns);
    bwd_base_.push_back(cost.bwd.ns);
    fc_in_.push_back(core::HasSufficientFactors(l) ? l.fc_in : 0);
    fc_out_.push_back(core::HasSufficientFactors(l) ? l.fc_out : 0);
    fc_rows_.push_back(l.fc_rows);
  }
}

ComputeModel ComputeModel::FromCudnnModel(const core::Model& model,
                                          const config::DeviceSpec& device, int64_t batch) {
  POSEIDON_CHECK(batch > 0) << "batch " << batch;
  POSEIDON_CHECK(device.pcie_bandwidth_Bps >= 0);
  ComputeModel c;
  c.kind_ = Kind::kCudnn;
  c.batch_ = batch;
  c.device_ = device;
  c.kernel_params_ = KernelParamsFor(device);
  c.pcie_Bps_ = device.pcie_bandwidth_Bps;
  c.AddLayers(model, [&](const core::Layer& l) {
    return CudnnLayerCost(l, batch, device, c.kernel_params_);
  });
  c.base_source_ = fmt::format("cudnn model {} (batch {})", device.name, batch);
  c.ComputeTotals();
  return c;
}

ComputeModel ComputeModel::FromFrameworkModel(const core::Model& model,
                                              const config::DeviceSpec& device, int64_t batch) {
  ComputeModel c;
  c.kind_ = Kind::kFramework;
  c.batch_ = batch;
  c.device_ = device;
  c.framework_params_ = FrameworkParamsFor(device);
  c.pcie_Bps_ = device.pcie_bandwidth_Bps;
  const std::vector<LayerCost> costs =
      FrameworkModelCosts(model, batch, device, c.framework_params_);
  c.AddLayers(model, [&](const core::Layer& l) { return costs[static_cast<size_t>(l.id)]; });
  // The once-per-iteration work, before the next forward pass starts: the optimizer step on the
  // device and the framework's own overhead.
  c.iteration_ns_ = OptimizerStepNs(model, device, c.framework_params_) +
                    c.framework_params_.iteration_us * 1e3;
  if (!c.fwd_base_.empty()) c.fwd_base_[0] += c.iteration_ns_;
  const bool half = device.precision == config::Precision::kFp16 ||
                    device.precision == config::Precision::kBf16;
  if (device.batchnorm_fusion != config::BatchNormFusion::kNone &&
      (!half || device.memory_format != config::MemoryFormat::kNhwc)) {
    c.warnings_.push_back(fmt::format(
        "batchnorm_fusion {} fuses nothing at precision {} in {}: cuDNN's fused batch norm runs "
        "NHWC at fp16 or bf16 (set cluster.memory_format: nhwc and a half precision, or leave "
        "batchnorm_fusion out)",
        config::BatchNormFusionName(device.batchnorm_fusion),
        config::PrecisionName(device.precision), config::MemoryFormatName(device.memory_format)));
  }
  c.base_source_ = fmt::format("framework model {} {}{} (batch {})", device.name,
                               config::PrecisionName(device.precision),
                               device.memory_format == config::MemoryFormat::kNhwc ? " nhwc" : "",
                               batch);
  c.ComputeTotals();
  return c;
}

ComputeModel ComputeModel::FromProfile(const core::Model& model, const config::ProfileSpec& profile,
                                       int64_t batch, const std::string& profile_file) {
  POSEIDON_CHECK(batch > 0) << "batch " << batch;
  POSEIDON_CHECK(profile.batch > 0) << "profile batch " << profile.batch;
  core::SourceLoc where = profile.loc;
  if (where.file.empty()) where.file = profile_file;

  std::vector<std::string> missing;
  for (const core::Layer& l : model.layers()) {
    if (!profile.layers.count(l.name)) missing.push_back(l.name);
  }
  if (!missing.empty()) {
    std::string names;
    const size_t shown = std::min<size_t>(missing.size(), 5);
    for (size_t i = 0; i < shown; ++i) names += fmt::format("{}'{}'", i ? ", " : "", missing[i]);
    if (missing.size() > shown) names += fmt::format(" and {} more", missing.size() - shown);
    config::FailAt(where,
                   fmt::format("profile '{}' has no times for layer{} {} of model '{}'; "
                               "re-run `poseidon calibrate` for this model, or add the "
                               "layer to the profile",
                               profile_file, missing.size() > 1 ? "s" : "", names, model.name()));
  }

  ComputeModel c;
  c.kind_ = Kind::kProfile;
  c.batch_ = batch;
  c.pcie_Bps_ = profile.pcie_bandwidth_Bps;
  c.update_ms_per_mb_ = profile.update_ms_per_mb;
  const double ratio = static_cast<double>(batch) / static_cast<double>(profile.batch);
  for (const core::Layer& l : model.layers()) {
    const config::LayerTiming& t = profile.layers.at(l.name);
    c.fwd_base_.push_back(t.fwd_ms * 1e6 * ratio);
    c.bwd_base_.push_back(t.bwd_ms * 1e6 * ratio);
    c.fc_in_.push_back(core::HasSufficientFactors(l) ? l.fc_in : 0);
    c.fc_out_.push_back(core::HasSufficientFactors(l) ? l.fc_out : 0);
    c.fc_rows_.push_back(l.fc_rows);
  }

  c.base_source_ = fmt::format("profile {}", profile_file);
  if (batch != profile.batch) {
    c.base_source_ += fmt::format(" (batch {} scaled to {})", profile.batch, batch);
    c.warnings_.push_back(fmt::format(
        "{}: profile measured at batch {}, used at batch {}: times scaled linearly by {} "
        "(fixed per-pass costs and cache effects are not modelled; calibrate at batch {} for "
        "measured times)",
        profile_file, profile.batch, batch, ratio, batch));
  }
  if (profile.model != model.name()) {
    c.warnings_.push_back(
        fmt::format("{}: profile was measured on model '{}', used for model "
                    "'{}'; layers are matched by name",
                    profile_file, profile.model, model.name()));
  }
  std::set<std::string> in_model;
  for (const core::Layer& l : model.layers()) in_model.insert(l.name);
  std::vector<std::string> extra;
  for (const auto& [name, t] : profile.layers) {
    if (!in_model.count(name)) extra.push_back(name);
  }
  if (!extra.empty()) {
    std::string names;
    for (const auto& n : extra) names += (names.empty() ? "" : ", ") + n;
    c.warnings_.push_back(fmt::format("{}: {} profile layer{} not in model '{}', ignored: {}",
                                      profile_file, extra.size(), extra.size() > 1 ? "s" : "",
                                      model.name(), names));
  }
  c.ComputeTotals();
  return c;
}

ComputeModel ComputeModel::ScaledBy(double slowdown) const {
  POSEIDON_CHECK(slowdown > 0 && std::isfinite(slowdown)) << "slowdown " << slowdown;
  ComputeModel c = *this;
  c.slowdown_ = slowdown_ * slowdown;
  c.ComputeTotals();
  return c;
}

int64_t ComputeModel::Scaled(double base_ns) const { return std::llround(base_ns * slowdown_); }

void ComputeModel::ComputeTotals() {
  total_fwd_ns_ = 0;
  total_bwd_ns_ = 0;
  for (int i = 0; i < num_layers(); ++i) {
    total_fwd_ns_ += fwd_ns(i);
    total_bwd_ns_ += bwd_ns(i);
  }
  source_ = base_source_;
  if (slowdown_ != 1.0) source_ += fmt::format(", slowed down x{}", slowdown_);
}

int64_t ComputeModel::fwd_ns(int layer_id) const {
  POSEIDON_CHECK(layer_id >= 0 && layer_id < num_layers()) << "layer " << layer_id;
  return Scaled(fwd_base_[static_cast<size_t>(layer_id)]);
}

int64_t ComputeModel::bwd_ns(int layer_id) const {
  POSEIDON_CHECK(layer_id >= 0 && layer_id < num_layers()) << "layer " << layer_id;
  return Scaled(bwd_base_[static_cast<size_t>(layer_id)]);
}

int64_t ComputeModel::total_fwd_ns() const { return total_fwd_ns_; }
int64_t ComputeModel::total_bwd_ns() const { return total_bwd_ns_; }

int64_t ComputeModel::CopyNs(int64_t bytes) const {
  if (bytes <= 0 || pcie_Bps_ <= 0) return 0;
  return std::llround(1e9 * static_cast<double>(bytes) / pcie_Bps_);
}

int64_t ComputeModel::UpdateNs(int64_t param_bytes) const {
  if (param_bytes <= 0) return 0;
  const double b = static_cast<double>(param_bytes);
  // ms per 1e6 bytes = 1e6 ns per 1e6 bytes = ns per byte.
  if (update_ms_per_mb_ > 0) return std::llround(update_ms_per_mb_ * b);
  return std::llround(1e9 * 5.0 * b / host_memory_Bps_);
}

int64_t ComputeModel::SfbRebuildNs(int layer_id, int64_t K) const {
  POSEIDON_CHECK(layer_id >= 0 && layer_id < num_layers()) << "layer " << layer_id;
  const size_t i = static_cast<size_t>(layer_id);
  POSEIDON_CHECK(fc_in_[i] > 0 && fc_out_[i] > 0) << "layer " << layer_id << " is not an FC layer";
  POSEIDON_CHECK(K >= 0) << "K " << K;
  if (K == 0) return 0;
  const double k = static_cast<double>(K);
  const double m = static_cast<double>(fc_in_[i]);
  const double n = static_cast<double>(fc_out_[i]);
  double base = 0;
  if (kind_ == Kind::kCudnn) {
    // dW[N,M] += U[N,K] V[K,M]: one sgemm, plus reading and writing the gradient it adds to.
    base = GemmNs(n, m, k, device_, kernel_params_) +
           1e9 * 4 * 2 * m * n / (device_.memory_bandwidth_Bps * kernel_params_.memory_efficiency);
  } else if (kind_ == Kind::kFramework) {
    base = FrameworkGemmNs(n, m, k, device_, framework_params_) +
           1e9 * 4 * 2 * m * n /
               (device_.memory_bandwidth_Bps * framework_params_.memory_efficiency);
  } else if (kind_ == Kind::kRoofline) {
    const double flops = 2 * k * m * n;
    const double bytes = 4 * (k * (m + n) + 2 * m * n);
    base = static_cast<double>(launch_ns_) +
           1e9 * std::max(flops / effective_flops_, bytes / effective_memory_Bps_);
  } else {
    // The forward GEMM's rows are batch x fc_rows (tokens for a linear layer, 1 for fc).
    base = fwd_base_[i] * k / (static_cast<double>(batch_) * static_cast<double>(fc_rows_[i]));
  }
  return Scaled(base);
}

void ComputeModel::set_host_memory_bandwidth(double bytes_per_s) {
  POSEIDON_CHECK(bytes_per_s > 0) << bytes_per_s;
  host_memory_Bps_ = bytes_per_s;
}

void ComputeModel::set_pcie_bandwidth(double bytes_per_s) {
  POSEIDON_CHECK(bytes_per_s >= 0) << bytes_per_s;
  pcie_Bps_ = bytes_per_s;
}

ComputeModel BuildComputeModel(const config::ScenarioSpec& s, const core::Model& model) {
  ComputeModel c = s.profile
                       ? ComputeModel::FromProfile(model, *s.profile, s.batch_per_worker,
                                                   s.profile_file)
                       : ComputeModel::FromDevice(model, *s.device, s.batch_per_worker);
  if (s.profile && s.device && s.profile->pcie_bandwidth_Bps == 0) {
    // A profile measured on a host-only backend says nothing of PCIe; the device file does.
    c.set_pcie_bandwidth(s.device->pcie_bandwidth_Bps);
  }
  c.set_host_memory_bandwidth(s.server_update_Bps);
  // cluster.compute_scale (1 when absent: no copy, every output as before).
  if (s.compute_scale != 1.0) return c.ScaledBy(s.compute_scale);
  return c;
}

}  // namespace poseidon::cost
