#include "apps/poseidon/gpu_model_command.h"

#include <fstream>
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
#include "cost/gpu_kernel_model.h"

namespace poseidon::app {

struct GpuModelCommands {
  const std::string* data_dir = nullptr;
  CLI::App* check = nullptr;
  CLI::App* fit = nullptr;
  CLI::App* show = nullptr;
  CLI::App* compare = nullptr;
  std::string profile;
  std::string file;
  std::string compute_model = "cudnn";
  bool csv = false;
  std::string set = "all";
  int evaluations = 4000;
  std::string output;
  std::string model, device;
  std::vector<std::string> without;
  int64_t batch = 0;
};

namespace {

std::string MeasurementsFile(const GpuModelCommands& c) {
  return c.file.empty() ? *c.data_dir + "/devices/measurements/cnn_benchmarks.yaml" : c.file;
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

int Check(const GpuModelCommands& c) {
  const std::string file = MeasurementsFile(c);
  const config::PublishedTimings t = config::LoadPublishedTimings(file);
  const std::vector<calibration::GpuCase> cases = calibration::LoadGpuCases(t, *c.data_dir);
  const auto kind = c.compute_model == "roofline" ? config::DeviceComputeModel::kRoofline
                                                  : config::DeviceComputeModel::kCudnn;
  std::vector<calibration::GpuCase> chosen;
  for (const auto& gc : cases) {
    if (c.set == "all" || (c.set == "fit") == gc.row.fit) chosen.push_back(gc);
  }
  const auto errors = calibration::EvaluateCases(chosen, cost::FittedKernelParams(), kind);
  std::ostream& out = std::cout;
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
    return 0;
  }
  out << fmt::format("{} compute model against {}\nsource: {}\n", c.compute_model, file,
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
  return 0;
}

int Fit(const GpuModelCommands& c) {
  const std::string file = MeasurementsFile(c);
  const config::PublishedTimings t = config::LoadPublishedTimings(file);
  const std::vector<calibration::GpuCase> cases = calibration::LoadGpuCases(t, *c.data_dir);
  const config::KernelModelParams start{};  // config/specs.h defaults: a fixed start
  config::KernelModelParams p = calibration::FitKernelParams(cases, start, c.evaluations);
  std::string yaml = fmt::format("# poseidon gpu-model fit {} --evaluations {}\n# objective {:.6g} "
                                 "(start {:.6g}); fit rows only\nkernel_model:\n",
                                 file, c.evaluations, calibration::FitObjective(cases, p),
                                 calibration::FitObjective(cases, start));
  for (int i = 0; i < config::kNumKernelParams; ++i) {
    yaml += fmt::format("  {}: {:.6g}\n", config::kKernelParamNames[i],
                        *config::KernelParamField(p, i));
  }
  std::cout << yaml;
  std::vector<calibration::GpuCase> fit_only;
  for (const auto& gc : cases) {
    if (gc.row.fit) fit_only.push_back(gc);
  }
  PrintStats(calibration::EvaluateCases(fit_only, p, config::DeviceComputeModel::kCudnn), true,
             std::cout);
  if (!c.output.empty()) {
    std::ofstream f(c.output);
    if (!(f << yaml) || !f.flush()) {
      throw config::ConfigError(fmt::format("{}: error: cannot write file; check the folder "
                                            "exists and is writable",
                                            c.output));
    }
  }
  return 0;
}

int Show(const GpuModelCommands& c) {
  const std::string path = config::FindModelFile(c.model, *c.data_dir + "/models");
  core::BuildOptions options;
  options.without_groups = std::set<std::string>(c.without.begin(), c.without.end());
  const core::Model m = core::Model::Build(config::LoadModelFile(path), options);
  const config::DeviceSpec d =
      config::LoadDeviceFile(config::FindDeviceFile(c.device, *c.data_dir + "/devices"));
  const config::KernelModelParams p = cost::KernelParamsFor(d);
  std::cout << fmt::format("{} on {} ({}), batch {}, cudnn compute model\n", m.name(), d.name,
                           d.description, c.batch);
  std::cout << fmt::format("{:<28} {:<12} {:<14} {:>10} {:<14} {:>10} {:>7}\n", "layer", "type",
                           "fwd algo", "fwd_ms", "bwd algo", "bwd_ms", "kernels");
  double fwd = 0, bwd = 0;
  for (const core::Layer& l : m.layers()) {
    const cost::LayerCost cost = cost::CudnnLayerCost(l, c.batch, d, p);
    fwd += cost.fwd.ns;
    bwd += cost.bwd.ns;
    std::cout << fmt::format("{:<28} {:<12} {:<14} {:>10.3f} {:<14} {:>10.3f} {:>7}\n", l.name,
                             core::LayerKindName(l.kind), cost::ConvAlgoName(cost.fwd.algo),
                             cost.fwd.ns / 1e6, cost::ConvAlgoName(cost.bwd.algo),
                             cost.bwd.ns / 1e6, cost.fwd.kernels + cost.bwd.kernels);
  }
  std::cout << fmt::format("total: forward {:.2f} ms, backward {:.2f} ms\n", fwd / 1e6, bwd / 1e6);
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
      "gpu-model", "the cudnn GPU compute model: check it against published timings, fit it, "
                   "show what it picks per layer");
  g->require_subcommand(1);
  c->check = g->add_subcommand("check", "predicted against published forward/backward times, "
                                        "per row and per set (fit / held out)");
  c->check->add_option("file", c->file, "measurement file (default: "
                                        "DATA_DIR/devices/measurements/cnn_benchmarks.yaml)");
  c->check->add_option("--compute-model", c->compute_model, "cudnn or roofline")
      ->check(CLI::IsMember({"cudnn", "roofline"}))
      ->capture_default_str();
  c->check->add_flag("--csv", c->csv, "one CSV row per measurement");
  c->check->add_option("--set", c->set, "rows to report: all, fit or heldout")
      ->check(CLI::IsMember({"all", "fit", "heldout"}))
      ->capture_default_str();
  c->fit = g->add_subcommand("fit", "fit the model's constants to the rows marked `set: fit`");
  c->fit->add_option("file", c->file, "measurement file (default as for check)");
  c->fit->add_option("--evaluations", c->evaluations, "objective evaluations at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->fit->add_option("-o,--output", c->output, "also write the kernel_model mapping here");
  c->show = g->add_subcommand("show", "per layer: the algorithm picked and the time, forward and "
                                      "backward");
  c->show->add_option("model", c->model, "model name or file")->required();
  c->show->add_option("--device", c->device, "device name or file")->required();
  c->show->add_option("--batch", c->batch, "images per pass")
      ->required()
      ->check(CLI::PositiveNumber);
  c->show->add_option("--without", c->without, "groups of the model to leave out");
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
