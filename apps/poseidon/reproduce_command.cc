#include "apps/poseidon/reproduce_command.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "apps/poseidon/cli_checks.h"
#include "config/yaml_reader.h"
#include "sim/reproduce.h"

namespace poseidon::app {

struct ReproduceCommand {
  CLI::App* app = nullptr;
  std::vector<std::string> files;
  std::vector<std::string> overrides;
  std::string format = "text";
  std::string output;
  int jobs = 1;
};

std::shared_ptr<ReproduceCommand> AddReproduceCommand(CLI::App& app) {
  auto c = std::make_shared<ReproduceCommand>();
  CLI::App* a = c->app = app.add_subcommand(
      "reproduce",
      "published multi-machine throughputs (scenarios/measurements/*.yaml) against the "
      "simulator, only the 1-GPU time calibrated");
  a->add_option("files", c->files, "measurement YAML files")->required()->expected(1, -1);
  a->add_option("--set", c->overrides,
                "override a key of every row's scenario: KEY=VALUE (dotted path; wins over the "
                "row's keys)");
  a->add_option("--format", c->format, "text | csv")
      ->check(CLI::IsMember({"text", "csv"}))
      ->capture_default_str();
  a->add_option("-o,--output", c->output, "write the result here instead of stdout");
  c->jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  a->add_option("-j,--jobs", c->jobs, "simulations at once (the output is the same)")
      ->check(AtLeast(1))
      ->capture_default_str();
  return c;
}

int RunReproduceCommand(const ReproduceCommand& c) {
  if (!c.app->parsed()) return -1;
  const sim::ReproduceResult r = sim::RunReproduce(c.files, c.overrides, c.jobs);
  const std::string text = sim::FormatReproduce(
      r, c.format == "csv" ? sim::OutputFormat::kCsv : sim::OutputFormat::kTable);
  if (c.output.empty()) {
    std::cout << text << std::flush;
    return 0;
  }
  std::ofstream out(c.output, std::ios::binary);
  if (!out || !(out << text) || !out.flush()) {
    throw config::ConfigError(fmt::format(
        "{}: error: cannot write file; check the folder exists and is writable", c.output));
  }
  return 0;
}

}  // namespace poseidon::app
