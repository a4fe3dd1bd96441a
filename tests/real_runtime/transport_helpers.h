// Helpers of the transport tests: an event loop on its own thread, what an endpoint's callbacks
// saw, a peer that speaks the wire protocol by hand (RawPeer), a fixture with a good connection
// that every hostile test keeps, and a recording relay (a man in the middle). No sleeps: every
// wait is on a condition with a generous deadline.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <asio.hpp>
#include <asio/ssl.hpp>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "real_runtime/frame.h"
#include "real_runtime/frame_mac.h"
#include "real_runtime/handshake.h"
#include "real_runtime/tls_files.h"
#include "real_runtime/transport.h"

namespace poseidon::rt::test {

using asio::ip::tcp;
using namespace std::chrono_literals;

constexpr auto kDeadline = 30s;  // generous: a loaded 2-core machine
const char kSecret[] = "s3cret-bytes-that-must-never-be-logged";
const char kJob[] = "test-job";

// An io_context running on its own thread; Run executes a function on it and waits.
class Loop {
 public:
  Loop() : guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~Loop() {
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  template <typename F>
  auto Run(F&& f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::forward<F>(f));
    auto fut = task.get_future();
    asio::post(io_, [&task] { task(); });
    if (fut.wait_for(kDeadline) != std::future_status::ready) {
      ADD_FAILURE() << "the event loop did not run a task within the deadline";
      std::abort();
    }
    return fut.get();
  }
  asio::io_context io_;

 private:
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// What one endpoint's callbacks saw; written on the loop thread, read by the test thread.
struct Events {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> up;
  std::vector<std::pair<int, std::string>> down;
  std::vector<core::Message> msgs;
  std::vector<core::Message> sent;
  std::vector<std::pair<int, std::vector<uint8_t>>> control;
  std::vector<std::pair<std::string, std::string>> refused;

  template <typename F>
  void Add(F&& f) {
    {
      std::lock_guard<std::mutex> l(mu);
      f();
    }
    cv.notify_all();
  }
  template <typename P>
  bool WaitFor(P&& pred) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, kDeadline, pred);
  }
  std::string RefusedText() {
    std::lock_guard<std::mutex> l(mu);
    std::string s;
    for (auto& [who, why] : refused) s += who + ": " + why + "\n";
    return s;
  }
};

struct Node {
  std::unique_ptr<Transport> t;
  Events ev;
};

inline TransportOptions Options() {
  TransportOptions o;
  o.job_id = kJob;
  o.secret = kSecret;
  o.handshake_timeout = 10s;
  o.frame_timeout = 10s;
  o.connect_timeout = 10s;
  return o;
}

// `o` with TLS on, using the job identity `files`.
inline TransportOptions WithTls(TransportOptions o, const TlsFiles& files) {
  o.tls = true;
  o.tls_cert = files.cert;
  o.tls_key = files.key;
  o.tls_ca = files.ca;
  return o;
}

inline std::shared_ptr<std::vector<float>> Floats(size_t n, float base) {
  auto v = std::make_shared<std::vector<float>>(n);
  for (size_t i = 0; i < n; ++i) (*v)[i] = base + static_cast<float>(i) * 0.25f;
  return v;
}

inline core::Message Msg(core::MsgType type, int from, int to, std::shared_ptr<std::vector<float>> d,
                  int64_t clock = 3) {
  core::Message m;
  m.type = type;
  m.from = from;
  m.to = to;
  m.clock = clock;
  m.chunk = 11;
  m.layer = 2;
  m.step = -1;
  m.payload_bytes = d ? static_cast<int64_t>(d->size() * 4) : 0;
  m.data = std::move(d);
  return m;
}

// A peer that speaks the wire protocol by hand over a blocking socket on the test thread, as a
// dialer (port) or as the acceptor of one connection (acceptor), in plain TCP or in TLS with the
// job's certificate (an insider with the TLS identity but, in the hostile tests, not the secret).
class RawPeer {
 public:
  explicit RawPeer(uint16_t port, const TlsFiles* tls = nullptr)
      : ctx_(Context(tls)), stream_(io_, ctx_), tls_(tls != nullptr) {
    stream_.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    if (tls_) stream_.handshake(asio::ssl::stream_base::client);
  }
  RawPeer(tcp::acceptor& acceptor, const TlsFiles* tls = nullptr)
      : ctx_(Context(tls)), stream_(io_, ctx_), tls_(tls != nullptr) {
    tcp::socket s(io_);
    acceptor.accept(s);
    stream_.next_layer() = std::move(s);
    if (tls_) stream_.handshake(asio::ssl::stream_base::server);
  }
  void Write(const std::vector<uint8_t>& bytes) {
    if (tls_) {
      asio::write(stream_, asio::buffer(bytes));
    } else {
      asio::write(stream_.next_layer(), asio::buffer(bytes));
    }
  }
  static std::vector<uint8_t> Frame(uint8_t type, uint32_t sender, uint64_t seq,
                                    const std::vector<uint8_t>& body, uint32_t epoch = 0,
                                    uint8_t flags = 0) {
    FrameHeader h;
    h.type = type;
    h.flags = flags;
    h.sender = sender;
    h.seq = seq;
    h.epoch = epoch;
    h.length = static_cast<uint32_t>(body.size());
    auto hb = EncodeFrameHeader(h);
    // Sized up front: GCC 12 warns (-Warray-bounds, a false positive) on insert after a copy.
    std::vector<uint8_t> out(hb.size() + body.size());
    std::memcpy(out.data(), hb.data(), hb.size());
    if (!body.empty()) std::memcpy(out.data() + hb.size(), body.data(), body.size());
    return out;
  }
  // `frame` (header and body, as Frame makes it) with its tag under this peer's sending key,
  // for the sequence number in its header: what the transport sends once a handshake is done.
  std::vector<uint8_t> Sealed(std::vector<uint8_t> frame) {
    uint64_t seq = 0;
    std::memcpy(&seq, frame.data() + 12, sizeof seq);
    const FrameTag tag = tx_->Tag(seq, {Bytes(frame.data(), frame.size())});
    frame.insert(frame.end(), tag.begin(), tag.end());
    return frame;
  }
  // Reads one frame (header checks only; after the handshake, its tag too, which must verify)
  // and returns its body; empty once the other side has closed.
  std::vector<uint8_t> ReadFrame(uint8_t* type = nullptr) {
    std::array<uint8_t, kFrameHeaderBytes> hb{};
    asio::error_code ec;
    ReadExactly(hb.data(), hb.size(), ec);
    if (ec) return {};  // closed: the other side refused us
    DecodeResult r = DecodeFrameHeader(hb.data(), 0, 1u << 30, rx_seq_++, r_epoch_);
    EXPECT_TRUE(r.ok) << r.error;
    if (type) *type = r.header.type;
    std::vector<uint8_t> body(r.header.length);
    ReadExactly(body.data(), body.size(), ec);
    if (ec) return {};
    if (rx_) {
      FrameTag tag{};
      ReadExactly(tag.data(), tag.size(), ec);
      if (ec) return {};
      EXPECT_TRUE(rx_->Verify(r.header.seq, {Bytes(hb.data(), hb.size()),
                                             Bytes(body.data(), body.size())}, tag.data()));
    }
    return body;
  }
  // The whole handshake, as the dialer, as rank `rank` reaching `peer_rank`; returns whether
  // the other side's AUTH verified (and then this peer holds the session's keys).
  bool Handshake(uint32_t rank, const std::string& secret = kSecret,
                 const std::string& job = kJob, uint32_t epoch = 0, uint32_t peer_rank = 0) {
    const std::vector<uint8_t> mine = SendHello(rank, peer_rank, epoch, job);
    std::vector<uint8_t> theirs = ReadFrame();
    if (theirs.empty()) return false;  // refused
    Hello h;
    std::string err;
    EXPECT_TRUE(DecodeHello(theirs, 0, &h, &err)) << err;
    const Digest t = TranscriptHash(mine, theirs);
    const SessionKeys k = DeriveSessionKeys(secret, t);
    const Mac proof = AuthProof(k, Role::kDialer, t);
    Write(Frame(kFrameAuth, rank, 1, std::vector<uint8_t>(proof.begin(), proof.end()), epoch));
    uint8_t type = 0;
    std::vector<uint8_t> auth = ReadFrame(&type);
    const Mac want = AuthProof(k, Role::kAcceptor, t);
    if (type != kFrameAuth || auth.size() != kMacBytes || !MacEqual(auth.data(), want.data())) {
      return false;
    }
    tx_ = std::make_unique<FrameMac>(k.Sending(Role::kDialer));
    rx_ = std::make_unique<FrameMac>(k.Receiving(Role::kDialer));
    return true;
  }
  // A dialer's HELLO; returns its body (the transcript's first half).
  std::vector<uint8_t> SendHello(uint32_t rank, uint32_t peer_rank, uint32_t epoch = 0,
                                 const std::string& job = kJob, const Nonce* nonce = nullptr,
                                 Role role = Role::kDialer) {
    Hello mine;
    mine.version = kProtocolVersion;
    mine.role = role;
    mine.rank = rank;
    mine.epoch = epoch;
    mine.peer_rank = peer_rank;
    mine.nonce = nonce ? *nonce : RandomNonce();
    mine.job_id = job;
    const std::vector<uint8_t> body = EncodeHello(mine);
    Write(Frame(kFrameHello, rank, 0, body, epoch));
    return body;
  }
  void ExpectEpoch(uint32_t epoch) { r_epoch_ = epoch; }
  static std::vector<uint8_t> MessageBody(const core::Message& m) {
    auto fixed = EncodeMessageFixed(m);
    std::vector<uint8_t> b(fixed.begin(), fixed.end());
    if (m.data) {
      const auto* p = reinterpret_cast<const uint8_t*>(m.data->data());
      b.insert(b.end(), p, p + m.data->size() * 4);
    }
    return b;
  }
  // True once the other side has closed the connection (reads until EOF or an error).
  bool ClosedByPeer() {
    std::array<uint8_t, 4096> buf{};
    asio::error_code ec;
    while (!ec) {
      if (tls_) {
        stream_.read_some(asio::buffer(buf), ec);
      } else {
        stream_.next_layer().read_some(asio::buffer(buf), ec);
      }
    }
    return ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::ssl::error::stream_truncated;
  }
  void Close() { stream_.next_layer().close(); }

 private:
  static asio::ssl::context Context(const TlsFiles* tls) {
    asio::ssl::context ctx(asio::ssl::context::tls);
    if (tls) {
      ctx.use_certificate_chain_file(tls->cert);
      ctx.use_private_key_file(tls->key, asio::ssl::context::pem);
      ctx.load_verify_file(tls->ca);
      ctx.set_verify_mode(asio::ssl::verify_peer);
    }
    return ctx;
  }
  void ReadExactly(uint8_t* p, size_t n, asio::error_code& ec) {
    if (n == 0) return;
    if (tls_) {
      asio::read(stream_, asio::buffer(p, n), ec);
    } else {
      asio::read(stream_.next_layer(), asio::buffer(p, n), ec);
    }
  }

  asio::io_context io_;
  asio::ssl::context ctx_;
  asio::ssl::stream<tcp::socket> stream_;
  bool tls_ = false;
  uint64_t rx_seq_ = 0;
  uint32_t r_epoch_ = 0;
  std::unique_ptr<FrameMac> tx_, rx_;
};

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = std::make_shared<spdlog::logger>(
        "transport_test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text_));
    log_->set_level(spdlog::level::debug);
    v_opts_ = Options();
    v_opts_.frame_timeout = 500ms;
    w_opts_ = Options();
  }
  void TearDown() override {
    loop_.Run([&] {
      for (Node* n : {&v_, &w_, &x_}) {
        if (n->t) n->t->Close();
        n->t.reset();
      }
    });
    log_->flush();
    EXPECT_EQ(log_text_.str().find(kSecret), std::string::npos) << "the secret was logged";
  }

  void Make(Node* n, int rank, TransportOptions o) {
    o.logger = log_;
    TransportCallbacks cb;
    Events* ev = &n->ev;
    cb.on_peer_up = [ev](int p) { ev->Add([&] { ev->up.push_back(p); }); };
    cb.on_peer_down = [ev](int p, const std::string& r) {
      ev->Add([&] { ev->down.emplace_back(p, r); });
    };
    cb.on_message = [ev](core::Message m) { ev->Add([&] { ev->msgs.push_back(std::move(m)); }); };
    cb.on_sent = [ev](const core::Message& m) { ev->Add([&] { ev->sent.push_back(m); }); };
    cb.on_control = [ev](int p, uint8_t type, std::vector<uint8_t> body) {
      body.insert(body.begin(), type);
      ev->Add([&] { ev->control.emplace_back(p, std::move(body)); });
    };
    cb.on_refused = [ev](const std::string& who, const std::string& why) {
      ev->Add([&] { ev->refused.emplace_back(who, why); });
    };
    loop_.Run([&] { n->t = std::make_unique<Transport>(loop_.io_, rank, o, cb); });
  }

  // V (rank 0) listens, W (rank 1) dials it: the good connection every hostile test keeps.
  void StartGoodPair() {
    Make(&v_, 0, v_opts_);
    Make(&w_, 1, w_opts_);
    port_ = loop_.Run([&] { return v_.t->Listen("127.0.0.1", 0); });
    loop_.Run([&] { w_.t->Connect(0, "127.0.0.1", port_); });
    ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 1; }));
    ASSERT_TRUE(w_.ev.WaitFor([&] { return w_.ev.up.size() == 1; }));
    EXPECT_EQ(v_.ev.up[0], 1);
    EXPECT_EQ(w_.ev.up[0], 0);
  }

  // Messages still flow both ways between W and V.
  void ExpectGoodTraffic() {
    const size_t v_before = Count(v_.ev), w_before = Count(w_.ev);
    const int64_t clock = ++good_clock_;
    ASSERT_TRUE(loop_.Run([&] {
      return w_.t->Send(Msg(core::MsgType::kPushGrad, 1, 0, Floats(1000, 1.0f), clock));
    }));
    ASSERT_TRUE(loop_.Run([&] {
      return v_.t->Send(Msg(core::MsgType::kParams, 0, 1, Floats(1000, 2.0f), clock));
    }));
    ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.msgs.size() == v_before + 1; }));
    ASSERT_TRUE(w_.ev.WaitFor([&] { return w_.ev.msgs.size() == w_before + 1; }));
    std::lock_guard<std::mutex> l(v_.ev.mu);
    EXPECT_EQ(v_.ev.msgs.back().clock, clock);
    EXPECT_EQ((*v_.ev.msgs.back().data)[999], 1.0f + 999 * 0.25f);
  }
  static size_t Count(Events& ev) {
    std::lock_guard<std::mutex> l(ev.mu);
    return ev.msgs.size();
  }

  // Waits until V has refused one more connection and checks the reason.
  void ExpectRefused(size_t before, const std::string& what, const std::string& who_part) {
    ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.refused.size() > before; }))
        << "no refusal; log:\n" << Log();
    std::lock_guard<std::mutex> l(v_.ev.mu);
    const auto& [who, why] = v_.ev.refused[before];
    EXPECT_NE(why.find(what), std::string::npos) << why;
    EXPECT_NE(who.find(who_part), std::string::npos) << who;
    EXPECT_NE(who.find("127.0.0.1:"), std::string::npos) << who;
    EXPECT_NE(Log().find(why), std::string::npos) << "the reason was not logged";
  }
  size_t Refusals() {
    std::lock_guard<std::mutex> l(v_.ev.mu);
    return v_.ev.refused.size();
  }
  std::string Log() {
    log_->flush();
    return log_text_.str();
  }

  // A raw peer authenticated to V as rank 5, then sends `frame` (sealed with a valid tag unless
  // `seal` is false); V must close it for `what`.
  void AttackAfterHandshake(const std::vector<uint8_t>& frame, const std::string& what,
                            bool seal = true) {
    StartGoodPair();
    const size_t before = Refusals();
    RawPeer p(port_);
    ASSERT_TRUE(p.Handshake(5));
    ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 2; }));
    ExpectGoodTraffic();
    p.Write(seal ? p.Sealed(frame) : frame);
    ExpectRefused(before, what, "rank 5 at");
    EXPECT_TRUE(p.ClosedByPeer());
    ASSERT_TRUE(v_.ev.WaitFor([&] { return !v_.ev.down.empty(); }));
    {
      std::lock_guard<std::mutex> l(v_.ev.mu);
      ASSERT_EQ(v_.ev.down.size(), 1u);
      EXPECT_EQ(v_.ev.down[0].first, 5);
    }
    EXPECT_FALSE(loop_.Run([&] { return v_.t->is_up(5); }));
    ExpectGoodTraffic();
  }

  std::vector<uint8_t> GoodMessageFrame(uint64_t seq, uint32_t sender = 5, int from = 5) {
    return RawPeer::Frame(static_cast<uint8_t>(core::MsgType::kPushGrad), sender, seq,
                          RawPeer::MessageBody(Msg(core::MsgType::kPushGrad, from, 0,
                                                   Floats(16, 0.5f))));
  }

  std::ostringstream log_text_;
  std::shared_ptr<spdlog::logger> log_;
  Loop loop_;
  Node v_, w_, x_;
  TransportOptions v_opts_, w_opts_;
  uint16_t port_ = 0;
  int64_t good_clock_ = 100;
};

// ---- a man in the middle -------------------------------------------------------------------

// A relay on loopback: accepts one connection, dials 127.0.0.1:`target`, forwards bytes both
// ways (one thread per direction) and records every byte the client sent. Inject() writes extra
// bytes towards the server, as an attacker on the path could.
class RecordingRelay {
 public:
  explicit RecordingRelay(uint16_t target)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        client_(io_),
        server_(io_),
        target_(target),
        port_(acceptor_.local_endpoint().port()),
        accept_thread_([this] { AcceptAndForward(); }) {}
  ~RecordingRelay() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
      // shutdown() (not close()) wakes the threads blocked in accept/read on these sockets.
      for (int fd : {acceptor_.native_handle(), client_.native_handle(), server_.native_handle()}) {
        if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
      }
    }
    accept_thread_.join();
    if (to_client_.joinable()) to_client_.join();
  }
  uint16_t port() const { return port_; }
  std::vector<uint8_t> Recorded() {
    std::lock_guard<std::mutex> l(mu_);
    return recorded_;
  }
  // What the server sent the client.
  std::vector<uint8_t> RecordedFromServer() {
    std::lock_guard<std::mutex> l(mu_);
    return from_server_;
  }
  void Inject(const std::vector<uint8_t>& bytes) {
    std::lock_guard<std::mutex> w(to_server_mu_);
    asio::write(server_, asio::buffer(bytes));
  }

 private:
  void AcceptAndForward() {
    asio::error_code ec;
    acceptor_.accept(client_, ec);
    if (ec) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      server_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), target_), ec);
      if (ec) return;
      to_client_ = std::thread([this] { Pump(server_, client_, /*record=*/false); });
    }
    Pump(client_, server_, /*record=*/true);
  }
  void Pump(tcp::socket& from, tcp::socket& to, bool record) {
    std::array<uint8_t, 1 << 16> buf{};
    for (;;) {
      asio::error_code ec;
      const size_t n = from.read_some(asio::buffer(buf), ec);
      if (ec) break;
      {
        std::lock_guard<std::mutex> l(mu_);
        auto& into = record ? recorded_ : from_server_;
        into.insert(into.end(), buf.begin(), buf.begin() + static_cast<long>(n));
      }
      std::unique_lock<std::mutex> w(to_server_mu_, std::defer_lock);
      if (record) w.lock();
      asio::write(to, asio::buffer(buf.data(), n), ec);
      if (ec) break;
    }
    // One side is gone: the relay drops the other, as a TCP proxy does.
    ::shutdown(to.native_handle(), SHUT_RDWR);
    ::shutdown(from.native_handle(), SHUT_RDWR);
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  tcp::socket client_, server_;
  const uint16_t target_;
  const uint16_t port_;
  std::mutex mu_;           // recorded_, stopping_, starting to_client_
  std::mutex to_server_mu_; // one writer at a time towards the server
  std::vector<uint8_t> recorded_, from_server_;
  bool stopping_ = false;
  std::thread to_client_;
  std::thread accept_thread_;  // last: starts once everything above is constructed
};

// A recorded byte stream cut into its frames; checks they are the genuine sequence 0, 1, ...
inline std::vector<std::vector<uint8_t>> SplitFrames(const std::vector<uint8_t>& s) {
  std::vector<std::vector<uint8_t>> frames;
  size_t off = 0;
  while (off + kFrameHeaderBytes <= s.size()) {
    DecodeResult r = DecodeFrameHeader(&s[off], off, 1u << 30, frames.size());
    EXPECT_TRUE(r.ok) << r.error;
    if (!r.ok) break;
    // HELLO and AUTH carry no tag; every later frame does.
    const size_t end =
        off + kFrameHeaderBytes + r.header.length + (frames.size() >= 2 ? kFrameTagBytes : 0);
    if (end > s.size()) break;
    frames.emplace_back(s.begin() + static_cast<long>(off), s.begin() + static_cast<long>(end));
    off = end;
  }
  EXPECT_EQ(off, s.size()) << "the recording ends inside a frame";
  return frames;
}

inline size_t CountFrom(Events& ev, int from) {
  std::lock_guard<std::mutex> l(ev.mu);
  return static_cast<size_t>(
      std::count_if(ev.msgs.begin(), ev.msgs.end(), [&](const core::Message& m) {
        return m.from == from;
      }));
}

}  // namespace poseidon::rt::test
