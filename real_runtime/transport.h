// real_runtime/transport.h: the live runtime's TCP transport (standalone asio, OpenSSL).
//
// One TCP connection per pair of nodes. Every connection opens with the authenticated handshake
// of handshake.h (optionally inside TLS) and then carries length-prefixed frames (frame.h): core
// messages, in order, and opaque runtime control frames. Anything malformed, oversized,
// out of sequence, unauthenticated or unexpected closes *that* connection with one logged reason
// naming the peer (rank and address), the stream offset and what was wrong; the process and its
// other connections go on. Limits that bound what a hostile or broken peer can cost:
//   - a frame's length is checked against max_payload_bytes (kMaxHandshakeFrameBytes before
//     authentication) before anything is allocated;
//   - a frame whose first byte has arrived must complete within frame_timeout;
//   - a connection must finish its handshake within handshake_timeout, and at most
//     max_pending_handshakes accepted connections may be handshaking at once (a new one past
//     the limit closes the oldest), so half-open connections cannot exhaust memory or file
//     descriptors, and cannot keep a genuine peer out unless they arrive faster than its
//     handshake completes (a dialer cut off during the handshake dials again);
//   - at most max_queued_bytes_per_peer bytes wait to be written per peer (see Send).
//
// Threading: single-threaded. Every member function must be called, and every callback is
// called, on the thread running `io` (other threads asio::post into it). Callbacks may call
// back into the Transport (Send, Close, ...).
//
//   asio::io_context io;
//   TransportOptions o{.job_id = "job-42", .secret = LoadSecretFile("job.secret")};
//   TransportCallbacks cb;
//   cb.on_message = [](core::Message m) { ... };
//   Transport t(io, /*my_rank=*/0, o, cb);
//   uint16_t port = t.Listen("0.0.0.0", 0);
//   // elsewhere: t1.Connect(0, "10.0.0.1", port); on_peer_up(0) then t1.Send(msg)
//   io.run();
#pragma once

#include <asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/messages.h"
#include "real_runtime/handshake.h"

namespace spdlog {
class logger;
}

namespace poseidon::rt {

struct TransportOptions {
  std::string job_id;  // bound into the handshake; at most kMaxJobIdBytes bytes
  std::string secret;  // the shared secret's bytes (never logged); see LoadSecretFile
  // This process's incarnation (0 at the first start, +1 at every restart), bound into the
  // handshake and every frame it sends; a peer's frames must carry the epoch its HELLO bound.
  uint32_t epoch = 0;
  // The job's ranks are 0..num_ranks-1: a HELLO claiming another is refused (0 = no check).
  int num_ranks = 0;
  uint32_t max_payload_bytes = 256u << 20;         // per frame, after the 32-byte header
  size_t max_queued_bytes_per_peer = 64u << 20;    // backpressure bound, see Send
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds frame_timeout{10000};   // a started frame must complete within this
  std::chrono::milliseconds connect_timeout{30000}; // Connect retries until this has passed
  int max_pending_handshakes = 64;                  // accepted connections not yet authenticated
  int socket_buffer_bytes = 4 << 20;                // SO_SNDBUF / SO_RCVBUF (the kernel caps it)
  // > 0: every connection sends at most this many bytes per second (SO_MAX_PACING_RATE;
  // socket_pacing.h): the scenario's network.connection_gbps, a cloud's cap on one flow. 0 = none.
  double max_pacing_Bps = 0;
  // Optional TLS (both sides must agree): every connection is TLS 1.2+ with certificates
  // verified against tls_ca on both ends (mutual TLS), and the HMAC handshake runs inside it.
  // Peer host names are not checked: a peer is identified by the HMAC handshake, TLS adds
  // confidentiality and integrity of the stream.
  bool tls = false;
  std::string tls_cert, tls_key, tls_ca;  // PEM file paths
  // Where log lines go; null = spdlog's default logger.
  std::shared_ptr<spdlog::logger> logger;
};

struct TransportCallbacks {
  // Handshake done (on both the dialing and the accepting side): Send to `peer` may start.
  std::function<void(int peer)> on_peer_up;
  // An authenticated connection closed (the reason is logged too), or Connect gave up or its
  // handshake failed. Not called for connections closed by Close().
  std::function<void(int peer, const std::string& reason)> on_peer_down;
  // A decoded core message; msg.from is the authenticated peer, msg.to this node's rank. `data`
  // is null when the message carried no floats (its payload_bytes is kept as sent).
  std::function<void(core::Message msg)> on_message;
  // A runtime control frame (type >= kFrameControlMin) from an authenticated peer.
  std::function<void(int peer, uint8_t type, std::vector<uint8_t> body)> on_control;
  // The last byte of a Send()'s frame has been written to the socket.
  std::function<void(const core::Message& msg)> on_sent;
  // Optional: a connection was refused or closed for a protocol, authentication or resource
  // reason (after the reason was logged). `peer` reads "rank 3 at 10.0.0.7:51234" or
  // "unauthenticated peer at 10.0.0.7:51234". Meant for tests and metrics.
  std::function<void(const std::string& peer, const std::string& reason)> on_refused;
};

class Transport {
 public:
  // Throws std::runtime_error on bad options (empty secret, job id too long, TLS files that do
  // not load), naming what to fix.
  Transport(asio::io_context& io, int my_rank, TransportOptions opts, TransportCallbacks cb);
  ~Transport();  // Close()s
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Listens on host:port (port 0 = the OS picks one) and returns the bound port. Throws
  // std::system_error if the address cannot be bound.
  uint16_t Listen(const std::string& host, uint16_t port);

  // Dials `peer` at host:port, retrying with backoff (50 ms doubling to 1 s) while the peer is
  // not listening yet, until connect_timeout; then handshakes and the connection must turn out
  // to be `peer`'s. A handshake the peer cuts short (it closes or resets the connection before
  // AUTH is done, as a listener at its max_pending_handshakes limit may) is dialed again the
  // same way, until connect_timeout. Success: on_peer_up(peer). Failure: on_peer_down(peer,
  // reason).
  void Connect(int peer, const std::string& host, uint16_t port);

  // Queues msg for msg.to, in order with every earlier Send to that peer, and never blocks; the
  // floats are written from msg.data without a copy (the vector must not be modified until
  // on_sent). Returns false, logs why and queues nothing when msg.to is not up, or when the
  // frame would take the peer's queue past max_queued_bytes_per_peer (backpressure: a frame
  // is always accepted into an empty queue, whatever its size). The caller keeps the message
  // and retries after on_sent has reported progress to that peer.
  bool Send(const core::Message& msg);
  // A runtime control frame; type must be >= kFrameControlMin. Same queueing rules as Send.
  bool SendControl(int peer, uint8_t type, std::vector<uint8_t> body);

  // Bytes (headers included) queued for `peer` and not yet written to its socket.
  size_t queued_bytes(int peer) const;
  bool is_up(int peer) const;
  int my_rank() const;
  // The epoch (incarnation) the connected peer's handshake bound; 0 when not up.
  uint32_t peer_epoch(int peer) const;
  // Fault tolerance: from now on a HELLO from `peer` with an epoch below `epoch` is refused (an
  // incarnation declared dead), and its connection, if older, is closed.
  void RefuseEpochsBelow(int peer, uint32_t epoch);
  // Closes the connection with `peer`, if up, without calling on_peer_down.
  void Disconnect(int peer);

  // Closes the listener and every connection; no callback fires for them afterwards. Safe to
  // call from inside a callback; idempotent.
  void Close();

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace poseidon::rt
