#include "calibration/net_probe.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <queue>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "calibration/provenance.h"
#include "calibration/stats.h"
#include "sim/network/network_model.h"

namespace poseidon::calibration {
namespace {

using Clock = std::chrono::steady_clock;

enum Op : uint32_t { kPing = 1, kSink = 2, kQuit = 3, kGo = 4, kHello = 5, kAck = 6 };
constexpr size_t kHeaderBytes = 24;

struct Header {
  uint32_t op = 0;
  uint64_t size = 0;
  uint64_t arg = 0;
};

void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// One connected socket with its peer's name for messages.
class Conn {
 public:
  Conn(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~Conn() {
    if (fd_ >= 0) close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }

  void SendAll(const uint8_t* p, size_t n) {
    size_t off = 0;
    while (off < n) {
      ssize_t w = send(fd_, p + off, n - off, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        throw ProbeError(fmt::format("sending to {} failed at byte {} of {}: {}; is the peer "
                                     "still running?",
                                     peer_, off, n, std::strerror(errno)));
      }
      off += static_cast<size_t>(w);
      sent_ += static_cast<uint64_t>(w);
    }
  }
  // Returns false on a clean close before the first byte when `eof_ok`.
  bool RecvAll(uint8_t* p, size_t n, bool eof_ok = false) {
    size_t off = 0;
    while (off < n) {
      ssize_t r = recv(fd_, p + off, n - off, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 && off == 0 && eof_ok) return false;
      if (r <= 0) {
        throw ProbeError(fmt::format(
            "receiving from {} failed at stream offset {} ({} of {} bytes of this read): {}; the "
            "peer closed or crashed",
            peer_, received_ + off, off, n, r == 0 ? "connection closed" : std::strerror(errno)));
      }
      off += static_cast<size_t>(r);
    }
    received_ += n;
    return true;
  }
  void SendHeader(const Header& h) {
    uint8_t b[kHeaderBytes] = {};
    PutU64(b, h.op);
    PutU64(b + 8, h.size);
    PutU64(b + 16, h.arg);
    SendAll(b, kHeaderBytes);
  }
  bool RecvHeader(Header* h, bool eof_ok = false) {
    uint8_t b[kHeaderBytes];
    const uint64_t at = received_;
    if (!RecvAll(b, kHeaderBytes, eof_ok)) return false;
    const uint64_t op = GetU64(b);
    if (op < kPing || op > kAck) {
      throw ProbeError(fmt::format("bad header from {} at stream offset {}: op {} is not a probe "
                                   "request; is the peer a `poseidon calibrate-net` of this "
                                   "version?",
                                   peer_, at, op));
    }
    h->op = static_cast<uint32_t>(op);
    h->size = GetU64(b + 8);
    h->arg = GetU64(b + 16);
    return true;
  }
  // Reads and discards n payload bytes.
  void Drain(uint64_t n) {
    static thread_local std::vector<uint8_t> buf(1 << 20);
    while (n > 0) {
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
      RecvAll(buf.data(), chunk);
      n -= chunk;
    }
  }
  void SendPayload(uint64_t n) {
    static thread_local std::vector<uint8_t> buf(1 << 20, 0x5a);
    while (n > 0) {
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
      SendAll(buf.data(), chunk);
      n -= chunk;
    }
  }

 private:
  int fd_;
  std::string peer_;
  uint64_t sent_ = 0, received_ = 0;
};

std::string AddrName(const sockaddr_storage& ss) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof(ss), host, sizeof(host), serv,
                  sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown peer";
  }
  return fmt::format("{}:{}", host, serv);
}

std::unique_ptr<Conn> Connect(const HostPort& hp, double timeout_s) {
  const std::string name = fmt::format("{}:{}", hp.host, hp.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res);
  if (rc != 0) {
    throw ProbeError(fmt::format("cannot resolve '{}': {}; give an IP address or a known host name",
                                 hp.host, gai_strerror(rc)));
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  std::string last_error;
  while (true) {
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(res);
        return std::make_unique<Conn>(fd, name);
      }
      last_error = std::strerror(errno);
      close(fd);
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // retry while the peer starts
  }
  freeaddrinfo(res);
  throw ProbeError(fmt::format("cannot connect to {}: {}; is `poseidon calibrate-net --listen {}` "
                               "running there?",
                               name, last_error, hp.port));
}

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Events in virtual time of one small replay on the simulator's network model.
struct Replay {
  explicit Replay(const config::NetworkSpec& spec, int hosts) {
    config::NetworkSpec s = spec;
    s.topology = config::TopologyKind::kStar;
    // The probe's repetitions follow each other with a round trip between them, which leaves a
    // shaper's token bucket empty: replay them without the file's burst.
    s.burst_bytes = 0;
    net = sim::MakeNetworkModel(s, hosts);
  }
  // Runs until nothing is pending; `on_delivery(tag, t)` may start flows at t.
  template <typename F>
  void Run(F on_delivery) {
    using Item = std::pair<sim::TimeNs, uint64_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<>> due;
    std::vector<sim::FlowDone> done;
    while (true) {
      const sim::TimeNs tn = net->NextEventTime();
      const sim::TimeNs td = due.empty() ? sim::kNever : due.top().first;
      if (tn == sim::kNever && td == sim::kNever) break;
      done.clear();
      if (tn <= td) {
        net->AdvanceTo(tn, &done);
      } else {
        auto [t, tag] = due.top();
        due.pop();
        net->AdvanceTo(t, &done);
        for (const auto& d : done) due.push({d.delivered_at, d.tag});
        done.clear();
        on_delivery(tag, t);
        continue;
      }
      for (const auto& d : done) due.push({d.delivered_at, d.tag});
    }
  }
  std::unique_ptr<sim::NetworkModel> net;
};

}  // namespace

HostPort ParseHostPort(const std::string& text, const std::string& default_host) {
  HostPort hp;
  std::string port = text;
  auto colon = text.rfind(':');
  if (colon != std::string::npos) {
    hp.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (hp.host.empty()) hp.host = default_host;
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  char* end = nullptr;
  long v = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || v < 0 || v > 65535) {
    throw ProbeError(fmt::format("'{}' is not HOST:PORT (a port in 0..65535), e.g. 10.77.0.1:7070",
                                 text));
  }
  hp.port = static_cast<int>(v);
  return hp;
}

ProbeServer::ProbeServer(const HostPort& hp) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res);
  if (rc != 0) {
    throw ProbeError(fmt::format("cannot resolve listen address '{}': {}", hp.host, gai_strerror(rc)));
  }
  std::string err = "no address";
  for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      fd_ = fd;
    } else {
      err = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(res);
  if (fd_ < 0) {
    throw ProbeError(fmt::format("cannot listen on {}:{}: {}; pick another port (or 0 for any)",
                                 hp.host, hp.port, err));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

ProbeServer::~ProbeServer() {
  if (fd_ >= 0) close(fd_);
}

void ProbeServer::Serve(bool once, const std::function<void(const std::string&)>& log) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::mutex log_mu;
  auto say = [&](const std::string& s) {
    std::lock_guard<std::mutex> lock(log_mu);
    if (log) log(s);
  };
  while (!stop.load()) {
    pollfd p{fd_, POLLIN, 0};
    int rc = poll(&p, 1, 100);
    if (rc <= 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int cfd = accept(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    if (cfd < 0) continue;
    auto conn = std::make_shared<Conn>(cfd, AddrName(ss));
    threads.emplace_back([conn, &stop, once, &say] {
      try {
        Header h;
        while (conn->RecvHeader(&h, /*eof_ok=*/true)) {
          if (h.op == kPing) {
            conn->SendHeader(h);
          } else if (h.op == kSink) {
            conn->Drain(h.size);
            conn->SendHeader({kAck, h.size, h.arg});
          } else if (h.op == kQuit) {
            if (once) stop.store(true);
            break;
          }
        }
      } catch (const ProbeError& e) {
        say(fmt::format("calibrate-net: connection {}: {}", conn->peer(), e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
}

ProbeResult ProbeNetwork(const HostPort& server, const ProbeOptions& o, const std::string& command,
                         const ProbeProgress& progress) {
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  ProbeResult result;
  auto conn = Connect(server, o.connect_timeout_s);
  // Quit on the main connection however the probe ends, so a `--once` server ends too when a
  // measurement fails (best effort: a broken connection has nothing left to tell).
  struct QuitOnExit {
    Conn* c;
    void Quit() {
      if (c == nullptr) return;
      Conn* once = std::exchange(c, nullptr);
      once->SendHeader({kQuit, 0, 0});
    }
    ~QuitOnExit() {
      try {
        Quit();
      } catch (const ProbeError&) {
      }
    }
  } quit_on_exit{conn.get()};
  // Round trips.
  std::vector<double> rtts;
  for (int i = 0; i < o.pings + 10; ++i) {
    auto t0 = Clock::now();
    conn->SendHeader({kPing, 0, static_cast<uint64_t>(i)});
    Header h;
    conn->RecvHeader(&h);
    if (i >= 10) rtts.push_back(MsSince(t0) * 1e3);
  }
  Summary rs = Summarize(rtts);
  result.rtt_us = rs.median;
  result.rtt_p10_us = rs.p10;
  result.rtt_p90_us = rs.p90;
  say(fmt::format("rtt: median {:.1f} us (p10 {:.1f}, p90 {:.1f}) over {} pings", rs.median, rs.p10,
                  rs.p90, rtts.size()));

  auto sink = [&](Conn& c, int64_t bytes) {
    auto t0 = Clock::now();
    c.SendHeader({kSink, static_cast<uint64_t>(bytes), 0});
    c.SendPayload(static_cast<uint64_t>(bytes));
    Header h;
    c.RecvHeader(&h);
    return MsSince(t0);
  };
  // Message sizes.
  for (int64_t s = o.min_size; s <= o.max_size; s *= 4) {
    sink(*conn, s);  // warm-up
    std::vector<double> t;
    double total = 0;
    while (t.size() < 3 || (total < o.seconds_per_size * 1e3 && t.size() < 200)) {
      t.push_back(sink(*conn, s));
      total += t.back();
    }
    Summary ss = Summarize(t);
    SizePoint pt;
    pt.bytes = s;
    pt.reps = static_cast<int>(t.size());
    pt.median_ms = ss.median;
    pt.p10_ms = ss.p10;
    pt.p90_ms = ss.p90;
    result.sizes.push_back(pt);
    say(fmt::format("size {:>9} B: median {:.3f} ms ({} reps) goodput {:.1f} Mbit/s", s,
                    ss.median, t.size(), 8.0 * static_cast<double>(s) / (ss.median * 1e3)));
  }
  // t = c + S * slope. The slope (1/beta) from the messages of >= 1 MiB when there are two or more
  // (else from all): below that, a shaper's token bucket (tc tbf, whose burst is up to ~128 KB)
  // lets part of a message through faster than the line, and a fit weighted toward the small
  // sizes then puts beta above the rate large transfers reach (1 Gbit/s: 0.979 x line rate
  // fitted over all sizes, 0.956 measured from 1 MiB up). Weights 1/t^2 (relative errors).
  // Then c, with the slope fixed, over all sizes (same weights).
  auto fit = [&](int64_t from_bytes, double* slope_out, double* intercept_out) {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int points = 0;
    for (const auto& p : result.sizes) {
      if (p.bytes < from_bytes) continue;
      const double x = static_cast<double>(p.bytes), y = p.median_ms * 1e3;  // us
      const double w = 1.0 / (y * y);
      sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
      ++points;
    }
    const double den = sw * sxx - sx * sx;
    *slope_out = points >= 2 && den != 0 ? (sw * sxy - sx * sy) / den : 0;  // us per byte
    *intercept_out = sw != 0 ? (sy - *slope_out * sx) / sw : 0;
    return points;
  };
  constexpr int64_t kLargeBytes = 1 << 20;
  double slope = 0, intercept = 0;
  if (fit(kLargeBytes, &slope, &intercept) < 2 || !(slope > 0)) fit(0, &slope, &intercept);
  if (!(slope > 0)) {
    throw ProbeError("the message times do not grow with the size (no bandwidth to fit); measure "
                     "larger sizes (--max-size) or longer (--seconds-per-size)");
  }
  {
    // c over the messages of >= 64 KiB (all when none is): a smaller message fits in the credit
    // a token bucket banks during the idle round trip before it and takes ~ the RTT, not c + S/beta.
    constexpr int64_t kInterceptFromBytes = 64 << 10;
    const bool any = std::any_of(result.sizes.begin(), result.sizes.end(),
                                 [](const SizePoint& p) { return p.bytes >= kInterceptFromBytes; });
    double sw = 0, sr = 0;
    for (const auto& p : result.sizes) {
      if (any && p.bytes < kInterceptFromBytes) continue;
      const double y = p.median_ms * 1e3;
      sw += 1.0 / (y * y);
      sr += (y - slope * static_cast<double>(p.bytes)) / (y * y);
    }
    intercept = sw != 0 ? sr / sw : 0;
  }
  result.beta_Bps = 1e6 / slope;
  result.intercept_us = intercept;

  // Concurrent connections.
  for (int k : o.streams) {
    std::vector<std::unique_ptr<Conn>> conns;
    for (int i = 0; i < k; ++i) conns.push_back(Connect(server, o.connect_timeout_s));
    std::vector<double> samples;
    for (int rep = 0; rep < 4; ++rep) {
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      std::vector<std::thread> th;
      std::vector<double> dummy(static_cast<size_t>(k));
      std::vector<std::string> errors(static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) {
        th.emplace_back([&, i] {
          ready.fetch_add(1);
          while (!go.load()) std::this_thread::yield();
          try {
            dummy[static_cast<size_t>(i)] = sink(*conns[static_cast<size_t>(i)], o.stream_bytes);
          } catch (const ProbeError& e) {
            errors[static_cast<size_t>(i)] = e.what();
          }
        });
      }
      while (ready.load() < k) std::this_thread::yield();
      auto t0 = Clock::now();
      go.store(true);
      for (auto& t : th) t.join();
      const double ms = MsSince(t0);
      for (const auto& e : errors) {
        if (!e.empty()) throw ProbeError(e);
      }
      if (rep > 0) samples.push_back(ms);  // the first run warms the new connections
    }
    conns.clear();  // closed without quit: only the main connection ends a --once server
    const double med = Summarize(samples).median;
    const double gbps = 8.0 * static_cast<double>(k) * static_cast<double>(o.stream_bytes) / (med * 1e6);
    result.streams_gbps.emplace_back(k, gbps);
    say(fmt::format("{} connection(s) x {} B: {:.3f} ms, aggregate {:.1f} Mbit/s", k, o.stream_bytes,
                    med, gbps * 1e3));
  }
  quit_on_exit.Quit();

  // The network file.
  config::NetworkFileSpec& f = result.network;
  config::NetworkSpec& n = f.network;
  const double beta_gbps = result.beta_Bps * 8 / 1e9;
  if (o.line_rate_gbps > 0) {
    n.host_bandwidth_Bps = o.line_rate_gbps * 1e9 / 8;
    n.efficiency = std::min(1.0, beta_gbps / o.line_rate_gbps);
  } else {
    n.host_bandwidth_Bps = result.beta_Bps;
    n.efficiency = 1.0;
  }
  // The replay charges one latency per flow, two per sink: c when c < RTT. Over a token-bucket
  // shaper c is below the ping RTT (the bucket credits the idle round trip before a message, so
  // its first bytes leave at once: 1 Gbit/s tbf, ping RTT 36 us, c ~ 0-5 us), and a latency of
  // RTT/2 then over-predicts a 64 KiB transfer by ~7%.
  n.latency_ns = std::llround(std::clamp(intercept, 0.0, result.rtt_us) / 2 * 1e3);
  n.per_message_overhead_ns = std::max<int64_t>(0, std::llround((intercept - result.rtt_us) / 2 * 1e3));
  f.provenance = CollectProvenance(command);
  f.provenance["peer"] = fmt::format("{}:{}", server.host, server.port);
  // This host's TCP, which the figures depend on (scripts/netns-run sets it per namespace).
  auto sysctl = [](const char* key) {
    std::ifstream in(std::string("/proc/sys/net/ipv4/") + key);
    std::string v;
    return std::getline(in, v) ? v : std::string("?");
  };
  f.provenance["tcp"] = fmt::format(
      "congestion control {}, slow start after idle {}, tcp_limit_output_bytes {}",
      sysctl("tcp_congestion_control"), sysctl("tcp_slow_start_after_idle"),
      sysctl("tcp_limit_output_bytes"));
  f.provenance["method"] =
      "t(S) = c + S/beta: beta fitted (weights 1/t^2) over the sink medians of >= 1 MiB, c over "
      ">= 64 KiB with beta fixed; latency = min(c, median ping RTT) / 2; "
      "efficiency = beta / line rate; per-message overhead = (c - RTT) / 2";
  if (o.line_rate_gbps > 0) {
    f.provenance["line_rate"] = fmt::format("{} Gbit/s (given with --line-rate-gbps)", o.line_rate_gbps);
  }
  f.measurements["rtt_us"] = fmt::format("median {:.2f}, p10 {:.2f}, p90 {:.2f}", result.rtt_us,
                                         result.rtt_p10_us, result.rtt_p90_us);
  f.measurements["fit"] = fmt::format("c = {:.2f} us, beta = {:.4f} Gbit/s", intercept, beta_gbps);
  for (auto& p : result.sizes) {
    p.predicted_ms = PredictSinkMs(n, p.bytes);
    f.measurements[fmt::format("sink_{:09}_bytes", p.bytes)] = fmt::format(
        "median {:.4f} ms (p10 {:.4f}, p90 {:.4f}, {} reps), {:.2f} Mbit/s; predicted {:.4f} ms",
        p.median_ms, p.p10_ms, p.p90_ms, p.reps,
        8.0 * static_cast<double>(p.bytes) / (p.median_ms * 1e3), p.predicted_ms);
  }
  for (const auto& [k, g] : result.streams_gbps) {
    f.measurements[fmt::format("streams_{}_goodput_gbps", k)] = fmt::format("{:.4f}", g);
  }
  return result;
}

int ProbeServer::AcceptFd(std::string* peer, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int cfd = accept(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    if (cfd >= 0) {
      *peer = AddrName(ss);
      return cfd;
    }
  }
  return -1;
}

std::vector<TransferCase> RunTransferReceiver(ProbeServer& server, int senders,
                                              const std::vector<int>& concurrency,
                                              const std::vector<int64_t>& sizes, int reps,
                                              const ProbeProgress& progress) {
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < senders; ++i) {
    std::string peer;
    int fd = server.AcceptFd(&peer, 60.0);
    if (fd < 0) {
      throw ProbeError(fmt::format("only {} of {} senders connected to port {} within 60 s; start "
                                   "`poseidon calibrate-net --send HOST:{}` on each",
                                   i, senders, server.port(), server.port()));
    }
    conns.push_back(std::make_unique<Conn>(fd, peer));
    Header h;
    conns.back()->RecvHeader(&h);
    if (h.op != kHello) {
      throw ProbeError(fmt::format("{} is not a transfer sender (first request op {}); start it "
                                   "with --send",
                                   peer, h.op));
    }
  }
  std::vector<uint8_t> buf(1 << 20);
  std::vector<TransferCase> cases;
  for (int k : concurrency) {
    if (k > senders) {
      throw ProbeError(fmt::format("concurrency {} needs {} senders, only {} connected", k, k,
                                   senders));
    }
    for (int64_t bytes : sizes) {
      TransferCase c;
      c.senders = k;
      c.bytes = bytes;
      for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
        auto t0 = Clock::now();
        for (int i = 0; i < k; ++i) conns[static_cast<size_t>(i)]->SendHeader({kGo, static_cast<uint64_t>(bytes), 0});
        std::vector<int64_t> left(static_cast<size_t>(k), bytes);
        int open = k;
        while (open > 0) {
          std::vector<pollfd> pf;
          std::vector<int> idx;
          for (int i = 0; i < k; ++i) {
            if (left[static_cast<size_t>(i)] > 0) {
              pf.push_back({conns[static_cast<size_t>(i)]->fd(), POLLIN, 0});
              idx.push_back(i);
            }
          }
          if (poll(pf.data(), pf.size(), 10000) <= 0) {
            throw ProbeError(fmt::format("no data from the senders for 10 s in case {} x {} B; is "
                                         "the link up?",
                                         k, bytes));
          }
          for (size_t j = 0; j < pf.size(); ++j) {
            if (pf[j].revents == 0) continue;
            const size_t i = static_cast<size_t>(idx[j]);
            const size_t want = static_cast<size_t>(std::min<int64_t>(left[i], static_cast<int64_t>(buf.size())));
            ssize_t r = recv(pf[j].fd, buf.data(), want, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
              throw ProbeError(fmt::format("sender {} closed or failed at byte {} of {}: {}",
                                           conns[i]->peer(), bytes - left[i], bytes,
                                           r == 0 ? "connection closed" : std::strerror(errno)));
            }
            if (r > 0) {
              left[i] -= r;
              if (left[i] == 0) --open;
            }
          }
        }
        if (rep > 0) c.samples_ms.push_back(MsSince(t0));
      }
      c.measured_ms = Summarize(c.samples_ms).median;
      if (progress) {
        progress(fmt::format("{} sender(s) x {} B: median {:.3f} ms over {} reps", k, bytes,
                             c.measured_ms, reps));
      }
      cases.push_back(c);
    }
  }
  for (auto& c : conns) c->SendHeader({kQuit, 0, 0});
  return cases;
}

void RunTransferSender(const HostPort& receiver, double connect_timeout_s) {
  auto conn = Connect(receiver, connect_timeout_s);
  conn->SendHeader({kHello, 0, 0});
  Header h;
  while (conn->RecvHeader(&h, /*eof_ok=*/true)) {
    if (h.op == kGo) {
      conn->SendPayload(h.size);
    } else if (h.op == kQuit) {
      return;
    }
  }
}

double PredictTransferMs(const config::NetworkSpec& spec, int senders, int64_t bytes) {
  Replay r(spec, senders + 1);
  for (int i = 1; i <= senders; ++i) r.net->StartFlow(0, 0, i, kHeaderBytes, static_cast<uint64_t>(i));
  sim::TimeNs last = 0;
  r.Run([&](uint64_t tag, sim::TimeNs t) {
    if (tag <= static_cast<uint64_t>(senders)) {
      r.net->StartFlow(t, static_cast<int>(tag), 0, bytes, 1000 + tag);
    } else {
      last = std::max(last, t);
    }
  });
  return static_cast<double>(last) / 1e6;
}

double PredictSinkMs(const config::NetworkSpec& spec, int64_t bytes) {
  Replay r(spec, 2);
  r.net->StartFlow(0, 0, 1, bytes + static_cast<int64_t>(kHeaderBytes), 1);
  sim::TimeNs last = 0;
  r.Run([&](uint64_t tag, sim::TimeNs t) {
    if (tag == 1) {
      r.net->StartFlow(t, 1, 0, kHeaderBytes, 2);
    } else {
      last = t;
    }
  });
  return static_cast<double>(last) / 1e6;
}

}  // namespace poseidon::calibration
