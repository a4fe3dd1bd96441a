#include "config/network_loader.h"

#include <cmath>

#include <fmt/format.h>

#include "config/compute_loader.h"

namespace poseidon::config {
namespace {

NetworkFileSpec ReadNetworkFile(const YamlFile& f);

// Reads the byte count `key` (>= 0, default `current`). Set above 0 in the file while the key it
// builds on is not (`has_base` false), it is one located line: `message`, what it needs and how.
int64_t ReadBytesOnTopOf(MapReader& r, const char* key, int64_t current, bool has_base,
                         const char* message) {
  const int64_t v = std::llround(r.NonNegativeNumber(key, static_cast<double>(current)));
  if (r.Has(key) && v > 0 && !has_base) r.FailKey(key, message);
  return v;
}

}  // namespace

void ReadNetworkSharing(MapReader& r, NetworkSpec* n) {
  const bool machine = n->connections == ConnectionKind::kMachinePair;
  n->connections = r.Choice("connections", {"machine_pair", "process_pair"},
                            machine ? "machine_pair" : "process_pair") == "machine_pair"
                       ? ConnectionKind::kMachinePair
                       : ConnectionKind::kProcessPair;
  n->fairness_alpha = r.NonNegativeNumber("fairness_alpha", n->fairness_alpha);
  if (n->fairness_alpha > kMaxFairnessAlpha) {
    r.FailKey("fairness_alpha", "fairness_alpha must be at most 50 (0 = max-min, which is what a "
                                "larger alpha approaches)");
  }
  n->ack_path_weight = r.NonNegativeNumber("ack_path_weight", n->ack_path_weight);
  if (n->ack_path_weight > kMaxAckPathWeight) {
    r.FailKey("ack_path_weight", "ack_path_weight must be at most 4 (the fraction of the reverse path's "
              "link prices a flow pays; 0 = none)");
  }
  n->burst_bytes = std::llround(
      r.NonNegativeNumber("burst_bytes", static_cast<double>(n->burst_bytes)));
  n->sender_queue_bytes = std::llround(
      r.NonNegativeNumber("sender_queue_bytes", static_cast<double>(n->sender_queue_bytes)));
  n->queue_limit_bytes = std::llround(
      r.NonNegativeNumber("queue_limit_bytes", static_cast<double>(n->queue_limit_bytes)));
  n->congested_flow_weight = r.NonNegativeNumber("congested_flow_weight", n->congested_flow_weight);
  if (r.Has("congested_flow_weight")) {
    if (!(n->congested_flow_weight > 0 && n->congested_flow_weight <= 1)) {
      r.FailKey(
          "congested_flow_weight",
          "congested_flow_weight must be in (0, 1]: the weight in its sender's link of a flow "
          "whose receiver is congested, against 1 for the others (1 = an equal split)");
    }
    if (n->congested_flow_weight < 1 && n->model != NetworkModelKind::kQueue &&
        n->model != NetworkModelKind::kAuto) {
      r.FailKey("congested_flow_weight",
                fmt::format("'congested_flow_weight' applies to models queue and auto only (this "
                            "network's model is {}); remove it or set 'model: queue'",
                            NetworkModelName(n->model)));
    }
  }
  n->initial_window_bytes = std::llround(
      r.NonNegativeNumber("initial_window_bytes", static_cast<double>(n->initial_window_bytes)));
  if (r.Has("initial_window_bytes") && n->initial_window_bytes > 0 &&
      n->model != NetworkModelKind::kQueue && n->model != NetworkModelKind::kAuto) {
    r.FailKey("initial_window_bytes",
              fmt::format("'initial_window_bytes' (TCP's slow start) applies to models queue and "
                          "auto only (this network's model is {}); remove it or set 'model: queue'",
                          NetworkModelName(n->model)));
  }
  const bool windows = n->initial_window_bytes > 0;
  n->segment_bytes = ReadBytesOnTopOf(
      r, "segment_bytes", n->segment_bytes, windows,
      "'segment_bytes' (TCP Reno's losses at a full queue) needs the windows they halve: set "
      "'initial_window_bytes' (Linux: 14480) or remove 'segment_bytes'");
  n->send_buffer_bytes = ReadBytesOnTopOf(
      r, "send_buffer_bytes", n->send_buffer_bytes, windows,
      "'send_buffer_bytes' (the most a connection has in flight) needs the windows it caps: set "
      "'initial_window_bytes' (Linux: 14480) or remove 'send_buffer_bytes'");
  n->loss_packet_bytes = ReadBytesOnTopOf(
      r, "loss_packet_bytes", n->loss_packet_bytes, n->segment_bytes > 0,
      "'loss_packet_bytes' (which connections a full queue's losses hit) needs the losses: set "
      "'segment_bytes' (Linux: the MSS, 1448) or remove 'loss_packet_bytes'");
  n->auto_flow_message_bytes = std::llround(r.NonNegativeNumber(
      "auto_flow_message_bytes", static_cast<double>(n->auto_flow_message_bytes)));
  if (r.Has("auto_flow_message_bytes") && n->auto_flow_message_bytes > 0 &&
      n->model != NetworkModelKind::kAuto) {
    r.FailKey("auto_flow_message_bytes",
              fmt::format("'auto_flow_message_bytes' applies to model auto only (this network's "
                          "model is {}); remove it or set 'model: auto'",
                          NetworkModelName(n->model)));
  }
  n->connection_Bps = r.NonNegativeNumber("connection_gbps", n->connection_Bps * 8 / 1e9) * 1e9 / 8;
  if (r.Has("connection_gbps") && n->connection_Bps > 0 && n->model != NetworkModelKind::kFlow) {
    r.FailKey("connection_gbps",
              fmt::format("'connection_gbps' (a cap per connection) is priced by the flow model "
                          "only (this network's model is {}); set 'model: flow' or remove it",
                          NetworkModelName(n->model)));
  }
  n->host_cores = static_cast<int>(r.NonNegativeNumber("host_cores", n->host_cores));
  n->host_message_ns = r.NonNegativeNumber("host_message_us", n->host_message_ns / 1e3) * 1e3;
  n->host_ns_per_byte = r.NonNegativeNumber("host_ns_per_byte", n->host_ns_per_byte);
  n->host_wakeup_ns = r.NonNegativeNumber("host_wakeup_us", n->host_wakeup_ns / 1e3) * 1e3;
  n->host_handoff_ns = r.NonNegativeNumber("host_handoff_us", n->host_handoff_ns / 1e3) * 1e3;
  n->host_wakeup_cpu_ns =
      r.NonNegativeNumber("host_wakeup_cpu_us", n->host_wakeup_cpu_ns / 1e3) * 1e3;
  n->host_kernel_ns_per_byte =
      r.NonNegativeNumber("host_kernel_ns_per_byte", n->host_kernel_ns_per_byte);
  const bool streamed = n->host_byte_cpu == HostByteCpu::kStreamed;
  n->host_byte_cpu = r.Choice("host_byte_cpu", {"after_arrival", "streamed"},
                              streamed ? "streamed" : "after_arrival") == "streamed"
                         ? HostByteCpu::kStreamed
                         : HostByteCpu::kAfterArrival;
  n->host_tag_ns_per_byte = r.NonNegativeNumber("host_tag_ns_per_byte", n->host_tag_ns_per_byte);
  n->host_write_share = r.NonNegativeNumber("host_write_share", n->host_write_share);
  n->host_reads_hold_receiver = r.Bool("host_reads_hold_receiver", n->host_reads_hold_receiver);
  if (n->host_reads_hold_receiver && n->host_byte_cpu != HostByteCpu::kStreamed) {
    r.FailKey("host_reads_hold_receiver",
              "'host_reads_hold_receiver' says where a message's streamed bytes are read: it needs "
              "'host_byte_cpu: streamed' (with 'host_cores'); add it or remove the key");
  }
  if (n->host_cores == 0 &&
      (n->host_message_ns > 0 || n->host_ns_per_byte > 0 || n->host_wakeup_ns > 0 ||
       n->host_kernel_ns_per_byte > 0 || n->host_tag_ns_per_byte > 0 ||
       n->host_byte_cpu == HostByteCpu::kStreamed)) {
    r.FailKey(r.Has("host_message_us")           ? "host_message_us"
              : r.Has("host_ns_per_byte")        ? "host_ns_per_byte"
              : r.Has("host_wakeup_us")          ? "host_wakeup_us"
              : r.Has("host_kernel_ns_per_byte") ? "host_kernel_ns_per_byte"
              : r.Has("host_tag_ns_per_byte")    ? "host_tag_ns_per_byte"
                                                 : "host_byte_cpu",
              "a host CPU cost needs 'host_cores' (the cores every process shares); add it or "
              "remove the cost");
  }
  if (n->host_write_share > 0 &&
      (n->host_write_share >= 1 || n->host_ns_per_byte <= 0 || n->send_buffer_bytes <= 0)) {
    r.FailKey("host_write_share",
              fmt::format("'host_write_share' ({}) is the sender's share of 'host_ns_per_byte' "
                          "({}), spent writing into a send buffer: it must be below 1 and needs "
                          "'host_ns_per_byte' (with 'host_cores') and 'send_buffer_bytes'",
                          n->host_write_share, n->host_ns_per_byte));
  }
  if (n->host_wakeup_cpu_ns > 0 && n->host_wakeup_ns <= 0) {
    r.FailKey("host_wakeup_cpu_us",
              "'host_wakeup_cpu_us' is the CPU of the wake-ups 'host_wakeup_us' charges, and there "
              "are none: add 'host_wakeup_us' (and 'host_cores') or remove it");
  }
  n->process_ns_per_byte = r.NonNegativeNumber("process_ns_per_byte", n->process_ns_per_byte);
  if (n->process_ns_per_byte > 0 && n->host_cores > 0) {
    r.FailKey(r.Has("process_ns_per_byte") ? "process_ns_per_byte" : "host_cores",
              "'process_ns_per_byte' prices a process on a real machine's own cores and "
              "'host_cores' processes sharing an emulated cluster's few (their CPU per byte is "
              "'host_ns_per_byte'): give one of them");
  }
}

namespace {

NetworkFileSpec ReadNetworkFile(const YamlFile& f) {
  const std::string& file = f.path();
  MapReader r(f.root(), file, "network file");
  if (!r.Has("schema_version")) {
    r.Fail(fmt::format("network file has no 'schema_version'; add 'schema_version: {}' as its "
                       "first key",
                       kNetworkSchemaVersion));
  }
  if (r.Int("schema_version") != kNetworkSchemaVersion) {
    r.FailKey("schema_version", fmt::format("unsupported schema_version for a network file; this "
                                            "build reads version {}",
                                            kNetworkSchemaVersion));
  }
  NetworkFileSpec s;
  NetworkSpec& n = s.network;
  n.loc = r.Loc();
  n.model = NetworkModelFromName(r.Choice("model", {"flow", "alpha_beta", "queue", "auto"}, "flow"));
  n.host_bandwidth_Bps = r.PositiveNumber("bandwidth_gbps") * 1e9 / 8;
  const double latency_us = r.Number("latency_us");
  if (latency_us < 0) r.FailKey("latency_us", "'latency_us' must not be negative");
  n.latency_ns = std::llround(latency_us * 1e3);
  n.efficiency = r.PositiveNumber("efficiency");
  if (n.efficiency > 1) {
    r.FailKey("efficiency", "efficiency is payload/wire bytes and must be <= 1");
  }
  n.per_message_overhead_ns = std::llround(r.NonNegativeNumber("per_message_overhead_us", 0) * 1e3);
  ReadNetworkSharing(r, &n);
  if (!r.Has("provenance")) {
    r.Fail("network file has no 'provenance'; say where the figures come from (date, command, "
           "host), e.g. 'provenance: {source: \"datasheet\"}'");
  }
  s.provenance = ReadStringMap(r.Node("provenance"), file, "provenance");
  YAML::Node meas = r.OptionalNode("measurements");
  if (meas.IsDefined() && !meas.IsNull()) s.measurements = ReadStringMap(meas, file, "measurements");
  r.Finish();
  return s;
}

}  // namespace

NetworkFileSpec LoadNetworkFile(const std::string& path) {
  return ReadNetworkFile(YamlFile::Load(path));
}

NetworkFileSpec ParseNetworkYaml(const std::string& text, const std::string& name) {
  return ReadNetworkFile(YamlFile::Parse(text, name));
}

void WriteNetworkYaml(const NetworkFileSpec& spec, std::ostream& out) {
  const NetworkSpec& n = spec.network;
  out << "# Network figures for the simulator's network model. Format: config/network_loader.h.\n";
  out << "schema_version: " << kNetworkSchemaVersion << "\n";
  out << "model: " << NetworkModelName(n.model) << "\n";
  out << "bandwidth_gbps: " << YamlScalarNumber(n.host_bandwidth_Bps * 8 / 1e9) << "\n";
  out << "latency_us: " << YamlScalarNumber(static_cast<double>(n.latency_ns) / 1e3) << "\n";
  out << "efficiency: " << YamlScalarNumber(n.efficiency) << "\n";
  out << "per_message_overhead_us: "
      << YamlScalarNumber(static_cast<double>(n.per_message_overhead_ns) / 1e3) << "\n";
  if (n.connections == ConnectionKind::kProcessPair) out << "connections: process_pair\n";
  if (n.fairness_alpha > 0) out << "fairness_alpha: " << YamlScalarNumber(n.fairness_alpha) << "\n";
  if (n.ack_path_weight > 0) out << "ack_path_weight: " << YamlScalarNumber(n.ack_path_weight) << "\n";
  if (n.burst_bytes > 0) out << "burst_bytes: " << n.burst_bytes << "\n";
  if (n.sender_queue_bytes > 0) out << "sender_queue_bytes: " << n.sender_queue_bytes << "\n";
  if (n.queue_limit_bytes > 0) out << "queue_limit_bytes: " << n.queue_limit_bytes << "\n";
  if (n.congested_flow_weight < 1) {
    out << "congested_flow_weight: " << YamlScalarNumber(n.congested_flow_weight) << "\n";
  }
  if (n.initial_window_bytes > 0) out << "initial_window_bytes: " << n.initial_window_bytes << "\n";
  if (n.segment_bytes > 0) out << "segment_bytes: " << n.segment_bytes << "\n";
  if (n.send_buffer_bytes > 0) out << "send_buffer_bytes: " << n.send_buffer_bytes << "\n";
  if (n.loss_packet_bytes > 0) out << "loss_packet_bytes: " << n.loss_packet_bytes << "\n";
  if (n.auto_flow_message_bytes > 0) {
    out << "auto_flow_message_bytes: " << n.auto_flow_message_bytes << "\n";
  }
  if (n.connection_Bps > 0) {
    out << "connection_gbps: " << YamlScalarNumber(n.connection_Bps * 8 / 1e9) << "\n";
  }
  if (n.host_cores > 0) {
    out << "host_cores: " << n.host_cores << "\n";
    out << "host_message_us: " << YamlScalarNumber(n.host_message_ns / 1e3) << "\n";
    out << "host_ns_per_byte: " << YamlScalarNumber(n.host_ns_per_byte) << "\n";
    if (n.host_wakeup_ns > 0) {
      out << "host_wakeup_us: " << YamlScalarNumber(n.host_wakeup_ns / 1e3) << "\n";
    }
    if (n.host_handoff_ns > 0) {
      out << "host_handoff_us: " << YamlScalarNumber(n.host_handoff_ns / 1e3) << "\n";
    }
    if (n.host_wakeup_cpu_ns > 0) {
      out << "host_wakeup_cpu_us: " << YamlScalarNumber(n.host_wakeup_cpu_ns / 1e3) << "\n";
    }
    if (n.host_kernel_ns_per_byte > 0) {
      out << "host_kernel_ns_per_byte: " << YamlScalarNumber(n.host_kernel_ns_per_byte) << "\n";
    }
    if (n.host_byte_cpu == HostByteCpu::kStreamed) out << "host_byte_cpu: streamed\n";
    if (n.host_tag_ns_per_byte > 0) {
      out << "host_tag_ns_per_byte: " << YamlScalarNumber(n.host_tag_ns_per_byte) << "\n";
    }
    if (n.host_write_share > 0) {
      out << "host_write_share: " << YamlScalarNumber(n.host_write_share) << "\n";
    }
    if (n.host_reads_hold_receiver) out << "host_reads_hold_receiver: true\n";
  }
  if (n.process_ns_per_byte > 0) {
    out << "process_ns_per_byte: " << YamlScalarNumber(n.process_ns_per_byte) << "\n";
  }
  out << "provenance:" << (spec.provenance.empty() ? " {}" : "") << "\n";
  for (const auto& [k, v] : spec.provenance) {
    out << "  " << YamlScalarString(k) << ": " << YamlScalarString(v) << "\n";
  }
  if (!spec.measurements.empty()) {
    out << "measurements:\n";
    for (const auto& [k, v] : spec.measurements) {
      out << "  " << YamlScalarString(k) << ": " << YamlScalarString(v) << "\n";
    }
  }
}

}  // namespace poseidon::config
