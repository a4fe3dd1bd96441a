// real_runtime/loopback_push.h: the live transport between two endpoints of one process over
// loopback, for measuring what a message costs (bench/transport_benchmark, and `poseidon validate
// --testbed-keys measure`, validation/testbed_keys.h).
//
//   LoopbackPush pair(options, /*floats=*/1024);   // connects, handshakes
//   const double c0 = ProcessCpuSeconds();
//   pair.Push(4000);                                // 4,000 messages of 4 KiB, all received
//   const double us_per_message = 1e6 * (ProcessCpuSeconds() - c0) / 4000;
//
// Each endpoint is a Transport on its own io_context and thread (TransportLoop), as two processes
// would be; the sender keeps the transport's queue full (core::Message kPushGrad frames of float
// payloads, as gradient pushes travel). Not thread-safe: one caller drives Push.
#pragma once

#include <asio.hpp>

#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "core/messages.h"
#include "real_runtime/transport.h"

namespace poseidon::rt {

// An io_context run on its own thread until destroyed; Run(f) runs f there and waits for it.
class TransportLoop {
 public:
  TransportLoop() : guard_(asio::make_work_guard(io)), thread_([this] { io.run(); }) {}
  ~TransportLoop() {
    guard_.reset();
    io.stop();
    thread_.join();
  }
  TransportLoop(const TransportLoop&) = delete;
  TransportLoop& operator=(const TransportLoop&) = delete;
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

 private:
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// A counter other threads wait on until it reaches a value.
class CountLatch {
 public:
  void Add(int64_t n = 1) {
    {
      std::lock_guard<std::mutex> l(mu_);
      count_ += n;
    }
    cv_.notify_all();
  }
  void WaitFor(int64_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return count_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t count_ = 0;
};

// A sender and a receiver Transport connected over 127.0.0.1 (both with `options`).
class LoopbackPush {
 public:
  LoopbackPush(const TransportOptions& options, size_t floats);
  ~LoopbackPush();
  LoopbackPush(const LoopbackPush&) = delete;
  LoopbackPush& operator=(const LoopbackPush&) = delete;
  // Sends n copies of the message and returns when all have arrived.
  void Push(int n);

 private:
  void Pump();
  TransportLoop sender_loop_, receiver_loop_;
  CountLatch up_, received_;
  std::unique_ptr<Transport> sender_, receiver_;
  core::Message m_;
  int remaining_ = 0;
  int64_t target_ = 0;
};

// User + system CPU seconds of this process so far (every thread: both endpoints above, and the
// loopback TCP stack's work done on their behalf).
double ProcessCpuSeconds();

}  // namespace poseidon::rt
