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
#include "cost/gpu_kernel_model.h"

namespace poseidon::calibration {
namespace {

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
};

Pred Predict(const GpuCase& c, const KernelModelParams& p, config::DeviceComputeModel kind) {
  Pred out;
  if (kind == config::DeviceComputeModel::kRoofline) {
    config::DeviceSpec d = c.device;
    d.compute_model = config::DeviceComputeModel::kRoofline;
    cost::ComputeModel m = cost::ComputeModel::FromDevice(c.model, d, c.row.batch);
    return {static_cast<double>(m.total_fwd_ns()) / 1e6,
            static_cast<double>(m.total_bwd_ns()) / 1e6};
  }
  for (const core::Layer& l : c.model.layers()) {
    const cost::LayerCost cost = cost::CudnnLayerCost(l, c.row.batch, c.device, p);
    out.fwd_ms += cost.fwd.ns / 1e6;
    out.bwd_ms += cost.bwd.ns / 1e6;
  }
  return out;
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
      device.cudnn_version = config::ParseCudnnVersion(row.library);
      if (device.cudnn_version == 0) {
        config::FailAt(row.loc, fmt::format("cudnn '{}' is not MAJOR.MINOR[.PATCH]; write the "
                                            "version as published, for example \"5.1.05\"",
                                            row.library));
      }
    }
    cases.push_back({row, std::move(model), std::move(device)});
  }
  return cases;
}

std::vector<CaseError> EvaluateCases(const std::vector<GpuCase>& cases,
                                     const KernelModelParams& p,
                                     config::DeviceComputeModel kind) {
  std::vector<CaseError> out;
  for (const GpuCase& c : cases) {
    const Pred pr = Predict(c, p, kind);
    CaseError e;
    e.c = &c;
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

double FitObjective(const std::vector<GpuCase>& cases, const KernelModelParams& p) {
  double sum = 0;
  for (const GpuCase& c : cases) {
    if (!c.row.fit) continue;
    const Pred pr = Predict(c, p, config::DeviceComputeModel::kCudnn);
    sum += std::pow(std::log(pr.fwd_ms / c.row.fwd_ms), 2) +
           std::pow(std::log(pr.bwd_ms / c.row.bwd_ms), 2);
  }
  return sum;
}

KernelModelParams FitKernelParams(const std::vector<GpuCase>& cases,
                                  const KernelModelParams& start, int evaluations) {
  POSEIDON_CHECK(evaluations > 0) << evaluations;
  auto f = [&cases](const Vec& y) { return FitObjective(cases, FromCoords(y)); };
  // Nelder-Mead (standard coefficients), restarted from its best point while evaluations last:
  // the restarts undo the simplex collapsing early in a narrow valley.
  Vec best = ToCoords(start);
  double best_f = f(best);
  int used = 1;
  while (used + kN + 1 < evaluations) {
    std::array<Vec, kN + 1> x;
    std::array<double, kN + 1> fx;
    x[0] = best;
    fx[0] = best_f;
    for (int i = 0; i < kN; ++i) {
      x[i + 1] = best;
      x[i + 1][i] += 0.5;
      fx[i + 1] = f(x[i + 1]);
      ++used;
    }
    const double before = best_f;
    for (int iter = 0; iter < 400 && used < evaluations; ++iter) {
      std::array<int, kN + 1> order;
      for (int i = 0; i <= kN; ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&fx](int a, int b) { return fx[a] < fx[b]; });
      const int lo = order[0], hi = order[kN], second = order[kN - 1];
      Vec centroid{};
      for (int i = 0; i <= kN; ++i) {
        if (i == hi) continue;
        for (int j = 0; j < kN; ++j) centroid[j] += x[i][j] / kN;
      }
      auto along = [&](double t) {
        Vec v;
        for (int j = 0; j < kN; ++j) v[j] = centroid[j] + t * (x[hi][j] - centroid[j]);
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
          for (int i = 0; i <= kN; ++i) {
            if (i == lo) continue;
            for (int j = 0; j < kN; ++j) x[i][j] = x[lo][j] + 0.5 * (x[i][j] - x[lo][j]);
            fx[i] = f(x[i]);
            ++used;
          }
        }
      }
    }
    for (int i = 0; i <= kN; ++i) {
      if (fx[i] < best_f) best_f = fx[i], best = x[i];
    }
    if (before - best_f < 1e-9 * (1 + before)) break;
  }
  return FromCoords(best);
}

}  // namespace poseidon::calibration
