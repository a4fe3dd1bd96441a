// calibration/compute_profiler.h: measures the per-layer profile `poseidon calibrate` writes, and
// the real one-node training iteration the profile is checked against (calibration loop (a)).
//
//   core::Model m = core::Model::Build(config::LoadModelFile("scenarios/models/fmnist_mlp.yaml"));
//   ComputeProfileOptions o;  o.batch = 64;  o.repetitions = 20;
//   config::ProfileSpec p = MeasureComputeProfile(m, "fmnist_mlp", o, nullptr);
//   config::WriteProfileYaml(p, std::cout);
//
// Method. A kernels::Net of the model at the batch is fed seeded random images and labels. After
// `warmup` untimed iterations, each of `repetitions` iterations times (steady_clock, per call):
// SetInput + ForwardLayer(0) as layer 0's forward, ForwardLayer(i) for the others; BeginBackward +
// BackwardLayer(n-1) as the last layer's backward, BackwardLayer(i) for the others; so the sum of
// a profile's times is a whole forward+backward pass; then the SGD step over all parameters, timed
// as the update. Every timed iteration is a real training iteration (the step runs between them).
// The profile records, per layer, the mean of its samples over the "typical" iterations: those
// whose total time (all layers + step) lies between the 25th and 75th percentile of the totals;
// p10/p90 over all samples. Why not each layer's median: the simulator adds layer times, and
// medians do not add up when the samples are skewed, as they are on a loaded machine (fmnist_mlp
// b64, 2 shared cores: sum of the per-layer and step medians 21.1 ms, median of the
// per-iteration totals 25.2 ms). Means over the same iterations add up exactly (their sum is the mean total of those
// iterations), and keeping only the interquartile iterations drops the rare long preemptions the
// way a median would. Then:
//   update_ms_per_mb  the step's time (same iterations, same mean) divided by the parameters'
//                     size in MB (1e6 bytes);
//   sfb_rebuild_ms    per FC layer and linear layer with its own weight, median time of
//                     kernels::RebuildFcGradient from the last backward's sufficient factors
//                     (K = batch pairs for fc, batch x tokens for linear);
//   pcie_gbs          host<->device copies: only for a GPU backend (not measured on cpu).
// Host backends only (reference, cpu); the cuda backend throws kernels::KernelError from the Net
// until kernels/ gives Nets device buffers.
//
// Thread-safety: none needed; each call builds its own Net.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/specs.h"
#include "core/model.h"
#include "kernels/kernel.h"

namespace poseidon::calibration {

struct ComputeProfileOptions {
  int64_t batch = 64;
  kernels::Backend backend = kernels::Backend::kCpu;
  int repetitions = 20;  // timed iterations (>= 1)
  int warmup = 3;        // untimed iterations first (>= 0)
  uint64_t seed = 1;
  std::string command;   // recorded in the provenance
};

// `phase` names the stage ("warm-up", "layers", "update", "sfb"), done/total its progress.
using ProgressFn = std::function<void(const std::string& phase, int done, int total)>;

// Throws kernels::KernelError when the backend cannot run here, std::invalid_argument for
// repetitions < 1 or warmup < 0.
config::ProfileSpec MeasureComputeProfile(const core::Model& model, const std::string& model_name,
                                          const ComputeProfileOptions& options,
                                          const ProgressFn& progress);

// Loop (a) without drift between the two sides: the profile of MeasureComputeProfile, where each
// profiled iteration is followed at once by one whole training iteration (Forward, Backward, SGD
// step, as `poseidon train` runs it, on the same Net) timed as one. On a shared machine the load
// changes over seconds; alternating iteration by iteration makes the profile and the whole
// iterations see the same load, which two separate runs do not.
struct ProfileAndIterations {
  config::ProfileSpec profile;
  std::vector<double> whole_iteration_ms;  // options.repetitions samples
};
ProfileAndIterations MeasureProfileAndIterations(const core::Model& model,
                                                 const std::string& model_name,
                                                 const ComputeProfileOptions& options,
                                                 const ProgressFn& progress);

// Times `iterations` whole training iterations as `poseidon train` runs them (Forward, Backward,
// one SGD-with-momentum step over all parameters) after `warmup` untimed ones; returns the per
// iteration times in ms.
std::vector<double> MeasureTrainingIterations(const core::Model& model,
                                              const ComputeProfileOptions& options,
                                              int iterations);

}  // namespace poseidon::calibration
