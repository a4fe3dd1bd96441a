#include "apps/poseidon/compare_command.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "apps/poseidon/cli_checks.h"
#include "config/yaml_reader.h"
#include "sim/compare.h"

extern char** environ;

namespace poseidon::app {

struct CompareCommand {
  CLI::App* app = nullptr;
  std::string data_dir;
  std::string scenario;
  std::vector<std::string> overrides;
  std::string format = "text";
  std::string output;
  std::string plot;
  int jobs = 1;
};

namespace {

using config::ConfigError;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text) || !out.flush()) {
    throw ConfigError(
        fmt::format("{}: error: cannot write file; check the folder exists and is "
                    "writable",
                    path));
  }
}

// Runs analysis/plot_compare.py on the comparison's JSON (a temporary file), its stdout on our
// stderr so that ours holds only the table. Debian's Python has matplotlib (analysis/README.md).
int Plot(const std::string& data_dir, const std::string& json, const std::string& out) {
  const std::string script = data_dir + "/../analysis/plot_compare.py";
  if (!std::filesystem::exists(script)) {
    throw ConfigError(
        fmt::format("{}: error: the plot script is missing; --plot needs the "
                    "source tree's analysis/ folder",
                    script));
  }
  std::string tmp = (std::filesystem::temp_directory_path() / "poseidon-compare-XXXXXX").string();
  const int fd = mkstemp(tmp.data());
  if (fd < 0) {
    throw ConfigError(
        fmt::format("{}: error: cannot create a temporary file: {}", tmp, std::strerror(errno)));
  }
  close(fd);
  WriteText(tmp, json);
  const std::string python =
      std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  std::vector<std::string> args = {python, script, tmp, "-o", out};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  if (err == 0) waitpid(pid, &status, 0);
  std::filesystem::remove(tmp);
  if (err != 0) {
    throw ConfigError(
        fmt::format("--plot {}: error: cannot run {}: {}", out, python, std::strerror(err)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << fmt::format("poseidon: error: --plot {}: {} failed (its message is above)\n", out,
                             script);
    return 2;
  }
  return 0;
}

}  // namespace

std::shared_ptr<CompareCommand> AddCompareCommand(CLI::App& app, const std::string& data_dir) {
  auto c = std::make_shared<CompareCommand>();
  c->data_dir = data_dir;
  CLI::App* a = c->app = app.add_subcommand(
      "compare", "Poseidon against PyTorch DDP, Horovod and parameter servers on one cluster");
  a->add_option("scenario", c->scenario, "scenario YAML file (its cluster, model and batch)")
      ->required();
  a->add_option("--set", c->overrides, "override a scenario key: KEY=VALUE (dotted path)");
  a->add_option("--format", c->format, "text | csv | json")
      ->check(CLI::IsMember({"text", "table", "csv", "json"}))
      ->capture_default_str();
  a->add_option("-o,--output", c->output, "write the result here instead of stdout");
  a->add_option("--plot", c->plot,
                "also draw the iteration time per system (compute / wait) to FILE.png and "
                "FILE.svg (analysis/plot_compare.py)");
  c->jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  a->add_option("-j,--jobs", c->jobs, "simulations at once (the output is the same)")
      ->check(AtLeast(1))
      ->capture_default_str();
  return c;
}

int RunCompareCommand(const CompareCommand& c) {
  if (!c.app->parsed()) return -1;
  const sim::CompareResult r = sim::RunCompare(c.scenario, c.overrides, c.jobs);
  const sim::OutputFormat f = c.format == "csv"    ? sim::OutputFormat::kCsv
                              : c.format == "json" ? sim::OutputFormat::kJson
                                                   : sim::OutputFormat::kTable;
  const std::string text = sim::FormatCompare(r, f);
  if (c.output.empty()) {
    std::cout << text << std::flush;
  } else {
    WriteText(c.output, text);
  }
  if (!c.plot.empty()) {
    return Plot(
        c.data_dir,
        f == sim::OutputFormat::kJson ? text : sim::FormatCompare(r, sim::OutputFormat::kJson),
        c.plot);
  }
  return 0;
}

}  // namespace poseidon::app
