// calibration/gpu_fit.h: the cudnn compute model (cost/gpu_kernel_model.h) against published
// whole-model timings (config/measurement_loader.h): predictions, errors, and the fit of its
// constants to the rows marked `set: fit`.
//
//   std::vector<GpuCase> cases = LoadGpuCases(timings, data_dir);  // models and devices resolved
//   KernelModelParams p = FitKernelParams(cases, cost::FittedKernelParams());  // fit rows only
//   std::vector<CaseError> e = EvaluateCases(cases, p, config::DeviceComputeModel::kCudnn);
//
// The fit minimises the sum over fit rows of log(predicted / measured)^2, forward and backward
// each, by Nelder-Mead in an unbounded reparametrisation (logit for fractions, log for sizes and
// the launch cost, a scaled logistic for winograd_gain in [1, 4]), from the given start, for a
// fixed number of evaluations: deterministic. Held-out rows never enter it.
#pragma once

#include <string>
#include <vector>

#include "config/measurement_loader.h"
#include "config/specs.h"
#include "core/model.h"
#include "cost/framework_model.h"

namespace poseidon::calibration {

struct GpuCase {
  config::PublishedTiming row;
  core::Model model;
  config::DeviceSpec device;
};

// Resolves each row's model (with its input size and groups left out) and device under
// data_dir (scenarios/). ConfigError at the row for an unknown model or device.
std::vector<GpuCase> LoadGpuCases(const config::PublishedTimings& timings,
                                  const std::string& data_dir);

struct CaseError {
  const GpuCase* c = nullptr;
  double fwd_ms = 0, bwd_ms = 0;        // predicted
  double fwd_err = 0, bwd_err = 0;      // (predicted - measured) / measured
  double total_err = 0;                 // the same for fwd + bwd (a whole-iteration row: for
                                        // the iteration)
  double iteration_ms = 0;              // predicted, a whole-iteration row
};

// `kind` picks the compute model: kCudnn with `p`, or kRoofline with each device file's flat
// efficiencies (p unused).
// kFramework evaluates the whole-iteration rows only, with `fp`; kCudnn and kRoofline price a
// whole-iteration row's forward and backward passes in fp32 (what they know), to compare.
std::vector<CaseError> EvaluateCases(
    const std::vector<GpuCase>& cases, const config::KernelModelParams& p,
    config::DeviceComputeModel kind,
    const config::FrameworkModelParams& fp = cost::FittedFrameworkParams());

struct ErrorStats {
  int rows = 0;
  double median_abs = 0, max_abs = 0;  // of |error|, as fractions
};
// Over the rows whose set is `fit` (fit_rows = true) or held out (false); `which` picks the error:
// 0 total, 1 forward, 2 backward.
ErrorStats Stats(const std::vector<CaseError>& errors, bool fit_rows, int which);

// Fits the constants to the fit rows. `evaluations` (> 0) bounds the objective evaluations.
config::KernelModelParams FitKernelParams(const std::vector<GpuCase>& cases,
                                          const config::KernelModelParams& start,
                                          int evaluations = 4000);
// The objective at p (sum of squared log ratios over fit rows, forward and backward).
double FitObjective(const std::vector<GpuCase>& cases, const config::KernelModelParams& p);

// The framework model's constants fitted to the `set: fit` whole-iteration rows (sum of squared
// log ratios of the iteration time), the same Nelder-Mead from `start`. The constants named in
// `held` (config::kFrameworkParamNames) keep start's values: measured, not fitted; so do those
// after the first config::kNumFittedFrameworkParams (batch norm's measured rates) always.
config::FrameworkModelParams FitFrameworkParams(const std::vector<GpuCase>& cases,
                                                const config::FrameworkModelParams& start,
                                                int evaluations = 3000,
                                                const std::vector<std::string>& held = {});
double FrameworkObjective(const std::vector<GpuCase>& cases,
                          const config::FrameworkModelParams& fp);

}  // namespace poseidon::calibration
