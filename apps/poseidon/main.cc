// poseidon: the command-line program. One binary, one subcommand per job; each parses its flags
// and calls the libraries. Bad input ends with one "poseidon: error: ..." line and exit code 2.
#include <chrono>
#include <cstdio>
#include <unistd.h>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/poseidon/allocator.h"
#include "apps/poseidon/cli_checks.h"
#include "apps/poseidon/calibrate_command.h"
#include "apps/poseidon/compare_command.h"
#include "apps/poseidon/evaluate_command.h"
#include "apps/poseidon/goodput_command.h"
#include "apps/poseidon/gpu_model_command.h"
#include "apps/poseidon/live_command.h"
#include "apps/poseidon/models_command.h"
#include "apps/poseidon/models_import_command.h"
#include "apps/poseidon/plan_command.h"
#include "apps/poseidon/reproduce_command.h"
#include "apps/poseidon/train_command.h"
#include "apps/poseidon/validate_command.h"
#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "core/model.h"
#include "kernels/data/idx.h"
#include "model_import/onnx_import.h"
#include "sim/simulation.h"
#include "sim/sweep.h"

namespace {

using poseidon::config::ConfigError;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text) || !out.flush()) {
    throw ConfigError(fmt::format("{}: error: cannot write file; check the folder exists and is "
                                  "writable",
                                  path));
  }
}

// A progress line with an estimate of the time left, on stderr only (stdout bytes never change).
// On a terminal it redraws one line at most 4 times a second; otherwise (with --progress) it
// writes a line at most every 10 s. Silent until the run has lasted 1 s (short runs print nothing).
class ProgressLine {
 public:
  ProgressLine(std::string what, bool enabled)
      : what_(std::move(what)), enabled_(enabled), tty_(isatty(fileno(stderr)) != 0),
        start_(Clock::now()), last_(start_) {}
  ~ProgressLine() {
    if (drawn_ && tty_) std::cerr << "\n";
  }
  // fraction in [0, 1]; `detail` is appended (e.g. "12/40 points").
  void Update(double fraction, const std::string& detail = "") {
    if (!enabled_) return;
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (elapsed < 1 || (drawn_ && since < (tty_ ? 0.25 : 10)) ) return;
    last_ = now;
    drawn_ = true;
    std::string eta = "?";
    if (fraction > 0) eta = fmt::format("{:.0f} s", elapsed * (1 - fraction) / fraction);
    const std::string line = fmt::format("{}: {:5.1f}%{}{} elapsed {:.0f} s, about {} left",
                                         what_, 100 * fraction, detail.empty() ? "" : ", ",
                                         detail, elapsed, eta);
    if (tty_) {
      std::cerr << "\r" << line << "\x1b[K" << std::flush;
    } else {
      std::cerr << line << "\n";
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_;
  bool enabled_;
  bool tty_;
  Clock::time_point start_, last_;
  bool drawn_ = false;
};

int Simulate(const std::string& scenario, const std::vector<std::string>& overrides,
             const std::string& format, const std::string& trace, const std::string& output,
             bool baseline, bool progress, const std::string& decisions,
             const std::string& windows) {
  poseidon::config::ScenarioSpec s = poseidon::config::LoadScenarioFile(scenario, overrides);
  poseidon::sim::SimOptions opts;
  opts.record_trace = !trace.empty();
  opts.record_decisions = !decisions.empty();
  opts.record_windows = !windows.empty();
  opts.baseline = baseline;
  std::optional<ProgressLine> line;
  line.emplace("simulate " + s.name, progress || isatty(fileno(stderr)) != 0);
  opts.progress = [&](double f) { line->Update(f); };
  poseidon::sim::ScenarioResult r = poseidon::sim::SimulateScenario(s, opts);
  line.reset();
  if (r.deadlocked) {
    std::cerr << "poseidon: error: the simulation deadlocked: every actor waits and nothing is "
                 "pending. Who waits for what:\n"
              << r.deadlock_report;
    return 3;
  }
  poseidon::sim::OutputFormat f = format == "csv"    ? poseidon::sim::OutputFormat::kCsv
                                  : format == "json" ? poseidon::sim::OutputFormat::kJson
                                                     : poseidon::sim::OutputFormat::kTable;
  std::string text = poseidon::sim::FormatResult(r, f);
  if (output.empty()) {
    std::cout << text;
  } else {
    WriteFile(output, text);
  }
  if (!trace.empty()) {
    WriteFile(trace, r.chrome_trace);
    std::cerr << "trace written to " << trace << " (open it in https://ui.perfetto.dev)\n";
  }
  if (!decisions.empty()) WriteFile(decisions, r.decisions);
  if (!windows.empty()) WriteFile(windows, r.windows);
  return 0;
}

int Sweep(const std::string& sweep_file, const std::string& output, int jobs,
          const std::string& shard, bool progress) {
  poseidon::config::SweepSpec sw = poseidon::config::LoadSweepFile(sweep_file);
  poseidon::sim::SweepOptions so;
  so.threads = jobs;
  if (!shard.empty()) poseidon::sim::ParseShard(shard, &so.shard_index, &so.shard_count);
  std::optional<ProgressLine> line;
  line.emplace("sweep " + sw.name, progress || isatty(fileno(stderr)) != 0);
  so.progress = [&](int done, int total) {
    line->Update(static_cast<double>(done) / total, fmt::format("{}/{} points", done, total));
  };
  std::string csv = poseidon::sim::RunSweep(sw, so);
  line.reset();
  const auto rows = std::count(csv.begin(), csv.end(), '\n') - (so.shard_count > 1 ? 2 : 1);
  if (output.empty()) {
    std::cout << csv;
  } else {
    WriteFile(output, csv);
    std::cerr << fmt::format("wrote {} rows to {}\n", rows, output);
  }
  return 0;
}

int MergeSweep(const std::vector<std::string>& files, const std::string& output) {
  std::vector<std::pair<std::string, std::string>> texts;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      throw ConfigError(fmt::format("{}: error: cannot read the shard file; check the path", f));
    }
    texts.emplace_back(f, std::string(std::istreambuf_iterator<char>(in), {}));
  }
  std::string csv = poseidon::sim::MergeSweepShards(texts);
  if (output.empty()) {
    std::cout << csv;
  } else {
    WriteFile(output, csv);
    std::cerr << fmt::format("merged {} shards into {}\n", files.size(), output);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"poseidon: simulate and run data-parallel deep-learning training over Ethernet"};
  app.require_subcommand(1);
  std::string data_dir = POSEIDON_DATA_DIR;
  app.add_option("--data-dir", data_dir, "folder with models/, devices/, profiles/")
      ->capture_default_str();

  CLI::App* models = app.add_subcommand("models", "list the model library or show one model");
  models->require_subcommand(1);
  CLI::App* models_list = models->add_subcommand("list", "one line per model");
  CLI::App* models_show = models->add_subcommand("show", "per-layer table and totals");
  std::string model_name;
  std::vector<std::string> without;
  models_show->add_option("model", model_name, "model name or path to a .yaml file")->required();
  models_show->add_option("--without", without, "leave out a layer group (e.g. aux)");
  CLI::App* models_import =
      models->add_subcommand("import", "write a model YAML from an ONNX file (model_import/)");
  std::string import_onnx, import_output, import_name;
  models_import->add_option("model", import_onnx, "the .onnx file")->required();
  models_import->add_option("-o,--output", import_output, "the model YAML to write")->required();
  models_import->add_option("--name", import_name, "the model's name (default: the file stem)");

  CLI::App* simulate = app.add_subcommand("simulate", "simulate one scenario");
  std::string scenario = std::string(POSEIDON_DATA_DIR) + "/demo.yaml";
  std::string format = "table", trace, output;
  bool no_baseline = false;
  std::vector<std::string> overrides;
  simulate->add_option("scenario", scenario, "scenario YAML file")->capture_default_str();
  simulate->add_option("--format", format, "table | csv | json")
      ->check(CLI::IsMember({"table", "csv", "json"}));
  simulate->add_option("--trace", trace, "write a Chrome-trace JSON timeline (Perfetto)");
  std::string sim_decisions;
  simulate->add_option("--decisions", sim_decisions,
                       "write every actor's protocol decisions here (to compare with a live run)");
  std::string sim_windows;
  simulate->add_option("--windows", sim_windows,
                       "write the network model's congestion windows here: every connection's "
                       "loss episodes (to compare with analysis/tcp_trace.py episodes)");
  simulate->add_option("-o,--output", output, "write the result here instead of stdout");
  simulate->add_option("--set", overrides, "override a scenario key: KEY=VALUE (dotted path)");
  simulate->add_flag("--no-baseline", no_baseline, "skip the one-node run used for the speedup");
  bool sim_progress = false;
  simulate->add_flag("--progress", sim_progress,
                     "progress and time left on stderr even when it is not a terminal");

  CLI::App* plan = app.add_subcommand("plan", "per layer: shape, bytes per scheme, SACP's choice");
  std::string plan_scenario = std::string(POSEIDON_DATA_DIR) + "/demo.yaml";
  std::vector<std::string> plan_overrides;
  plan->add_option("scenario", plan_scenario, "scenario YAML file")->capture_default_str();
  plan->add_option("--set", plan_overrides, "override a scenario key: KEY=VALUE (dotted path)");

  CLI::App* train = app.add_subcommand("train", "train a model on Fashion-MNIST on this machine");
  poseidon::app::TrainOptions topt;
  train->add_option("--model", topt.model, "model name or .yaml path")->capture_default_str();
  train->add_option("--data-dir", topt.data_dir, "folder with the IDX files")->capture_default_str();
  train->add_option("--iterations", topt.iterations)->capture_default_str()->check(poseidon::app::AtLeast(1));
  train->add_option("--batch", topt.batch)->capture_default_str()->check(poseidon::app::AtLeast(1));
  train->add_option("--backend", topt.backend, "reference | cpu | cuda")->capture_default_str();
  train->add_option("--seed", topt.seed)->capture_default_str();
  train->add_option("--lr", topt.lr, "base learning rate")->capture_default_str();
  train->add_option("--momentum", topt.momentum)->capture_default_str();
  train->add_option("--weight-decay", topt.weight_decay)->capture_default_str();
  train->add_option("--lr-policy", topt.lr_policy, "fixed | step | poly")->capture_default_str();
  train->add_option("--gamma", topt.gamma, "step: factor per stepsize")->capture_default_str();
  train->add_option("--stepsize", topt.stepsize, "step: iterations (0 = iterations/3)");
  train->add_option("--power", topt.power, "poly: power")->capture_default_str();
  train->add_option("--print-interval", topt.print_interval)->capture_default_str();
  train->add_option("--test-interval", topt.test_interval, "0 = test at the end only")
      ->capture_default_str();
  train->add_option("--csv", topt.csv, "write the learning curve here");
  train->add_option("--save", topt.save_dir,
                    "write a checkpoint (.npy per blob + index.json) to DIR at the end");
  train->add_option("--save-interval", topt.save_interval,
                    "also every N iterations (the folder keeps the latest)")
      ->check(poseidon::app::AtLeast(1));
  train->add_option("--resume", topt.resume_dir,
                    "continue the run whose checkpoint DIR holds (same flags: bit-identical)");
  train->add_option("--stop-after", topt.stop_after, "tests only: stop after iteration N")
      ->group("");

  CLI::App* evaluate =
      app.add_subcommand("evaluate", "test loss and accuracy of a checkpoint on Fashion-MNIST");
  poseidon::app::EvaluateOptions eopt;
  evaluate->add_option("--params", eopt.params, "the checkpoint folder (train/launch --save)")
      ->required();
  evaluate->add_option("--model", eopt.model, "model name or .yaml path (default: the "
                                              "checkpoint's)");
  evaluate->add_option("--data-dir", eopt.data_dir, "folder with the IDX files")
      ->capture_default_str();
  evaluate->add_option("--backend", eopt.backend, "reference | cpu | cuda (default: the "
                                                  "checkpoint's)");
  evaluate->add_option("--batch", eopt.batch, "default: the checkpoint's")
      ->check(poseidon::app::AtLeast(1));

  CLI::App* sweep = app.add_subcommand("sweep", "simulate every point of a sweep, one CSV row each");
  std::string sweep_file, sweep_out;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string shard;
  std::vector<std::string> merge_files;
  bool sweep_progress = false;
  sweep->add_option("sweep", sweep_file, "sweep YAML file");
  sweep->add_option("-o,--output", sweep_out, "CSV file (default: stdout)");
  sweep->add_option("-j,--jobs", jobs, "threads")->capture_default_str()->check(poseidon::app::AtLeast(1));
  sweep->add_option("--shard", shard,
                    "run only shard I of N (I/N, 0 <= I < N): a contiguous block of the points");
  sweep->add_option("--merge", merge_files,
                    "join these shard CSVs (from --shard) into the whole sweep's CSV")
      ->expected(1, -1);
  sweep->add_flag("--progress", sweep_progress,
                  "progress and time left on stderr even when it is not a terminal");
  bool sweep_check = false;
  sweep->add_flag("--check", sweep_check,
                  "load every point (files, keys, values) and simulate nothing: what a job "
                  "script checks before it submits");

  auto calibrate_commands = poseidon::app::AddCalibrateCommands(app, &data_dir);
  auto gpu_model_commands = poseidon::app::AddGpuModelCommands(app, &data_dir);
  auto validate_command = poseidon::app::AddValidateCommand(app, POSEIDON_DATA_DIR);
  auto goodput_command = poseidon::app::AddGoodputCommand(app);
  auto compare_command = poseidon::app::AddCompareCommand(app, POSEIDON_DATA_DIR);
  auto reproduce_command = poseidon::app::AddReproduceCommand(app);
  std::unique_ptr<poseidon::app::LiveCommands> live;
  try {
    live = poseidon::app::AddLiveCommands(app);
  } catch (const std::exception& e) {
    std::cerr << "poseidon: error: " << e.what() << "\n";
    return 1;
  }

  // Everything after the first "--" is a program's command line (launch --torch, node), never
  // our flags: CLI11 2.1 ends a multi-value option at a "--" and drops it (`--set K=V -- python
  // train.py --lr 0.1` would parse --lr as ours), so the words after it are cut off here.
  std::vector<std::string> after_dashes;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      after_dashes.assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }
  CLI11_PARSE(app, argc, argv);
  if (!after_dashes.empty() && !live->TakeCommand(std::move(after_dashes))) {
    std::cerr << "poseidon: error: only 'poseidon launch --torch' and 'poseidon node' run a "
                 "command given after '--'\n";
    return 1;
  }
  try {
    if (int rc = poseidon::app::RunCalibrateCommands(*calibrate_commands, argc, argv); rc >= 0) {
      return rc;
    }
    if (const int rc = live->RunIfParsed(); rc >= 0) return rc;
    if (const int rc = poseidon::app::RunValidateCommand(*validate_command, argc, argv); rc >= 0) return rc;
    if (const int rc = poseidon::app::RunGoodputCommand(*goodput_command); rc >= 0) return rc;
    if (const int rc = poseidon::app::RunCompareCommand(*compare_command); rc >= 0) return rc;
    if (const int rc = poseidon::app::RunReproduceCommand(*reproduce_command); rc >= 0) return rc;
    if (const int rc = poseidon::app::RunGpuModelCommands(*gpu_model_commands); rc >= 0) {
      return rc;
    }
    const std::string models_dir = data_dir + "/models";
    if (models_list->parsed()) return poseidon::app::RunModelsList(models_dir, std::cout);
    if (models_show->parsed()) {
      return poseidon::app::RunModelsShow(model_name, models_dir,
                                          std::set<std::string>(without.begin(), without.end()),
                                          std::cout);
    }
    if (models_import->parsed()) {
      return poseidon::app::RunModelsImport(import_onnx, import_output, import_name, std::cout);
    }
    if (simulate->parsed() || sweep->parsed() || plan->parsed()) {
      poseidon::app::KeepFreedMemoryForReuse();
    }
    if (simulate->parsed()) {
      return Simulate(scenario, overrides, format, trace, output, !no_baseline, sim_progress,
                      sim_decisions, sim_windows);
    }
    if (sweep->parsed()) {
      if (!merge_files.empty()) {
        if (!sweep_file.empty() || !shard.empty()) {
          throw ConfigError("sweep --merge: error: give only the shard CSVs (no sweep file, no "
                            "--shard): poseidon sweep --merge s0.csv s1.csv ... -o all.csv");
        }
        return MergeSweep(merge_files, sweep_out);
      }
      if (sweep_file.empty()) {
        throw ConfigError("sweep: error: give a sweep YAML file (or --merge with shard CSVs)");
      }
      if (sweep_check) {
        int index = 0, count = 1;
        if (!shard.empty()) poseidon::sim::ParseShard(shard, &index, &count);
        const poseidon::config::SweepSpec sw = poseidon::config::LoadSweepFile(sweep_file);
        std::cout << fmt::format("sweep {}: {} points, every one loads\n", sweep_file, sw.points.size());
        return 0;
      }
      return Sweep(sweep_file, sweep_out, jobs, shard, sweep_progress);
    }
    if (train->parsed()) {
      topt.models_dir = models_dir;
      return poseidon::app::RunTrain(topt, std::cout);
    }
    if (evaluate->parsed()) {
      eopt.models_dir = models_dir;
      return poseidon::app::RunEvaluate(eopt, std::cout);
    }
    if (plan->parsed()) {
      return poseidon::app::RunPlan(
          poseidon::config::LoadScenarioFile(plan_scenario, plan_overrides), std::cout);
    }
  } catch (const poseidon::model_import::ImportError& e) {
    // One located line, as a compiler's: "FILE: error: node 'NAME' (OpType): why; what to do".
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const ConfigError& e) {
    std::cerr << "poseidon: " << e.what() << "\n";
    return 2;
  } catch (const poseidon::core::ModelError& e) {
    std::cerr << "poseidon: " << e.what() << "\n";
    return 2;
  } catch (const poseidon::kernels::DataError& e) {
    // A missing, truncated or hostile data set is bad input like a bad scenario.
    std::cerr << "poseidon: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "poseidon: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
