// real_runtime/transport_connect.cc: listening for connections (accept, the bound on pending
// handshakes) and dialing peers (retry with backoff until connect_timeout). See transport_impl.h.
#include "real_runtime/transport_impl.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace poseidon::rt {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

uint16_t Transport::Impl::Listen(const std::string& host, uint16_t port) {
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive);
  const tcp::endpoint ep = results.begin()->endpoint();
  acceptor_ = std::make_unique<tcp::acceptor>(io_);
  acceptor_->open(ep.protocol());
  acceptor_->set_option(tcp::acceptor::reuse_address(true));
  acceptor_->bind(ep);
  acceptor_->listen(asio::socket_base::max_listen_connections);
  const uint16_t bound = acceptor_->local_endpoint().port();
  log_->info("rank {}: listening on {}:{}", rank_, host, bound);
  DoAccept();
  return bound;
}

void Transport::Impl::DoAccept() {
  if (closed_ || !acceptor_) return;
  acceptor_->async_accept([self = shared_from_this()](asio::error_code ec, tcp::socket s) {
    self->OnAccept(ec, std::move(s));
  });
}

void Transport::Impl::OnAccept(asio::error_code ec, tcp::socket s) {
  if (closed_) return;
  if (ec) {
    if (ec == asio::error::operation_aborted) return;
    // Out of file descriptors and the like: say so and retry shortly rather than spin.
    log_->warn("rank {}: accept failed: {}; retrying in 100 ms", rank_, ec.message());
    accept_retry_.expires_after(std::chrono::milliseconds(100));
    accept_retry_.async_wait([self = shared_from_this()](asio::error_code e) {
      if (!e) self->DoAccept();
    });
    return;
  }
  asio::error_code ep_ec;
  const tcp::endpoint remote = s.remote_endpoint(ep_ec);
  const std::string addr =
      ep_ec ? std::string("?") : fmt::format("{}:{}", remote.address().to_string(), remote.port());
  // At the limit, the oldest handshaking connection makes room for the new one: a flood of
  // half-open connections then keeps a genuine peer out only by opening
  // max_pending_handshakes connections within the time that peer's handshake takes (and a
  // dialer that is cut off dials again), where refusing newcomers would let a slow trickle
  // of silent connections hold every slot. Memory and descriptors stay bounded the same way.
  if (pending_ >= o_.max_pending_handshakes && pending_ > 0) EvictOldestPending();
  if (pending_ >= o_.max_pending_handshakes) {  // max_pending_handshakes <= 0
    const std::string who = fmt::format("unauthenticated peer at {}", addr);
    const std::string reason = fmt::format(
        "{} connections are already handshaking (max_pending_handshakes); connection refused",
        pending_);
    log_->warn("rank {}: closing connection with {}: {}", rank_, who, reason);
    asio::error_code ignored;
    s.close(ignored);
    if (cb_.on_refused) cb_.on_refused(who, reason);
  } else {
    auto c = std::make_shared<Conn>(io_, ssl_);
    c->stream.next_layer() = std::move(s);
    c->addr = addr;
    c->accept_seq = ++accepts_;
    StartConn(c);
  }
  DoAccept();
}

void Transport::Impl::EvictOldestPending() {
  std::shared_ptr<Conn> oldest;
  for (const auto& [ptr, c] : conns_) {
    if (c->pending_counted && (!oldest || c->accept_seq < oldest->accept_seq)) oldest = c;
  }
  if (!oldest) return;
  Fail(oldest, fmt::format("{} connections are handshaking (max_pending_handshakes); the "
                           "oldest, this one ({} bytes received), is closed to make room for "
                           "a new one",
                           pending_, oldest->rx_off));
}

void Transport::Impl::Connect(int peer, const std::string& host, uint16_t port) {
  if (closed_) return;
  auto d = std::make_shared<Dial>(io_);
  d->peer = peer;
  d->host = host;
  d->port = port;
  d->deadline = Clock::now() + o_.connect_timeout;
  std::erase_if(dials_, [](const std::shared_ptr<Dial>& old) { return old->done; });
  dials_.push_back(d);
  Attempt(d);
}

void Transport::Impl::Attempt(const std::shared_ptr<Dial>& d) {
  d->resolver.async_resolve(
      d->host, std::to_string(d->port),
      [self = shared_from_this(), d](asio::error_code ec, tcp::resolver::results_type results) {
        if (self->closed_ || d->done) return;
        if (ec) return self->Retry(d, "cannot resolve the host: " + ec.message());
        auto c = std::make_shared<Conn>(self->io_, self->ssl_);
        d->conn = c;
        asio::async_connect(c->stream.next_layer(), results,
                            [self, d, c](asio::error_code e, const tcp::endpoint& ep) {
                              if (self->closed_ || d->done) return;
                              if (e) return self->Retry(d, e.message());
                              // d stays open until the handshake is done: a handshake the peer cuts
                              // short dials again (see Fail).
                              d->conn.reset();
                              c->dial = d;
                              c->dialer = true;
                              c->expected_peer = d->peer;
                              c->addr = fmt::format("{}:{}", ep.address().to_string(), ep.port());
                              self->StartConn(c);
                            });
      });
}

void Transport::Impl::Retry(const std::shared_ptr<Dial>& d, const std::string& error) {
  if (Clock::now() + d->backoff > d->deadline) {
    d->done = true;
    const std::string reason =
        fmt::format("could not connect to rank {} at {}:{} within {} ms: {}", d->peer, d->host,
                    d->port, o_.connect_timeout.count(), error);
    log_->error("rank {}: {}", rank_, reason);
    if (cb_.on_peer_down) cb_.on_peer_down(d->peer, reason);
    return;
  }
  d->timer.expires_after(d->backoff);
  d->backoff = std::min(d->backoff * 2, std::chrono::milliseconds(1000));
  d->timer.async_wait([self = shared_from_this(), d](asio::error_code ec) {
    if (!ec && !self->closed_ && !d->done) self->Attempt(d);
  });
}

}  // namespace poseidon::rt
