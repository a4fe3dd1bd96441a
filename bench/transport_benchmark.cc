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

#include <sys/resource.h>

#include "calibration/stats.h"
#include "real_runtime/frame.h"
#include "real_runtime/frame_mac.h"
#include "real_runtime/handshake.h"
#include "real_runtime/loopback_push.h"
#include "real_runtime/tls_files.h"
#include "real_runtime/transport.h"
#include "real_runtime/wakeup_cpu.h"

namespace poseidon::rt {
namespace {

using asio::ip::tcp;

constexpr size_t kMessageFloats = (4u << 20) / sizeof(float);  // 4 MiB per message
constexpr int kMessages = 256;                                   // 1 GiB per iteration

using Loop = TransportLoop;
using Latch = CountLatch;

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

// 1 GiB of 4 MiB pushes through Transport (real_runtime/loopback_push.h); arg 0 = plain TCP,
// 1 = TLS.
void BM_TransportPush(benchmark::State& state) {
  LoopbackPush pair(Options(state.range(0) != 0), kMessageFloats);
  for (auto _ : state) pair.Push(kMessages);
  state.SetBytesProcessed(state.iterations() * kMessages * kMessageFloats * sizeof(float));
}
BENCHMARK(BM_TransportPush)->Arg(0)->Arg(1)->Iterations(3)->UseRealTime()->Unit(
    benchmark::kMillisecond);

// Host CPU per message: the process's CPU time (both endpoints' threads, user and system: the
// loopback TCP stack included) per message of the given payload size, plain TCP. What an emulated
// cluster's processes spend per message on the cores they share (scenarios/networks/emulated_*:
// host_message_us and host_ns_per_byte are fitted to these counters, docs/performance.md).
void BM_TransportMessageCpu(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  LoopbackPush pair(Options(false), std::max<size_t>(1, bytes / sizeof(float)));
  // About 64 MiB or 4,000 messages per iteration, whichever is more messages.
  const int n = static_cast<int>(std::max<size_t>(4000, (64u << 20) / std::max<size_t>(bytes, 1)));
  pair.Push(n);  // warm: connection, buffers, pools
  double cpu = 0;
  int64_t messages = 0;
  for (auto _ : state) {
    const double c0 = ProcessCpuSeconds();
    pair.Push(n);
    cpu += ProcessCpuSeconds() - c0;
    messages += n;
  }
  state.counters["cpu_us_per_message"] = 1e6 * cpu / static_cast<double>(messages);
  state.counters["payload_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_TransportMessageCpu)
    ->Arg(256)
    ->Arg(4096)
    ->Arg(65536)
    ->Arg(1 << 20)
    ->Iterations(3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The CPU one wake-up costs (real_runtime/wakeup_cpu.h): rounds of a replayed compute task's
// hand-over, timer sleep and post back, three wake-ups each. The simulator's host_wakeup_cpu_us
// (scenarios/networks/emulated_*.yaml) is this figure's median.
void BM_WakeupCpu(benchmark::State& state) {
  MeasureWakeupCpu(1000);  // warm: threads, allocator
  double cpu = 0;
  int64_t wakeups = 0;
  for (auto _ : state) {
    const WakeupCpu w = MeasureWakeupCpu(4000);
    cpu += w.cpu_s;
    wakeups += 3 * w.rounds;
  }
  state.counters["cpu_us_per_wakeup"] = 1e6 * cpu / static_cast<double>(wakeups);
}
BENCHMARK(BM_WakeupCpu)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);

// The wake-up and hand-off latencies a live replay's traces show (real_runtime/wakeup_cpu.h,
// MeasureHostLatency): the simulator's host_wakeup_us and host_handoff_us on an idle host.
void BM_HostLatency(benchmark::State& state) {
  rt::HostLatency last;
  for (auto _ : state) last = rt::MeasureHostLatency(4000);
  const calibration::Summary wake = calibration::Summarize(last.wakeup_us);
  const calibration::Summary handoff = calibration::Summarize(last.handoff_us);
  state.counters["wakeup_mean_us"] = wake.mean;
  state.counters["wakeup_median_us"] = wake.median;
  state.counters["handoff_mean_us"] = handoff.mean;
  state.counters["handoff_median_us"] = handoff.median;
}
BENCHMARK(BM_HostLatency)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

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
