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
// a profile's times is a whole forward+backward pass. The profile records the median of each
// layer's samples (fwd_ms, bwd_ms) and their p10/p90. Then:
//   update_ms_per_mb  median time of one SGD-with-momentum update (kernels::SgdUpdate) of all the
//                     model's parameters, divided by their size in MB (1e6 bytes);
//   sfb_rebuild_ms    per FC layer, median time of kernels::RebuildFcGradient from the last
//                     backward's sufficient factors (K = batch pairs);
//   pcie_gbs          host<->device copies: only for a GPU backend (not measured on cpu).
// Host backends only (reference, cpu); the cuda backend throws kernels::KernelError from the Net
// until kernels/ gives Nets device buffers.
//
// Thread-safety: none needed; each call builds its own Net.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

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

// Times `iterations` whole training iterations as `poseidon train` runs them (Forward, Backward,
// one SGD-with-momentum step over all parameters) after `warmup` untimed ones; returns the per
// iteration times in ms.
std::vector<double> MeasureTrainingIterations(const core::Model& model,
                                              const ComputeProfileOptions& options,
                                              int iterations);

}  // namespace poseidon::calibration
