// config/compute_loader.h: device files (datasheet figures) and measured per-layer profiles.
//
// Two YAML formats feed cost::ComputeModel:
//
// Device file (scenarios/devices/NAME.yaml): datasheet figures of one accelerator, units in the
// key names.
//
//   schema_version: 1
//   name: k20                         # should equal the file's stem; scenarios say `device: k20`
//   description: "NVIDIA Tesla K20 (Kepler GK110), datasheet figures"
//   peak_tflops: 3.52                 # fp32 peak, 1e12 FLOP/s          (> 0)
//   memory_bandwidth_gbs: 208         # device memory, 1e9 bytes/s      (> 0)
//   sm_count: 13                      # streaming multiprocessors (> 0; the cudnn model needs it)
//   architecture: kepler              # kepler maxwell pascal volta turing ampere hopper (cudnn)
//   pcie_gbs: 6                       # effective host<->device, 1e9 bytes/s; 0 = CPU device
//   launch_overhead_us: 5             # roofline: fixed cost per layer pass (>= 0)
//   source: "NVIDIA Tesla K20 board specification"   # required: where the figures come from
//   compute_model: cudnn              # optional: cudnn (default) | roofline
//   compute_efficiency: 0.5           # optional, roofline: fraction of peak conv/fc reach (0, 1]
//   memory_efficiency: 0.7            # optional, roofline: fraction of bandwidth reached  (0, 1]
//   cudnn_version: "5.1"              # optional: the algorithms of that cuDNN; default current
//   kernel_model: {launch_us: 5}      # optional: replaces fitted cudnn-model constants
//
// Profile file (scenarios/profiles/*.yaml, written by `poseidon calibrate`): per-layer times
// of one model at one batch size. `layers` is a list (file order = forward order) of one flow
// mapping per layer, so a profile reads as a table:
//
//   schema_version: 1
//   model: alexnet
//   batch: 256                        # images per pass the times were measured at  (> 0)
//   device: "NVIDIA H200"
//   backend: cuda                     # cpu | cuda | synthetic
//   update_ms_per_mb: 0.4             # optional: server SGD update, ms per 1e6 param bytes
//   pcie_gbs: 50                      # optional: measured host<->device copies, 1e9 bytes/s
//   provenance:                       # free-form strings: date, command, commit, libraries
//     date: "2025-01-01"
//     command: "poseidon calibrate ..."
//   layers:
//     - {name: conv1, fwd_ms: 1.25, bwd_ms: 2.5, fwd_p10_ms: 1.2, fwd_p90_ms: 1.3}
//     - {name: relu1, fwd_ms: 0.1, bwd_ms: 0.12}
//
// Layer entries: name, fwd_ms, bwd_ms (>= 0, the time for the whole batch; calibration writes
// the mean over the interquartile iterations, calibration/compute_profiler.h) and optionally
// fwd_p10_ms, fwd_p90_ms, bwd_p10_ms, bwd_p90_ms (>= 0, p10 <= p90).
// A layer name may appear once. FC layers may also carry sfb_rebuild_ms (>= 0, optional): the
// measured time of one sufficient-factor gradient rebuild (kernels::RebuildFcGradient) from
// `batch` factor pairs, written by `poseidon calibrate`.
//
// Every bad input (unknown key, missing or unsupported schema_version, negative time, a value
// that is not a number, duplicate layer) throws one ConfigError "FILE:LINE:COL: error: ...; what
// to do". Thread-safety: free functions without shared state.
#pragma once

#include <ostream>
#include <string>

#include "config/specs.h"
#include "config/yaml_reader.h"

namespace poseidon::config {

inline constexpr int kDeviceSchemaVersion = 1;
inline constexpr int kProfileSchemaVersion = 1;

DeviceSpec LoadDeviceFile(const std::string& path);
// Same from text already in memory; `name` is used as the file name in messages.
DeviceSpec ParseDeviceYaml(const std::string& text, const std::string& name);

// Resolves a scenario's `device:` value. A value that contains '/' or ends in .yaml/.yml is a
// path (it must exist); anything else is a name looked up as DEVICES_DIR/NAME.yaml. An unknown
// name throws ConfigError listing the known devices (the *.yaml stems of devices_dir), with a
// "did you mean" hint; `where` (the scenario's `device:` key), when given, prefixes the message.
std::string FindDeviceFile(const std::string& name_or_path, const std::string& devices_dir,
                           const core::SourceLoc& where = {});

// "5.1", "5.1.05", "4" -> 51, 51, 40 (major * 10 + minor, a minor above 9 as 9); 0 for anything
// else. Library releases (cuDNN, CUDA) are written this way.
int ParseMajorMinor(const std::string& text);

// The keys a device file and a scenario's cluster share (both readers call these): `compute_model`
// (cudnn | roofline, default cudnn) and `cudnn_version` (ParseMajorMinor; a value it refuses is
// a located ConfigError). The caller checks r.Has(key) first.
class MapReader;
DeviceComputeModel ReadComputeModel(MapReader& r);
int ReadCudnnVersion(MapReader& r);
// A release as ParseMajorMinor gives it, back as text: 102 -> "10.2"; 0 (a current one) -> "".
std::string MajorMinorName(int version);
// `key` as a CUDA release ("10.2", "11.8"; ParseMajorMinor), a located ConfigError otherwise.
int ReadCudaVersion(MapReader& r, const std::string& key);
// cluster.precision, cluster.optimizer and the like (fp32 | tf32 | fp16 | bf16; sgd | adam |
// adamw | rmsprop | lamb), as Choice errors: located, with the choices.
Precision ReadPrecision(MapReader& r, const std::string& key);
OptimizerKind ReadOptimizer(MapReader& r, const std::string& key);
// A measurement's memory_format (nchw | nhwc), a Choice error when unknown.
MemoryFormat ReadMemoryFormat(MapReader& r, const std::string& key);
// A measurement's or scenario's batchnorm_fusion (none | bn_relu | bn_add_relu), a Choice error
// when unknown.
BatchNormFusion ReadBatchNormFusion(MapReader& r, const std::string& key);
// Why `device` cannot run `precision` (empty when it can): tf32 and bf16 need the tensor-core
// figure of that precision (Ampere and later); fp16 a tensor-core or fp16_tflops figure.
std::string PrecisionUnsupported(const DeviceSpec& device, Precision precision);
// Why `device` cannot have run with CUDA device.cuda_version (empty when it can, or when the
// version is 0, a current release): its architecture needs a later release (Volta 9.0, Turing
// 10.0, Ampere 11.0, Ada and Hopper 11.8, Blackwell 12.8).
std::string CudaVersionUnsupported(const DeviceSpec& device);
// Whether the device file has what the cudnn compute model needs (sm_count, architecture).
inline bool HasCudnnFigures(const DeviceSpec& d) {
  return d.sm_count > 0 && d.architecture != GpuArchitecture::kUnknown;
}

// "" when the device file gives what the framework compute model prices with (sm_count,
// architecture, boost_clock_mhz); otherwise what is missing and what to do.
std::string FrameworkFiguresMissing(const DeviceSpec& device);

ProfileSpec LoadProfileFile(const std::string& path);
ProfileSpec ParseProfileYaml(const std::string& text, const std::string& name);

// Writes `profile` in the format above: fixed key order, layers in profile.layer_order then by
// name, optional keys only when set (update_ms_per_mb > 0, pcie_bandwidth_Bps > 0, percentiles
// present), numbers in the shortest form that reads back to the same double, strings quoted when
// YAML would otherwise misread them. LoadProfileFile of the output gives back the same values
// (pcie to within rounding of the 1e9 unit conversion).
void WriteProfileYaml(const ProfileSpec& profile, std::ostream& out);

// The scalar forms WriteProfileYaml uses, for other writers of config files (network files):
// a string plain when unambiguous, else double-quoted; a number in its shortest exact form.
std::string YamlScalarString(const std::string& s);
std::string YamlScalarNumber(double v);

}  // namespace poseidon::config
