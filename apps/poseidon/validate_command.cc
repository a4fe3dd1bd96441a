#include "apps/poseidon/validate_command.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "apps/poseidon/cli_checks.h"
#include "calibration/provenance.h"
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
  validation::DrawBound draw_bound;
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
  v->add_option("--max-processes-per-core", c->draw_bound.max_processes_per_core,
                "with --draw: only configurations whose processes (coordinator, workers, shards) "
                "fit this many per core, what the host can emulate faithfully; the file says so")
      ->check(NumberAtLeast(0, /*strict=*/true));
  c->draw_bound.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  v->add_option("--cores", c->draw_bound.cores,
                "with --max-processes-per-core: the cores of the host that will run the set "
                "(default: this one's)")
      ->check(AtLeast(1))
      ->capture_default_str();
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
  v->add_option("--sim-seeds", o.sim_seeds,
                "simulate each configuration with this many seeds (the scenario's and those after "
                "it) and predict with the run whose pace is the median: a simulation that draws "
                "(losses at a full queue, jitter) is one realisation, as a live run is")
      ->check(AtLeast(1))
      ->capture_default_str();
  v->add_flag("--reuse-live", o.reuse_live,
              "run nothing live: compare with the live runs an earlier validate left in --work-dir "
              "(same input, --set and --repeat), e.g. to try a --sim-set against the same "
              "measurements");
  v->add_flag("--run-missing", o.run_missing,
              "with --reuse-live: run live what has no recorded run, or one recorded for another "
              "configuration, instead of failing it (resume an interrupted validate, renew stale "
              "runs)");
  v->add_option("--wait-quiet", o.wait_quiet_s,
                "before each live run, wait up to SECONDS for a quiet host (other processes' CPU "
                "and steal within the faithfulness bound, docs/validation.md)")
      ->check(NumberAtLeast(0));
  v->add_option("--rerun-disturbed", o.rerun_disturbed,
                "run a live run that the host disturbed again, up to N times (the last one counts; "
                "a job that keeps more of the host busy than the rule allows is not run again)")
      ->check(AtLeast(0));
  v->add_option(
       "--repeat-spread", o.repeat_spread,
       "after --repeat runs, run a configuration whose live runs (those not disturbed) "
       "differ by more than 8% ((max - min) / median) again, up to N runs in all: its "
       "median then stands on more runs (the rule reads the live runs, not the prediction)")
      ->check(AtLeast(0));
  v->add_option("--testbed-keys", o.testbed_keys,
                "the emulated hosts' keys the simulator charges: 'files' (the network files'), "
                "'measure' (measure them on this host first: root, a minute or two per link rate), "
                "'latencies' (measure the wake-up and hand-off latencies alone: seconds; the CPU "
                "keys stay the files') or a testbed keys file an earlier measure wrote "
                "(validation/testbed_keys.h)")
      ->capture_default_str();
  v->add_flag("--loopback{false}", o.emulate,
              "run live over loopback instead of an emulated cluster (no root needed; the network "
              "is then not the scenario's)");
  return c;
}

int RunValidateCommand(const ValidateCommand& c, int argc, const char* const* argv) {
  if (!c.app->parsed()) return -1;
  if (c.draw_count != 0) {
    try {
      return validation::RunDraw(c.draw_count, c.draw_seed, c.options.input, c.data_dir,
                                 c.draw_bound);
    } catch (const config::ConfigError&) {
      throw;
    } catch (const std::runtime_error& e) {  // a file system error: said as bad input is
      throw config::ConfigError(std::string("error: ") + e.what());
    }
  }
  if (c.draw_bound.max_processes_per_core > 0) {
    throw config::ConfigError("error: --max-processes-per-core bounds a draw: give it with --draw N");
  }
  validation::ValidateOptions o = c.options;
  o.netns_script = c.data_dir + "/../scripts/netns-run";
  o.command = calibration::JoinCommandLine(argc, argv);
  return validation::RunValidate(o);
}

}  // namespace poseidon::app
