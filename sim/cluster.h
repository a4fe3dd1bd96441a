// sim/cluster.h: a whole job -- coordinator, workers, server shards -- hosted on the
// discrete-event engine, a network model and replayed compute.
//
// The protocol actors are the core's (core/worker.h, core/server.h, core/coordinator.h); this
// file only hosts them: it implements core::Host for each actor, turns Send into a flow on the
// network model (or an immediate local delivery between actors on one machine; messages on one
// connection leave in order, one flow at a time; a connection joins two machines, or with
// network.connections: process_pair two actors), turns
// StartCompute into a task on one of the actor's FIFO streams whose duration comes from the
// cost::ComputeModel, and turns the engine's events back into the actors' On* calls. On machines with
// several devices a worker has a compute and a copy stream per device, and its local reductions
// and broadcasts share the machine's links and host memory with each other and the NIC
// (cost/intra_machine.h).
//
//   SimJob job(config);
//   SimRun run = job.Run();   // iteration times, breakdowns, link load, optional trace
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/specs.h"
#include "core/decision_log.h"
#include "core/host.h"
#include "core/job.h"
#include "core/model.h"
#include "core/param_store.h"
#include "core/placement.h"
#include "cost/compute_model.h"
#include "cost/intra_machine.h"
#include "cost/jitter.h"
#include "sim/engine.h"
#include "sim/network/network_model.h"
#include "sim/task_fifo.h"

namespace poseidon::sim {

struct SimJobConfig {
  const core::Model* model = nullptr;
  core::JobLayout layout;
  core::ProtocolConfig protocol;
  config::NetworkSpec network;
  // How a machine's devices are joined (protocol.devices_per_machine > 1, or local_copy_devices).
  config::InterconnectSpec interconnect;
  // > 1 (cluster.local_copies: interconnect, client: device): each machine has this many devices,
  // one worker process each, and a message between two processes of one machine is a copy over
  // the interconnect (worker to worker device to device, worker to and from a co-located shard
  // device to host), sharing it with the NIC; 0: such messages take no time (as before).
  int local_copy_devices = 0;
  // Compute model of each worker (size num_workers; stragglers have slower ones). Server updates
  // and copies use the worker 0 model's rates.
  std::vector<cost::ComputeModel> worker_compute;
  // Per-task variability of the workers' compute: each forward/backward task's time is
  // multiplied by a factor with mean 1 and this coefficient of variation (0 = none), drawn from
  // a generator seeded by (seed, worker), so runs are reproducible (cost/jitter.h; the live
  // runtime's replayed compute draws the same way).
  cost::ComputeJitter::Kind jitter = cost::ComputeJitter::Kind::kNone;
  double jitter_cv = 0;
  uint64_t seed = 1;
  // Each machine's input pipeline (cluster.input_samples_per_s): the samples per second it
  // delivers to the machine's devices together (0: no limit, the default). A device's forward
  // pass of the first layer takes input_batch of them, waiting until the pipeline has produced
  // them; the pipeline runs ahead by at most input_prefetch_samples and serves the devices in the
  // order they ask. It starts empty: a bound machine then runs at its steady pace from its first
  // iteration on, where a prefetch full at the start would hide the bound for the few
  // iterations a simulation runs.
  double input_samples_per_s = 0;
  int64_t input_batch = 0;
  double input_prefetch_samples = 0;
  // Clocks below this are left out of the per-layer figures (SimRun::layers).
  int64_t warmup_iterations = 0;
  bool record_trace = false;
  // Progress: called every 2^16 events with the fraction (0..1) of the job's forward and backward
  // tasks and layer syncs done, counted per worker and clock. A rough measure of work: in a
  // one-iteration run the syncs come late, so an estimate of time left from it runs high. Only observes; results do not depend on it.
  std::function<void(double fraction)> progress;
  // Fault injection for tests: a message for which this returns true is lost (never delivered),
  // e.g. to check that a job which cannot progress ends with a deadlock report.
  std::function<bool(const core::Message&)> drop_message;
  // Record every actor's protocol decisions (core/decision_log.h) into SimRun::decisions.
  bool record_decisions = false;
  // Record the network model's congestion windows into SimRun::windows (a model with windows;
  // only observes).
  bool record_windows = false;
  // With record_trace, on emulated hosts (NetworkSpec::host_cores > 0): the CPU the host model
  // books for each actor's process, as core::ProcessCpuEvent counters in the trace (its messages'
  // CPU, the writes of its sends, the reads of its streamed bytes, its threads' wake-ups; the
  // kernel's per-byte CPU is not a process's), each at the moment it is booked. What a live
  // process's own CPU clock is read against (validation/cpu_window.h). Only observes.
  bool record_host_cpu = false;
};

struct WorkerRun {
  std::vector<TimeNs> iteration_begin;
  std::vector<TimeNs> iteration_end;
  std::vector<TimeNs> compute_busy;  // per iteration: forward+backward (+ SFB rebuild) task time
  std::vector<TimeNs> nic_busy;      // per iteration: time this worker's machine NIC was busy
  // synced[v-1]: when every layer of this worker first held every update of clocks 0..v-1.
  std::vector<TimeNs> synced;
};

// One connection's congestion window over a run (SimJobConfig::record_windows): its loss
// episodes, and its window and threshold at the end. Wire bytes.
struct ConnectionWindows {
  std::string name;  // "worker 1 -> shard 0" (one connection per process pair), or
                     // "machine 0 -> machine 2" (one per machine pair)
  std::vector<WindowLoss> losses;
  double window_bytes = 0;
  double threshold_bytes = 0;  // infinite before its first loss
};

// Per layer, summed over workers and measured clocks by the caller.
struct LayerRun {
  TimeNs fwd = 0, bwd = 0;  // compute task time
  TimeNs sync = 0;          // backward end of clock c -> layer fresh for clock c+1
  int64_t samples = 0;      // (worker, clock) pairs counted in sync
};

struct SimRun {
  TimeNs end_time = 0;
  std::vector<WorkerRun> workers;
  std::vector<LayerRun> layers;  // summed over workers and clocks after warm-up
  std::vector<LinkStats> links;
  uint64_t events = 0;
  uint64_t messages = 0;
  uint64_t network_messages = 0;
  int64_t network_payload_bytes = 0;
  bool deadlocked = false;
  std::string deadlock_report;  // who waits for what, one actor a line
  std::vector<core::TraceEvent> trace;
  core::DecisionLog decisions;  // with SimJobConfig::record_decisions
  std::vector<ConnectionWindows> windows;  // with SimJobConfig::record_windows, by key
};

class SimJob {
 public:
  explicit SimJob(SimJobConfig config);
  ~SimJob();
  SimJob(const SimJob&) = delete;
  SimJob& operator=(const SimJob&) = delete;

  SimRun Run();

  // A message of a recorded run (a live one): sent by actor `from` to actor `to` (on another
  // machine) at `sent`, with `payload_bytes` of payload.
  struct ReplayMessage {
    TimeNs sent = 0;
    core::ActorId from = 0, to = 0;
    int64_t payload_bytes = 0;
  };
  // Instead of Run: no actor runs; the messages are sent at their recorded times through this
  // job's connections and network model, as the actors' messages are in Run (in order per
  // connection, behind the machine's other sockets). Returns when each was delivered, in the
  // order given. It tells the network model's error on a run's own traffic apart from how the
  // simulated run's schedule differs. Once per SimJob, instead of Run.
  std::vector<TimeNs> ReplayMessages(const std::vector<ReplayMessage>& messages);
  // After Run or ReplayMessages: a receiving queue of the network model reached its limit.
  bool queue_overflowed() const { return network_->queue_overflowed(); }
  // After Run or ReplayMessages: the most wire bytes of one message the network model carried.
  int64_t largest_network_message() const { return largest_network_message_; }

 private:
  class ActorHost;
  struct StreamState {
    TaskFifo queue;
    bool busy = false;
    TimeNs started = 0;
    TimeNs last_end = 0;  // the previous task's end (NetworkSpec::host_wakeup_ns)
    bool woke = false;    // the running task's thread sleeps to its end and wakes there
  };
  struct Slot {
    core::Message msg;
    TimeNs sent = 0;
    TimeNs bytes_read = 0;  // NetworkSpec::host_byte_cpu streamed: its receiver's reads done
    int32_t next = -1;  // next free slot, or next message queued on the same connection
    bool written = false;  // in its connection's send buffer, its sender told (SendBuffer)
    // NetworkSpec::host_write_share: when its write into the send buffer begins (BookWrite), and
    // whether the flow that waits for it continues its connection's stream.
    TimeNs write_start = 0;
    bool continues_stream = false;
  };
  // One TCP-like connection per ordered pair of machines (or of actors, NetworkSpec::connections):
  // its messages leave one after another, the next starting when the previous one's last byte
  // has left (as on a real stream socket); concurrent connections share links max-min fairly.
  struct Connection {
    int32_t head = -1;  // queued messages (slot ids), not yet handed to the network
    int32_t tail = -1;
    bool busy = false;  // a message of this connection is on the network
  };
  // With NetworkSpec::send_buffer_bytes B: a connection's socket send buffer. A message is
  // written into it, and its sender told (Actor::OnSent, as the live transport's on_sent says
  // its last byte went into the socket), once it fits: the written messages not yet delivered
  // and it hold at most B payload bytes. Messages are written in their connection's order; one
  // larger than B is told once its last byte has left the machine, as every message is without
  // the key.
  struct SendBuffer {
    int64_t written_bytes = 0;     // payload of written messages whose last byte has not left
    int32_t in_flight = -1;        // the message on the network (slot), or -1
    int32_t first_unwritten = -1;  // the first message not written yet, in connection order
  };
  enum EventKind : uint32_t {
    kStartActor,
    kDeliver,
    kTaskDone,
    kNetwork,
    kTimer,
    kStartFlow,
    kReplaySend,
    kArrive,
    kComputeDone,
    kIntra,
    kWritten,
    kWriteBegun
  };

  // Returns the message's slot (kNoSlot if SimJobConfig::drop_message dropped it).
  uint32_t Send(core::ActorId from, core::Message msg);
  static constexpr uint32_t kNoSlot = 0xffffffffu;
  void StartCompute(core::ActorId actor, const core::ComputeTask& task);
  void Trace(const core::TraceEvent& e);
  StreamState& StreamAt(core::ActorId actor, int slot) {
    return streams_[static_cast<size_t>(stream_base_[static_cast<size_t>(actor)] + slot)];
  }
  void StartNextTask(core::ActorId actor, int slot);
  // The task at the front of (actor, slot) has ended now.
  void TaskDone(core::ActorId actor, int slot);
  // Machines with several devices: the machine's next local-op event, and its NIC's directions.
  void ScheduleIntra(int machine, TimeNs at);
  // The copy a message between two processes of one machine makes, if the interconnect times
  // it (SimJobConfig::local_copy_devices); nullopt: it takes no time.
  std::optional<cost::IntraOp> LocalCopy(core::ActorId from, core::ActorId to) const;
  // An intra-machine op's tag with this bit is a message's copy (the slot below it); without, a
  // task (actor << 32 | stream slot).
  static constexpr uint64_t kMessageCopyTag = uint64_t{1} << 63;
  void OnIntraEvent(int machine, uint64_t generation);
  void NicDirections(int machine);
  TimeNs TaskDuration(core::ActorId actor, const core::ComputeTask& task);
  TimeNs Jittered(int worker, TimeNs base);
  uint32_t AllocSlot();
  void ScheduleNetworkNow();
  void OnNetworkEvent(uint64_t generation);
  void NicChange(int machine, int delta);
  // Starts the flow of `slot` now, or, with NetworkSpec::sender_queue_bytes q, once what the
  // machine's other messages of >= q bytes keep queued ahead of it (q each; less for one that
  // opened onto an idle NIC less than q / rate ago) has left at the NIC's rate (kStartFlow).
  void StartFlowAfterQueue(int src, int dst, uint32_t slot, bool continues_stream);
  void StartFlow(int src, int dst, uint32_t slot);
  // A kStartFlow event's flow (target: source machine; arg: destination << 32 | slot).
  void StartQueuedFlow(const Event& ev);
  // Returns a delivered message's slot to the free list.
  void FreeSlot(uint32_t slot);
  // `slot` has arrived at its receiving process at `at`: delivered then, or, with the host CPU
  // modelled (NetworkSpec::host_cores), once that process and one shared core have processed it,
  // or, with NetworkSpec::process_ns_per_byte, once that process alone has.
  void Arrive(TimeNs at, uint32_t slot);
  void ProcessArrival(uint32_t slot);
  // When `actor`'s protocol thread takes an event ready at now_ (NetworkSpec::host_wakeup_ns):
  // now_ plus the wake-up latency if the thread sleeps, else once it is free.
  TimeNs ProtocolThreadStart(core::ActorId actor) const;
  // Whether `actor`'s protocol thread sleeps at now_ (has no event left to process).
  bool ProtocolThreadAsleep(core::ActorId actor) const;
  // Books `cpu_ns` on the earliest free shared core from now_ (NetworkSpec::host_cores) and
  // returns when it is done.
  TimeNs BookSharedCore(double cpu_ns);
  // Books `cpu_ns` on `actor`'s process (its one thread, after what it is busy with) and the
  // earliest free shared core, from now_ on; returns when it begins and ends.
  std::pair<TimeNs, TimeNs> BookProcessAndCore(core::ActorId actor, double cpu_ns);
  // NetworkSpec::host_write_share: message `s`'s sender writes it into a socket, on its own
  // process (after what it is busy with) and the earliest free shared core; sets s.write_start
  // and returns when the write ends.
  TimeNs BookWrite(Slot& s);
  // Starts message `slot`'s flow (StartFlowAfterQueue) once its write has begun: with
  // NetworkSpec::host_write_share its first byte cannot leave before (kWriteBegun).
  void StartFlowOnceWriting(int src, int dst, uint32_t slot, bool continues_stream);
  // kWriteBegun: the flow StartFlowOnceWriting deferred.
  void StartWrittenFlow(const Event& ev);
  // The receiving process's CPU per payload byte of `msg`: host_ns_per_byte, less the writer's
  // share when the message was written into a send buffer.
  double ReceiverNsPerByte(const core::Message& msg, bool between_machines) const;
  // NetworkSpec::host_byte_cpu streamed: as message `slot`'s first byte leaves, books its
  // receiver's per-byte CPU (the kernel's and the process's) and sets its Slot::bytes_read.
  void BookStreamedCpu(uint32_t slot);
  void EnsureHostCpuState();
  // `cpu_ns` of process CPU booked for `actor` now: counted, and traced with record_host_cpu.
  void AddProcessCpu(core::ActorId actor, double cpu_ns);
  // SimJobConfig::input_samples_per_s: when `actor`'s machine's input pipeline has a batch for a
  // forward pass asked for now (now_ or later), which it takes.
  TimeNs TakeInput(core::ActorId actor);
  // The connection a message from actor `from` on machine src to `to` on dst travels on: one per
  // machine pair or per process pair (network.connections).
  uint64_t ConnectionKey(int src, int dst, core::ActorId from, core::ActorId to) const;
  // What ConnectionKey named `key`: "worker 1 -> shard 0" or "machine 0 -> machine 2".
  std::string ConnectionName(uint64_t key) const;
  // record_windows: SimRun::windows from the network model's log and its windows now.
  void CollectWindows();
  Connection& ConnectionOf(int src, int dst, core::ActorId from, core::ActorId to);
  // Writes the connection's next messages into its send buffer while they fit (SendBuffer),
  // telling each sender by a kWritten event now.
  void WriteIntoSendBuffer(const Connection& c, SendBuffer& b);
  std::string DeadlockReport() const;

  SimJobConfig config_;
  core::Placement placement_;
  std::unique_ptr<NetworkModel> network_;
  std::vector<std::unique_ptr<ActorHost>> hosts_;
  std::vector<std::unique_ptr<core::Actor>> actors_;
  core::PhantomWorkerStore worker_store_;
  core::PhantomShardStore shard_store_;
  std::vector<StreamState> streams_;  // stream_base_[actor] + core::StreamSlot(task)
  std::vector<int> stream_base_;      // per actor
  // Machines with several devices (null otherwise).
  std::unique_ptr<cost::IntraMachine> intra_;
  std::vector<uint64_t> intra_generation_;  // per machine: the latest scheduled event's
  std::vector<int> nic_tx_, nic_rx_;        // per machine: flows it sends, receives
  std::vector<uint64_t> intra_done_;        // scratch
  std::vector<Slot> slots_;
  static constexpr uint64_t kDenseConnections = uint64_t{1} << 22;  // 48 MiB of Connection
  std::vector<Connection> dense_connections_;
  std::unordered_map<uint64_t, Connection> connections_;
  // NetworkSpec::send_buffer_bytes: the connections' send buffers (by ConnectionKey).
  std::unordered_map<uint64_t, SendBuffer> send_buffers_;
  // Messages written into a send buffer whose sender is yet to be told (kWritten), by sequence
  // number: with NetworkSpec::host_write_share a write ends when its CPU is done, so the
  // events need not come in the order the messages were written.
  std::unordered_map<uint64_t, core::Message> written_;
  uint64_t written_sequence_ = 0;
  bool replaying_ = false;  // in ReplayMessages: no actor is told of sends or deliveries
  int64_t largest_network_message_ = 0;
  int32_t free_slot_ = -1;
  EventQueue queue_;
  TimeNs now_ = 0;
  uint64_t net_generation_ = 0;
  TimeNs net_pending_at_ = kNever;
  std::vector<FlowDone> done_scratch_;
  // Host CPU (NetworkSpec::host_cores, process_ns_per_byte): when each shared core (host_cores
  // only) and each actor's process is free.
  std::vector<TimeNs> core_free_;
  std::vector<TimeNs> process_free_;
  std::vector<double> process_cpu_ns_;  // per actor: the process CPU booked so far
  // Input pipelines (SimJobConfig::input_samples_per_s), per machine: samples ready at
  // input_since_ (that time may lie ahead: batches promised to earlier forward passes).
  std::vector<double> input_samples_;
  std::vector<TimeNs> input_since_;
  // With NetworkSpec::host_wakeup_ns: the ended tasks whose kComputeDone is pending.
  std::unordered_map<uint64_t, core::ComputeTask> done_pending_;  // by sequence number
  uint64_t done_sequence_ = 0;
  // NIC activity per machine: flows in flight touching it, and busy-time accounting.
  std::vector<int> nic_active_;
  // Per machine: its messages of >= sender_queue_bytes that are sending or queued to send, each
  // with what it keeps queued at the NIC ahead of a new connection's first message: q from the
  // start, or, for one that opened onto a NIC with none of them (its first bytes went straight
  // out), what the link has drained since it started, up to q (StartFlowAfterQueue).
  struct AtNic {
    uint32_t slot = 0;
    TimeNs since = 0;
    bool opened_idle = false;
  };
  std::vector<std::vector<AtNic>> sending_;
  std::vector<TimeNs> nic_since_;
  std::vector<TimeNs> nic_busy_total_;
  std::vector<TimeNs> nic_busy_at_iter_begin_;
  std::vector<TimeNs> compute_busy_total_;
  std::vector<TimeNs> compute_busy_at_iter_begin_;
  std::vector<cost::ComputeJitter> jitter_;  // per worker
  // Per worker: version of every layer, the minimum over parameter layers, and how many
  // parameter layers sit at that minimum (to find when a worker is synced to a clock).
  std::vector<std::vector<int64_t>> layer_version_;
  std::vector<int64_t> min_version_;
  std::vector<int> at_min_;
  // Backward end of (worker, layer) for the clock being synced, for LayerRun::sync.
  std::vector<std::vector<TimeNs>> backward_end_;  // [worker * layers + layer][clock]
  SimRun run_;
  std::vector<WindowLoss> window_log_;  // record_windows: the network model's loss episodes
  // For progress: workers x iterations x (2 x layers + parameter layers), and how many of those
  // forward/backward tasks and layer syncs are done.
  int64_t iterations_total_ = 0;
  int64_t iterations_done_ = 0;
};

}  // namespace poseidon::sim
