#include "apps/poseidon/gpu_model_command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <iostream>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "calibration/gpu_fit.h"
#include "config/compute_loader.h"
#include "config/measurement_loader.h"
#include "config/model_loader.h"
#include "config/yaml_reader.h"
#include "core/model.h"
#include "cost/framework_model.h"
#include "cost/gpu_kernel_model.h"

namespace poseidon::app {

struct GpuModelCommands {
  const std::string* data_dir = nullptr;
  CLI::App* check = nullptr;
  CLI::App* fit = nullptr;
  CLI::App* show = nullptr;
  CLI::App* compare = nullptr;
  std::string profile;
  std::vector<std::string> files;
  std::string compute_model = "auto";
  std::string precision = "fp32";
  std::string optimizer = "sgd";
  std::string memory_format = "nchw";
  std::string batchnorm_fusion = "none";
  std::string cuda_version;  // empty: a current release
  bool csv = false;
  bool all_rows = false;
  std::vector<std::string> hold;  // NAME=VALUE: framework constants measured, not fitted
  std::string set = "all";
  int evaluations = 4000;
  std::string output;
  std::string model, device;
  std::vector<std::string> without;
  int64_t batch = 0;
  int64_t tokens = 0;  // show: 0 = the model file's sequence length
};

namespace {

std::string MeasurementsDir(const GpuModelCommands& c) {
  return *c.data_dir + "/devices/measurements";
}

// The files to read: those named, else by model: cnn_benchmarks.yaml for cudnn and roofline (its
// per-pass rows), every file of whole-iteration rows for framework, both for auto.
std::vector<std::string> MeasurementFiles(const GpuModelCommands& c) {
  if (!c.files.empty()) return c.files;
  std::vector<std::string> out;
  if (c.compute_model != "framework") out.push_back(MeasurementsDir(c) + "/cnn_benchmarks.yaml");
  if (c.compute_model == "framework" || c.compute_model == "auto") {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(MeasurementsDir(c))) {
      if (e.path().extension() != ".yaml") continue;
      const config::PublishedTimings t = config::LoadPublishedTimings(e.path().string());
      if (!t.rows.empty() && t.rows.front().iteration_ms > 0) names.push_back(e.path().string());
    }
    std::sort(names.begin(), names.end());
    out.insert(out.end(), names.begin(), names.end());
  }
  return out;
}

config::DeviceComputeModel KindFor(const std::string& name, bool iteration_rows) {
  if (name == "roofline") return config::DeviceComputeModel::kRoofline;
  if (name == "framework" || (name == "auto" && iteration_rows)) {
    return config::DeviceComputeModel::kFramework;
  }
  return config::DeviceComputeModel::kCudnn;
}

const char* KindName(config::DeviceComputeModel k) {
  return k == config::DeviceComputeModel::kRoofline    ? "roofline"
         : k == config::DeviceComputeModel::kFramework ? "framework"
                                                       : "cudnn";
}

std::string Pct(double e) { return fmt::format("{:+.1f}%", 100 * e); }

void PrintStats(const std::vector<calibration::CaseError>& errors, bool fit_rows,
                std::ostream& out) {
  const char* names[] = {"fwd+bwd", "forward", "backward"};
  for (int which = 0; which < 3; ++which) {
    const calibration::ErrorStats s = calibration::Stats(errors, fit_rows, which);
    if (s.rows == 0) continue;
    out << fmt::format("{:<8} rows {:>2}  {:<8}  median |error| {:5.1f}%  max {:5.1f}%\n",
                       fit_rows ? "fit" : "heldout", s.rows, names[which], 100 * s.median_abs,
                       100 * s.max_abs);
  }
}

// One file's per-pass rows (fwd_ms / bwd_ms) against the cudnn or roofline model.
void CheckPerPass(const GpuModelCommands& c, const std::string& file,
                  const config::PublishedTimings& t, const std::vector<calibration::GpuCase>& cases,
                  config::DeviceComputeModel kind, std::ostream& out) {
  const auto errors = calibration::EvaluateCases(cases, cost::FittedKernelParams(), kind);
  if (c.csv) {
    out << "set,model,device,cudnn,batch,fwd_ms,bwd_ms,pred_fwd_ms,pred_bwd_ms,fwd_err,bwd_err,"
           "total_err\n";
    for (const auto& e : errors) {
      const config::PublishedTiming& r = e.c->row;
      out << fmt::format("{},{},{},{},{},{},{},{:.3f},{:.3f},{:.4f},{:.4f},{:.4f}\n",
                         r.fit ? "fit" : "heldout", r.model, r.device, r.library, r.batch,
                         r.fwd_ms, r.bwd_ms, e.fwd_ms, e.bwd_ms, e.fwd_err, e.bwd_err,
                         e.total_err);
    }
    return;
  }
  out << fmt::format("{} compute model against {}\nsource: {}\n", KindName(kind), file,
                     t.source);
  out << fmt::format("{:<8} {:<10} {:<14} {:<7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}\n",
                     "set", "model", "device", "cudnn", "fwd_ms", "pred", "bwd_ms", "pred",
                     "fwd", "bwd", "total");
  for (const auto& e : errors) {
    const config::PublishedTiming& r = e.c->row;
    out << fmt::format("{:<8} {:<10} {:<14} {:<7} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>8} {:>8} "
                       "{:>8}\n",
                       r.fit ? "fit" : "heldout", r.model, r.device, r.library, r.fwd_ms, e.fwd_ms,
                       r.bwd_ms, e.bwd_ms, Pct(e.fwd_err), Pct(e.bwd_err), Pct(e.total_err));
  }
  PrintStats(errors, true, out);
  PrintStats(errors, false, out);
}

// The precision a whole-iteration row was priced at (tf32 where the file says fp32 ran as TF32).
std::string PricedPrecision(const calibration::GpuCase& gc) {
  const std::string p = config::PrecisionName(gc.device.precision);
  return gc.device.precision == gc.row.precision ? p : p + "*";
}

// |error| median and max of a group of rows.
std::string GroupStats(const std::vector<double>& errs) {
  if (errs.empty()) return "-";
  std::vector<double> a;
  for (double e : errs) a.push_back(std::abs(e));
  std::sort(a.begin(), a.end());
  const double median = a.size() % 2 ? a[a.size() / 2] : (a[a.size() / 2 - 1] + a[a.size() / 2]) / 2;
  return fmt::format("{:>3} rows  median {:5.1f}%  max {:5.1f}%", a.size(), 100 * median,
                     100 * a.back());
}

// Whole-iteration rows of every file, then the summaries: per set and precision, per set,
// precision and device, per set, precision and layout, per set and model.
void CheckIterations(const GpuModelCommands& c, const std::vector<std::string>& files,
                     config::DeviceComputeModel kind, std::ostream& out) {
  std::vector<std::vector<calibration::GpuCase>> all;
  std::vector<calibration::CaseError> errors;
  for (const std::string& file : files) {
    const config::PublishedTimings t = config::LoadPublishedTimings(file);
    all.push_back(calibration::LoadGpuCases(t, *c.data_dir));
  }
  for (const auto& cases : all) {
    for (const auto& e : calibration::EvaluateCases(cases, cost::FittedKernelParams(), kind)) {
      if (c.set == "all" || (c.set == "fit") == e.c->row.fit) errors.push_back(e);
    }
  }
  if (c.csv) {
    out << "set,file,model,device,precision,priced_as,batch,tokens,optimizer,memory_format,"
           "iteration_ms,"
           "pred_iteration_ms,pred_fwd_ms,pred_bwd_ms,error,cuda_version\n";
  } else {
    out << fmt::format("{} compute model against the whole-iteration rows of {} files\n",
                       KindName(kind), files.size());
    out << fmt::format("{:<8} {:<11} {:<14} {:<6} {:<4} {:>5} {:>5} {:>11} {:>11} {:>8}\n",
                       "set", "model", "device", "prec", "fmt", "batch", "tok", "iter_ms", "pred",
                       "error");
  }
  std::map<std::string, std::vector<double>> by_precision, by_device, by_layout, by_model;
  for (const auto& e : errors) {
    const config::PublishedTiming& r = e.c->row;
    const std::string set = r.fit ? "fit" : "heldout";
    const std::string priced = config::PrecisionName(e.c->device.precision);
    if (c.csv) {
      out << fmt::format("{},{},{},{},{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{:.4f},{}\n",
                         set, std::filesystem::path(r.loc.file).filename().string(), r.model,
                         r.device, config::PrecisionName(r.precision), priced, r.batch, r.tokens,
                         config::kOptimizerNames[static_cast<int>(r.optimizer)],
                         config::MemoryFormatName(r.memory_format), r.iteration_ms, e.iteration_ms,
                         e.fwd_ms, e.bwd_ms, e.total_err, config::MajorMinorName(r.cuda_version));
    } else {
      out << fmt::format("{:<8} {:<11} {:<14} {:<6} {:<4} {:>5} {:>5} {:>11.2f} {:>11.2f} {:>8}\n",
                         set, r.model, r.device, PricedPrecision(*e.c),
                         config::MemoryFormatName(r.memory_format), r.batch, r.tokens,
                         r.iteration_ms, e.iteration_ms, Pct(e.total_err));
    }
    by_precision[set + " " + priced].push_back(e.total_err);
    by_device[set + " " + priced + " " + r.device].push_back(e.total_err);
    by_layout[set + " " + priced + " " + config::MemoryFormatName(r.memory_format)].push_back(
        e.total_err);
    by_model[set + " " + r.model].push_back(e.total_err);
  }
  if (c.csv) return;
  out << "(* priced as tf32: the file says its framework ran fp32 work as TF32 there)\n";
  out << "\nper set and precision:\n";
  for (const auto& [k, v] : by_precision) out << fmt::format("  {:<30} {}\n", k, GroupStats(v));
  out << "per set, precision and device:\n";
  for (const auto& [k, v] : by_device) out << fmt::format("  {:<30} {}\n", k, GroupStats(v));
  out << "per set, precision and layout (memory_format; nchw where a file does not say):\n";
  for (const auto& [k, v] : by_layout) out << fmt::format("  {:<30} {}\n", k, GroupStats(v));
  out << "per set and model:\n";
  for (const auto& [k, v] : by_model) out << fmt::format("  {:<30} {}\n", k, GroupStats(v));
  for (const bool fit : {true, false}) {
    std::vector<double> v;
    for (const auto& e : errors) {
      if (e.c->row.fit == fit) v.push_back(e.total_err);
    }
    if (!v.empty()) {
      out << fmt::format("{:<8} all precisions: {}\n", fit ? "fit" : "heldout", GroupStats(v));
    }
  }
}

int Check(const GpuModelCommands& c) {
  std::vector<std::string> iteration_files;
  bool first = true;
  for (const std::string& file : MeasurementFiles(c)) {
    const config::PublishedTimings t = config::LoadPublishedTimings(file);
    const bool iteration = !t.rows.empty() && t.rows.front().iteration_ms > 0;
    const config::DeviceComputeModel kind = KindFor(c.compute_model, iteration);
    if (kind == config::DeviceComputeModel::kFramework || (iteration && c.compute_model != "auto")) {
      if (iteration) iteration_files.push_back(file);
      continue;
    }
    if (iteration) continue;
    std::vector<calibration::GpuCase> chosen;
    for (auto& gc : calibration::LoadGpuCases(t, *c.data_dir)) {
      if (c.set == "all" || (c.set == "fit") == gc.row.fit) chosen.push_back(std::move(gc));
    }
    if (!first) std::cout << "\n";
    first = false;
    CheckPerPass(c, file, t, chosen, kind, std::cout);
  }
  if (!iteration_files.empty()) {
    if (!first) std::cout << "\n";
    CheckIterations(c, iteration_files, KindFor(c.compute_model, true), std::cout);
  }
  return 0;
}

// Every row of the files, resolved (models and devices).
std::vector<calibration::GpuCase> LoadAllCases(const GpuModelCommands& c,
                                               const std::vector<std::string>& files) {
  std::vector<calibration::GpuCase> cases;
  for (const std::string& file : files) {
    for (auto& gc : calibration::LoadGpuCases(config::LoadPublishedTimings(file), *c.data_dir)) {
      cases.push_back(std::move(gc));
    }
  }
  return cases;
}

void WriteFitOutput(const GpuModelCommands& c, const std::string& yaml) {
  std::cout << yaml;
  if (c.output.empty()) return;
  std::ofstream f(c.output);
  if (!(f << yaml) || !f.flush()) {
    throw config::ConfigError(fmt::format("{}: error: cannot write file; check the folder "
                                          "exists and is writable",
                                          c.output));
  }
}

int Fit(const GpuModelCommands& c) {
  const std::vector<std::string> files =
      c.compute_model == "framework" || !c.files.empty()
          ? MeasurementFiles(c)
          : std::vector<std::string>{MeasurementsDir(c) + "/cnn_benchmarks.yaml"};
  std::string names;
  for (const auto& f : files) names += " " + f;
  if (c.compute_model == "framework") {
    std::vector<calibration::GpuCase> cases = LoadAllCases(c, files);
    if (c.all_rows) {
      for (auto& gc : cases) gc.row.fit = true;  // rows an earlier evaluation has seen
    }
    config::FrameworkModelParams start{};  // config/specs.h defaults: a fixed start
    std::vector<std::string> held;
    std::string flags = c.all_rows ? " --all-rows" : "";
    for (const std::string& kv : c.hold) {
      const size_t eq = kv.find('=');
      const int index = eq == std::string::npos ? -1 : config::FrameworkParamIndex(kv.substr(0, eq));
      double v = 0;
      try {
        if (index >= 0) v = std::stod(kv.substr(eq + 1));
      } catch (const std::exception&) {
        v = 0;
      }
      if (index < 0 || !(v > 0)) {
        throw config::ConfigError(fmt::format(
            "--hold {}: give NAME=VALUE with a framework constant's name (tensor_efficiency, "
            "..., bn_native_nhwc) and a value > 0",
            kv));
      }
      *config::FrameworkParamField(start, index) = v;
      held.push_back(config::kFrameworkParamNames[index]);
      flags += " --hold " + kv;
    }
    config::FrameworkModelParams p =
        calibration::FitFrameworkParams(cases, start, c.evaluations, held);
    std::string yaml = fmt::format(
        "# poseidon gpu-model fit --compute-model framework --evaluations {}{}\n# objective "
        "{:.6g} (start {:.6g}); {}\nframework_model:\n",
        c.evaluations, flags + names, calibration::FrameworkObjective(cases, p),
        calibration::FrameworkObjective(cases, start),
        c.all_rows ? "every row of the files" : "fit rows only");
    for (int i = 0; i < config::kNumFrameworkParams; ++i) {
      yaml += fmt::format("  {}: {:.6g}\n", config::kFrameworkParamNames[i],
                          *config::FrameworkParamField(p, i));
    }
    WriteFitOutput(c, yaml);
    return 0;
  }
  const std::vector<calibration::GpuCase> cases = LoadAllCases(c, files);
  const config::KernelModelParams start{};  // config/specs.h defaults: a fixed start
  config::KernelModelParams p = calibration::FitKernelParams(cases, start, c.evaluations);
  std::string yaml = fmt::format("# poseidon gpu-model fit{} --evaluations {}\n# objective {:.6g} "
                                 "(start {:.6g}); fit rows only\nkernel_model:\n",
                                 names, c.evaluations, calibration::FitObjective(cases, p),
                                 calibration::FitObjective(cases, start));
  for (int i = 0; i < config::kNumKernelParams; ++i) {
    yaml += fmt::format("  {}: {:.6g}\n", config::kKernelParamNames[i],
                        *config::KernelParamField(p, i));
  }
  WriteFitOutput(c, yaml);
  std::vector<calibration::GpuCase> fit_only;
  for (const auto& gc : cases) {
    if (gc.row.fit) fit_only.push_back(gc);
  }
  PrintStats(calibration::EvaluateCases(fit_only, p, config::DeviceComputeModel::kCudnn), true,
             std::cout);
  return 0;
}

int Show(const GpuModelCommands& c) {
  const std::string path = config::FindModelFile(c.model, *c.data_dir + "/models");
  core::BuildOptions options;
  options.without_groups = std::set<std::string>(c.without.begin(), c.without.end());
  core::ModelSpec spec = config::LoadModelFile(path);
  if (c.tokens > 0 && !config::SetSequenceLength(&spec, c.tokens)) {
    throw config::ConfigError(
        fmt::format("--tokens applies to a model of token ids or sequences; "
                    "'{}' takes images",
                    c.model));
  }
  const core::Model m = core::Model::Build(spec, options);
  const std::string device_file = config::FindDeviceFile(c.device, *c.data_dir + "/devices");
  config::DeviceSpec d = config::LoadDeviceFile(device_file);
  // A precision other than the default, or --compute-model framework, is the framework model.
  const bool framework = c.compute_model == "framework" ||
                         (c.compute_model == "auto" && (c.precision != "fp32" ||
                                                        d.compute_model ==
                                                            config::DeviceComputeModel::kFramework));
  if (!framework && c.precision != "fp32") {
    throw config::ConfigError(fmt::format("--precision {} is priced by the framework compute "
                                          "model, not {}; leave out --compute-model or give "
                                          "--compute-model framework",
                                          c.precision, c.compute_model));
  }
  if (!framework && !c.cuda_version.empty()) {
    throw config::ConfigError(
        "--cuda-version is read by the framework compute model; give "
        "--precision or --compute-model framework");
  }
  if (framework) {
    d.precision = config::PrecisionFromName(c.precision);
    d.optimizer = config::OptimizerFromName(c.optimizer);
    d.memory_format = config::MemoryFormatFromName(c.memory_format);
    d.batchnorm_fusion = config::BatchNormFusionFromName(c.batchnorm_fusion);
    if (!c.cuda_version.empty()) {
      d.cuda_version = config::ParseMajorMinor(c.cuda_version);
      if (d.cuda_version == 0) {
        throw config::ConfigError(
            fmt::format("--cuda-version '{}' is not a CUDA release "
                        "MAJOR.MINOR (for example 10.2 or 11.8)",
                        c.cuda_version));
      }
    }
    std::string why = config::FrameworkFiguresMissing(d);
    if (why.empty()) why = config::PrecisionUnsupported(d, d.precision);
    if (why.empty()) why = config::CudaVersionUnsupported(d);
    if (!why.empty()) throw config::ConfigError(fmt::format("{}: error: {}", device_file, why));
  }
  const config::KernelModelParams p = cost::KernelParamsFor(d);
  const config::FrameworkModelParams fp = cost::FrameworkParamsFor(d);
  std::cout << fmt::format(
      "{} on {} ({}), batch {}, {}\n", m.name(), d.name, d.description, c.batch,
      framework ? fmt::format(
                      "framework compute model, precision {}, {}{}{}",
                      config::PrecisionName(d.precision), config::MemoryFormatName(d.memory_format),
                      d.batchnorm_fusion == config::BatchNormFusion::kNone
                          ? ""
                          : std::string(", batch norm fused: ") +
                                config::BatchNormFusionName(d.batchnorm_fusion),
                      d.cuda_version == 0 ? "" : ", CUDA " + config::MajorMinorName(d.cuda_version))
                : std::string("cudnn compute model"));
  std::cout << fmt::format("{:<28} {:<12} {:<18} {:>10} {:<18} {:>10} {:>7}\n", "layer", "type",
                           "fwd kernel", "fwd_ms", "bwd kernel", "bwd_ms", "kernels");
  double fwd = 0, bwd = 0, gemm = 0, gpu = 0;
  // The framework model says where a pass's GEMM-like kernels ran: tensor cores, CUDA cores, or
  // some of each ("tc 4/6").
  auto choice = [framework](const cost::PassCost& pass) {
    std::string name = pass.algo == cost::ConvAlgo::kNone && pass.gemm_kernels > 0
                           ? std::string("gemm")
                           : std::string(cost::ConvAlgoName(pass.algo));
    if (!framework || pass.gemm_kernels == 0) return name;
    if (pass.tensor_kernels == pass.gemm_kernels) return name + " tc";
    if (pass.tensor_kernels == 0) return name + " cuda";
    return fmt::format("{} tc {}/{}", name, pass.tensor_kernels, pass.gemm_kernels);
  };
  const std::vector<cost::LayerCost> fused =
      framework ? cost::FrameworkModelCosts(m, c.batch, d, fp) : std::vector<cost::LayerCost>{};
  for (const core::Layer& l : m.layers()) {
    const cost::LayerCost cost =
        framework ? fused[static_cast<size_t>(l.id)] : cost::CudnnLayerCost(l, c.batch, d, p);
    fwd += cost.fwd.ns;
    bwd += cost.bwd.ns;
    gemm += cost.fwd.gemm_ns + cost.bwd.gemm_ns;
    gpu += cost.fwd.kernel_ns + cost.bwd.kernel_ns;
    std::cout << fmt::format("{:<28} {:<12} {:<18} {:>10.3f} {:<18} {:>10.3f} {:>7}\n", l.name,
                             core::LayerKindName(l.kind), choice(cost.fwd), cost.fwd.ns / 1e6,
                             choice(cost.bwd), cost.bwd.ns / 1e6,
                             cost.fwd.kernels + cost.bwd.kernels);
  }
  std::cout << fmt::format("total: forward {:.2f} ms, backward {:.2f} ms\n", fwd / 1e6, bwd / 1e6);
  if (framework) {
    const double opt = cost::OptimizerStepNs(m, d, fp);
    const double iter = fwd + bwd + opt + fp.iteration_us * 1e3;
    std::cout << fmt::format("optimizer step ({}) {:.2f} ms, framework overhead {:.2f} ms; "
                             "iteration {:.2f} ms, {:.1f} samples/s\n",
                             config::kOptimizerNames[static_cast<int>(d.optimizer)], opt / 1e6,
                             fp.iteration_us / 1e3, iter / 1e6,
                             static_cast<double>(c.batch) * 1e9 / iter);
    // The GPU's kernel time by kind, as a kernel profile classes it (the passes' longer CPU
    // dispatch aside): analysis/profile_vs_model.py reads this line.
    std::cout << fmt::format(
        "GPU kernels: GEMMs and convolutions {:.2f} ms, the rest {:.2f} ms, "
        "optimizer step {:.2f} ms\n",
        gemm / 1e6, (gpu - gemm) / 1e6, opt / 1e6);
  }
  return 0;
}

// A measured profile (poseidon calibrate --backend cuda) against the cudnn model for a device.
int Compare(const GpuModelCommands& c) {
  const config::ProfileSpec prof = config::LoadProfileFile(c.profile);
  const std::string path = config::FindModelFile(prof.model, *c.data_dir + "/models");
  const core::Model m = core::Model::Build(config::LoadModelFile(path));
  const config::DeviceSpec d =
      config::LoadDeviceFile(config::FindDeviceFile(c.device, *c.data_dir + "/devices"));
  const config::KernelModelParams p = cost::KernelParamsFor(d);
  std::ostream& out = std::cout;
  out << fmt::format("{} (batch {}, measured on {}) against the cudnn model for {}\n", prof.model,
                     prof.batch, prof.device, d.name);
  out << fmt::format("{:<28} {:<14} {:>10} {:>10} {:<14} {:>10} {:>10}\n", "layer", "fwd algo",
                     "fwd_ms", "model", "bwd algo", "bwd_ms", "model");
  double mf = 0, mb = 0, pf = 0, pb = 0;
  for (const core::Layer& l : m.layers()) {
    auto it = prof.layers.find(l.name);
    if (it == prof.layers.end()) {
      config::FailAt(prof.loc, fmt::format("profile {} has no times for layer '{}' of model '{}'; "
                                           "re-run `poseidon calibrate` for this model",
                                           c.profile, l.name, prof.model));
    }
    const cost::LayerCost cost = cost::CudnnLayerCost(l, prof.batch, d, p);
    mf += it->second.fwd_ms, mb += it->second.bwd_ms;
    pf += cost.fwd.ns / 1e6, pb += cost.bwd.ns / 1e6;
    out << fmt::format("{:<28} {:<14} {:>10.3f} {:>10.3f} {:<14} {:>10.3f} {:>10.3f}\n", l.name,
                       cost::ConvAlgoName(cost.fwd.algo), it->second.fwd_ms, cost.fwd.ns / 1e6,
                       cost::ConvAlgoName(cost.bwd.algo), it->second.bwd_ms, cost.bwd.ns / 1e6);
  }
  out << fmt::format("total: forward {:.3f} ms measured, {:.3f} model ({}); backward {:.3f} "
                     "measured, {:.3f} model ({}); fwd+bwd {}\n",
                     mf, pf, Pct(pf / mf - 1), mb, pb, Pct(pb / mb - 1),
                     Pct((pf + pb) / (mf + mb) - 1));
  return 0;
}

}  // namespace

std::shared_ptr<GpuModelCommands> AddGpuModelCommands(CLI::App& app, const std::string* data_dir) {
  auto c = std::make_shared<GpuModelCommands>();
  c->data_dir = data_dir;
  CLI::App* g = app.add_subcommand(
      "gpu-model", "the GPU compute models (cudnn, framework): check them against published "
                   "timings, fit them, show what they pick per layer");
  g->require_subcommand(1);
  c->check = g->add_subcommand("check", "predicted against published forward/backward times, "
                                        "per row and per set (fit / held out)");
  c->check->add_option("files", c->files,
                        "measurement files (default: DATA_DIR/devices/measurements/"
                        "cnn_benchmarks.yaml for cudnn and roofline, every file of "
                        "whole-iteration rows for framework, both for auto)");
  c->check->add_option("--compute-model", c->compute_model,
                       "auto (per-pass rows: cudnn; whole iterations: framework), cudnn, "
                       "roofline or framework")
      ->check(CLI::IsMember({"auto", "cudnn", "roofline", "framework"}))
      ->capture_default_str();
  c->check->add_flag("--csv", c->csv, "one CSV row per measurement");
  c->check->add_option("--set", c->set, "rows to report: all, fit or heldout")
      ->check(CLI::IsMember({"all", "fit", "heldout"}))
      ->capture_default_str();
  c->fit = g->add_subcommand("fit", "fit the model's constants to the rows marked `set: fit`");
  c->fit->add_option("files", c->files, "measurement files (default as for check)");
  c->fit->add_option("--compute-model", c->compute_model,
                     "the model whose constants to fit: cudnn (per-pass rows) or framework "
                     "(whole-iteration rows)")
      ->check(CLI::IsMember({"auto", "cudnn", "framework"}));
  c->fit->add_option("--evaluations", c->evaluations, "objective evaluations at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->fit->add_flag("--all-rows", c->all_rows,
                   "fit the framework model to every row of the files, held out or not (rows "
                   "that an earlier evaluation has seen; report the fit on a set measured after)");
  c->fit->add_option("--hold", c->hold,
                     "NAME=VALUE: a framework constant measured elsewhere, kept at VALUE (repeat)")
      ->allow_extra_args(false);
  c->fit->add_option("-o,--output", c->output, "also write the kernel_model mapping here");
  c->show = g->add_subcommand("show", "per layer: the algorithm picked and the time, forward and "
                                      "backward");
  c->show->add_option("model", c->model, "model name or file")->required();
  c->show->add_option("--device", c->device, "device name or file")->required();
  c->show->add_option("--batch", c->batch, "images per pass")
      ->required()
      ->check(CLI::PositiveNumber);
  c->show
      ->add_option("--tokens", c->tokens,
                   "a transformer's sequence length (default: its model file's)")
      ->check(CLI::PositiveNumber);
  c->show->add_option("--without", c->without, "groups of the model to leave out");
  c->show->add_option("--precision", c->precision,
                      "fp32, tf32, fp16 or bf16 (fp16/bf16: mixed precision); other than fp32 "
                      "means the framework compute model")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}))
      ->capture_default_str();
  c->show
      ->add_option("--optimizer", c->optimizer,
                   "the framework model's optimizer step: sgd, adam, adamw, rmsprop or lamb")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "rmsprop", "lamb"}))
      ->capture_default_str();
  c->show->add_option("--memory-format", c->memory_format,
                      "the framework model's activation layout: nchw or nhwc (channels_last)")
      ->check(CLI::IsMember({"nchw", "nhwc"}))
      ->capture_default_str();
  c->show
      ->add_option("--batchnorm-fusion", c->batchnorm_fusion,
                   "what the framework fuses into batch norm (NHWC, fp16/bf16): none, bn_relu "
                   "or bn_add_relu")
      ->check(CLI::IsMember({"none", "bn_relu", "bn_add_relu"}))
      ->capture_default_str();
  c->show->add_option("--cuda-version", c->cuda_version,
                      "the CUDA release of the framework's libraries (e.g. 10.2: cuBLAS 10 runs "
                      "unaligned GEMMs on CUDA cores); default a current one");
  c->show->add_option("--compute-model", c->compute_model,
                      "auto (the device file's, framework for a precision), cudnn or framework")
      ->check(CLI::IsMember({"auto", "cudnn", "framework"}))
      ->capture_default_str();
  c->compare = g->add_subcommand("compare", "a measured profile (calibrate --backend cuda) "
                                            "against the cudnn model, per layer");
  c->compare->add_option("profile", c->profile, "profile file")->required();
  c->compare->add_option("--device", c->device, "device name or file")->required();
  return c;
}

int RunGpuModelCommands(const GpuModelCommands& c) {
  if (c.check->parsed()) return Check(c);
  if (c.fit->parsed()) return Fit(c);
  if (c.show->parsed()) return Show(c);
  if (c.compare->parsed()) return Compare(c);
  return -1;
}

}  // namespace poseidon::app
