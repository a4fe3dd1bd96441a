// config/network_loader.h: network files (scenarios/networks/*.yaml), the link figures that
// `poseidon calibrate-net` measures and a scenario's network model replays.
//
//   schema_version: 1
//   model: flow                       # flow | alpha_beta | queue | auto (optional, default
//                                     # flow; auto: queue unless a job fills a receiving queue
//                                     # to queue_limit_bytes, which it then needs > 0)
//   bandwidth_gbps: 1                 # NIC line rate, 1e9 bit/s                 (> 0)
//   latency_us: 31.5                  # one-way, host to host                    (>= 0)
//   efficiency: 0.941                 # payload / wire bytes                     (0 < x <= 1)
//   per_message_overhead_us: 12       # fixed cost added to every message        (>= 0)
//   connections: process_pair         # optional (default machine_pair), see below
//   fairness_alpha: 1                 # optional (default 0 = max-min)         (0..50)
//   ack_path_weight: 0.41             # optional (default 0), alpha-fair only     (0..4)
//   burst_bytes: 32768                # optional (default 0)                     (>= 0)
//   sender_queue_bytes: 32768         # optional (default 0)                     (>= 0)
//   queue_limit_bytes: 1250000        # optional (default 0), queue and auto     (>= 0)
//   congested_flow_weight: 0.6        # optional (default 1), queue and auto: a flow's weight
//                                     #   in its sender's link when its receiver is congested
//                                     #   (0 < x <= 1; config/specs.h NetworkSpec)
//   initial_window_bytes: 14480       # optional (default 0 = none), queue and auto: TCP's
//                                     #   first window per connection, grown by slow start
//                                     #   (>= 0; config/specs.h NetworkSpec)
//   segment_bytes: 1448               # optional (default 0 = no losses), with
//                                     #   initial_window_bytes: Reno's losses at a full
//                                     #   queue, growth by a segment per round trip past
//                                     #   the threshold (>= 0; config/specs.h NetworkSpec)
//   send_buffer_bytes: 2600000        # optional (default 0 = no limit), with
//                                     #   initial_window_bytes: the most a connection has
//                                     #   in flight (>= 0; config/specs.h NetworkSpec)
//   loss_packet_bytes: 16384          # optional (default 0 = every sender halves), with
//                                     #   segment_bytes: losses drawn a packet of this
//                                     #   size at a time (>= 0; config/specs.h NetworkSpec)
//   host_cores: 2                     # optional (default 0 = not modelled): cores all processes
//   host_message_us: 7.4              #   share, and the CPU each message costs there (both
//   host_ns_per_byte: 1.037           #   ends), per message and per payload byte (>= 0)
//   host_wakeup_us: 100               # optional (default 0), with host_cores: a sleeping
//   host_handoff_us: 10               #   protocol thread's wake-up; hand-off between awake
//                                     #   threads (>= 0; config/specs.h NetworkSpec)
//   host_wakeup_cpu_us: 13.1          # optional (default 0), with host_wakeup_us: the CPU each
//                                     #   wake-up costs on a shared core (>= 0)
//   host_kernel_ns_per_byte: 1.0      # optional (default 0), with host_cores: kernel CPU per
//                                     #   wire byte between machines, on a shared core (>= 0)
//   host_write_share: 0.396           # optional (default 0), with host_ns_per_byte and
//                                     #   send_buffer_bytes: the sender's share of the
//                                     #   per-byte CPU, spent writing into the socket (< 1)
//   host_reads_hold_receiver: true    # optional (default false), with host_byte_cpu:
//                                     #   streamed: a message's per-byte CPU also holds its
//                                     #   receiving process's thread
//   process_ns_per_byte: 1.111        # optional (default 0), not with host_cores: a framework
//                                     #   RPC runtime's CPU per payload byte on the receiving
//                                     #   process, its own core (TensorFlow's gRPC) (>= 0)
//   provenance:                       # free-form strings; calibrate-net writes host, kernel,
//     date: "2026-11-29T10:00:00Z"    # date, command, commit, link
//   measurements: {...}               # optional, free-form: the raw figures (not read)
//
// A scenario uses one with `network: {file: networks/NAME.yaml}` (a path relative to the
// scenario, or a name looked up in networks/ folders like models and profiles); keys given next
// to `file` (topology, hosts_per_leaf, ...; or bandwidth_gbps to override) win over the file's.
//
// Every bad input throws one ConfigError "FILE:LINE:COL: error: ...; what to do".
// Thread-safety: free functions without shared state.
#pragma once

#include <map>
#include <ostream>
#include <string>

#include "config/specs.h"
#include "config/yaml_reader.h"

namespace poseidon::config {

inline constexpr int kNetworkSchemaVersion = 1;

struct NetworkFileSpec {
  NetworkSpec network;  // model, bandwidth, latency, efficiency, overhead; topology left default
  std::map<std::string, std::string> provenance;
  // Free-form measured figures written under `measurements:` (name -> text), written back as is.
  std::map<std::string, std::string> measurements;
};

NetworkFileSpec LoadNetworkFile(const std::string& path);
NetworkFileSpec ParseNetworkYaml(const std::string& text, const std::string& name);

// The keys on how messages share links -- connections (machine_pair | process_pair),
// fairness_alpha, burst_bytes, sender_queue_bytes, queue_limit_bytes (NetworkSpec says what
// each means) -- read
// from a network file or a scenario's `network:`, each defaulting to *n's current value.
void ReadNetworkSharing(MapReader& r, NetworkSpec* n);

// Writes the format above (fixed key order); LoadNetworkFile of the output gives back the same
// values (latency and overhead to the ns).
void WriteNetworkYaml(const NetworkFileSpec& spec, std::ostream& out);

}  // namespace poseidon::config
