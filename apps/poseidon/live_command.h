// apps/poseidon/live_command.h: `poseidon node` (one process of a live job), `poseidon launch`
// (a whole live job on this machine) and `poseidon trace merge` (one timeline from the
// processes' traces). Flags only; the work is in real_runtime/ and core/trace.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace poseidon::app {

class LiveCommands {
 public:
  virtual ~LiveCommands() = default;
  // Runs the parsed subcommand and returns its exit code; -1 when neither was given.
  virtual int RunIfParsed() = 0;
  // The words after the command line's first "--" (a program to run: launch --torch, node),
  // given before RunIfParsed. Returns false when none of these subcommands was parsed to take them.
  virtual bool TakeCommand(std::vector<std::string> words) = 0;
};

// Adds `node`, `launch` and `trace merge` to `app`.
std::unique_ptr<LiveCommands> AddLiveCommands(CLI::App& app);

}  // namespace poseidon::app
