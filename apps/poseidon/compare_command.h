// apps/poseidon/compare_command.h: the flags of `poseidon compare SCENARIO`: Poseidon against
// PyTorch DDP, Horovod and two parameter servers on the scenario's cluster. Flags only: the work
// is in sim/compare.h; --plot runs analysis/plot_compare.py on the JSON.
//
//   auto compare = AddCompareCommand(app, POSEIDON_DATA_DIR);        // before parsing
//   if (int rc = RunCompareCommand(*compare); rc >= 0) return rc;     // after
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace poseidon::app {

struct CompareCommand;

// Adds `compare`; `data_dir` is the scenarios folder (analysis/ is beside it).
std::shared_ptr<CompareCommand> AddCompareCommand(CLI::App& app, const std::string& data_dir);
// Runs it when it was parsed and returns its exit code; -1 when it was not given. Bad input
// throws config::ConfigError (one located line).
int RunCompareCommand(const CompareCommand& c);

}  // namespace poseidon::app
