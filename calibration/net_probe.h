// calibration/net_probe.h: the TCP probe of `poseidon calibrate-net` (a measuring tool over plain
// POSIX sockets, not the protocol transport of real_runtime/).
//
// Two programs talk over TCP (TCP_NODELAY). Every request is a 24-byte header {op u32, zero u32,
// size u64, arg u64} (little-endian):
//   ping   the server echoes the header                       -> round-trip latency
//   sink   `size` payload bytes follow; the server answers with a header once all arrived
//                                                              -> time of one message of `size`
//   quit   the client is done (a `--once` server then exits)
// The client (ProbeNetwork) sends pings, then sinks of 4 KiB .. 64 MiB (x4 steps; each size
// repeated until `seconds_per_size` has passed, at least 3 and at most 200 times), then the same
// sink on 1, 2, 4, 8 connections at once, and fits the simulator's network figures:
//   latency_us              = min(c, median ping RTT) / 2 (c below: the fixed cost data messages
//                             see; below the RTT over a token-bucket shaper, which credits the
//                             idle round trip before each message)
//   t(S) = c + S / beta     beta: weighted least squares (weights 1/t^2) over the sink medians
//                           of >= 1 MiB (all sizes when fewer than two are that large): a
//                           shaper's token bucket passes smaller messages partly above line
//                           rate; c: weighted mean of t - S/beta over the sizes >= 64 KiB
//                           (smaller ones fit in that credit and take ~ one RTT)
//   bandwidth_gbps          = the nominal line rate when given, else beta (then efficiency 1)
//   efficiency              = beta / line rate (capped at 1)
//   per_message_overhead_us = max(0, (c - RTT) / 2): what a message costs beyond a ping, split
//                             over the two messages (payload, answer) the simulator replays
// With those figures the simulator's flow model replays a sink as payload flow + answer flow and
// gives exactly c + S/beta (+ 24 bytes).
//
// Transfer check (calibration loop (b)): a receiver (RunTransferReceiver) waits for N senders
// (RunTransferSender, each in its own network namespace), then for each case (k senders, S bytes)
// sends each of k senders a `go` header and times until all k*S bytes have arrived. The same case
// is predicted on the simulator's network model (PredictTransfer).
//
// Errors (cannot resolve/connect/bind, a peer that closes or sends a bad header) throw ProbeError
// naming the peer and the byte offset. Thread-safety: each call owns its sockets; the server runs
// one thread per connection.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/network_loader.h"
#include "config/specs.h"

namespace poseidon::calibration {

class ProbeError : public std::runtime_error {
 public:
  explicit ProbeError(const std::string& msg) : std::runtime_error(msg) {}
};

// "HOST:PORT" or ":PORT" / "PORT" (host "0.0.0.0"). Throws ProbeError for a bad port.
struct HostPort {
  std::string host;
  int port = 0;
};
HostPort ParseHostPort(const std::string& text, const std::string& default_host);

// A listening socket bound to `hp` (port 0 picks a free one; port() says which).
class ProbeServer {
 public:
  explicit ProbeServer(const HostPort& hp);
  ~ProbeServer();
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;
  int port() const { return port_; }
  // Serves connections (one thread each) until a client sends quit (once == true) or forever.
  void Serve(bool once, const std::function<void(const std::string&)>& log);
  // One accepted connection (its fd, owned by the caller) within timeout_s, or -1.
  int AcceptFd(std::string* peer, double timeout_s);

 private:
  int fd_ = -1;
  int port_ = 0;
};

struct ProbeOptions {
  int64_t min_size = 4 * 1024;
  int64_t max_size = 64 * 1024 * 1024;
  double seconds_per_size = 0.5;
  int pings = 200;
  std::vector<int> streams = {1, 2, 4, 8};
  int64_t stream_bytes = 8 * 1024 * 1024;  // per connection in the concurrency test
  double line_rate_gbps = 0;               // nominal rate (e.g. the tbf rate); 0 = unknown
  double connect_timeout_s = 5;            // retry connecting this long (the server may start late)
};

struct SizePoint {
  int64_t bytes = 0;
  int reps = 0;
  double median_ms = 0, p10_ms = 0, p90_ms = 0;
  double predicted_ms = 0;  // by the fitted network file on the simulator's model
};

struct ProbeResult {
  double rtt_us = 0;  // median
  double rtt_p10_us = 0, rtt_p90_us = 0;
  std::vector<SizePoint> sizes;
  std::vector<std::pair<int, double>> streams_gbps;  // connections -> aggregate goodput
  double beta_Bps = 0, intercept_us = 0;
  config::NetworkFileSpec network;  // the fitted figures, provenance filled
};

using ProbeProgress = std::function<void(const std::string&)>;
ProbeResult ProbeNetwork(const HostPort& server, const ProbeOptions& options,
                         const std::string& command, const ProbeProgress& progress);

// --- transfer check ------------------------------------------------------------------------

struct TransferCase {
  int senders = 1;
  int64_t bytes = 0;
  std::vector<double> samples_ms;
  double measured_ms = 0;  // median
  double predicted_ms = 0;
};

// Waits for `senders` connections on `server`, runs every (k in concurrency, S in sizes) case
// `reps` times, tells the senders to quit, returns the cases (measured only).
std::vector<TransferCase> RunTransferReceiver(ProbeServer& server, int senders,
                                              const std::vector<int>& concurrency,
                                              const std::vector<int64_t>& sizes, int reps,
                                              const ProbeProgress& progress);
// Connects (retrying for `connect_timeout_s` while the receiver starts) and obeys until quit.
void RunTransferSender(const HostPort& receiver, double connect_timeout_s);

// The case on the simulator's network model (sim::MakeNetworkModel of `spec` over a star of
// senders + 1 hosts): the receiver's 24-byte go flows to each sender at t = 0, each sender's S-byte
// flow to the receiver when its go is delivered; the time of the last delivery, in ms.
double PredictTransferMs(const config::NetworkSpec& spec, int senders, int64_t bytes);
// One sink of S bytes (payload flow, then 24-byte answer flow) between two hosts, in ms.
double PredictSinkMs(const config::NetworkSpec& spec, int64_t bytes);

}  // namespace poseidon::calibration
