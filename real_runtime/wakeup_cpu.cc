#include "real_runtime/wakeup_cpu.h"

#include <asio.hpp>

#include <algorithm>
#include <functional>
#include <future>
#include <thread>

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

}  // namespace poseidon::rt
