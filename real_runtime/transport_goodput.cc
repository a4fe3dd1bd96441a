#include "real_runtime/transport_goodput.h"

#include <asio.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "real_runtime/transport.h"

namespace poseidon::rt {

int RunTransportGoodput(const GoodputOptions& options) {
  const std::string& listen = options.listen;
  const std::string& connect = options.connect;
  const int64_t mib = options.mib, message_kib = options.message_kib;
  if (listen.empty() == connect.empty() || mib <= 0 || message_kib <= 0) {
    std::fprintf(stderr, "transport_goodput: give exactly one of --listen PORT, --connect HOST:PORT "
                         "(and --mib, --message-kib > 0)\n");
    return 2;
  }
  asio::io_context io;
  TransportOptions o;
  o.job_id = "goodput";
  o.secret = "transport-goodput-benchmark-secret";
  o.connect_timeout = std::chrono::milliseconds(20000);
  const int64_t floats = message_kib * 256;
  const int64_t messages = mib * 1024 / message_kib;
  TransportCallbacks cb;
  using Clock = std::chrono::steady_clock;
  Clock::time_point first;
  int64_t received = 0;
  int rc = 0;
  std::unique_ptr<Transport> t;
  // Sender state (lives as long as the loop runs).
  auto payload = std::make_shared<const std::vector<float>>(static_cast<size_t>(floats), 1.5f);
  int64_t sent = 0, done = 0;
  std::function<void()> pump = [&] {
    while (sent < messages) {
      core::Message m;
      m.type = core::MsgType::kPushGrad;
      m.from = 1;
      m.to = 0;
      m.clock = sent;
      m.chunk = 0;
      m.layer = 0;
      m.payload_bytes = floats * 4;
      m.data = payload;
      if (!t->Send(m)) return;
      ++sent;
    }
  };
  if (!listen.empty()) {
    cb.on_message = [&](core::Message m) {
      if (received++ == 0) first = Clock::now();
      (void)m;
      if (received == messages) {
        const double s = std::chrono::duration<double>(Clock::now() - first).count();
        // The first message's bytes are not inside the timed window.
        const double bits = 8.0 * 4.0 * static_cast<double>(floats) * static_cast<double>(messages - 1);
        std::printf("received %lld messages of %lld KiB: %.3f Gbit/s payload goodput\n",
                    static_cast<long long>(messages), static_cast<long long>(message_kib),
                    bits / s / 1e9);
        std::fflush(stdout);
        t->Close();
      }
    };
    cb.on_peer_down = [&](int, const std::string& why) {
      if (received < messages) {
        std::fprintf(stderr, "transport_goodput: sender lost: %s\n", why.c_str());
        rc = 1;
      }
    };
    t = std::make_unique<Transport>(io, 0, o, cb);
    t->Listen("0.0.0.0", static_cast<uint16_t>(std::atoi(listen.c_str())));
  } else {
    const size_t colon = connect.rfind(':');
    cb.on_peer_up = [&](int) { pump(); };
    cb.on_sent = [&](const core::Message&) {
      if (++done == messages) return;  // the receiver closes when it has everything
      pump();
    };
    cb.on_peer_down = [&](int, const std::string& why) {
      if (sent < messages) {
        std::fprintf(stderr, "transport_goodput: receiver lost: %s\n", why.c_str());
        rc = 1;
      }
      t->Close();
    };
    t = std::make_unique<Transport>(io, 1, o, cb);
    t->Connect(0, connect.substr(0, colon),
               static_cast<uint16_t>(std::atoi(connect.substr(colon + 1).c_str())));
  }
  io.run();
  return rc;
}

}  // namespace poseidon::rt
