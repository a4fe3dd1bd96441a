#include "apps/poseidon/validate_command.h"

#include <stdexcept>

#include "apps/poseidon/cli_checks.h"
#include "config/yaml_reader.h"
#include "validation/draw.h"
#include "validation/validate.h"

namespace poseidon::app {

struct ValidateCommand {
  CLI::App* app = nullptr;
  std::string data_dir;
  validation::ValidateOptions options;
  int draw_count = 0;
  uint64_t draw_seed = 1;
};

std::shared_ptr<ValidateCommand> AddValidateCommand(CLI::App& app, const std::string& data_dir) {
  auto c = std::make_shared<ValidateCommand>();
  c->data_dir = data_dir;
  validation::ValidateOptions& o = c->options;
  CLI::App* v = c->app = app.add_subcommand(
      "validate", "simulated vs live iteration time per configuration of a scenario or sweep");
  v->add_option("input", o.input, "scenario or sweep YAML (with --draw: the sweep file to write)")
      ->required();
  v->add_option("--draw", c->draw_count,
                "write N configurations drawn at random (a held-out set: validation/draw.h) to "
                "INPUT and run nothing");
  v->add_option("--seed", c->draw_seed, "the draw's seed")->capture_default_str();
  v->add_option("--set", o.overrides, "override a scenario key: KEY=VALUE");
  v->add_option("--sim-set", o.sim_overrides,
                "override a key for the simulator only (e.g. to see a wrong network model caught)");
  v->add_option("--work-dir", o.work_dir, "logs and traces per configuration")->capture_default_str();
  v->add_option("-o,--output", o.csv, "CSV (default: stdout)");
  v->add_option("--json", o.json, "also write JSON here");
  v->add_option("--repeat", o.repeat,
                "live runs per configuration (the summary takes the median of each "
                "configuration's runs)")
      ->check(AtLeast(1))
      ->capture_default_str();
  v->add_flag("--reuse-live", o.reuse_live,
              "run nothing live: compare with the live runs an earlier validate left in --work-dir "
              "(same input, --set and --repeat), e.g. to try a --sim-set against the same "
              "measurements");
  v->add_flag("--loopback{false}", o.emulate,
              "run live over loopback instead of an emulated cluster (no root needed; the network "
              "is then not the scenario's)");
  return c;
}

int RunValidateCommand(const ValidateCommand& c) {
  if (!c.app->parsed()) return -1;
  if (c.draw_count != 0) {
    try {
      return validation::RunDraw(c.draw_count, c.draw_seed, c.options.input, c.data_dir);
    } catch (const config::ConfigError&) {
      throw;
    } catch (const std::runtime_error& e) {  // a file system error: said as bad input is
      throw config::ConfigError(std::string("error: ") + e.what());
    }
  }
  validation::ValidateOptions o = c.options;
  o.netns_script = c.data_dir + "/../scripts/netns-run";
  return validation::RunValidate(o);
}

}  // namespace poseidon::app
