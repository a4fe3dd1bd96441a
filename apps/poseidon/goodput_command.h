// apps/poseidon/goodput_command.h: the flags of `poseidon transport-goodput` (hidden from the help:
// a measuring role, real_runtime/transport_goodput.h). `validate --testbed-keys measure` runs it
// in two emulated machines to move bytes through the live transport while it reads the kernel's
// CPU (validation/testbed_keys.h).
//
//   auto goodput = AddGoodputCommand(app);                      // before parsing
//   if (int rc = RunGoodputCommand(*goodput); rc >= 0) return rc;   // after
#pragma once

#include <memory>

#include <CLI/CLI.hpp>

namespace poseidon::app {

struct GoodputCommand;

std::shared_ptr<GoodputCommand> AddGoodputCommand(CLI::App& app);
// Its exit code when it was given; -1 when not.
int RunGoodputCommand(const GoodputCommand& c);

}  // namespace poseidon::app
