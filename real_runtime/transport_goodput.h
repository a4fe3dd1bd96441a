// real_runtime/transport_goodput.h: goodput of the live transport between two processes, for
// links that exist only between processes (an emulated cluster's shaped veth links). Run by
// bench/transport_goodput and by `poseidon transport-goodput` (hidden: what `validate
// --testbed-keys measure` moves between two emulated machines, validation/testbed_keys.h).
//
//   RunTransportGoodput({.listen = "7000"});                              // rank 0: receives
//   RunTransportGoodput({.connect = "10.77.0.1:7000", .mib = 256});       // rank 1: pushes
//
// The sender pushes core::Message frames with float payloads (as gradient pushes travel) and
// keeps the transport's queue full; the receiver times from the first byte of the first message
// to the last byte of the last and prints payload goodput in Gbit/s (1e9 bit/s) on stdout. The
// shared secret is fixed: this measures, it does not protect.
#pragma once

#include <cstdint>
#include <string>

namespace poseidon::rt {

struct GoodputOptions {
  std::string listen;   // PORT: receive
  std::string connect;  // HOST:PORT: send
  int64_t mib = 256;
  int64_t message_kib = 4096;
};

// 0 when every message arrived; 1 when the peer was lost; 2 for bad options (said on stderr).
int RunTransportGoodput(const GoodputOptions& options);

}  // namespace poseidon::rt
