// real_runtime/transport_impl.h: the transport's internals, shared by the files that implement
// it (not an API: include transport.h). One Impl per Transport, its member functions defined
// by job, in the manner of gloo's transport (listener, pair, buffer):
//   transport.cc            the options and TLS context, a connection's life and close, the API
//   transport_connect.cc    listening (accept, the bound on pending handshakes) and dialing
//   transport_handshake.cc  HELLO and AUTH on one connection (the rules are handshake.h's)
//   transport_write.cc      the per-connection write queue, frame tags, backpressure
//   transport_read.cc       reading frames: header checks, bodies into pooled vectors, tags
// Single-threaded like the Transport: everything runs on the io_context's thread.
#pragma once

#include <array>
#include <asio.hpp>
#include <asio/ssl.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "real_runtime/frame.h"
#include "real_runtime/frame_mac.h"
#include "real_runtime/handshake.h"
#include "real_runtime/transport.h"

namespace poseidon::rt {

// One frame waiting to be written. Core messages keep a reference to their floats (no copy), or,
// in a 16-bit wire format (msg.wire), own their values encoded (half.h); control and handshake
// frames own their small body.
struct OutFrame {
  std::array<uint8_t, kFrameHeaderBytes> header{};
  std::array<uint8_t, kMessageFixedBytes> fixed{};
  bool is_message = false;
  uint8_t flags = 0;          // the header's: a message's wire format
  core::Message msg;          // for on_sent; msg.data is the payload written (fp32)
  std::vector<uint16_t> values16;  // msg.data encoded, in a 16-bit wire format
  std::vector<uint8_t> body;  // control / handshake body
  FrameTag tag{};             // after the handshake: the frame's tag (frame_mac.h)
  bool tagged = false;
  size_t bytes = 0;  // header and tag included

  // A message's values as written after its fixed part.
  Bytes Values() const {
    if (msg.wire != core::WireFormat::kFp32) {
      return Bytes(reinterpret_cast<const uint8_t*>(values16.data()),
                   values16.size() * sizeof(uint16_t));
    }
    if (!msg.data) return Bytes();
    return Bytes(reinterpret_cast<const uint8_t*>(msg.data->data()),
                 msg.data->size() * sizeof(float));
  }

  void AppendBuffers(std::vector<asio::const_buffer>* b) const {
    b->push_back(asio::buffer(header));
    if (is_message) {
      b->push_back(asio::buffer(fixed));
      const Bytes values = Values();
      if (!values.empty()) b->push_back(asio::buffer(values.data(), values.size()));
    } else if (!body.empty()) {
      b->push_back(asio::buffer(body));
    }
    if (tagged) b->push_back(asio::buffer(tag));
  }
};

enum class ConnState { kTls, kHandshake, kUp, kClosed };

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

struct Dial;

struct Conn {
  Conn(asio::io_context& io, asio::ssl::context& ctx)
      : stream(io, ctx), hs_timer(io), frame_timer(io) {}

  asio::ssl::stream<asio::ip::tcp::socket> stream;
  bool tls = false;
  bool dialer = false;
  int expected_peer = -1;      // dialer: the rank dialed
  std::shared_ptr<Dial> dial;  // dialer, until the handshake ends: the Connect it belongs to
  int claimed = -1;            // the rank the peer's HELLO claims (not yet proven)
  int peer = -1;               // the authenticated rank, once up
  std::string addr;
  ConnState state = ConnState::kHandshake;
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
  std::vector<uint16_t> values16;  // a 16-bit message's values as read, before decoding
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
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds backoff{50};
  asio::ip::tcp::resolver resolver;
  asio::steady_timer timer;
  std::shared_ptr<Conn> conn;
  bool done = false;
};

class Transport::Impl : public std::enable_shared_from_this<Transport::Impl> {
 public:
  // Connections: setup and life (transport.cc).
  Impl(asio::io_context& io, int rank, TransportOptions o, TransportCallbacks cb);
  void SetUpTls();
  void StartConn(const std::shared_ptr<Conn>& c);
  std::string Who(const Conn& c) const;
  void Fail(const std::shared_ptr<Conn>& c, const std::string& reason, bool peer_hung_up = false,
            uint8_t refusal = 0);
  void PeerClosed(const std::shared_ptr<Conn>& c, const std::string& why);
  void Shutdown(const std::shared_ptr<Conn>& c);
  void WriteRefusal(const std::shared_ptr<Conn>& c, uint8_t code);
  void Close();
  size_t queued_bytes(int peer) const;
  uint32_t peer_epoch(int peer) const;
  void RefuseEpochsBelow(int peer, uint32_t epoch);
  void Disconnect(int peer);

  // Listening and dialing (transport_connect.cc).
  uint16_t Listen(const std::string& host, uint16_t port);
  void DoAccept();
  void OnAccept(asio::error_code ec, asio::ip::tcp::socket s);
  void EvictOldestPending();
  void Connect(int peer, const std::string& host, uint16_t port);
  void Attempt(const std::shared_ptr<Dial>& d);
  void Retry(const std::shared_ptr<Dial>& d, const std::string& error);

  // The handshake on one connection (transport_handshake.cc).
  void BeginHandshake(const std::shared_ptr<Conn>& c);
  void SendHello(const std::shared_ptr<Conn>& c, uint32_t peer_rank);
  void SendAuth(const std::shared_ptr<Conn>& c);
  void OnHello(const std::shared_ptr<Conn>& c, uint64_t body_off);
  void OnAuth(const std::shared_ptr<Conn>& c, uint64_t body_off);
  std::string Duplicate(const Conn& c, uint32_t epoch) const;

  // Writing frames (transport_write.cc).
  void Enqueue(const std::shared_ptr<Conn>& c, uint8_t type, OutFrame f);
  void DoWrite(const std::shared_ptr<Conn>& c);
  void OnWritten(const std::shared_ptr<Conn>& c, asio::error_code ec);
  bool Send(const core::Message& msg);
  bool SendControl(int peer, uint8_t type, std::vector<uint8_t> body);
  bool HasRoom(const Conn& c, size_t bytes) const;

  // Reading frames (transport_read.cc).
  void ReadHeader(const std::shared_ptr<Conn>& c);
  void ArmFrameTimer(const std::shared_ptr<Conn>& c);
  bool TlsRefused(const std::shared_ptr<Conn>& c, asio::error_code ec);
  void ReadFailed(const std::shared_ptr<Conn>& c, asio::error_code ec, const char* what);
  void OnHeaderBytes(const std::shared_ptr<Conn>& c, asio::error_code ec, size_t n);
  void ReadBody(const std::shared_ptr<Conn>& c);
  void OnFixed(const std::shared_ptr<Conn>& c, asio::error_code ec, size_t got);
  bool TagChecks(const std::shared_ptr<Conn>& c, Bytes body, Bytes more = {});
  void OnMessageRead(const std::shared_ptr<Conn>& c);
  void FrameDone(const std::shared_ptr<Conn>& c);
  void Deliver(const std::shared_ptr<Conn>& c);
  void OnBody(const std::shared_ptr<Conn>& c, asio::error_code ec, size_t got);

  bool is_up(int peer) const { return up_.count(peer) != 0; }

  asio::io_context& io_;
  const int rank_;
  TransportOptions o_;
  TransportCallbacks cb_;
  std::shared_ptr<spdlog::logger> log_;
  asio::ssl::context ssl_;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
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

}  // namespace poseidon::rt
