// real_runtime/transport.cc: the Transport API over its Impl (transport_impl.h): the options and
// the TLS context, a connection's start, refusal and close, and the per-peer state the API reads.

#include "real_runtime/transport_impl.h"

#include <endian.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <bit>
#include <stdexcept>

#include "real_runtime/socket_pacing.h"

namespace poseidon::rt {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// The floats go on the wire in the host's layout (see frame.h): little-endian hosts only.
static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

Transport::Impl::Impl(asio::io_context& io, int rank, TransportOptions o, TransportCallbacks cb)
    : io_(io),
      rank_(rank),
      o_(std::move(o)),
      cb_(std::move(cb)),
      log_(o_.logger ? o_.logger : spdlog::default_logger()),
      ssl_(asio::ssl::context::tls),
      accept_retry_(io) {
  if (o_.secret.empty()) {
    throw std::runtime_error(
        "TransportOptions.secret is empty; load the job's secret file "
        "with LoadSecretFile");
  }
  if (o_.job_id.size() > kMaxJobIdBytes) {
    throw std::runtime_error(fmt::format("TransportOptions.job_id has {} bytes, at most {}",
                                         o_.job_id.size(), kMaxJobIdBytes));
  }
  if (o_.max_payload_bytes < kMessageFixedBytes) {
    throw std::runtime_error("TransportOptions.max_payload_bytes is smaller than a message");
  }
  if (o_.tls) SetUpTls();
}

void Transport::Impl::SetUpTls() {
  auto load = [&](const char* what, const std::string& path, auto&& f) {
    if (path.empty()) {
      throw std::runtime_error(fmt::format("TLS is on but TransportOptions.{} is empty", what));
    }
    asio::error_code ec;
    f(path, ec);
    if (ec) {
      throw std::runtime_error(
          fmt::format("TLS {} {}: {}; give a readable PEM file", what, path, ec.message()));
    }
  };
  ssl_.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1);
  load("tls_cert", o_.tls_cert,
       [&](const std::string& p, asio::error_code& ec) { ssl_.use_certificate_chain_file(p, ec); });
  load("tls_key", o_.tls_key, [&](const std::string& p, asio::error_code& ec) {
    ssl_.use_private_key_file(p, asio::ssl::context::pem, ec);
  });
  load("tls_ca", o_.tls_ca,
       [&](const std::string& p, asio::error_code& ec) { ssl_.load_verify_file(p, ec); });
  ssl_.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
}

void Transport::Impl::StartConn(const std::shared_ptr<Conn>& c) {
  asio::error_code ignored;
  auto& sock = c->stream.next_layer();
  sock.set_option(tcp::no_delay(true), ignored);
  sock.set_option(asio::socket_base::send_buffer_size(o_.socket_buffer_bytes), ignored);
  sock.set_option(asio::socket_base::receive_buffer_size(o_.socket_buffer_bytes), ignored);
  if (o_.max_pacing_Bps > 0) {
    std::string error;
    if (!SetMaxPacingRate(sock.native_handle(), o_.max_pacing_Bps, &error)) {
      log_->warn("transport: the connection's rate is not capped: {}", error);
    }
  }
  conns_.emplace(c.get(), c);
  if (!c->dialer) {
    c->pending_counted = true;
    ++pending_;
  }
  c->hs_timer.expires_after(o_.handshake_timeout);
  c->hs_timer.async_wait([self = shared_from_this(), c](asio::error_code ec) {
    if (ec || c->state == ConnState::kUp || c->state == ConnState::kClosed) return;
    self->Fail(c, fmt::format("handshake not completed within {} ms ({} bytes received)",
                              self->o_.handshake_timeout.count(), c->rx_off));
  });
  c->tls = o_.tls;
  if (c->tls) {
    c->state = ConnState::kTls;
    c->stream.async_handshake(
        c->dialer ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
        [self = shared_from_this(), c](asio::error_code ec) {
          if (c->state == ConnState::kClosed) return;
          if (ec) return self->Fail(c, "TLS handshake failed: " + ec.message());
          self->BeginHandshake(c);
        });
  } else {
    BeginHandshake(c);
  }
}

std::string Transport::Impl::Who(const Conn& c) const {
  if (c.state == ConnState::kUp) return fmt::format("rank {} at {}", c.peer, c.addr);
  if (c.dialer)
    return fmt::format("rank {} at {} (dialed, not yet authenticated)", c.expected_peer, c.addr);
  if (c.claimed >= 0) {
    return fmt::format("unauthenticated peer at {} (claims rank {})", c.addr, c.claimed);
  }
  return fmt::format("unauthenticated peer at {}", c.addr);
}

// Closes c for `reason`: one log line, then the callbacks. `peer_hung_up`: the peer closed
// or reset the connection (rather than this side finding something wrong). A dialed
// connection that the peer hangs up on during the HELLO/AUTH exchange is dialed again, with
// the same backoff, until connect_timeout: a listener flooded with half-open connections
// may have closed it to make room (max_pending_handshakes), and that must not make a genuine
// peer give up. (A listener that refused it for a reason -- a duplicate rank -- says why in
// its own log; this side then gives up at connect_timeout.)
//
// `refusal` (an acceptor refusing a dialer's AUTH): a last handshake frame of that code is
// written before the socket closes, if nothing else is being written.
void Transport::Impl::Fail(const std::shared_ptr<Conn>& c, const std::string& reason,
                           bool peer_hung_up, uint8_t refusal) {
  if (c->state == ConnState::kClosed || closed_) return;
  const std::string who = Who(*c);
  const bool was_up = c->state == ConnState::kUp;
  const int peer = was_up ? c->peer : c->expected_peer;
  const std::shared_ptr<Dial> dial = std::move(c->dial);
  const bool redial = dial && peer_hung_up && c->state == ConnState::kHandshake;
  log_->warn("rank {}: closing connection with {}: {}{}", rank_, who, reason,
             redial ? "; dialing again" : "");
  if (refusal != 0 && !c->writing) WriteRefusal(c, refusal);
  Shutdown(c);
  if (cb_.on_refused) cb_.on_refused(who, reason);
  if (redial) return Retry(dial, reason);
  if (dial) dial->done = true;
  if ((was_up || c->dialer) && cb_.on_peer_down) cb_.on_peer_down(peer, reason);
}

// The peer closed the connection cleanly between frames.
void Transport::Impl::PeerClosed(const std::shared_ptr<Conn>& c, const std::string& why) {
  if (c->state != ConnState::kUp) {
    return Fail(c,
                fmt::format("connection closed by the peer during the handshake at stream "
                            "offset {} ({})",
                            c->rx_off, why),
                /*peer_hung_up=*/true);
  }
  const std::string reason =
      fmt::format("connection closed by the peer at stream offset {} ({})", c->rx_off, why);
  log_->info("rank {}: rank {} at {}: {}", rank_, c->peer, c->addr, reason);
  const int peer = c->peer;
  Shutdown(c);
  if (cb_.on_peer_down) cb_.on_peer_down(peer, reason);
}

void Transport::Impl::Shutdown(const std::shared_ptr<Conn>& c) {
  if (c->state == ConnState::kClosed) return;
  if (c->state == ConnState::kUp) {
    auto it = up_.find(c->peer);
    if (it != up_.end() && it->second == c) up_.erase(it);
  }
  c->state = ConnState::kClosed;
  if (c->pending_counted) {
    c->pending_counted = false;
    --pending_;
  }
  asio::error_code ignored;
  if (!c->refusing) c->stream.next_layer().close(ignored);
  if (!c->refusing) c->hs_timer.cancel();
  c->frame_timer.cancel();
  c->queue.clear();
  c->queued_bytes = 0;
  conns_.erase(c.get());
}

// A connection being closed writes one refusal frame, then closes (bounded by hs_timer's
// deadline: a peer that does not read cannot hold the socket open).
void Transport::Impl::WriteRefusal(const std::shared_ptr<Conn>& c, uint8_t code) {
  FrameHeader h;
  h.type = kFrameRefused;
  h.sender = static_cast<uint32_t>(rank_);
  h.seq = c->tx_seq++;
  h.epoch = o_.epoch;
  h.length = 1;
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  const auto hb = EncodeFrameHeader(h);
  bytes->assign(hb.begin(), hb.end());
  bytes->push_back(code);
  c->refusing = true;
  c->WithStream([&](auto& s) {
    asio::async_write(s, asio::buffer(*bytes), [c, bytes](asio::error_code, size_t) {
      asio::error_code ignored;
      c->stream.next_layer().close(ignored);
    });
  });
  c->hs_timer.expires_after(o_.handshake_timeout);
  c->hs_timer.async_wait([c](asio::error_code ec) {
    if (ec) return;
    asio::error_code ignored;
    c->stream.next_layer().close(ignored);
  });
}

void Transport::Impl::Close() {
  if (closed_) return;
  closed_ = true;
  asio::error_code ignored;
  if (acceptor_) acceptor_->close(ignored);
  accept_retry_.cancel();
  for (auto& d : dials_) {
    d->done = true;
    d->resolver.cancel();
    d->timer.cancel();
    if (d->conn) d->conn->stream.next_layer().close(ignored);
  }
  dials_.clear();
  auto conns = conns_;
  for (auto& [ptr, c] : conns) Shutdown(c);
  up_.clear();
}

size_t Transport::Impl::queued_bytes(int peer) const {
  auto it = up_.find(peer);
  return it == up_.end() ? 0 : it->second->queued_bytes;
}

uint32_t Transport::Impl::peer_epoch(int peer) const {
  auto it = up_.find(peer);
  return it == up_.end() ? 0 : it->second->theirs.epoch;
}

void Transport::Impl::RefuseEpochsBelow(int peer, uint32_t epoch) {
  uint32_t& m = min_epoch_[peer];
  m = std::max(m, epoch);
  auto it = up_.find(peer);
  if (it != up_.end() && it->second->theirs.epoch < m) Disconnect(peer);
}

void Transport::Impl::Disconnect(int peer) {
  auto it = up_.find(peer);
  if (it == up_.end()) return;
  const std::shared_ptr<Conn> c = it->second;
  log_->info("rank {}: closing the connection with rank {} at {} (epoch {})", rank_, peer, c->addr,
             c->theirs.epoch);
  Shutdown(c);
}

Transport::Transport(asio::io_context& io, int my_rank, TransportOptions opts,
                     TransportCallbacks cb)
    : impl_(std::make_shared<Impl>(io, my_rank, std::move(opts), std::move(cb))) {}
Transport::~Transport() { impl_->Close(); }
uint16_t Transport::Listen(const std::string& host, uint16_t port) {
  return impl_->Listen(host, port);
}
void Transport::Connect(int peer, const std::string& host, uint16_t port) {
  impl_->Connect(peer, host, port);
}
bool Transport::Send(const core::Message& msg) { return impl_->Send(msg); }
bool Transport::SendControl(int peer, uint8_t type, std::vector<uint8_t> body) {
  return impl_->SendControl(peer, type, std::move(body));
}
size_t Transport::queued_bytes(int peer) const { return impl_->queued_bytes(peer); }
bool Transport::is_up(int peer) const { return impl_->is_up(peer); }
int Transport::my_rank() const { return impl_->rank_; }
uint32_t Transport::peer_epoch(int peer) const { return impl_->peer_epoch(peer); }
void Transport::RefuseEpochsBelow(int peer, uint32_t epoch) {
  impl_->RefuseEpochsBelow(peer, epoch);
}
void Transport::Disconnect(int peer) { impl_->Disconnect(peer); }
void Transport::Close() { impl_->Close(); }

}  // namespace poseidon::rt
