// apps/poseidon/reproduce_command.h: the flags of `poseidon reproduce FILE...`: published
// multi-machine measurements (scenarios/measurements/*.yaml) against the simulator, only the
// one-GPU time calibrated. Flags only: the work is in sim/reproduce.h.
//
//   auto reproduce = AddReproduceCommand(app);                         // before parsing
//   if (int rc = RunReproduceCommand(*reproduce); rc >= 0) return rc;  // after
#pragma once

#include <memory>

#include <CLI/CLI.hpp>

namespace poseidon::app {

struct ReproduceCommand;

std::shared_ptr<ReproduceCommand> AddReproduceCommand(CLI::App& app);
// Runs it when it was parsed and returns its exit code; -1 when it was not given. Bad input
// throws config::ConfigError (one located line).
int RunReproduceCommand(const ReproduceCommand& c);

}  // namespace poseidon::app
