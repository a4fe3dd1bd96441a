// real_runtime/wakeup_cpu.h: the CPU a wake-up costs on this host, paid as a live run that
// replays compute pays it (bench/transport_benchmark's WakeupCpu; the simulator's
// host_wakeup_cpu_us, config/specs.h, which the emulated network files carry).
//
//   const WakeupCpu w = MeasureWakeupCpu(4000);  // w.us_per_wakeup
//
// One round is what a replayed compute task costs the host between two tasks: a protocol thread
// (an io_context on its own thread, as a node's) hands a task to a compute stream (an Executor:
// a condition variable's wake-up); the stream sleeps until the task's modelled end (a timer's
// wake-up) and posts its end back to the protocol thread (asio's wake-up of the io_context). So
// a round is three wake-ups, and the process's CPU (user + system) over the rounds, divided by
// three per round, is the CPU of one wake-up with what it takes to hand the work over.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace poseidon::rt {

struct WakeupCpu {
  double us_per_wakeup = 0;  // process CPU per wake-up, microseconds
  int64_t rounds = 0;
  double cpu_s = 0;   // process CPU over the rounds
  double wall_s = 0;  // their wall time
};

// `rounds` rounds, the stream sleeping `sleep` in each (long enough that every thread is asleep
// when it is woken). Blocks for about rounds x (sleep + the wake-ups).
WakeupCpu MeasureWakeupCpu(int64_t rounds,
                           std::chrono::microseconds sleep = std::chrono::microseconds(100));

// The latencies a live replay's traces show (validation/testbed_keys.h, AddHostLatencies; the
// simulator's host_wakeup_us and host_handoff_us), measured in one process with the threads a node
// runs: a protocol thread (an io_context on its own thread) and a compute stream (an Executor).
//   wake-up   the stream sleeps to a task's end E (`sleep` after the hand-over, long enough that
//             every thread is asleep) and posts the end back; the protocol thread takes it at S:
//             S - E, the timer's lateness and the post back;
//   hand-off  the protocol thread hands over at A a task whose end has passed; the stream posts
//             its end back at once; the protocol thread takes it at S: S - A, two wake-ups of
//             threads that were awake a moment before.
// `rounds` of each (wake-up rounds first), after `rounds` / 10 of each to warm up; every sample,
// in microseconds, for the caller to summarise.
struct HostLatency {
  std::vector<double> wakeup_us, handoff_us;
};
HostLatency MeasureHostLatency(int64_t rounds,
                               std::chrono::microseconds sleep = std::chrono::microseconds(200));

}  // namespace poseidon::rt
