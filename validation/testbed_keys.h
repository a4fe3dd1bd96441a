// validation/testbed_keys.h: the emulated testbed's own keys: what the simulator charges for the
// hosts of an emulated cluster (the network keys host_message_us, host_ns_per_byte,
// host_kernel_ns_per_byte, host_wakeup_us, host_handoff_us), where they came from, measuring them
// on this host, and what the live runs showed of them.
//
// The shipped emulated network files (scenarios/networks/emulated_*.yaml) carry keys measured on
// one machine (their provenance says which: host_keys_cpu, host_keys_cores, host_keys_date).
// `poseidon validate --testbed-keys measure` measures these keys here before predicting
// (`--testbed-keys latencies`: the last two alone, the CPU keys staying the network files'):
//
//   host_message_us, host_ns_per_byte   the live transport's process CPU per message of 256 B,
//                                       4 KiB, 64 KiB and 1 MiB over loopback (both endpoints,
//                                       user + system; bench/transport_benchmark's MessageCpu),
//                                       fitted as c + b x bytes by least squares on relative error
//   host_kernel_ns_per_byte (per rate)  the interrupt + softirq CPU of /proc/stat per byte moved
//                                       between two emulated machines (scripts/netns-run: veth,
//                                       bridge, tbf at the rate; the live transport pushing 1 MiB
//                                       messages, `poseidon transport-goodput`), a transfer of 20 s
//                                       (64-512 MiB) minus one of 1 MiB (the setup), median of 3
//                                       (scripts/host-cpu-check's method)
//   host_wakeup_cpu_us                  the process CPU per wake-up of rounds that do what a live
//                                       replay does between two compute tasks (hand-over, timer
//                                       sleep, post back: real_runtime/wakeup_cpu.h; the
//                                       transport benchmark's WakeupCpu), median of 3 rounds of
//                                       4,000
//   host_wakeup_us, host_handoff_us     the latencies a live replay's traces show (the wake-up of a
//                                       task's end after a timer sleep, the hand-off of a task
//                                       whose end has passed: AddHostLatencies below), of the
//                                       same threads one round at a time on an otherwise idle
//                                       host (real_runtime/wakeup_cpu.h, MeasureHostLatency;
//                                       the transport benchmark's HostLatency): each round's
//                                       median (a few late wake-ups, a disturbance of the host,
//                                       move a mean by half), median of 3 rounds of 4,000 each
//
// and writes them, with provenance, to a testbed keys file (format below) that `--testbed-keys
// FILE` reads back. Every validate also reports the wake-up and hand-off latencies as the live
// runs showed them (HostLatencies, the method of analysis/host_latency.py) beside what the
// simulator charged.
//
// Testbed keys file:
//   schema_version: 1
//   host_message_us: 4.18                     # > 0
//   host_ns_per_byte: 0.66                    # >= 0
//   host_kernel_ns_per_byte:                  # per link rate of the emulated links
//     - {bandwidth_gbps: 1, ns_per_byte: 0.54}
//   (a file of latencies alone has none of the three keys above)
//   host_wakeup_cpu_us: 13.1                  # optional, > 0 (files written before it lack it:
//                                             # the network files' own figure stays)
//   host_wakeup_us: 82.3                      # optional, > 0 (likewise)
//   host_handoff_us: 15.1                     # optional, > 0 (likewise)
//   measurements: {NAME: "TEXT", ...}         # optional: the figures behind each key
//   provenance: {cpu: .., cores: .., kernel: .., date: .., commit: .., command: ..}
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "validation/trace_reader.h"

namespace poseidon::validation {

// The machine a figure was measured on, as far as it matters to the testbed's keys.
struct HostIdentity {
  std::string cpu;     // /proc/cpuinfo's model name
  int cores = 0;       // logical CPUs
  std::string kernel;  // "Linux 6.1.0-..."
};
HostIdentity ThisHost();

struct TestbedKeys {
  double host_message_us = 0;
  double host_ns_per_byte = 0;
  std::map<double, double> kernel_ns_per_byte;  // link rate (Gbit/s) -> ns per wire byte
  double host_wakeup_cpu_us = 0;                // 0: not in the file (the network file's stays)
  double host_wakeup_us = 0, host_handoff_us = 0;  // the same
  // Whether the file has the CPU keys (host_message_us, host_ns_per_byte, host_kernel_ns_per_byte):
  // a file of latencies alone ('--testbed-keys latencies') has not, and the network files' stay.
  bool HasCpuKeys() const { return host_message_us > 0; }
  std::map<std::string, std::string> measurements;
  std::map<std::string, std::string> provenance;
};

// The rate of a network's links in Gbit/s (1e9 bit/s), as the keys file and netns-run name it.
double LinkGbps(const config::NetworkSpec& network);

// Reads a testbed keys file; bad input is one config::ConfigError "FILE:LINE:COLUMN: error: ...".
TestbedKeys LoadTestbedKeys(const std::string& path);
TestbedKeys ParseTestbedKeys(const std::string& text, const std::string& name);
// Writes the format above; ParseTestbedKeys of the output gives the same keys.
void WriteTestbedKeys(const TestbedKeys& keys, std::ostream& out);

// The --set lines that charge `keys` on the simulator's side for `network`'s links
// ("cluster.network.host_message_us=4.18", ...); host_wakeup_cpu_us and host_wakeup_us only where
// the file has them and the network charges a wake-up (host_wakeup_us), host_handoff_us only where
// the file has it and the network charges a hand-off. Throws ConfigError naming `source` when the
// file has no kernel figure for the links' rate (within 1e-6 relative).
std::vector<std::string> TestbedKeyOverrides(const TestbedKeys& keys,
                                             const config::NetworkSpec& network,
                                             const std::string& source);

// --- measuring on this host -----------------------------------------------------------------

struct MessageCpuPoint {
  int64_t bytes = 0;
  double us_per_message = 0;
};
// c + b x bytes minimising the sum of squared relative errors; {c (us), b (ns per byte)}.
// Throws std::invalid_argument for fewer than two points of different sizes.
std::pair<double, double> FitMessageCpu(const std::vector<MessageCpuPoint>& points);
// The live transport's process CPU per message over loopback, at 256 B, 4 KiB, 64 KiB and 1 MiB
// (median of `reps` rounds of max(4,000, round_bytes / size) messages each).
std::vector<MessageCpuPoint> MeasureMessageCpu(int reps = 3, int64_t round_bytes = int64_t{64} << 20);

using MeasureProgress = std::function<void(const std::string&)>;
// Interrupt + softirq CPU per byte moved between two emulated machines at `gbps` (root, netns).
// `netns_script` is scripts/netns-run, `exe` this program (its transport-goodput moves the bytes).
// Each run's figures are appended to *evidence. Throws ConfigError when a transfer fails.
double MeasureKernelNsPerByte(double gbps, const std::string& netns_script, const std::string& exe,
                              int reps, std::vector<std::string>* evidence,
                              const MeasureProgress& progress);
// The process CPU per wake-up (rt::MeasureWakeupCpu): the median of `reps` rounds of `rounds`
// after one to warm; each round's figure is appended to *evidence.
double MeasureWakeupCpuUs(int reps, int64_t rounds, std::vector<std::string>* evidence);
// The wake-up and hand-off latencies (rt::MeasureHostLatency): {wake-up, hand-off} in us, the
// medians over `reps` rounds of `rounds` of the rounds' medians; each round's figures are appended
// to *evidence.
// A round whose median lies more than twice (and 10 us) above another's is a host that placed
// the threads differently from round to round (both on one core, or across); their median then
// takes one mode or the other from one measurement to the next, and *warnings gets a line saying
// so for each key (LatencyRoundsWarning).
std::pair<double, double> MeasureHostLatencyUs(int reps, int64_t rounds,
                                               std::vector<std::string>* evidence,
                                               std::vector<std::string>* warnings = nullptr);
// "" when the rounds' figures of a latency key (`what`: "hand-off") agree; else one line naming
// them, for the report: max > 2 x min and max - min > 10 us.
std::string LatencyRoundsWarning(const std::string& what, const std::vector<double>& rounds_us);
// The wake-up and hand-off latencies alone (MeasureHostLatencyUs), with provenance: a file of
// latencies whose CPU keys stay the network files' ('--testbed-keys latencies').
TestbedKeys MeasureTestbedLatencies(const std::string& command, const MeasureProgress& progress);
// All of them, for every rate in `rates_gbps`, with provenance (`command`: the command line).
TestbedKeys MeasureTestbedKeys(const std::vector<double>& rates_gbps,
                               const std::string& netns_script, const std::string& exe,
                               const std::string& command, const MeasureProgress& progress);

// --- what the live runs showed ---------------------------------------------------------------

// A replayed compute task sleeps to its modelled end on its stream thread and the protocol thread
// records it as ending when it learns of it. For three consecutive compute tasks a, b, c of one
// compute lane (clock >= warmup) where b and c started before their predecessor was seen (both
// handed over early, so b's modelled end is c's start): when b's modelled end lay after a was
// seen, seen(b) - end(b) is a wake-up; otherwise b had ended when handed over and seen(b) -
// seen(a) is a hand-off between awake threads. (analysis/host_latency.py reads the same.)
// Each sample is also kept apart when no message reached the task's process while it lasted
// (from b's modelled end, or from seen(a) for a hand-off, to seen(b); the messages the trace
// records as delivered to the lane's worker, shard or coordinator): the simulator charges a
// message's CPU on its receiving process apart from the wake-up and hand-off, so those quiet
// samples are what the two keys alone stand for.
struct HostLatencySamples {
  std::vector<double> wakeup_us, handoff_us;
  std::vector<double> wakeup_quiet_us, handoff_quiet_us;
};
void AddHostLatencies(const std::vector<TraceRecord>& events, int64_t warmup_clock,
                      HostLatencySamples* out);

// --- the report ----------------------------------------------------------------------------

// The testbed keys one configuration's simulation charged, and where they came from.
struct TestbedKeysUsed {
  std::string network;  // the network file, or "the scenario's network"
  double gbps = 0;
  double message_us = 0, ns_per_byte = 0, kernel_ns_per_byte = 0, wakeup_us = 0, handoff_us = 0;
  double wakeup_cpu_us = 0;      // host_wakeup_cpu_us (0: not charged)
  std::string source;            // one line: the file and the machine they were measured on
  HostIdentity measured_on;      // cpu "" when not known
  std::string measured_date;
  // The latencies' rounds disagreed when measured (the keys file's measurements.latency_warning,
  // LatencyRoundsWarning); "" when they agreed or were not measured.
  std::string latency_warning;
};
// `keys_file` names the testbed keys file whose figures replaced the network file's ("" when
// none: the network file's own, with its provenance). False when the scenario charges no host
// CPU (host_cores 0: a real cluster, not an emulated one).
bool KeysUsed(const config::ScenarioSpec& sim_scenario, const std::string& keys_file,
              const TestbedKeys* keys, TestbedKeysUsed* out);

// One entry per network and rate the configurations used, with what the live runs on it showed.
struct TestbedKeysEntry {
  TestbedKeysUsed used;
  HostLatencySamples live;
  int configurations = 0;
};
// The text validate prints after its summary: per entry the keys, their source, the live
// wake-up and hand-off (mean and median, samples) against the charged ones, and whether the keys
// were measured on a machine like this one (same CPU model and cores).
std::string TestbedKeysText(const std::vector<TestbedKeysEntry>& entries, const HostIdentity& here);
// The same as a JSON array.
std::string TestbedKeysJson(const std::vector<TestbedKeysEntry>& entries, const HostIdentity& here);

}  // namespace poseidon::validation
