// apps/poseidon/calibrate_command.h: `poseidon calibrate`, `poseidon calibrate-check` and
// `poseidon calibrate-net` (flags -> calibration/ library; no logic of their own).
//
//   poseidon calibrate --model fmnist_mlp --batch 64 --backend cpu --repetitions 20 -o p.yaml
//   poseidon calibrate-check --profile p.yaml --iterations 20      # loop (a): measured vs predicted
//   poseidon calibrate-net --listen 7070 --once                     # probe server
//   poseidon calibrate-net --connect 10.77.0.1:7070 --line-rate-gbps 1 -o net.yaml
//   poseidon calibrate-net --receive 7071 --senders 4 --network net.yaml   # loop (b) receiver
//   poseidon calibrate-net --send 10.77.0.1:7071                            # loop (b) sender
//
// main.cc calls AddCalibrateCommands before parsing and RunCalibrateCommands after; the latter
// returns -1 when none of these subcommands was given. Bad flags or files throw ConfigError;
// network failures throw calibration::ProbeError (main prints both as one error line).
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace poseidon::app {

struct CalibrateCommands;

// `data_dir` is read when the command runs (after parsing), so --data-dir applies.
std::shared_ptr<CalibrateCommands> AddCalibrateCommands(CLI::App& app, const std::string* data_dir);
int RunCalibrateCommands(const CalibrateCommands& c, int argc, const char* const* argv);

}  // namespace poseidon::app
