#include "calibration/gpu_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "calibration/stats.h"
#include "config/compute_loader.h"
#include "config/model_loader.h"
#include "config/yaml_reader.h"
#include "core/types.h"
#include "cost/compute_model.h"
#include "cost/framework_model.h"
#include "cost/gpu_kernel_model.h"

namespace poseidon::calibration {
namespace {

using config::FrameworkModelParams;
using config::KernelModelParams;
constexpr int kN = config::kNumKernelParams;
using Vec = std::array<double, kN>;

double Logit(double x) { return std::log(x / (1 - x)); }
double Logistic(double y) { return 1 / (1 + std::exp(-y)); }

// Unbounded coordinates <-> constants (the order of config::kKernelParamNames).
Vec ToCoords(const KernelModelParams& p) {
  return {Logit(std::min(p.gemm_efficiency, 0.999)),
          Logit(std::clamp(p.tile_alpha / 2, 1e-3, 0.999)),
          Logit(std::clamp((p.winograd_gain - 1) / 3, 1e-3, 0.999)),
          Logit(std::min(p.fft_efficiency, 0.999)),
          Logit(std::min(p.memory_efficiency, 0.999)),
          std::log(std::max(p.launch_us, 1e-3)),
          Logit(std::min(p.kepler_efficiency, 0.999))};
}

KernelModelParams FromCoords(const Vec& y) {
  KernelModelParams p;
  p.gemm_efficiency = Logistic(y[0]);
  p.tile_alpha = 2 * Logistic(y[1]);
  p.winograd_gain = 1 + 3 * Logistic(y[2]);
  p.fft_efficiency = Logistic(y[3]);
  p.memory_efficiency = Logistic(y[4]);
  p.launch_us = std::exp(y[5]);
  p.kepler_efficiency = Logistic(y[6]);
  return p;
}

struct Pred {
  double fwd_ms = 0, bwd_ms = 0;
  double iteration_ms = 0;  // the framework model: fwd + bwd + optimizer step + overhead
};

// A whole-iteration row priced by the framework model at its precision.
Pred PredictIteration(const GpuCase& c, const FrameworkModelParams& fp) {
  Pred out;
  for (const cost::LayerCost& cost :
       cost::FrameworkModelCosts(c.model, c.row.batch, c.device, fp)) {
    out.fwd_ms += cost.fwd.ns / 1e6;
    out.bwd_ms += cost.bwd.ns / 1e6;
  }
  out.iteration_ms = out.fwd_ms + out.bwd_ms +
                     (cost::OptimizerStepNs(c.model, c.device, fp) + fp.iteration_us * 1e3) / 1e6;
  return out;
}

Pred Predict(const GpuCase& c, const KernelModelParams& p, config::DeviceComputeModel kind,
             const FrameworkModelParams& fp) {
  if (kind == config::DeviceComputeModel::kFramework) return PredictIteration(c, fp);
  Pred out;
  if (kind == config::DeviceComputeModel::kRoofline) {
    config::DeviceSpec d = c.device;
    d.compute_model = config::DeviceComputeModel::kRoofline;
    cost::ComputeModel m = cost::ComputeModel::FromDevice(c.model, d, c.row.batch);
    out = {static_cast<double>(m.total_fwd_ns()) / 1e6,
           static_cast<double>(m.total_bwd_ns()) / 1e6};
    out.iteration_ms = out.fwd_ms + out.bwd_ms;
    return out;
  }
  for (const core::Layer& l : c.model.layers()) {
    const cost::LayerCost cost = cost::CudnnLayerCost(l, c.row.batch, c.device, p);
    out.fwd_ms += cost.fwd.ns / 1e6;
    out.bwd_ms += cost.bwd.ns / 1e6;
  }
  out.iteration_ms = out.fwd_ms + out.bwd_ms;
  return out;
}

// The fitted constants' coordinates (config::kNumFittedFrameworkParams); the measured ones
// (batch norm's rates) ride along from the start.
using FwVec = std::array<double, config::kNumFittedFrameworkParams>;

// The first three fitted constants are fractions (logit coordinates); the rest are positive
// (log coordinates).
constexpr int kNumFractionParams = 3;

FwVec ToFwCoords(const FrameworkModelParams& p) {
  FrameworkModelParams q = p;
  FwVec y{};
  for (int i = 0; i < config::kNumFittedFrameworkParams; ++i) {
    const double v = *config::FrameworkParamField(q, i);
    y[i] = i < kNumFractionParams ? Logit(std::min(v, 0.999)) : std::log(std::max(v, 1e-3));
  }
  return y;
}

FrameworkModelParams FromFwCoords(const FwVec& y, const FrameworkModelParams& measured) {
  FrameworkModelParams p = measured;
  for (int i = 0; i < config::kNumFittedFrameworkParams; ++i) {
    *config::FrameworkParamField(p, i) = i < kNumFractionParams ? Logistic(y[i]) : std::exp(y[i]);
  }
  return p;
}

// Nelder-Mead (standard coefficients) over N unbounded coordinates from `start`, restarted from
// its best point while evaluations last: the restarts undo the simplex collapsing early in a
// narrow valley. Deterministic.
template <int N, typename F>
std::array<double, N> Minimize(const F& f, const std::array<double, N>& start, int evaluations) {
  using Vec = std::array<double, N>;
  Vec best = start;
  double best_f = f(best);
  int used = 1;
  while (used + N + 1 < evaluations) {
    std::array<Vec, N + 1> x;
    std::array<double, N + 1> fx;
    x[0] = best;
    fx[0] = best_f;
    for (int i = 0; i < N; ++i) {
      x[i + 1] = best;
      x[i + 1][i] += 0.5;
      fx[i + 1] = f(x[i + 1]);
      ++used;
    }
    const double before = best_f;
    for (int iter = 0; iter < 400 && used < evaluations; ++iter) {
      std::array<int, N + 1> order;
      for (int i = 0; i <= N; ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&fx](int a, int b) { return fx[a] < fx[b]; });
      const int lo = order[0], hi = order[N], second = order[N - 1];
      Vec centroid{};
      for (int i = 0; i <= N; ++i) {
        if (i == hi) continue;
        for (int j = 0; j < N; ++j) centroid[j] += x[i][j] / N;
      }
      auto along = [&](double t) {
        Vec v;
        for (int j = 0; j < N; ++j) v[j] = centroid[j] + t * (x[hi][j] - centroid[j]);
        return v;
      };
      const Vec r = along(-1);
      const double fr = f(r);
      ++used;
      if (fr < fx[lo]) {
        const Vec e = along(-2);
        const double fe = f(e);
        ++used;
        if (fe < fr) x[hi] = e, fx[hi] = fe;
        else x[hi] = r, fx[hi] = fr;
      } else if (fr < fx[second]) {
        x[hi] = r, fx[hi] = fr;
      } else {
        const Vec k = along(fr < fx[hi] ? -0.5 : 0.5);
        const double fk = f(k);
        ++used;
        if (fk < std::min(fr, fx[hi])) {
          x[hi] = k, fx[hi] = fk;
        } else {
          for (int i = 0; i <= N; ++i) {
            if (i == lo) continue;
            for (int j = 0; j < N; ++j) x[i][j] = x[lo][j] + 0.5 * (x[i][j] - x[lo][j]);
            fx[i] = f(x[i]);
            ++used;
          }
        }
      }
    }
    for (int i = 0; i <= N; ++i) {
      if (fx[i] < best_f) best_f = fx[i], best = x[i];
    }
    if (before - best_f < 1e-9 * (1 + before)) break;
  }
  return best;
}


}  // namespace

std::vector<GpuCase> LoadGpuCases(const config::PublishedTimings& timings,
                                  const std::string& data_dir) {
  namespace fs = std::filesystem;
  std::vector<GpuCase> cases;
  for (const config::PublishedTiming& row : timings.rows) {
    std::string model_file;
    try {
      model_file = config::FindModelFile(row.model, (fs::path(data_dir) / "models").string());
    } catch (const config::ConfigError& e) {
      config::FailAt(row.loc, fmt::format("row's model: {}", e.what()));
    }
    core::ModelSpec spec = config::LoadModelFile(model_file);
    if (row.input > 0) spec.input_h = spec.input_w = row.input;
    if (row.tokens > 0 && !config::SetSequenceLength(&spec, row.tokens)) {
      config::FailAt(row.loc, fmt::format("'tokens' applies to a model of token ids or "
                                          "sequences; '{}' takes images",
                                          row.model));
    }
    core::BuildOptions options;
    options.without_groups = row.without;
    core::Model model = [&] {
      try {
        return core::Model::Build(spec, options);
      } catch (const core::ModelError& e) {
        config::FailAt(row.loc, fmt::format("model '{}' at input {}: {}", row.model, row.input,
                                            e.what()));
      }
    }();
    const std::string device_file =
        config::FindDeviceFile(row.device, (fs::path(data_dir) / "devices").string(), row.loc);
    config::DeviceSpec device = config::LoadDeviceFile(device_file);
    if (!row.library.empty()) {
      // The algorithms of the cuDNN the row was measured with.
      device.cudnn_version = config::ParseMajorMinor(row.library);
      if (device.cudnn_version == 0) {
        config::FailAt(row.loc, fmt::format("cudnn '{}' is not MAJOR.MINOR[.PATCH]; write the "
                                            "version as published, for example \"5.1.05\"",
                                            row.library));
      }
    }
    if (row.iteration_ms > 0) {
      device.precision = row.precision;
      // The framework ran fp32 work as TF32 on Ampere and later (the file says so).
      if (timings.fp32_runs_tf32 && row.precision == config::Precision::kFp32 &&
          device.tensor_flops.count(config::Precision::kTf32)) {
        device.precision = config::Precision::kTf32;
      }
      device.optimizer = row.optimizer;
      device.memory_format = row.memory_format;
      device.batchnorm_fusion = row.batchnorm_fusion;
      device.cuda_version = row.cuda_version;
      std::string why = config::FrameworkFiguresMissing(device);
      if (why.empty()) why = config::PrecisionUnsupported(device, device.precision);
      if (why.empty()) why = config::CudaVersionUnsupported(device);
      if (!why.empty()) config::FailAt(row.loc, why);
    }
    cases.push_back({row, std::move(model), std::move(device)});
  }
  return cases;
}

std::vector<CaseError> EvaluateCases(const std::vector<GpuCase>& cases,
                                     const KernelModelParams& p,
                                     config::DeviceComputeModel kind,
                                     const FrameworkModelParams& fp) {
  std::vector<CaseError> out;
  for (const GpuCase& c : cases) {
    // A whole-iteration row: the framework model, or (to compare) another model's fwd + bwd.
    const bool iteration = c.row.iteration_ms > 0;
    if (!iteration && kind == config::DeviceComputeModel::kFramework) continue;
    const Pred pr = Predict(c, p, kind, fp);
    CaseError e;
    e.c = &c;
    if (iteration) {
      e.fwd_ms = pr.fwd_ms;
      e.bwd_ms = pr.bwd_ms;
      e.iteration_ms = pr.iteration_ms;
      e.total_err = pr.iteration_ms / c.row.iteration_ms - 1;
      out.push_back(e);
      continue;
    }
    e.fwd_ms = pr.fwd_ms;
    e.bwd_ms = pr.bwd_ms;
    e.fwd_err = pr.fwd_ms / c.row.fwd_ms - 1;
    e.bwd_err = pr.bwd_ms / c.row.bwd_ms - 1;
    e.total_err = (pr.fwd_ms + pr.bwd_ms) / (c.row.fwd_ms + c.row.bwd_ms) - 1;
    out.push_back(e);
  }
  return out;
}

ErrorStats Stats(const std::vector<CaseError>& errors, bool fit_rows, int which) {
  std::vector<double> abs;
  for (const CaseError& e : errors) {
    if (e.c->row.fit != fit_rows) continue;
    const double v = which == 0 ? e.total_err : which == 1 ? e.fwd_err : e.bwd_err;
    abs.push_back(std::abs(v));
  }
  ErrorStats s;
  s.rows = static_cast<int>(abs.size());
  if (abs.empty()) return s;
  s.median_abs = Percentile(abs, 0.5);
  s.max_abs = *std::max_element(abs.begin(), abs.end());
  return s;
}

double FrameworkObjective(const std::vector<GpuCase>& cases, const FrameworkModelParams& fp) {
  double sum = 0;
  for (const GpuCase& c : cases) {
    if (!c.row.fit || c.row.iteration_ms <= 0) continue;
    sum += std::pow(std::log(PredictIteration(c, fp).iteration_ms / c.row.iteration_ms), 2);
  }
  return sum;
}

double FitObjective(const std::vector<GpuCase>& cases, const KernelModelParams& p) {
  double sum = 0;
  for (const GpuCase& c : cases) {
    if (!c.row.fit || c.row.iteration_ms > 0) continue;
    const Pred pr = Predict(c, p, config::DeviceComputeModel::kCudnn, {});
    sum += std::pow(std::log(pr.fwd_ms / c.row.fwd_ms), 2) +
           std::pow(std::log(pr.bwd_ms / c.row.bwd_ms), 2);
  }
  return sum;
}

KernelModelParams FitKernelParams(const std::vector<GpuCase>& cases,
                                  const KernelModelParams& start, int evaluations) {
  POSEIDON_CHECK(evaluations > 0) << evaluations;
  auto f = [&cases](const Vec& y) { return FitObjective(cases, FromCoords(y)); };
  return FromCoords(Minimize<kN>(f, ToCoords(start), evaluations));
}

FrameworkModelParams FitFrameworkParams(const std::vector<GpuCase>& cases,
                                        const FrameworkModelParams& start, int evaluations,
                                        const std::vector<std::string>& held) {
  POSEIDON_CHECK(evaluations > 0) << evaluations;
  std::vector<int> fixed;
  for (const std::string& name : held) {
    const int index = config::FrameworkParamIndex(name);
    POSEIDON_CHECK(index >= 0) << "unknown framework constant " << name;
    fixed.push_back(index);
  }
  // A held constant is start's, whatever the simplex does along its coordinate.
  FrameworkModelParams held_values = start;
  auto params = [&](const FwVec& y) {
    FrameworkModelParams p = FromFwCoords(y, held_values);
    for (int i : fixed) {
      *config::FrameworkParamField(p, i) = *config::FrameworkParamField(held_values, i);
    }
    return p;
  };
  auto f = [&](const FwVec& y) { return FrameworkObjective(cases, params(y)); };
  // The objective has kinks (a kernel's time is a max of its dispatch and its work, a GEMM the
  // faster of two plans), where one simplex can stall: four fixed starts (the given one, and it
  // with the rates high or low and the fixed costs small or large), the best result kept.
  FwVec best{};
  double best_f = 0;
  for (int s = 0; s < 4; ++s) {
    FrameworkModelParams from = start;
    if (s & 1) {
      from.tensor_efficiency = from.gemm_efficiency = 0.9;
      from.memory_efficiency = 0.6;
    }
    if (s & 2) from.launch_us = from.dispatch_us = 5, from.iteration_us = 100;
    const FwVec y = Minimize<config::kNumFittedFrameworkParams>(f, ToFwCoords(from), evaluations);
    const double fy = f(y);
    if (s == 0 || fy < best_f) best = y, best_f = fy;
  }
  return params(best);
}

}  // namespace poseidon::calibration
