#include "apps/poseidon/goodput_command.h"

#include "apps/poseidon/cli_checks.h"
#include "real_runtime/transport_goodput.h"

namespace poseidon::app {

struct GoodputCommand {
  CLI::App* app = nullptr;
  rt::GoodputOptions options;
};

std::shared_ptr<GoodputCommand> AddGoodputCommand(CLI::App& app) {
  auto c = std::make_shared<GoodputCommand>();
  rt::GoodputOptions& o = c->options;
  CLI::App* g = c->app = app.add_subcommand(
      "transport-goodput", "push messages through the live transport between two processes");
  g->group("");  // hidden: a measuring role of validate --testbed-keys measure
  g->add_option("--listen", o.listen, "PORT: receive and print the payload goodput");
  g->add_option("--connect", o.connect, "HOST:PORT: push to a receiver");
  g->add_option("--mib", o.mib, "MiB to move")->check(AtLeast(1))->capture_default_str();
  g->add_option("--message-kib", o.message_kib, "KiB per message")
      ->check(AtLeast(1))
      ->capture_default_str();
  return c;
}

int RunGoodputCommand(const GoodputCommand& c) {
  if (!c.app->parsed()) return -1;
  return rt::RunTransportGoodput(c.options);
}

}  // namespace poseidon::app
