// apps/poseidon/validate_command.h: the flags of `poseidon validate` (the simulator's prediction
// against live runs) and `poseidon validate --draw` (a held-out set drawn at random). Flags only:
// the work is in validation/ (validate.h, draw.h).
//
//   auto validate = AddValidateCommand(app);          // before parsing
//   if (int rc = RunValidateCommand(*validate, argc, argv); rc >= 0) return rc;   // after
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace poseidon::app {

struct ValidateCommand;

// Adds `validate`; `data_dir` is where the scenarios are (--draw's profiles and base scenario,
// scripts/netns-run beside it).
std::shared_ptr<ValidateCommand> AddValidateCommand(CLI::App& app, const std::string& data_dir);
// Runs it when it was parsed and returns its exit code; -1 when it was not given. Bad input
// throws config::ConfigError.
int RunValidateCommand(const ValidateCommand& c, int argc, const char* const* argv);

}  // namespace poseidon::app
