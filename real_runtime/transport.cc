#include "real_runtime/transport.h"

#include <endian.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <bit>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>

#include "real_runtime/frame.h"
#include "real_runtime/frame_mac.h"

namespace poseidon::rt {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// The floats go on the wire in the host's layout (see frame.h): little-endian hosts only.
static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

namespace {

// One frame waiting to be written. Core messages keep a reference to their floats (no copy);
// control and handshake frames own their small body.
struct OutFrame {
  std::array<uint8_t, kFrameHeaderBytes> header{};
  std::array<uint8_t, kMessageFixedBytes> fixed{};
  bool is_message = false;
  core::Message msg;          // for on_sent; msg.data is the payload written
  std::vector<uint8_t> body;  // control / handshake body
  FrameTag tag{};             // after the handshake: the frame's tag (frame_mac.h)
  bool tagged = false;
  size_t bytes = 0;           // header and tag included

  void AppendBuffers(std::vector<asio::const_buffer>* b) const {
    b->push_back(asio::buffer(header));
    if (is_message) {
      b->push_back(asio::buffer(fixed));
      if (msg.data && !msg.data->empty()) {
        b->push_back(asio::buffer(msg.data->data(), msg.data->size() * sizeof(float)));
      }
    } else if (!body.empty()) {
      b->push_back(asio::buffer(body));
    }
    if (tagged) b->push_back(asio::buffer(tag));
  }
};

enum class State { kTls, kHandshake, kUp, kClosed };

// The acceptor's last word to a dialer whose AUTH failed, so that the dialer says why rather than
// dialling again (handshake frames, like this one, carry no tag).
constexpr uint8_t kRefusedAuthFailed = 1;

constexpr size_t kMaxBuffersPerWrite = 48;

// Received payloads are read straight into vectors that come back here when the last reference
// to a delivered message's data is dropped (on any thread), so that steady-state traffic reuses
// warm memory instead of allocating, zero-filling and page-faulting a fresh vector per message.
class FloatPool : public std::enable_shared_from_this<FloatPool> {
 public:
  std::shared_ptr<std::vector<float>> Get(size_t n) {
    std::unique_ptr<std::vector<float>> v;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!free_.empty()) {
        v = std::move(free_.back());
        free_.pop_back();
        pooled_bytes_ -= v->capacity() * sizeof(float);
      }
    }
    if (!v) v = std::make_unique<std::vector<float>>();
    v->resize(n);  // every element is overwritten by the read that follows
    return std::shared_ptr<std::vector<float>>(
        v.release(), [self = shared_from_this()](std::vector<float>* p) { self->Put(p); });
  }

 private:
  void Put(std::vector<float>* p) {
    std::unique_ptr<std::vector<float>> v(p);
    const size_t bytes = v->capacity() * sizeof(float);
    std::lock_guard<std::mutex> l(mu_);
    if (free_.size() < kMaxPooled && pooled_bytes_ + bytes <= kMaxPooledBytes) {
      pooled_bytes_ += bytes;
      free_.push_back(std::move(v));
    }
  }
  static constexpr size_t kMaxPooled = 16;
  static constexpr size_t kMaxPooledBytes = size_t{64} << 20;
  std::mutex mu_;
  std::vector<std::unique_ptr<std::vector<float>>> free_;
  size_t pooled_bytes_ = 0;
};

}  // namespace

struct Dial;

struct Conn {
  Conn(asio::io_context& io, asio::ssl::context& ctx)
      : stream(io, ctx), hs_timer(io), frame_timer(io) {}

  asio::ssl::stream<tcp::socket> stream;
  bool tls = false;
  bool dialer = false;
  int expected_peer = -1;      // dialer: the rank dialed
  std::shared_ptr<Dial> dial;  // dialer, until the handshake ends: the Connect it belongs to
  int claimed = -1;            // the rank the peer's HELLO claims (not yet proven)
  int peer = -1;               // the authenticated rank, once up
  std::string addr;
  State state = State::kHandshake;
  bool pending_counted = false;  // accepted and still handshaking (max_pending_handshakes)
  uint64_t accept_seq = 0;       // accepted connections in order: the oldest is evicted first
  Role role() const { return dialer ? Role::kDialer : Role::kAcceptor; }
  Hello mine, theirs;
  std::vector<uint8_t> mine_raw, theirs_raw;  // the HELLO bodies as sent: the transcript
  bool have_hello = false;
  Digest transcript{};
  SessionKeys keys;
  std::unique_ptr<FrameMac> tx_mac, rx_mac;  // set once this side's / the peer's AUTH is done
  FrameTag rx_tag{};
  bool refusing = false;  // a refusal frame is being written; the socket closes after it

  // Read side.
  uint64_t rx_off = 0;  // bytes received so far = stream offset of the next byte
  uint64_t rx_seq = 0;
  std::array<uint8_t, kFrameHeaderBytes> hdr{};
  size_t hdr_got = 0;
  FrameHeader cur;
  uint64_t frame_off = 0;
  std::array<uint8_t, kMessageFixedBytes> fixed{};
  MessageFixed mf;
  std::vector<uint8_t> body;
  std::shared_ptr<std::vector<float>> floats;
  uint64_t frame_gen = 0;
  asio::steady_timer hs_timer, frame_timer;

  // Write side.
  uint64_t tx_seq = 0;
  std::deque<OutFrame> queue;
  size_t queued_bytes = 0;
  bool writing = false;
  size_t in_flight = 0;
  std::vector<asio::const_buffer> bufs;

  template <typename F>
  void WithStream(F&& f) {
    if (tls) {
      f(stream);
    } else {
      f(stream.next_layer());
    }
  }
};

struct Dial {
  Dial(asio::io_context& io) : resolver(io), timer(io) {}
  int peer = -1;
  std::string host;
  uint16_t port = 0;
  Clock::time_point deadline;
  std::chrono::milliseconds backoff{50};
  tcp::resolver resolver;
  asio::steady_timer timer;
  std::shared_ptr<Conn> conn;
  bool done = false;
};

class Transport::Impl : public std::enable_shared_from_this<Transport::Impl> {
 public:
  Impl(asio::io_context& io, int rank, TransportOptions o, TransportCallbacks cb)
      : io_(io),
        rank_(rank),
        o_(std::move(o)),
        cb_(std::move(cb)),
        log_(o_.logger ? o_.logger : spdlog::default_logger()),
        ssl_(asio::ssl::context::tls),
        accept_retry_(io) {
    if (o_.secret.empty()) {
      throw std::runtime_error("TransportOptions.secret is empty; load the job's secret file "
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

  void SetUpTls() {
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

  // ---- listening ----------------------------------------------------------------------------

  uint16_t Listen(const std::string& host, uint16_t port) {
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

  void DoAccept() {
    if (closed_ || !acceptor_) return;
    acceptor_->async_accept([self = shared_from_this()](asio::error_code ec, tcp::socket s) {
      self->OnAccept(ec, std::move(s));
    });
  }

  void OnAccept(asio::error_code ec, tcp::socket s) {
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

  void EvictOldestPending() {
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

  // ---- dialing ------------------------------------------------------------------------------

  void Connect(int peer, const std::string& host, uint16_t port) {
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

  void Attempt(const std::shared_ptr<Dial>& d) {
    d->resolver.async_resolve(
        d->host, std::to_string(d->port),
        [self = shared_from_this(), d](asio::error_code ec, tcp::resolver::results_type results) {
          if (self->closed_ || d->done) return;
          if (ec) return self->Retry(d, "cannot resolve the host: " + ec.message());
          auto c = std::make_shared<Conn>(self->io_, self->ssl_);
          d->conn = c;
          asio::async_connect(
              c->stream.next_layer(), results,
              [self, d, c](asio::error_code e, const tcp::endpoint& ep) {
                if (self->closed_ || d->done) return;
                if (e) return self->Retry(d, e.message());
                // d stays open until the handshake is done: a handshake the peer cuts short
                // dials again (see Fail).
                d->conn.reset();
                c->dial = d;
                c->dialer = true;
                c->expected_peer = d->peer;
                c->addr = fmt::format("{}:{}", ep.address().to_string(), ep.port());
                self->StartConn(c);
              });
        });
  }

  void Retry(const std::shared_ptr<Dial>& d, const std::string& error) {
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

  // ---- a connection's life --------------------------------------------------------------------

  void StartConn(const std::shared_ptr<Conn>& c) {
    asio::error_code ignored;
    auto& sock = c->stream.next_layer();
    sock.set_option(tcp::no_delay(true), ignored);
    sock.set_option(asio::socket_base::send_buffer_size(o_.socket_buffer_bytes), ignored);
    sock.set_option(asio::socket_base::receive_buffer_size(o_.socket_buffer_bytes), ignored);
    conns_.emplace(c.get(), c);
    if (!c->dialer) {
      c->pending_counted = true;
      ++pending_;
    }
    c->hs_timer.expires_after(o_.handshake_timeout);
    c->hs_timer.async_wait([self = shared_from_this(), c](asio::error_code ec) {
      if (ec || c->state == State::kUp || c->state == State::kClosed) return;
      self->Fail(c, fmt::format("handshake not completed within {} ms ({} bytes received)",
                                self->o_.handshake_timeout.count(), c->rx_off));
    });
    c->tls = o_.tls;
    if (c->tls) {
      c->state = State::kTls;
      c->stream.async_handshake(
          c->dialer ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
          [self = shared_from_this(), c](asio::error_code ec) {
            if (c->state == State::kClosed) return;
            if (ec) return self->Fail(c, "TLS handshake failed: " + ec.message());
            self->BeginHandshake(c);
          });
    } else {
      BeginHandshake(c);
    }
  }

  // The dialer speaks first; the acceptor answers a HELLO that passed its checks (OnBody).
  void BeginHandshake(const std::shared_ptr<Conn>& c) {
    c->state = State::kHandshake;
    if (c->dialer) SendHello(c, static_cast<uint32_t>(c->expected_peer));
    ReadHeader(c);
  }

  void SendHello(const std::shared_ptr<Conn>& c, uint32_t peer_rank) {
    c->mine.version = kProtocolVersion;
    c->mine.role = c->role();
    c->mine.rank = static_cast<uint32_t>(rank_);
    c->mine.epoch = o_.epoch;
    c->mine.peer_rank = peer_rank;
    c->mine.nonce = RandomNonce();
    c->mine.job_id = o_.job_id;
    c->mine_raw = EncodeHello(c->mine);
    OutFrame f;
    f.body = c->mine_raw;
    Enqueue(c, kFrameHello, std::move(f));
  }

  void SendAuth(const std::shared_ptr<Conn>& c) {
    const Mac proof = AuthProof(c->keys, c->role(), c->transcript);
    OutFrame f;
    f.body.assign(proof.begin(), proof.end());
    Enqueue(c, kFrameAuth, std::move(f));
    c->tx_mac = std::make_unique<FrameMac>(c->keys.Sending(c->role()));  // every later frame
  }

  std::string Who(const Conn& c) const {
    if (c.state == State::kUp) return fmt::format("rank {} at {}", c.peer, c.addr);
    if (c.dialer) return fmt::format("rank {} at {} (dialed, not yet authenticated)",
                                     c.expected_peer, c.addr);
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
  void Fail(const std::shared_ptr<Conn>& c, const std::string& reason, bool peer_hung_up = false,
            uint8_t refusal = 0) {
    if (c->state == State::kClosed || closed_) return;
    const std::string who = Who(*c);
    const bool was_up = c->state == State::kUp;
    const int peer = was_up ? c->peer : c->expected_peer;
    const std::shared_ptr<Dial> dial = std::move(c->dial);
    const bool redial = dial && peer_hung_up && c->state == State::kHandshake;
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
  void PeerClosed(const std::shared_ptr<Conn>& c, const std::string& why) {
    if (c->state != State::kUp) {
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

  void Shutdown(const std::shared_ptr<Conn>& c) {
    if (c->state == State::kClosed) return;
    if (c->state == State::kUp) {
      auto it = up_.find(c->peer);
      if (it != up_.end() && it->second == c) up_.erase(it);
    }
    c->state = State::kClosed;
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
  void WriteRefusal(const std::shared_ptr<Conn>& c, uint8_t code) {
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

  // ---- writing ------------------------------------------------------------------------------

  void Enqueue(const std::shared_ptr<Conn>& c, uint8_t type, OutFrame f) {
    FrameHeader h;
    h.type = type;
    h.sender = static_cast<uint32_t>(rank_);
    h.seq = c->tx_seq++;
    h.epoch = o_.epoch;
    size_t body = f.body.size();
    if (f.is_message) {
      body = kMessageFixedBytes + (f.msg.data ? f.msg.data->size() * sizeof(float) : 0);
    }
    h.length = static_cast<uint32_t>(body);
    f.header = EncodeFrameHeader(h);
    f.bytes = kFrameHeaderBytes + body;
    if (c->tx_mac) {
      // The tag is computed now, over the bytes that will be written: a message's floats must
      // not change until on_sent (Send's contract).
      const Bytes header(f.header.data(), f.header.size());
      if (f.is_message) {
        const Bytes floats = f.msg.data ? Bytes(reinterpret_cast<const uint8_t*>(
                                                    f.msg.data->data()),
                                                f.msg.data->size() * sizeof(float))
                                        : Bytes();
        f.tag = c->tx_mac->Tag(h.seq, {header, Bytes(f.fixed.data(), f.fixed.size()), floats});
      } else {
        f.tag = c->tx_mac->Tag(h.seq, {header, Bytes(f.body.data(), f.body.size())});
      }
      f.tagged = true;
      f.bytes += kFrameTagBytes;
    }
    c->queued_bytes += f.bytes;
    c->queue.push_back(std::move(f));
    if (!c->writing) DoWrite(c);
  }

  void DoWrite(const std::shared_ptr<Conn>& c) {
    c->bufs.clear();
    size_t n = 0;
    for (const OutFrame& f : c->queue) {
      if (n > 0 && c->bufs.size() + 4 > kMaxBuffersPerWrite) break;
      f.AppendBuffers(&c->bufs);
      ++n;
    }
    if (n == 0) return;
    c->writing = true;
    c->in_flight = n;
    c->WithStream([&](auto& s) {
      asio::async_write(s, c->bufs, [self = shared_from_this(), c](asio::error_code ec, size_t) {
        self->OnWritten(c, ec);
      });
    });
  }

  void OnWritten(const std::shared_ptr<Conn>& c, asio::error_code ec) {
    c->writing = false;
    if (c->state == State::kClosed || closed_) return;
    if (ec) return Fail(c, "write failed: " + ec.message(), /*peer_hung_up=*/true);
    std::vector<core::Message> sent;
    for (size_t i = 0; i < c->in_flight; ++i) {
      OutFrame& f = c->queue.front();
      c->queued_bytes -= f.bytes;
      if (f.is_message) sent.push_back(std::move(f.msg));
      c->queue.pop_front();
    }
    c->in_flight = 0;
    if (!c->queue.empty()) DoWrite(c);
    if (cb_.on_sent) {
      for (const core::Message& m : sent) {
        if (closed_) return;
        cb_.on_sent(m);
      }
    }
  }

  bool Send(const core::Message& msg) {
    if (closed_) return false;
    auto it = up_.find(msg.to);
    if (it == up_.end()) {
      log_->warn("rank {}: cannot send {} to rank {}: not connected; message dropped", rank_,
                 core::MsgTypeName(msg.type), msg.to);
      return false;
    }
    if (msg.from != rank_) {
      log_->error("rank {}: refusing to send a message whose from ({}) is not this rank", rank_,
                  msg.from);
      return false;
    }
    const size_t floats = msg.data ? msg.data->size() : 0;
    const size_t body = kMessageFixedBytes + floats * sizeof(float);
    if (body > o_.max_payload_bytes) {
      log_->error("rank {}: cannot send {} to rank {}: {} bytes exceed max_payload_bytes {}",
                  rank_, core::MsgTypeName(msg.type), msg.to, body, o_.max_payload_bytes);
      return false;
    }
    const std::shared_ptr<Conn>& c = it->second;
    if (!HasRoom(*c, kFrameHeaderBytes + body + kFrameTagBytes)) return false;
    OutFrame f;
    f.is_message = true;
    f.msg = msg;
    f.fixed = EncodeMessageFixed(msg);
    Enqueue(c, static_cast<uint8_t>(msg.type), std::move(f));
    return true;
  }

  bool SendControl(int peer, uint8_t type, std::vector<uint8_t> body) {
    if (closed_) return false;
    if (type < kFrameControlMin) {
      log_->error("rank {}: control frame type {} is below {}; not sent", rank_, type,
                  kFrameControlMin);
      return false;
    }
    auto it = up_.find(peer);
    if (it == up_.end()) {
      log_->warn("rank {}: cannot send control frame {} to rank {}: not connected", rank_, type,
                 peer);
      return false;
    }
    if (body.size() > o_.max_payload_bytes) {
      log_->error("rank {}: control frame of {} bytes exceeds max_payload_bytes", rank_,
                  body.size());
      return false;
    }
    if (!HasRoom(*it->second, kFrameHeaderBytes + body.size() + kFrameTagBytes)) return false;
    OutFrame f;
    f.body = std::move(body);
    Enqueue(it->second, type, std::move(f));
    return true;
  }

  bool HasRoom(const Conn& c, size_t bytes) const {
    if (c.queued_bytes == 0 || c.queued_bytes + bytes <= o_.max_queued_bytes_per_peer) return true;
    log_->debug("rank {}: backpressure: {} bytes queued for rank {}, a {}-byte frame would pass "
                "max_queued_bytes_per_peer {}",
                rank_, c.queued_bytes, c.peer, bytes, o_.max_queued_bytes_per_peer);
    return false;
  }

  // ---- reading ------------------------------------------------------------------------------

  void ReadHeader(const std::shared_ptr<Conn>& c) {
    c->WithStream([&](auto& s) {
      s.async_read_some(asio::buffer(c->hdr.data() + c->hdr_got, kFrameHeaderBytes - c->hdr_got),
                        [self = shared_from_this(), c](asio::error_code ec, size_t n) {
                          self->OnHeaderBytes(c, ec, n);
                        });
    });
  }

  void ArmFrameTimer(const std::shared_ptr<Conn>& c) {
    const uint64_t gen = ++c->frame_gen;
    c->frame_timer.expires_after(o_.frame_timeout);
    c->frame_timer.async_wait([self = shared_from_this(), c, gen](asio::error_code ec) {
      if (ec || c->state == State::kClosed || c->frame_gen != gen) return;
      self->Fail(c, fmt::format("stalled partial frame: the frame at stream offset {} is "
                                "incomplete after {} ms ({} bytes of it received)",
                                c->frame_off, self->o_.frame_timeout.count(),
                                c->rx_off - c->frame_off));
    });
  }

  // Inside TLS, bytes that fail the record layer's checks (altered or injected on the path) are
  // a refusal, not the peer hanging up: true when `ec` is one and c was closed for it.
  bool TlsRefused(const std::shared_ptr<Conn>& c, asio::error_code ec) {
    if (!c->tls || ec.category() != asio::error::get_ssl_category()) return false;
    Fail(c, fmt::format("TLS refused the bytes after stream offset {} ({}): they were altered or "
                        "injected on the path",
                        c->rx_off, ec.message()));
    return true;
  }

  // A read failed: the peer went away or the socket broke.
  void ReadFailed(const std::shared_ptr<Conn>& c, asio::error_code ec, const char* what) {
    if (c->state == State::kClosed) return;
    if (TlsRefused(c, ec)) return;
    Fail(c,
         fmt::format("connection lost ({}) at stream offset {} in the middle of the frame that "
                     "starts at offset {}: truncated {}",
                     ec.message(), c->rx_off, c->frame_off, what),
         /*peer_hung_up=*/true);
  }

  void OnHeaderBytes(const std::shared_ptr<Conn>& c, asio::error_code ec, size_t n) {
    if (c->state == State::kClosed || closed_) return;
    if (ec) {
      if (TlsRefused(c, ec)) return;
      if (c->hdr_got == 0) return PeerClosed(c, ec.message());
      return ReadFailed(c, ec, "header");
    }
    if (c->hdr_got == 0 && n > 0) {
      c->frame_off = c->rx_off;
      ArmFrameTimer(c);
    }
    c->hdr_got += n;
    c->rx_off += n;
    if (c->hdr_got < kFrameHeaderBytes) return ReadHeader(c);

    const bool up = c->state == State::kUp;
    const uint32_t limit = up ? o_.max_payload_bytes : kMaxHandshakeFrameBytes;
    // Frames carry their sender's epoch (its incarnation): before the HELLO, whatever the
    // header says (the HELLO's body must repeat it); afterwards the one the HELLO bound.
    uint32_t header_epoch = 0;
    std::memcpy(&header_epoch, c->hdr.data() + 24, sizeof header_epoch);
    const uint32_t want_epoch = c->have_hello ? c->theirs.epoch : le32toh(header_epoch);
    DecodeResult r = DecodeFrameHeader(c->hdr.data(), c->frame_off, limit, c->rx_seq, want_epoch);
    if (!r.ok) {
      if (!up && r.error.find("exceeds the limit") != std::string::npos) {
        r.error += " (the limit before authentication)";
      }
      return Fail(c, r.error);
    }
    const FrameHeader& h = r.header;
    if (h.flags != 0) {
      return Fail(c, fmt::format("unknown flags 0x{:02x} at stream offset {}", h.flags,
                                 c->frame_off + 7));
    }
    if (up && h.sender != static_cast<uint32_t>(c->peer)) {
      return Fail(c, fmt::format("sender rank {} at stream offset {}, but this connection is "
                                 "authenticated as rank {}",
                                 h.sender, c->frame_off + 8, c->peer));
    }
    ++c->rx_seq;
    c->cur = h;
    if (c->state == State::kTls || c->state == State::kHandshake) {
      const uint8_t want = c->have_hello ? kFrameAuth : kFrameHello;
      // The acceptor may answer a dialer's AUTH with a refusal instead.
      const bool refusal = h.type == kFrameRefused && c->dialer && c->have_hello;
      if (h.type != want && !refusal) {
        return Fail(c, fmt::format("frame type {} at stream offset {} before the handshake "
                                   "finished (expected {}); the peer must authenticate first",
                                   h.type, c->frame_off + 6,
                                   want == kFrameHello ? "HELLO" : "AUTH"));
      }
      return ReadBody(c);
    }
    if (IsCoreMessageType(h.type)) {
      if (h.length < kMessageFixedBytes) {
        return Fail(c, fmt::format("a {} frame of {} bytes at stream offset {} is shorter than "
                                   "its {}-byte fixed part",
                                   core::MsgTypeName(static_cast<core::MsgType>(h.type)),
                                   h.length, c->frame_off, kMessageFixedBytes));
      }
      c->WithStream([&](auto& s) {
        asio::async_read(s, asio::buffer(c->fixed),
                         [self = shared_from_this(), c](asio::error_code e, size_t got) {
                           self->OnFixed(c, e, got);
                         });
      });
      return;
    }
    if (h.type >= kFrameControlMin) return ReadBody(c);
    Fail(c, fmt::format("unexpected frame type {} at stream offset {} on an authenticated "
                        "connection",
                        h.type, c->frame_off + 6));
  }

  void ReadBody(const std::shared_ptr<Conn>& c) {
    c->body.assign(c->cur.length, 0);  // the length was checked against its limit
    std::vector<asio::mutable_buffer> bufs;
    if (!c->body.empty()) bufs.push_back(asio::buffer(c->body));
    if (c->state == State::kUp) bufs.push_back(asio::buffer(c->rx_tag));
    if (bufs.empty()) return OnBody(c, {}, 0);
    c->WithStream([&](auto& s) {
      asio::async_read(s, bufs,
                       [self = shared_from_this(), c](asio::error_code e, size_t got) {
                         self->OnBody(c, e, got);
                       });
    });
  }

  void OnFixed(const std::shared_ptr<Conn>& c, asio::error_code ec, size_t got) {
    if (c->state == State::kClosed || closed_) return;
    c->rx_off += got;
    if (ec) return ReadFailed(c, ec, "message body");
    MessageFixedResult r = DecodeMessageFixed(c->fixed.data(), c->cur.type, c->cur.length,
                                              c->frame_off + kFrameHeaderBytes);
    if (!r.ok) return Fail(c, r.error);
    c->mf = r.fixed;
    std::vector<asio::mutable_buffer> rest;
    if (c->mf.float_count > 0) {
      c->floats = pool_->Get(c->mf.float_count);
      rest.push_back(asio::buffer(c->floats->data(), c->floats->size() * sizeof(float)));
    }
    rest.push_back(asio::buffer(c->rx_tag));  // a message travels only on an authenticated link
    c->WithStream([&](auto& s) {
      asio::async_read(s, rest, [self = shared_from_this(), c](asio::error_code e, size_t n) {
        if (c->state == State::kClosed || self->closed_) return;
        c->rx_off += n;
        if (e) return self->ReadFailed(c, e, "message payload");
        self->OnMessageRead(c);
      });
    });
  }

  // Before a frame's contents are used: only its header and a message's sizes (to read the rest
  // into a buffer of the checked length) are looked at before its tag verifies.
  bool TagChecks(const std::shared_ptr<Conn>& c, Bytes body, Bytes more = {}) {
    const bool ok = c->rx_mac->Verify(c->cur.seq, {Bytes(c->hdr.data(), c->hdr.size()), body, more},
                                      c->rx_tag.data());
    if (ok) return true;
    Fail(c, fmt::format("the frame at stream offset {} (type {}, sequence number {}) fails its "
                        "authentication tag at stream offset {}: it was altered, injected, "
                        "reflected or relayed on the path, or sent under another session's key; "
                        "frame refused",
                        c->frame_off, c->cur.type, c->cur.seq,
                        c->frame_off + kFrameHeaderBytes + c->cur.length));
    return false;
  }

  void OnMessageRead(const std::shared_ptr<Conn>& c) {
    const Bytes floats =
        c->floats ? Bytes(reinterpret_cast<const uint8_t*>(c->floats->data()),
                          c->floats->size() * sizeof(float))
                  : Bytes();
    if (!TagChecks(c, Bytes(c->fixed.data(), c->fixed.size()), floats)) return;
    const uint64_t body_off = c->frame_off + kFrameHeaderBytes;
    if (c->mf.msg.from != c->peer) {
      return Fail(c, fmt::format("message from rank {} at stream offset {}, but this connection "
                                 "is authenticated as rank {}",
                                 c->mf.msg.from, body_off, c->peer));
    }
    if (c->mf.msg.to != rank_) {
      return Fail(c, fmt::format("message to rank {} at stream offset {}, but this is rank {}",
                                 c->mf.msg.to, body_off + 4, rank_));
    }
    Deliver(c);
  }

  void FrameDone(const std::shared_ptr<Conn>& c) {
    ++c->frame_gen;
    c->frame_timer.cancel();
    c->hdr_got = 0;
  }

  void Deliver(const std::shared_ptr<Conn>& c) {
    FrameDone(c);
    core::Message m = std::move(c->mf.msg);
    m.data = std::move(c->floats);
    c->floats.reset();
    ReadHeader(c);
    if (cb_.on_message) cb_.on_message(std::move(m));
  }

  void OnBody(const std::shared_ptr<Conn>& c, asio::error_code ec, size_t got) {
    if (c->state == State::kClosed || closed_) return;
    c->rx_off += got;
    if (ec) return ReadFailed(c, ec, "frame body");
    FrameDone(c);
    const uint64_t body_off = c->frame_off + kFrameHeaderBytes;
    if (c->state == State::kUp) {
      if (!TagChecks(c, Bytes(c->body.data(), c->body.size()))) return;
      std::vector<uint8_t> body = std::move(c->body);
      c->body.clear();
      const uint8_t type = c->cur.type;
      ReadHeader(c);
      if (cb_.on_control) cb_.on_control(c->peer, type, std::move(body));
      return;
    }
    if (!c->have_hello) return OnHello(c, body_off);
    if (c->cur.type == kFrameRefused) {
      const uint8_t code = c->body.size() == 1 ? c->body[0] : 0;
      return Fail(c, code == kRefusedAuthFailed
                         ? "the peer refused this node's AUTH: HMAC-SHA256 authentication failed "
                           "(are the secret files identical?)"
                         : fmt::format("the peer refused the handshake (refusal code {})", code));
    }
    OnAuth(c, body_off);
  }

  // The peer's HELLO: the pure rules (CheckHello), then what needs this transport's state. The
  // acceptor answers with its own HELLO; both sides then know the transcript and the keys, and
  // the dialer proves first.
  void OnHello(const std::shared_ptr<Conn>& c, uint64_t body_off) {
    Hello h;
    std::string err;
    if (!DecodeHello(c->body, body_off, &h, &err)) return Fail(c, err);
    if (h.rank == c->cur.sender) c->claimed = static_cast<int>(h.rank);
    HelloRules rules;
    rules.job_id = o_.job_id;
    rules.my_rank = static_cast<uint32_t>(rank_);
    rules.my_role = c->role();
    rules.num_ranks = o_.num_ranks;
    rules.expected_peer = c->expected_peer;
    rules.header_sender = c->cur.sender;
    rules.header_epoch = c->cur.epoch;
    if (err = CheckHello(h, rules, body_off); !err.empty()) return Fail(c, err);
    if (auto it = min_epoch_.find(c->claimed); it != min_epoch_.end() && h.epoch < it->second) {
      return Fail(c, fmt::format("HELLO at stream offset {}: rank {} in epoch {}, an old "
                                 "incarnation (declared dead; this node accepts epoch {} or "
                                 "later from it)",
                                 body_off + 7, c->claimed, h.epoch, it->second));
    }
    if (auto err2 = Duplicate(*c, h.epoch); !err2.empty()) return Fail(c, err2);
    c->theirs = std::move(h);
    c->theirs_raw = std::move(c->body);
    c->body.clear();
    c->have_hello = true;
    if (!c->dialer) SendHello(c, c->theirs.rank);
    c->transcript = c->dialer ? TranscriptHash(c->mine_raw, c->theirs_raw)
                              : TranscriptHash(c->theirs_raw, c->mine_raw);
    c->keys = DeriveSessionKeys(o_.secret, c->transcript);
    if (c->dialer) SendAuth(c);
    ReadHeader(c);
  }

  // The peer's proof over this connection's transcript. The acceptor proves only once the
  // dialer's proof checked out, so an outsider who dials never obtains a proof.
  void OnAuth(const std::shared_ptr<Conn>& c, uint64_t body_off) {
    if (c->body.size() != kMacBytes) {
      return Fail(c, fmt::format("AUTH at stream offset {} has {} bytes, expected {}", body_off,
                                 c->body.size(), kMacBytes));
    }
    const Role peer_role = c->dialer ? Role::kAcceptor : Role::kDialer;
    const Mac want = AuthProof(c->keys, peer_role, c->transcript);
    if (!MacEqual(want.data(), c->body.data())) {
      return Fail(c,
                  fmt::format("AUTH at stream offset {}: HMAC-SHA256 authentication failed; the "
                              "peer does not hold this job's secret (are the secret files "
                              "identical?), or the handshake was relayed or replayed from "
                              "another connection",
                              body_off),
                  /*peer_hung_up=*/false, c->dialer ? 0 : kRefusedAuthFailed);
    }
    if (auto it = up_.find(c->claimed); it != up_.end() && it->second->theirs.epoch < c->theirs.epoch) {
      // Authenticated, and a later incarnation: a restarted process replaces the connection of
      // its dead predecessor, whose close may not have reached us yet.
      log_->info("rank {}: rank {} is back in epoch {}; closing its epoch {} connection", rank_,
                 c->claimed, c->theirs.epoch, it->second->theirs.epoch);
      Shutdown(it->second);
    }
    if (auto err = Duplicate(*c, c->theirs.epoch); !err.empty()) return Fail(c, err);
    c->rx_mac = std::make_unique<FrameMac>(c->keys.Receiving(c->role()));
    if (!c->dialer) SendAuth(c);
    c->state = State::kUp;
    c->peer = c->claimed;
    if (c->pending_counted) {
      c->pending_counted = false;
      --pending_;
    }
    c->hs_timer.cancel();
    if (c->dial) {
      c->dial->done = true;
      c->dial.reset();
    }
    up_[c->peer] = c;
    log_->info("rank {}: connection with rank {} at {} is up ({}{})", rank_, c->peer, c->addr,
               c->dialer ? "dialed" : "accepted", c->tls ? ", TLS" : "");
    ReadHeader(c);
    if (cb_.on_peer_up) cb_.on_peer_up(c->peer);
  }

  // A connection claiming an already connected rank is refused, unless it claims a later epoch
  // (a restarted process; it replaces the old connection once authenticated).
  std::string Duplicate(const Conn& c, uint32_t epoch) const {
    auto it = up_.find(c.claimed);
    if (it == up_.end() || it->second->theirs.epoch < epoch) return {};
    return fmt::format("rank {} is already connected from {}; a second connection claiming it is "
                       "refused",
                       c.claimed, it->second->addr);
  }

  void Close() {
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

  size_t queued_bytes(int peer) const {
    auto it = up_.find(peer);
    return it == up_.end() ? 0 : it->second->queued_bytes;
  }
  bool is_up(int peer) const { return up_.count(peer) != 0; }

  uint32_t peer_epoch(int peer) const {
    auto it = up_.find(peer);
    return it == up_.end() ? 0 : it->second->theirs.epoch;
  }

  void RefuseEpochsBelow(int peer, uint32_t epoch) {
    uint32_t& m = min_epoch_[peer];
    m = std::max(m, epoch);
    auto it = up_.find(peer);
    if (it != up_.end() && it->second->theirs.epoch < m) Disconnect(peer);
  }

  void Disconnect(int peer) {
    auto it = up_.find(peer);
    if (it == up_.end()) return;
    const std::shared_ptr<Conn> c = it->second;
    log_->info("rank {}: closing the connection with rank {} at {} (epoch {})", rank_, peer,
               c->addr, c->theirs.epoch);
    Shutdown(c);
  }

  asio::io_context& io_;
  const int rank_;
  TransportOptions o_;
  TransportCallbacks cb_;
  std::shared_ptr<spdlog::logger> log_;
  asio::ssl::context ssl_;
  std::unique_ptr<tcp::acceptor> acceptor_;
  asio::steady_timer accept_retry_;
  std::map<const Conn*, std::shared_ptr<Conn>> conns_;
  std::map<int, std::shared_ptr<Conn>> up_;
  std::map<int, uint32_t> min_epoch_;  // per rank: older incarnations are refused
  std::vector<std::shared_ptr<Dial>> dials_;
  std::shared_ptr<FloatPool> pool_ = std::make_shared<FloatPool>();
  int pending_ = 0;
  uint64_t accepts_ = 0;
  bool closed_ = false;
};

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
void Transport::RefuseEpochsBelow(int peer, uint32_t epoch) { impl_->RefuseEpochsBelow(peer, epoch); }
void Transport::Disconnect(int peer) { impl_->Disconnect(peer); }
void Transport::Close() { impl_->Close(); }

}  // namespace poseidon::rt
