#include "real_runtime/wakeup_cpu.h"

#include <asio.hpp>

#include <algorithm>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "real_runtime/compute_streams.h"
#include "real_runtime/loopback_push.h"

namespace poseidon::rt {

WakeupCpu MeasureWakeupCpu(int64_t rounds, std::chrono::microseconds sleep) {
  WakeupCpu out;
  out.rounds = std::max<int64_t>(1, rounds);
  TransportLoop protocol;  // the protocol thread
  Executor stream;         // a compute stream
  std::promise<void> done;
  int64_t left = out.rounds;
  // Runs on the protocol thread: hands the next task to the stream, whose end comes back here.
  std::function<void()> hand_over = [&] {
    if (left-- == 0) {
      done.set_value();
      return;
    }
    stream.Post([&] {
      std::this_thread::sleep_until(std::chrono::steady_clock::now() + sleep);
      asio::post(protocol.io, hand_over);
    });
  };
  const auto w0 = std::chrono::steady_clock::now();
  const double c0 = ProcessCpuSeconds();
  asio::post(protocol.io, hand_over);
  done.get_future().wait();
  out.cpu_s = ProcessCpuSeconds() - c0;
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  out.us_per_wakeup = 1e6 * out.cpu_s / (3.0 * static_cast<double>(out.rounds));
  return out;
}

namespace {

// `rounds` samples, each as HostLatency describes: with `sleep` > 0 a wake-up (S - E), else a
// hand-off (S - A).
std::vector<double> LatencySamples(int64_t rounds, std::chrono::microseconds sleep) {
  using Clock = std::chrono::steady_clock;
  TransportLoop protocol;
  Executor stream;
  std::promise<void> done;
  std::vector<double> out;
  out.reserve(static_cast<size_t>(rounds));
  std::function<void()> hand_over = [&] {
    if (static_cast<int64_t>(out.size()) == rounds) {
      done.set_value();
      return;
    }
    const Clock::time_point handed = Clock::now();
    const Clock::time_point end = sleep.count() > 0 ? handed + sleep : handed;
    stream.Post([&, handed, end] {
      std::this_thread::sleep_until(end);
      asio::post(protocol.io, [&, handed, end] {
        const Clock::time_point seen = Clock::now();
        const Clock::time_point from = sleep.count() > 0 ? end : handed;
        out.push_back(std::chrono::duration<double, std::micro>(seen - from).count());
        hand_over();
      });
    });
  };
  asio::post(protocol.io, hand_over);
  done.get_future().wait();
  return out;
}

}  // namespace

HostLatency MeasureHostLatency(int64_t rounds, std::chrono::microseconds sleep) {
  rounds = std::max<int64_t>(1, rounds);
  const int64_t warm = std::max<int64_t>(1, rounds / 10);
  HostLatency out;
  LatencySamples(warm, sleep);
  out.wakeup_us = LatencySamples(rounds, sleep);
  LatencySamples(warm, std::chrono::microseconds(0));
  out.handoff_us = LatencySamples(rounds, std::chrono::microseconds(0));
  return out;
}

}  // namespace poseidon::rt
