// Loopback goodput of the live transport against a raw socket stream of the same bytes, with and
// without TLS, the cost of a connection's handshake (v2: HMAC-SHA256 proofs over the transcript,
// HKDF session keys; and TLS + that), and of the per-frame tag.
//
//   build/bench/transport_benchmark --benchmark_counters_tabular=true
//
// Each goodput iteration pushes 256 core::Messages of 4 MiB of floats (1 GiB) from one endpoint to
// another, each endpoint on its own thread and io_context (as two processes would be). The raw
// baseline writes the same frames (header + fixed part + floats) with blocking asio writes and
// reads them into a reused buffer: an upper bound no protocol can beat.
#include <benchmark/benchmark.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <asio.hpp>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "real_runtime/frame.h"
#include "real_runtime/frame_mac.h"
#include "real_runtime/handshake.h"
#include "real_runtime/tls_files.h"
#include "real_runtime/transport.h"

namespace poseidon::rt {
namespace {

using asio::ip::tcp;

constexpr size_t kMessageFloats = (4u << 20) / sizeof(float);  // 4 MiB per message
constexpr int kMessages = 256;                                   // 1 GiB per iteration

// An io_context on its own thread.
struct Loop {
  Loop() : guard(asio::make_work_guard(io)), thread([this] { io.run(); }) {}
  ~Loop() {
    guard.reset();
    io.stop();
    thread.join();
  }
  template <typename F>
  void Run(F&& f) {
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  std::thread thread;
};

struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  int64_t count = 0;
  void Add(int64_t n = 1) {
    {
      std::lock_guard<std::mutex> l(mu);
      count += n;
    }
    cv.notify_all();
  }
  void WaitFor(int64_t n) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return count >= n; });
  }
};

// One TLS identity for every benchmark, made once.
TlsFiles Identity() {
  static const TlsFiles files = [] {
    std::string tmpl = std::filesystem::temp_directory_path() / "poseidon-bench-tls-XXXXXX";
    return WriteJobTlsFiles(mkdtemp(tmpl.data()), {});
  }();
  return files;
}

TransportOptions Options(bool tls) {
  TransportOptions o;
  o.job_id = "bench";
  o.secret = "benchmark-secret-0123456789abcdef";
  o.logger = std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::null_sink_mt>());
  if (tls) {
    o.tls = true;
    o.tls_cert = Identity().cert;
    o.tls_key = Identity().key;
    o.tls_ca = Identity().ca;
  }
  return o;
}

// The same bytes as the transport puts on the wire, through blocking asio socket calls.
void BM_RawSocketStream(benchmark::State& state) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket tx(io), rx(io);
  tx.connect(acceptor.local_endpoint());
  acceptor.accept(rx);
  for (tcp::socket* s : {&tx, &rx}) {
    s->set_option(tcp::no_delay(true));
    s->set_option(asio::socket_base::send_buffer_size(4 << 20));
    s->set_option(asio::socket_base::receive_buffer_size(4 << 20));
  }
  std::vector<float> payload(kMessageFloats, 1.0f);
  std::vector<uint8_t> header(kFrameHeaderBytes + kMessageFixedBytes, 0);
  std::vector<float> sink(kMessageFloats);
  std::vector<uint8_t> header_sink(header.size());
  for (auto _ : state) {
    std::thread reader([&] {
      for (int i = 0; i < kMessages; ++i) {
        asio::read(rx, asio::buffer(header_sink));
        asio::read(rx, asio::buffer(sink.data(), sink.size() * sizeof(float)));
      }
    });
    for (int i = 0; i < kMessages; ++i) {
      std::array<asio::const_buffer, 2> bufs{asio::buffer(header),
                                             asio::buffer(payload.data(), payload.size() * 4)};
      asio::write(tx, bufs);
    }
    reader.join();
  }
  state.SetBytesProcessed(state.iterations() * kMessages * kMessageFloats * sizeof(float));
}
BENCHMARK(BM_RawSocketStream)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

// 1 GiB of 4 MiB pushes through Transport; arg 0 = plain TCP, 1 = TLS.
void BM_TransportPush(benchmark::State& state) {
  const bool tls = state.range(0) != 0;
  Loop sender_loop, receiver_loop;
  Latch up, received;
  std::unique_ptr<Transport> sender, receiver;
  core::Message m;
  m.type = core::MsgType::kPushGrad;
  m.from = 1;
  m.to = 0;
  m.data = std::make_shared<std::vector<float>>(kMessageFloats, 1.0f);
  m.payload_bytes = static_cast<int64_t>(kMessageFloats * sizeof(float));
  int remaining = 0;
  auto pump = [&] {
    while (remaining > 0 && sender->Send(m)) --remaining;
  };
  TransportCallbacks rcb;
  rcb.on_peer_up = [&](int) { up.Add(); };
  rcb.on_message = [&](core::Message msg) {
    benchmark::DoNotOptimize(msg.data->data());
    received.Add();
  };
  TransportCallbacks scb;
  scb.on_peer_up = [&](int) { up.Add(); };
  scb.on_sent = [&](const core::Message&) { pump(); };
  uint16_t port = 0;
  receiver_loop.Run([&] {
    receiver = std::make_unique<Transport>(receiver_loop.io, 0, Options(tls), rcb);
    port = receiver->Listen("127.0.0.1", 0);
  });
  sender_loop.Run([&] {
    sender = std::make_unique<Transport>(sender_loop.io, 1, Options(tls), scb);
    sender->Connect(0, "127.0.0.1", port);
  });
  up.WaitFor(2);
  int64_t target = 0;
  for (auto _ : state) {
    target += kMessages;
    sender_loop.Run([&] {
      remaining = kMessages;
      pump();
    });
    received.WaitFor(target);
  }
  state.SetBytesProcessed(state.iterations() * kMessages * kMessageFloats * sizeof(float));
  sender_loop.Run([&] { sender.reset(); });
  receiver_loop.Run([&] { receiver.reset(); });
}
BENCHMARK(BM_TransportPush)->Arg(0)->Arg(1)->Iterations(3)->UseRealTime()->Unit(
    benchmark::kMillisecond);

// One connection's setup: TCP connect + (TLS handshake +) HELLO/AUTH both ways, until both sides
// report the peer up. Arg 0 = plain TCP + HMAC, 1 = TLS + HMAC.
void BM_ConnectAndHandshake(benchmark::State& state) {
  const bool tls = state.range(0) != 0;
  Loop server_loop, client_loop;
  Latch server_up, client_up;
  std::unique_ptr<Transport> server, client;
  TransportCallbacks scb;
  scb.on_peer_up = [&](int) { server_up.Add(); };
  TransportCallbacks ccb;
  ccb.on_peer_up = [&](int) { client_up.Add(); };
  uint16_t port = 0;
  server_loop.Run([&] {
    server = std::make_unique<Transport>(server_loop.io, 0, Options(tls), scb);
    port = server->Listen("127.0.0.1", 0);
  });
  int64_t n = 0;
  int rank = 1;
  for (auto _ : state) {
    ++n;
    const int my_rank = rank++;  // a fresh rank each time: the old connection may linger
    client_loop.Run([&] {
      client = std::make_unique<Transport>(client_loop.io, my_rank, Options(tls), ccb);
      client->Connect(0, "127.0.0.1", port);
    });
    client_up.WaitFor(n);
    server_up.WaitFor(n);
    client_loop.Run([&] { client.reset(); });
  }
  server_loop.Run([&] { server.reset(); });
}
BENCHMARK(BM_ConnectAndHandshake)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

// What handshake v2 computes per connection besides the round trips: the transcript hash, the
// HKDF of the session keys and the two proofs.
void BM_SessionKeys(benchmark::State& state) {
  const std::string secret = "benchmark-secret-0123456789abcdef";
  Hello d, a;
  d.version = a.version = kProtocolVersion;
  d.nonce = RandomNonce();
  a.nonce = RandomNonce();
  a.role = Role::kAcceptor;
  d.job_id = a.job_id = "bench";
  const auto hd = EncodeHello(d), ha = EncodeHello(a);
  for (auto _ : state) {
    const Digest t = TranscriptHash(hd, ha);
    const SessionKeys k = DeriveSessionKeys(secret, t);
    benchmark::DoNotOptimize(AuthProof(k, Role::kDialer, t));
    benchmark::DoNotOptimize(AuthProof(k, Role::kAcceptor, t));
  }
}
BENCHMARK(BM_SessionKeys)->Unit(benchmark::kMicrosecond);

// The tag of one frame (frame_mac.h) over a body of `range(0)` bytes: its throughput bounds the
// transport's goodput on one core.
void BM_FrameTag(benchmark::State& state) {
  FrameKey key{};
  key[0] = 1;
  FrameMac mac(key);
  std::vector<uint8_t> body(static_cast<size_t>(state.range(0)), 0x5a);
  std::array<uint8_t, kFrameHeaderBytes> header{};
  uint64_t seq = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(mac.Tag(seq++, {Bytes(header.data(), header.size()),
                                             Bytes(body.data(), body.size())}));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_FrameTag)->Arg(64)->Arg(4096)->Arg(4 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace poseidon::rt

BENCHMARK_MAIN();
