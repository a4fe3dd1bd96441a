// config/specs.h: the plain structs that configuration files are read into.
//
// They hold values in SI-based integer or double units named in the field (bytes, ns, bytes/s,
// FLOP/s). Loaders in config/ fill them from YAML (with file:line:column errors); sim/,
// real_runtime/ and calibration/ consume them. No YAML type appears here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/model.h"

namespace poseidon::config {

// ---- network -------------------------------------------------------------------------------

// flow: links shared max-min or alpha-fair (sim/network/flow_network.h); alpha_beta: no sharing
// (alpha_beta.h); queue: sending NICs shared, receiving links FIFO (queue_network.h); auto: the
// queue model while no receiving queue fills to queue_limit_bytes, the flow model for a job whose
// traffic fills one (TCP's regime is the traffic's: a job that never overflows a queue never loses
// a packet and keeps slow start's windows; one that does is held by its windows from then on).
// The simulation runs the job with the queue model and, if a queue filled, again with the flow
// model (sim/simulation.cc, RunWithNetworkModel); with NetworkSpec::auto_flow_message_bytes > 0
// also if the job sent a message of that many bytes or more between machines.
enum class NetworkModelKind { kFlow, kAlphaBeta, kQueue, kAuto };
inline const char* NetworkModelName(NetworkModelKind k) {
  return k == NetworkModelKind::kFlow        ? "flow"
         : k == NetworkModelKind::kAlphaBeta ? "alpha_beta"
         : k == NetworkModelKind::kQueue     ? "queue"
                                             : "auto";
}
inline NetworkModelKind NetworkModelFromName(const std::string& name) {  // one of the four names
  return name == "alpha_beta" ? NetworkModelKind::kAlphaBeta
         : name == "queue"    ? NetworkModelKind::kQueue
         : name == "auto"     ? NetworkModelKind::kAuto
                              : NetworkModelKind::kFlow;
}
enum class TopologyKind { kStar, kLeafSpine };
// How the simulator multiplexes a job's messages onto the network (docs/validation.md, "The
// emulated cluster's network model"): one in-order connection per ordered pair of machines
// (messages between two machines leave one after another), or one per ordered pair of processes
// (as the live runtime's TCP connections; concurrent ones share the links as fairness_alpha says).
enum class ConnectionKind { kMachinePair, kProcessPair };

// When a message between machines costs its per-byte host CPU (NetworkSpec::host_byte_cpu, YAML
// host_byte_cpu): all of it after its last byte has arrived, on its receiving process (the model
// before the key), or while its bytes stream in, as the live transport reads a socket: each
// segment is copied out as it arrives, so only the tag's check (host_tag_ns_per_byte) and the
// message's fixed cost follow the last byte.
enum class HostByteCpu { kAfterArrival, kStreamed };

inline constexpr double kMaxFairnessAlpha = 50;
inline constexpr double kMaxAckPathWeight = 4;

struct NetworkSpec {
  NetworkModelKind model = NetworkModelKind::kFlow;
  TopologyKind topology = TopologyKind::kStar;
  // NIC rate of every host, full duplex, in bytes per second (YAML: bandwidth_gbps, 1e9 bits).
  double host_bandwidth_Bps = 10e9 / 8;
  // One-way latency between two hosts on the same switch, in ns (YAML: latency_us). In the flow
  // model it is split evenly over the two links of the route host->switch->host; a route over a
  // spine crosses four links and so takes twice as long.
  int64_t latency_ns = 5000;
  // Payload bytes / wire bytes (headers, acknowledgements); 1 means none. Calibrated by
  // `poseidon calibrate-net` (YAML: efficiency).
  double efficiency = 1.0;
  // Fixed cost per message in ns, added to its delivery (YAML: per_message_overhead_us).
  int64_t per_message_overhead_ns = 0;
  ConnectionKind connections = ConnectionKind::kMachinePair;  // YAML: connections
  // How concurrent flows share links (flow model; YAML: fairness_alpha). 0: max-min fairness.
  // alpha > 0: alpha-fair rates (1 = proportional fairness), under which a flow that crosses two
  // busy links gets less than one crossing one of them, as TCP flows do (a "parking lot" of three
  // flows at 100 Mbit/s: docs/validation.md). Large alpha approaches max-min; at most
  // kMaxFairnessAlpha (beyond it, use 0).
  double fairness_alpha = 0;
  // alpha-fair sharing only (YAML: ack_path_weight): what the busy links of a flow's reverse path,
  // which its acknowledgements cross, add to its price, as a fraction of their price: TCP's round
  // trip includes their queues, and a window-limited flow's rate falls with its round trip
  // (docs/validation.md). 0 = the forward path alone. At most kMaxAckPathWeight.
  double ack_path_weight = 0;
  // A link's token bucket (flow and queue models; YAML: burst_bytes): a flow that starts on idle
  // links passes its first bytes at once, up to what their buckets hold (at most this many). A
  // bucket keeps what a flow did not take and refills at the link's rate while the link is idle.
  // Real NICs have none (0); tc tbf has its `burst`.
  int64_t burst_bytes = 0;
  // Bytes each sending connection keeps queued below TCP at its machine's NIC (YAML:
  // sender_queue_bytes, q): a message that starts an idle connection while messages of >= q
  // bytes of its machine are in flight or waiting waits until q of each has left at the link's
  // rate before it gets its share (Linux TCP small queues keep about two packets per socket,
  // ahead of any new message in the machine's qdisc); only messages of >= q bytes count, as a
  // smaller one queues less. One that opened onto a NIC with none of them sent its first bytes
  // straight out and has queued only what the link drained since it started, up to q. A
  // message written while its connection is still sending continues that stream and does not
  // wait again. 0 = none.
  int64_t sender_queue_bytes = 0;
  // Queue model only (YAML: queue_limit_bytes): most wire bytes a receiving link queues (tc tbf's
  // `limit`); a full queue takes no more than its rate, shared max-min by the flows it holds back,
  // and their senders give the rest of their NICs to their other flows. 0 = no limit.
  int64_t queue_limit_bytes = 0;
  // Queue and auto models (YAML: congested_flow_weight, in (0, 1]): a sending link is shared by
  // its flows in proportion to weights, 1 for a flow whose receiving link is not congested and
  // this for one whose receiving link is (a queue of at least 1 ms of its rate stands on it; or
  // the flows sending to it, each at its equal share of its sender, would bring more than the
  // link's rate; or its queue is full). Live TCP gives a socket whose receiver is congested less
  // of its sender's link than the others, however congested (scripts/fairness-check
  // --sender-split; docs/validation.md, "A sender's split"). 1 = an equal split (the queue model
  // as before).
  double congested_flow_weight = 1;
  // Queue and auto models (YAML: initial_window_bytes): TCP's slow start. Each connection starts
  // with a congestion window of this many payload bytes (Linux: 10 segments of 1448 bytes, 14480)
  // and a flow may have no more than its window in flight: its rate is at most window / round
  // trip, the round trip being twice the route's latency and overhead plus the queues its bytes
  // wait in (its receiver's link, as it stands) and its acknowledgements wait in (its sender's own
  // receiving link, as it stands when they join it a forward trip later: grown or drained at the
  // present rates, within its limit; docs/validation.md, "An acknowledgement's queue, as it
  // stands when the acknowledgement arrives"). While a flow is held to its window, the window grows
  // by what it sent in each round trip (slow start doubles it), and it is kept between messages (no
  // slow start after idle, as scripts/netns-run sets the emulated hosts). What this shows: a
  // connection whose round trip a standing queue lengthens (a parameter server's pulls while its
  // workers' pushes fill its link) sends slowly until its window has grown (docs/validation.md,
  // "Slow start behind a standing queue"). Losses are not modelled unless segment_bytes is set (at
  // a full queue, auto takes the flow model). 0 = no windows (the queue model as before).
  int64_t initial_window_bytes = 0;
  // Queue and auto models, with initial_window_bytes (YAML: segment_bytes): TCP Reno's losses. A
  // receiving queue that is full while its senders' windows would bring more than its rate drops
  // packets, and every connection sending into it (or those loss_packet_bytes draws) halves its
  // window (multiplicative decrease: the slow-start threshold becomes half the window its sender
  // has when it hears of the loss a round trip later, grown meanwhile by what it had acknowledged
  // in slow start or by a segment past its threshold, as RFC 5681 and Linux's tcp_reno_ssthresh
  // take it, at least two segments; docs/validation.md, "The first overshoot, ACK by ACK"), at
  // most once per round trip (one loss episode, as fast recovery takes it). A
  // window at or above its threshold grows by one segment of this many payload bytes per round trip
  // (congestion avoidance; Linux: the MSS, 1448 bytes on the emulated hosts' links). What this
  // shows: when a parameter server's pushes overflow tbf's queue, the windows, not the senders'
  // links, share the receiver, and a connection whose acknowledgements wait in a full queue has a
  // longer round trip and so a smaller share (docs/validation.md, "Losses at a full queue"). A
  // connection that lost also delivers nothing sent after the loss until the retransmission
  // arrives: its sender hears of the loss from what it sent after the lost bytes, a round trip
  // later, and the retransmission waits through the receiving queue (TCP delivers in order;
  // docs/validation.md, "A hole behind a loss"). 0 = no losses (a full queue holds its senders to
  // its rate, max-min).
  int64_t segment_bytes = 0;
  // Queue and auto models, with initial_window_bytes (YAML: send_buffer_bytes): the most payload
  // one connection has in flight, whatever its window: what the sender's socket buffer holds
  // unacknowledged once the application keeps it full (Linux: tcp_wmem's largest, 4 MiB by
  // default, counts the skbs' overhead and the bytes not yet sent too). A window at or above it
  // does not grow, as Linux grows only a window that limits. What this shows: at 1 Gbit/s a
  // window that slow start would grow past it stays there, so several senders into one machine
  // fill its 12.5 MB queue less than unbounded windows would (docs/validation.md, "Losses at a
  // full queue"). The simulator's host also tells a sender that a message has left once the
  // buffer takes it (its connection's earlier messages not yet sent and it fit in this many
  // bytes), as the live transport's on_sent fires once the last byte is written to the socket:
  // a priority window (protocol.priority_window_kib) then counts what the socket has not taken,
  // as it does live (docs/validation.md, "A sender's window and its socket"). 0 = no limit, and
  // a sender is told when a message's last byte has left its machine.
  int64_t send_buffer_bytes = 0;
  // Queue and auto models, with segment_bytes (YAML: loss_packet_bytes): which connections a full
  // queue's losses hit, drawn as a drop-tail queue drops: what arrives while it is full is lost a
  // packet of this many wire bytes at a time (tc tbf drops whole GSO packets; netns-run's --gso,
  // 16384 on the emulated hosts). The senders hear of a loss a round trip later, and meanwhile the
  // windows grow as they do each round (a segment in congestion avoidance, the window in slow
  // start, nothing while the send buffer holds it back), but no more than the senders bring over
  // the queue's rate in that round trip (a window that outgrows its sender's link sends no more
  // for it): that over this size is how many packets are dropped (at least one), and what each
  // connection lost it sends again before its hole is filled. Each is drawn from a connection in
  // proportion to the rate it
  // brings, with the scenario's seed; a connection hit halves unless it is already recovering. So
  // slow start's overshoot halves every connection, while in congestion avoidance a few senders'
  // growth, a fraction of a packet, costs one drawn connection its window and the others keep
  // theirs: the windows become unequal and even out over many round trips, and under BSP a shard's
  // pulls wait for the slowest push (`ss -tin` on the emulated hosts, 3 workers into 2 shards at
  // 100 Mbit/s: after start-up every loss episode at a shard hit one connection, a different one
  // each time; docs/validation.md, "Which connections lose at a full queue"). 0 = every connection
  // sending into the full queue halves (as before).
  int64_t loss_packet_bytes = 0;
  // Model auto only (YAML: auto_flow_message_bytes): a job that sends a message of at least this
  // many wire bytes between machines is simulated with the flow model even if no queue fills. A
  // TCP sender does not split its link equally among sockets with long messages waiting: the
  // one whose receiver is congested gets less (docs/validation.md, "The PS divergences at 100
  // Mbit/s, named"), which the flow model's prices carry and the queue model's equal split does
  // not; short messages leave at the sender's share, as the queue model says. 0 = off, as in
  // every shipped file: 64 KiB at 100 Mbit/s helped the in-sample sets and made held-out set 7
  // worse (docs/validation.md), so it is a switch for such experiments, not a default.
  int64_t auto_flow_message_bytes = 0;
  // Flow model only (YAML: connection_gbps, 1e9 bits/s): the most one connection carries, as a
  // cloud network caps a single flow (one TCP 5-tuple) below the NIC's rate: Amazon EC2 limits
  // single-flow traffic to 5 Gbit/s between instances outside a cluster placement group and to
  // 10 Gbit/s inside one, whatever the instance's rate ("Amazon EC2 instance network
  // bandwidth", EC2 User Guide). A connection (one per machine pair, or per process pair:
  // `connections`) has one message on the network at a time; a machine reaches its NIC's rate
  // only over several connections at once. 0 = no limit.
  double connection_Bps = 0;
  // The host CPU messages cost when every process of the cluster shares a few cores, as in an
  // emulated cluster on one machine (YAML: host_cores, host_message_us, host_ns_per_byte). A
  // message that has arrived is processed, sender's and receiver's work together, for
  // host_message_us + host_ns_per_byte x payload bytes, on its receiving process (one message at
  // a time) and on one of host_cores cores that all processes share; messages between processes
  // of one machine pay it too. 0 cores = not modelled (real machines: each has its own cores).
  int host_cores = 0;
  double host_message_ns = 0;
  double host_ns_per_byte = 0;
  // With host_cores (YAML: host_wakeup_us): how long a process's protocol thread that sleeps takes
  // to run once an event for it is ready (a message has been received, a compute task has ended):
  // the scheduler's wake-up latency on shared cores. A thread still busy with an earlier event
  // takes the next one without it. With it, compute tasks are timed as a live run that replays
  // them does (cost::kReplayAbsorbNs) and a task whose modelled end has passed when it is handed
  // over comes back host_handoff_us later (YAML), the round trip between two awake threads.
  // 0 = none.
  double host_wakeup_ns = 0;
  double host_handoff_ns = 0;
  // With host_wakeup_us (YAML: host_wakeup_cpu_us): the CPU a wake-up itself costs on one of the
  // shared cores (the scheduler's switch, the futex or timer that woke the thread), for every
  // wake-up the host model charges: a sleeping protocol thread taking a message, and a replayed
  // compute task's end (its stream thread's timer, when it slept to the end, and the protocol
  // thread, when it sleeps). It keeps a core busy; a woken protocol thread also spends it before
  // the message it woke for. 0 = none.
  double host_wakeup_cpu_ns = 0;
  // With host_cores (YAML: host_kernel_ns_per_byte): the CPU the kernel spends per wire byte of a
  // message between machines outside the processes (softirq work of the emulated path: veth,
  // bridge, tbf), on one of the shared cores but not on the receiving process. 0 = none.
  double host_kernel_ns_per_byte = 0;
  // With host_cores (YAML: host_byte_cpu: after_arrival | streamed). after_arrival: a message's
  // host_ns_per_byte x payload is spent on its receiving process after its last byte, as above.
  // streamed: for a message between machines it is booked, with the kernel's share, on the
  // earliest free shared cores when its first byte leaves, and the message is its receiving
  // process's once both are done, so it delays the message only when the cores were busy; after
  // that the process spends host_message_us and the tag's check (below). Messages between
  // processes of one machine are copied at the CPU's pace, not a link's: they keep
  // after_arrival's cost either way.
  HostByteCpu host_byte_cpu = HostByteCpu::kAfterArrival;
  // With host_cores (YAML: host_tag_ns_per_byte): the CPU per payload byte of checking a frame's
  // authentication tag (real_runtime/frame_mac.h), which the receiving process does after the
  // last byte is read, charged there after the last byte. The sender's computing the tag before
  // the first byte is written is not charged (the same CPU per byte, on the sender's own thread).
  // 0 = none (a plain TCP transport; every old scenario).
  double host_tag_ns_per_byte = 0;
  // With host_cores and send_buffer_bytes (YAML: host_write_share): the sender's share of a
  // message's per-byte CPU (host_ns_per_byte), spent when a message between machines is written
  // into its connection's send buffer: the live transport's one thread computes the frame's tag
  // and copies the message into the socket, and the kernel's transmit path runs in that call.
  // It is booked on the sending process (one thread: its writes and the messages it takes, one
  // at a time) and on the earliest free shared core, and the sender is told the message is
  // written (Actor::OnSent) once it is done; the receiver spends the rest, (1 - share) x
  // host_ns_per_byte. So a priority window's next message waits for the write, as it does live,
  // and writers that outnumber the cores take turns. In [0, 1); 0 = all of it at the receiver
  // and a message written at once (every old scenario).
  double host_write_share = 0;
  // With host_byte_cpu streamed (YAML: host_reads_hold_receiver): a message between machines
  // holds its receiving process while its bytes come in. Its per-byte CPU (the kernel's, which
  // runs on the core the receiver's thread runs on: the ACK-clocked path, measured in
  // docs/validation.md, "One worker sets an ASP job's pace"; and the process's reads) is booked
  // on that process's one thread as well as on a shared core, one message after another, so a
  // compute task's end or another message waits behind it. false = on the shared cores only
  // (every old scenario).
  bool host_reads_hold_receiver = false;
  // A framework's RPC runtime on a real cluster (YAML: process_ns_per_byte): the CPU a process
  // spends per payload byte of a message it receives before the message is its (deserialising and
  // copying it out of the transport's buffers: TensorFlow's gRPC RecvTensor path), one message at a
  // time per process, on that process's own core (no shared pool: for an emulated cluster on
  // shared cores use host_cores and host_ns_per_byte instead; the two are exclusive). Messages
  // between processes of one machine pay it too. 0 = free (every old scenario).
  double process_ns_per_byte = 0;
  // Leaf-spine only.
  int hosts_per_leaf = 16;
  int spines = 2;
  // Sum of host NIC rates under one leaf / sum of that leaf's uplink rates (>= 1; 1 = non-blocking).
  double oversubscription = 1.0;
  core::SourceLoc loc;
};

// ---- inside a machine with several devices ------------------------------------------------

// How a machine's devices are joined (scenarios/interconnects/NAME.yaml, or a scenario's
// cluster.interconnect mapping; config/interconnect_loader.h).
//   nvlink  device-to-device links (NVLink, NVSwitch) beside each device's PCIe link to the host;
//   pcie    no such links: peers talk over the same PCIe links the host copies use;
//   host    CPU devices: worker threads sharing the host's memory (nothing to copy).
enum class InterconnectKind { kNvlink, kPcie, kHost };
// Where a machine sums its devices' gradients (cost/intra_machine.h prices both):
//   device  a ring among the devices (reduce-scatter), then each device's 1/D of the sum to the
//           host; fresh values go back as 1/D to each device and an all-gather among them;
//   host    every device's gradient to the host, summed by the CPU; every device gets the whole
//           fresh layer from the host.
enum class ReduceOn { kDevice, kHost };

// A machine's CPUs, where NCCL's tuning reads them (core/nccl_tuning.h NcclTopology).
enum class CpuVendor { kIntel, kAmd, kOther };

struct InterconnectSpec {
  std::string name;
  std::string description;
  std::string source;              // required in a file: where the figures come from
  InterconnectKind kind = InterconnectKind::kHost;
  double link_Bps = 0;             // nvlink: device-to-device, per device, each direction
  int64_t link_latency_ns = 0;     // one step between two devices (a ring step), or one copy
  double pcie_Bps = 0;             // device <-> host memory, per device, each direction; 0: the
                                   // device file's (or profile's) pcie_gbs
  double host_memory_Bps = 0;      // shared by copies, the host's sums and the NIC; 0: the
                                   // scenario's server_update_gbs
  ReduceOn reduce_on = ReduceOn::kDevice;
  CpuVendor cpu_vendor = CpuVendor::kIntel;  // the machine's CPUs (NCCL's network post overhead)
  core::SourceLoc loc;             // the file or mapping
  core::SourceLoc link_loc;        // link_gbs, for errors about it
  core::SourceLoc pcie_loc;        // pcie_gbs
};
inline const char* InterconnectKindName(InterconnectKind k) {
  return k == InterconnectKind::kNvlink ? "nvlink" : k == InterconnectKind::kPcie ? "pcie" : "host";
}

// ---- compute -------------------------------------------------------------------------------

// The constants of the `cudnn` compute model (cost/gpu_kernel_model.h), the same for every device.
// Defaults here are placeholders for a value-initialised struct; cost::FittedKernelParams() holds
// the fitted values that the simulator uses.
struct KernelModelParams {
  double gemm_efficiency = 0.8;  // fraction of fp32 peak a large, well-tiled sgemm reaches (0, 1]
  double tile_alpha = 0.5;       // a tile's efficiency goes as its intensity^alpha     [0, 2]
  double winograd_gain = 2.5;    // effective reduction of non-fused Winograd F(4x4,3x3) [1, 4]
  double fft_efficiency = 0.3;   // fraction of peak FFT convolution arithmetic reaches  (0, 1]
  double memory_efficiency = 0.7;  // fraction of DRAM bandwidth streaming kernels reach (0, 1]
  double launch_us = 10;         // per kernel: launch plus framework dispatch           (>= 0)
  double kepler_efficiency = 0.6;  // Kepler's rates relative to Maxwell and later       (0, 1]
};

// The names of KernelModelParams' fields, as written in YAML, in declaration order.
inline constexpr const char* kKernelParamNames[] = {
    "gemm_efficiency",   "tile_alpha", "winograd_gain",    "fft_efficiency",
    "memory_efficiency", "launch_us",  "kepler_efficiency"};
inline double* KernelParamField(KernelModelParams& p, int i) {
  double* fields[] = {&p.gemm_efficiency,   &p.tile_alpha, &p.winograd_gain,
                      &p.fft_efficiency,    &p.memory_efficiency,
                      &p.launch_us,         &p.kepler_efficiency};
  return fields[i];
}
inline constexpr int kNumKernelParams = 7;

// The constants of the `framework` compute model (cost/framework_model.h), the same for every
// device and precision. Defaults are the fit's starting point; cost::FittedFrameworkParams() holds
// the fitted values.
struct FrameworkModelParams {
  double tensor_efficiency = 0.6;  // fraction of the tensor-core peak a large aligned GEMM reaches
  double gemm_efficiency = 0.8;    // fraction of the CUDA-core peak a large sgemm reaches
  double memory_efficiency = 0.8;  // fraction of DRAM bandwidth streaming kernels reach
  double launch_us = 4;            // per kernel on the GPU: launch and tail
  double dispatch_us = 15;         // per kernel on the CPU: an eager framework's dispatch; a
                                   // kernel never takes less (the GPU waits for the CPU)
  double iteration_us = 1000;      // per iteration outside kernels (zero_grad, loss scaling,
                                   // the Python loop, synchronisation)
  // What an SM's operand path (shared memory and registers into the tensor cores) sustains,
  // FLOPs a clock: a tensor-core kernel runs at 1 / (1 / tensor peak + 1 / (SMs x boost clock x
  // this)), so a GPU whose tensor cores do more a clock per SM (A100 2,048 FLOPs, H100 3,800,
  // B200 7,700, a GeForce Ampere at fp32 accumulate 512) reaches less of its datasheet peak.
  double tensor_feed_per_sm_clock = 4096;
  // How a tensor-core kernel's efficiency falls with its tile's intensity (flops per byte loaded,
  // a b / (a + b) relative to a 128 x 128 tile's), as a power: the framework model's own. Its
  // default is the cudnn model's tile_alpha, fitted to CUDA-core sgemm of 2016 (v1 to v4 used it).
  double tensor_tile_alpha = 1.25409;
  // A GEMM whose N or K is not a multiple of the tensor cores' alignment (8 values in half
  // precision, 4 in tf32: 16 bytes) runs, from cuBLAS 11.0 on, on tensor cores too, in kernels
  // whose operand loads are as narrow as the dimensions allow; what an SM feeds such a kernel,
  // FLOPs a clock, bounds it as tensor_feed_per_sm_clock bounds an aligned one. 0: such a GEMM
  // runs on CUDA cores (cuBLAS before 11.0; the framework model's rule until v6).
  double unaligned_feed_per_sm_clock = 0;
  // Depthwise convolutions (groups = input channels; MobileNet, EfficientNet) do K x K
  // multiply-adds an output value and run on CUDA cores, in kernels of their own. Which kernels
  // is PyTorch's rule (use_cudnn_depthwise, since PyTorch 1.11 with cuDNN >= 8.2): cuDNN's in
  // channels-last; in NCHW cuDNN's for fp16 at stride 1 (and at stride 2 with >= 512 channels, or
  // >= 256 on planes >= 28 wide), ATen's own conv_depthwise2d otherwise (fp32, tf32, bf16). Each
  // busy SM does this many multiply-adds (taps) a clock at the boost clock, or DRAM at the values'
  // width bounds the kernel, whichever is slower; one kernel forward, two backward (data, weight).
  double dw_cudnn_nchw = 16;
  double dw_cudnn_nhwc = 16;
  double dw_native = 16;
  // Batch norm's kernels are bound by their per-channel reductions (Welford updates, warp and
  // block reductions), not by DRAM: each busy SM handles this many values a clock at the
  // device's boost clock (or DRAM at the values' width, whichever is slower). In NCHW a layer
  // of C channels keeps min(1, C / (bn_nchw_channels_per_sm x SMs)) of the SMs busy (its
  // kernels work a channel plane per block); channels-last keeps them all. Which kernels run is
  // PyTorch's rule (_select_batch_norm_backend): cuDNN's, one kernel a pass, unless the values
  // are bf16; then ATen's own (NCHW: statistics and normalise forward, one backward kernel;
  // channels-last: two each way). Measured on the H200 kernel profiles of ResNet-18/34/50/152
  // (docs/measured/prof_h200_*.json; analysis/bn_rates.py, the median per implementation and
  // layout; bn_cudnn_nhwc the largest, a lower bound: those kernels ran at 0.73-0.77 of DRAM),
  // not fitted to iteration times: `gpu-model fit` holds them.
  double bn_cudnn_nchw = 3.44;
  double bn_cudnn_nhwc = 6.70;
  double bn_native_nchw = 2.54;
  double bn_native_nhwc = 3.51;
  double bn_nchw_channels_per_sm = 2;  // the K of the five profiled rates' smallest spread
};
inline constexpr const char* kFrameworkParamNames[] = {"tensor_efficiency",
                                                       "gemm_efficiency",
                                                       "memory_efficiency",
                                                       "launch_us",
                                                       "dispatch_us",
                                                       "iteration_us",
                                                       "tensor_feed_per_sm_clock",
                                                       "tensor_tile_alpha",
                                                       "unaligned_feed_per_sm_clock",
                                                       "dw_cudnn_nchw",
                                                       "dw_cudnn_nhwc",
                                                       "dw_native",
                                                       "bn_cudnn_nchw",
                                                       "bn_cudnn_nhwc",
                                                       "bn_native_nchw",
                                                       "bn_native_nhwc",
                                                       "bn_nchw_channels_per_sm"};
inline constexpr int kNumFrameworkParams = 17;
// The first kNumFittedFrameworkParams of them are what `gpu-model fit` fits; the rest are
// measured (a fit keeps its start's values).
inline constexpr int kNumFittedFrameworkParams = 12;
// The index of a FrameworkModelParams field by its YAML name, -1 when there is none.
inline int FrameworkParamIndex(const std::string& name) {
  for (int i = 0; i < kNumFrameworkParams; ++i) {
    if (name == kFrameworkParamNames[i]) return i;
  }
  return -1;
}
inline double* FrameworkParamField(FrameworkModelParams& p, int i) {
  double* fields[] = {&p.tensor_efficiency,
                      &p.gemm_efficiency,
                      &p.memory_efficiency,
                      &p.launch_us,
                      &p.dispatch_us,
                      &p.iteration_us,
                      &p.tensor_feed_per_sm_clock,
                      &p.tensor_tile_alpha,
                      &p.unaligned_feed_per_sm_clock,
                      &p.dw_cudnn_nchw,
                      &p.dw_cudnn_nhwc,
                      &p.dw_native,
                      &p.bn_cudnn_nchw,
                      &p.bn_cudnn_nhwc,
                      &p.bn_native_nchw,
                      &p.bn_native_nhwc,
                      &p.bn_nchw_channels_per_sm};
  return fields[i];
}

// GPU generations, as device files name them (`architecture:`).
enum class GpuArchitecture { kUnknown, kKepler, kMaxwell, kPascal, kVolta, kTuring, kAmpere,
                             kHopper, kAda, kBlackwell };

// The arithmetic a training job runs its GEMMs and convolutions in (scenario: cluster.precision):
// fp32 on CUDA cores; tf32 on tensor cores (fp32 storage); fp16 and bf16 as automatic mixed
// precision (half-precision activations and tensor-core math, fp32 master weights and optimizer
// step). Only the `framework` compute model prices it (cost/framework_model.h).
enum class Precision { kFp32, kTf32, kFp16, kBf16 };
inline constexpr const char* kPrecisionNames[] = {"fp32", "tf32", "fp16", "bf16"};
inline const char* PrecisionName(Precision p) { return kPrecisionNames[static_cast<int>(p)]; }

// The optimizer whose step the `framework` compute model prices once per iteration (one pass over
// parameters, gradients and optimizer state): sgd (with momentum), adam / adamw / rmsprop, lamb.
enum class OptimizerKind { kSgd, kAdam, kLamb };
inline constexpr const char* kOptimizerNames[] = {"sgd", "adam", "lamb"};

// The layout a CNN's activations are kept in (scenario: cluster.memory_format; measurement files'
// memory_format): nchw, PyTorch's and TensorFlow's default, or nhwc (PyTorch's channels_last,
// MXNet's and Paddle's NHWC layouts). The `framework` model prices it: cuDNN's tensor-core
// convolutions run NHWC, so under NCHW each one is wrapped in layout transposes, and batch norm's
// kernels reduce strided planes (cost/framework_model.h).
enum class MemoryFormat { kNchw, kNhwc };
inline constexpr const char* kMemoryFormatNames[] = {"nchw", "nhwc"};
inline const char* MemoryFormatName(MemoryFormat f) {
  return kMemoryFormatNames[static_cast<int>(f)];
}
inline MemoryFormat MemoryFormatFromName(const std::string& name) {
  return name == "nhwc" ? MemoryFormat::kNhwc : MemoryFormat::kNchw;
}

// What the framework fuses into batch norm's kernels (scenario: cluster.batchnorm_fusion;
// measurement files' batchnorm_fusion): none (PyTorch in eager mode: batch norm, ReLU and the
// residual add each their own kernel), bn_relu (a ReLU that follows a batch norm runs inside it)
// or bn_add_relu (and a residual add + ReLU after a batch norm: MXNet's --fuse-bn-add-relu,
// Paddle's fuse_bn_add_act_ops, TensorFlow's _FusedBatchNormEx). cuDNN runs these fused batch
// norms (cudnnBatchNormalizationForwardTrainingEx with CUDNN_BATCHNORM_OPS_BN_ACTIVATION or
// _BN_ADD_ACTIVATION) in NHWC at half precision only; elsewhere the framework falls back to
// separate kernels, and so does the model (cost/framework_model.h).
enum class BatchNormFusion { kNone, kBnRelu, kBnAddRelu };
inline constexpr const char* kBatchNormFusionNames[] = {"none", "bn_relu", "bn_add_relu"};
inline const char* BatchNormFusionName(BatchNormFusion f) {
  return kBatchNormFusionNames[static_cast<int>(f)];
}
inline BatchNormFusion BatchNormFusionFromName(const std::string& name) {
  return name == "bn_add_relu" ? BatchNormFusion::kBnAddRelu
         : name == "bn_relu"   ? BatchNormFusion::kBnRelu
                               : BatchNormFusion::kNone;
}

// A precision or optimizer by name (a name already checked against the choices; an unknown one
// gives fp32 / sgd). "adamw" prices as adam (the same pass), and so does "rmsprop" (with momentum,
// as DeepLearningExamples' EfficientNet runs it: it reads the parameter, gradient, square average
// and momentum buffer and writes three of them, Adam's 28 bytes a parameter); "unknown" (a
// published row that does not say) as sgd.
inline Precision PrecisionFromName(const std::string& name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kPrecisionNames[i]) return static_cast<Precision>(i);
  }
  return Precision::kFp32;
}
inline OptimizerKind OptimizerFromName(const std::string& name) {
  return name == "lamb"                                           ? OptimizerKind::kLamb
         : name == "adam" || name == "adamw" || name == "rmsprop" ? OptimizerKind::kAdam
                                                                  : OptimizerKind::kSgd;
}

// How a device without a measured profile prices a layer: `cudnn` (cost/gpu_kernel_model.h, the
// default: cuDNN 5-era kernels in fp32, fitted to Torch7 timings), `roofline` (flat fractions of
// peak and bandwidth, cost/compute_model.h) or `framework` (a current framework's kernels at a
// precision, tensor cores, optimizer step and per-iteration overhead; cost/framework_model.h).
enum class DeviceComputeModel { kCudnn, kRoofline, kFramework };

// A device described by datasheet figures (scenarios/devices/NAME.yaml).
struct DeviceSpec {
  std::string name;         // "k20"
  std::string description;  // "NVIDIA Tesla K20 (Kepler GK110), datasheet"
  double peak_flops = 0;            // fp32 FLOP/s (YAML: peak_tflops)
  double memory_bandwidth_Bps = 0;  // bytes/s (YAML: memory_bandwidth_gbs, 1e9 bytes)
  double compute_efficiency = 0.5;  // fraction of peak reached by conv/fc kernels
  double memory_efficiency = 0.7;   // fraction of bandwidth reached by elementwise kernels
  double pcie_bandwidth_Bps = 0;    // host<->device copies, bytes/s (YAML: pcie_gbs); 0 = CPU device
  int64_t kernel_launch_ns = 0;     // fixed cost per layer pass (YAML: launch_overhead_us)
  std::string source;               // where the datasheet figures come from (YAML: source)
  DeviceComputeModel compute_model = DeviceComputeModel::kCudnn;  // YAML: compute_model
  // The cudnn model's datasheet figures (required for it): streaming multiprocessors and
  // generation (YAML: sm_count, architecture).
  int sm_count = 0;
  GpuArchitecture architecture = GpuArchitecture::kUnknown;
  // The cuDNN release whose algorithms the cudnn model may pick, as major * 10 + minor (51 =
  // 5.1); 0 = a current release, every algorithm (YAML: cudnn_version: "5.1"). Before 3: implicit
  // GEMM only; 3: + FFT; 5.0: + fused Winograd (3x3, forward and backward data); 5.1: + non-fused
  // Winograd (3x3 and 5x5, all three passes).
  int cudnn_version = 0;
  // YAML: kernel_model, a mapping of KernelModelParams names to values; each one given
  // replaces the fitted value for this device (cost::KernelParamsFor).
  std::map<std::string, double> kernel_model;
  // Datasheet figures the `framework` model reads (all optional): dense tensor-core peaks per
  // precision, FLOP/s (YAML: tensor_tflops: {tf32: 156, fp16: 312, bf16: 312}); the CUDA-core
  // half-precision rate where it is faster than fp32 (YAML: fp16_tflops, e.g. the P100); clocks,
  // L2 and memory size (YAML: boost_clock_mhz, base_clock_mhz, l2_cache_mb, memory_gb).
  std::map<Precision, double> tensor_flops;
  double fp16_flops = 0;
  std::string tensor_source;
  double boost_clock_mhz = 0, base_clock_mhz = 0, l2_cache_bytes = 0, memory_bytes = 0;
  // What the `framework` model prices: the scenario's precision and optimizer (cluster.precision,
  // cluster.optimizer), and its fitted constants overridden by YAML framework_model: {NAME: v}.
  Precision precision = Precision::kFp32;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  MemoryFormat memory_format = MemoryFormat::kNchw;  // cluster.memory_format
  BatchNormFusion batchnorm_fusion = BatchNormFusion::kNone;  // cluster.batchnorm_fusion
  // The CUDA release the framework's cuBLAS and cuDNN were built for, as major * 10 + minor (102 =
  // 10.2); 0 = a current release (cluster.cuda_version, measurement files' cuda_version). Before
  // 11.0 cuBLAS runs a GEMM whose N or K is not aligned on CUDA cores only, and has no tf32 or
  // bf16 (cost/framework_model.h); an architecture needs the release that first supports it
  // (config::CudaVersionUnsupported).
  int cuda_version = 0;
  std::map<std::string, double> framework_model;
  core::SourceLoc loc;
};

// Per-layer times measured at one batch size (scenarios/profiles/*.yaml), written by
// `poseidon calibrate`.
struct LayerTiming {
  double fwd_ms = 0;  // the time replayed (calibration writes the median of its repetitions)
  double bwd_ms = 0;
  // Optional spread of the measurement (10th / 90th percentile), for jitter models later.
  std::optional<double> fwd_p10_ms, fwd_p90_ms, bwd_p10_ms, bwd_p90_ms;
  // FC layers, optional: one SFB gradient rebuild from `batch` factor pairs, measured.
  std::optional<double> sfb_rebuild_ms;
  core::SourceLoc loc;  // the layer's entry in the profile file
};

struct ProfileSpec {
  std::string model;      // model name the profile was measured on
  int64_t batch = 0;      // batch size of the measurement
  std::string device;     // what it was measured on ("cpu: ...", "NVIDIA H200")
  std::string backend;    // "cpu" | "cuda" | "reference" | "synthetic"
  std::map<std::string, LayerTiming> layers;  // by layer name
  // Optional (0 = not given): parameter-server update cost in ms per MB (1e6 bytes) of
  // parameters, and host<->device copy bandwidth in bytes/s (YAML: pcie_gbs).
  double update_ms_per_mb = 0;
  double pcie_bandwidth_Bps = 0;
  std::map<std::string, std::string> provenance;  // date, command, commit, libraries, ...
  // Layer names in the order of the file (forward order when calibration wrote it);
  // WriteProfileYaml writes this order, then any layer not listed here in name order.
  std::vector<std::string> layer_order;
  core::SourceLoc loc;
};

}  // namespace poseidon::config
