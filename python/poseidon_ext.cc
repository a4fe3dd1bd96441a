// python/poseidon_ext.cc: the `poseidon._ext` extension module, the C++ half of the Python
// package (python/poseidon/, docs/python.md). Each function calls the library functions the
// `poseidon` command-line program calls for the same subcommand and returns their result as
// text (the CLI's JSON or CSV, parsed by the Python half) or as plain Python values; no result
// is computed here.
//
//   import poseidon._ext as ext
//   text, _ = ext.simulate_json("scenarios/demo.yaml", ["cluster.workers=4"], True, False, None)
//
// The GIL is released while the simulator runs; a progress callback is called with the GIL held
// (from the sweep's worker threads too, one call at a time). An exception raised by the callback
// does not stop the run (the sweep's threads cannot be interrupted between points): it is
// re-raised once the run has ended. config::ConfigError becomes poseidon.ConfigError (a
// ValueError) and core::ModelError poseidon.ModelError (a ConfigError), each with the message the
// CLI prints after "poseidon: ".
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "apps/poseidon/models_command.h"
#include "apps/poseidon/plan_command.h"
#include "config/model_loader.h"
#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "core/model.h"
#include "sim/simulation.h"
#include "sim/sweep.h"

namespace py = pybind11;

namespace poseidon::python {
namespace {

// Raised (as poseidon.SimulationError) when a simulation deadlocks: the CLI's exit status 3.
class SimulationError : public std::runtime_error {
 public:
  explicit SimulationError(const std::string& msg) : std::runtime_error(msg) {}
};

// Wraps an optional Python callable for calls from C++ code running without the GIL. The first
// Python exception it raises is kept (later calls are skipped) and re-raised by Rethrow().
// Thread-safe: every call takes the GIL, which serialises them. Built and destroyed with the GIL.
class Callback {
 public:
  explicit Callback(py::object f) : f_(std::move(f)) {}
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;

  bool enabled() const { return !f_.is_none(); }

  template <typename... Args>
  void operator()(Args... args) {
    py::gil_scoped_acquire gil;
    if (error_) return;
    try {
      f_(args...);
    } catch (py::error_already_set& e) {
      error_.emplace(std::move(e));
    }
  }

  // Needs the GIL.
  void Rethrow() {
    if (error_) {
      py::error_already_set e = std::move(*error_);
      error_.reset();
      throw e;
    }
  }

 private:
  py::object f_;
  std::optional<py::error_already_set> error_;
};

std::string ModelsDir(const std::optional<std::string>& data_dir) {
  return data_dir.value_or(config::DefaultDataDir()) + "/models";
}

// `poseidon simulate SCENARIO --set ... --format json [--no-baseline]`: the JSON text, and the
// Chrome-trace JSON when `trace` (else "").
py::tuple SimulateJson(const std::string& scenario, const std::vector<std::string>& overrides,
                       bool baseline, bool trace, py::object progress) {
  Callback callback(std::move(progress));
  std::string json, chrome_trace;
  {
    py::gil_scoped_release nogil;
    const config::ScenarioSpec s = config::LoadScenarioFile(scenario, overrides);
    sim::SimOptions opts;
    opts.record_trace = trace;
    opts.baseline = baseline;
    if (callback.enabled()) opts.progress = [&callback](double f) { callback(f); };
    sim::ScenarioResult r = sim::SimulateScenario(s, opts);
    if (r.deadlocked) {
      throw SimulationError(
          "the simulation deadlocked: every actor waits and nothing is pending. Who waits for "
          "what:\n" +
          r.deadlock_report);
    }
    json = sim::FormatResult(r, sim::OutputFormat::kJson);
    chrome_trace = std::move(r.chrome_trace);
  }
  callback.Rethrow();
  return py::make_tuple(json, chrome_trace);
}

// `poseidon sweep SWEEP -j JOBS [--shard I/N]`: the CSV text. progress(done, total) after each
// point computed (points with identical inputs count once, as in the CLI's progress line).
std::string SweepCsv(const std::string& sweep, int jobs, const std::string& shard,
                     py::object progress) {
  if (jobs < 1) throw config::ConfigError("sweep: error: jobs must be a whole number >= 1");
  Callback callback(std::move(progress));
  std::string csv;
  {
    py::gil_scoped_release nogil;
    const config::SweepSpec sw = config::LoadSweepFile(sweep);
    sim::SweepOptions so;
    so.threads = jobs;
    if (!shard.empty()) sim::ParseShard(shard, &so.shard_index, &so.shard_count);
    if (callback.enabled()) {
      so.progress = [&callback](int done, int total) { callback(done, total); };
    }
    csv = sim::RunSweep(sw, so);
  }
  callback.Rethrow();
  return csv;
}

// `poseidon models list` as rows.
py::list ModelsList(const std::optional<std::string>& data_dir) {
  const std::string dir = ModelsDir(data_dir);
  const std::vector<std::string> names = config::ListModelNames(dir);
  if (names.empty()) {
    throw config::ConfigError(dir + ": error: no model files (*.yaml) found; pass data_dir or run "
                                    "from the repository root");
  }
  py::list rows;
  for (const std::string& n : names) {
    const core::ModelSpec spec = config::LoadModelFile(config::FindModelFile(n, dir));
    const core::Model m = core::Model::Build(spec);
    py::dict row;
    row["name"] = n;
    row["layers"] = m.layers().size();
    row["parameters"] = m.total_params();
    row["macs_per_image"] = m.forward_macs();
    row["description"] = spec.description;
    rows.append(row);
  }
  return rows;
}

// `poseidon models show NAME [--without G]`: the per-layer table and the totals.
py::dict ModelsShow(const std::string& name, const std::set<std::string>& without,
                    const std::optional<std::string>& data_dir) {
  const std::string path = config::FindModelFile(name, ModelsDir(data_dir));
  const core::ModelSpec spec = config::LoadModelFile(path);
  core::BuildOptions options;
  options.without_groups = without;
  const core::Model m = core::Model::Build(spec, options);
  py::list layers;
  for (const core::Layer& l : m.layers()) {
    py::dict row;
    row["id"] = l.id;
    row["name"] = l.name;
    row["type"] = core::LayerKindName(l.kind);
    row["output"] = py::make_tuple(l.out.c, l.out.h, l.out.w);
    row["params"] = l.params;
    row["macs_per_image"] = l.fwd_macs;
    row["activation_bytes"] = l.out_bytes;
    layers.append(row);
  }
  const core::Shape in = m.input_shape();
  py::dict totals;
  totals["layers"] = m.layers().size();
  totals["parameters"] = m.total_params();
  totals["parameter_bytes_fp32"] = m.total_params() * 4;
  totals["forward_macs_per_image"] = m.forward_macs();
  totals["forward_flops_per_image"] = m.forward_flops();
  totals["activation_bytes_per_image"] = m.activation_bytes();
  py::dict out;
  out["model"] = m.name();
  out["file"] = path;
  out["description"] = spec.description;
  out["input"] = py::make_tuple(in.c, in.h, in.w);
  out["num_classes"] = spec.num_classes;
  out["without"] = without;
  out["layers"] = layers;
  out["totals"] = totals;
  return out;
}

py::object Bytes(int64_t b) { return b < 0 ? py::object(py::none()) : py::object(py::int_(b)); }

// `poseidon plan SCENARIO --set ...` (app::MakePlanReport).
py::dict Plan(const std::string& scenario, const std::vector<std::string>& overrides) {
  std::optional<app::PlanReport> report;
  {
    py::gil_scoped_release nogil;
    report.emplace(app::MakePlanReport(config::LoadScenarioFile(scenario, overrides)));
  }
  const app::PlanReport& r = *report;
  py::list layers;
  for (const app::PlanLayerRow& l : r.layers) {
    py::dict row;
    row["name"] = l.name;
    row["type"] = l.type;
    row["shape"] = l.shape;
    row["params"] = l.params;
    row["ps_bytes"] = Bytes(l.ps_bytes);
    row["sfb_bytes"] = Bytes(l.sfb_bytes);
    row["allreduce_bytes"] = Bytes(l.allreduce_bytes);
    row["choice"] = l.choice;
    row["reason"] = l.reason;
    layers.append(row);
  }
  py::dict out;
  out["scenario"] = r.scenario;
  out["model"] = r.model;
  out["workers"] = r.workers;
  out["servers"] = r.servers;
  out["placement"] = r.colocated ? "colocated" : "dedicated";
  out["batch_per_worker"] = r.batch_per_worker;
  out["scheme"] = r.scheme;
  out["layer_overrides"] = r.layer_overrides;
  out["gradient_wire"] = r.gradient_wire;
  py::dict thresholds;
  for (const auto& [name, t] : r.sfb_thresholds) thresholds[py::str(name)] = t;
  out["sfb_thresholds"] = thresholds;
  out["layers"] = layers;
  out["total_bytes"] = r.total_bytes;
  out["all_ps_bytes"] = r.all_ps_bytes;
  out["ratio_to_all_ps"] = r.ratio_to_all_ps;
  py::dict by_scheme;
  for (const auto& [scheme, n] : r.layers_by_scheme) by_scheme[py::str(scheme)] = n;
  out["layers_by_scheme"] = by_scheme;
  out["compute_source"] = r.compute_source;
  py::dict estimates;
  for (const auto& [what, ms] : r.estimated_iteration_ms) estimates[py::str(what)] = ms;
  out["estimated_iteration_ms"] = estimates;
  if (r.baseline.empty()) {
    out["baseline"] = py::none();
    return out;
  }
  py::dict b;
  b["kind"] = r.baseline;
  b["allreduce_algorithm"] = r.allreduce_algorithm;
  b["nccl_processes"] = r.nccl.ranks;
  b["nccl_machines"] = r.nccl.nodes;
  b["nccl_ring_from_bytes"] = r.nccl_ring_from_bytes;
  py::list collectives;
  for (const app::PlanCollectiveRow& c : r.collectives) {
    py::dict row;
    row["first_layer"] = c.first_layer;
    row["last_layer"] = c.last_layer;
    row["tensors"] = c.tensors;
    row["bytes"] = c.bytes;
    row["nccl_ring_us"] = c.nccl_ring_us;
    row["nccl_tree_us"] = c.nccl_tree_us > 0 ? py::object(py::float_(c.nccl_tree_us))
                                             : py::object(py::none());
    row["algorithm"] = c.algorithm;
    collectives.append(row);
  }
  b["collectives"] = collectives;
  out["baseline"] = b;
  return out;
}

std::string PlanText(const std::string& scenario, const std::vector<std::string>& overrides) {
  py::gil_scoped_release nogil;
  std::ostringstream out;
  app::RunPlan(config::LoadScenarioFile(scenario, overrides), out);
  return out.str();
}

std::string ModelsListText(const std::optional<std::string>& data_dir) {
  std::ostringstream out;
  app::RunModelsList(ModelsDir(data_dir), out);
  return out.str();
}

std::string ModelsShowText(const std::string& name, const std::set<std::string>& without,
                           const std::optional<std::string>& data_dir) {
  std::ostringstream out;
  app::RunModelsShow(name, ModelsDir(data_dir), without, out);
  return out.str();
}

}  // namespace
}  // namespace poseidon::python

PYBIND11_MODULE(_ext, m) {
  namespace pp = poseidon::python;
  m.doc() = "Poseidon's C++ core (the poseidon package wraps it; see docs/python.md)";

  static py::exception<poseidon::config::ConfigError> config_error(m, "ConfigError",
                                                                   PyExc_ValueError);
  static py::exception<poseidon::core::ModelError> model_error(m, "ModelError",
                                                               config_error.ptr());
  static py::exception<pp::SimulationError> simulation_error(m, "SimulationError",
                                                         PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const poseidon::core::ModelError& e) {
      PyErr_SetString(model_error.ptr(), e.what());
    } catch (const poseidon::config::ConfigError& e) {
      PyErr_SetString(config_error.ptr(), e.what());
    } catch (const pp::SimulationError& e) {
      PyErr_SetString(simulation_error.ptr(), e.what());
    }
  });

  m.def("default_data_dir", &poseidon::config::DefaultDataDir,
        "the folder of the built-in models, devices and profiles (the repository's scenarios/)");
  m.def("simulate_json", &pp::SimulateJson, py::arg("scenario"), py::arg("overrides"),
        py::arg("baseline"), py::arg("trace"), py::arg("progress"));
  m.def("sweep_csv", &pp::SweepCsv, py::arg("sweep"), py::arg("jobs"), py::arg("shard"),
        py::arg("progress"));
  m.def("models_list", &pp::ModelsList, py::arg("data_dir"));
  m.def("models_show", &pp::ModelsShow, py::arg("name"), py::arg("without"), py::arg("data_dir"));
  m.def("models_list_text", &pp::ModelsListText, py::arg("data_dir"));
  m.def("models_show_text", &pp::ModelsShowText, py::arg("name"), py::arg("without"),
        py::arg("data_dir"));
  m.def("plan", &pp::Plan, py::arg("scenario"), py::arg("overrides"));
  m.def("plan_text", &pp::PlanText, py::arg("scenario"), py::arg("overrides"));
}
