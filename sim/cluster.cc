#include "sim/cluster.h"

#include "core/trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "core/coordinator.h"
#include "core/server.h"
#include "core/worker.h"

namespace poseidon::sim {

using core::ActorId;
using core::ComputeTask;
using core::Message;
using core::TaskKind;
using core::TraceEvent;
using core::TraceKind;

// core::Host for one actor: forwards every action to the job with the actor's id.
class SimJob::ActorHost final : public core::Host {
 public:
  ActorHost(SimJob* job, ActorId id) : job_(job), id_(id) {}
  void Send(Message msg) override {
    if (job_->config_.record_decisions) job_->run_.decisions.Send(id_, msg);
    job_->Send(id_, std::move(msg));
  }
  void StartCompute(const ComputeTask& task) override {
    if (job_->config_.record_decisions) job_->run_.decisions.Compute(id_, task);
    job_->StartCompute(id_, task);
  }
  // Fault tolerance's heartbeats and failure checks (core/job.h FaultConfig).
  void SetTimer(TimeNs at, uint64_t timer_id) override {
    job_->queue_.Push(std::max(at, job_->now_), kTimer, static_cast<uint32_t>(id_), timer_id);
  }
  void Trace(const TraceEvent& e) override { job_->Trace(e); }

 private:
  SimJob* job_;
  ActorId id_;
};

SimJob::SimJob(SimJobConfig config) : config_(std::move(config)) {
  const core::JobLayout& layout = config_.layout;
  run_.decisions.FollowBaseline(config_.protocol.baseline);
  POSEIDON_CHECK(config_.model != nullptr);
  POSEIDON_CHECK(static_cast<int>(config_.worker_compute.size()) == layout.num_workers)
      << config_.worker_compute.size() << " compute models for " << layout.num_workers
      << " workers";
  placement_ = core::Placement::Build(*config_.model, layout.num_servers,
                                      config_.protocol.chunk_bytes,
                                      config_.protocol.scheme_of_layer,
                                      config_.protocol.placement_policy);
  network_ = MakeNetworkModel(config_.network, layout.num_machines, config_.seed);
  if (config_.record_windows) network_->RecordWindowLosses(&window_log_);
  const int n = layout.num_actors();
  for (ActorId a = 0; a < n; ++a) hosts_.push_back(std::make_unique<ActorHost>(this, a));
  actors_.push_back(
      std::make_unique<core::Coordinator>(layout, hosts_[0].get(), config_.protocol.fault));
  for (int w = 0; w < layout.num_workers; ++w) {
    ActorId a = layout.worker(w);
    actors_.push_back(std::make_unique<core::Worker>(a, *config_.model, placement_, layout,
                                                     config_.protocol, hosts_[a].get(),
                                                     &worker_store_));
  }
  for (int s = 0; s < layout.num_servers; ++s) {
    ActorId a = layout.server(s);
    actors_.push_back(std::make_unique<core::ServerShard>(a, placement_, layout, config_.protocol,
                                                          hosts_[a].get(), &shard_store_));
  }
  // Every actor has the streams of one device; a worker has those of each of its devices.
  const int devices = config_.protocol.devices_per_machine;
  stream_base_.resize(static_cast<size_t>(n));
  int slots = 0;
  for (ActorId a = 0; a < n; ++a) {
    stream_base_[static_cast<size_t>(a)] = slots;
    slots += core::StreamSlots(layout.IsWorker(a) ? devices : 1);
  }
  streams_.resize(static_cast<size_t>(slots));
  if (devices > 1 || config_.local_copy_devices > 1) {
    intra_ = std::make_unique<cost::IntraMachine>(
        config_.interconnect, devices > 1 ? devices : config_.local_copy_devices,
        layout.num_machines, config_.network.host_bandwidth_Bps);
    intra_generation_.assign(static_cast<size_t>(layout.num_machines), 0);
    nic_tx_.assign(static_cast<size_t>(layout.num_machines), 0);
    nic_rx_.assign(static_cast<size_t>(layout.num_machines), 0);
  }
  nic_active_.assign(layout.num_machines, 0);
  sending_.assign(static_cast<size_t>(layout.num_machines), {});
  nic_since_.assign(layout.num_machines, 0);
  nic_busy_total_.assign(layout.num_machines, 0);
  nic_busy_at_iter_begin_.assign(layout.num_workers, 0);
  compute_busy_total_.assign(layout.num_workers, 0);
  compute_busy_at_iter_begin_.assign(layout.num_workers, 0);
  run_.workers.resize(layout.num_workers);
  const size_t num_layers = config_.model->layers().size();
  run_.layers.resize(num_layers);
  backward_end_.resize(static_cast<size_t>(layout.num_workers) * num_layers);
  layer_version_.assign(static_cast<size_t>(layout.num_workers),
                        std::vector<int64_t>(num_layers, 0));
  min_version_.assign(static_cast<size_t>(layout.num_workers), 0);
  at_min_.assign(static_cast<size_t>(layout.num_workers),
                 static_cast<int>(config_.model->param_layers().size()));
  for (int w = 0; w < layout.num_workers; ++w) {
    jitter_.emplace_back(config_.jitter, config_.jitter_cv, config_.seed, w);
  }
  iterations_total_ = static_cast<int64_t>(layout.num_workers) * config_.protocol.iterations *
                      static_cast<int64_t>(2 * config_.model->layers().size() +
                                           config_.model->param_layers().size());
}

SimJob::~SimJob() = default;

uint32_t SimJob::AllocSlot() {
  if (free_slot_ >= 0) {
    uint32_t s = static_cast<uint32_t>(free_slot_);
    free_slot_ = slots_[s].next;
    slots_[s].next = -1;
    return s;
  }
  slots_.emplace_back();
  return static_cast<uint32_t>(slots_.size() - 1);
}

uint32_t SimJob::Send(ActorId from, Message msg) {
  POSEIDON_CHECK(msg.from == from) << "actor " << from << " sent as " << msg.from;
  POSEIDON_CHECK(msg.to >= 0 && msg.to < config_.layout.num_actors()) << core::Describe(msg);
  ++run_.messages;
  if (config_.drop_message && config_.drop_message(msg)) return kNoSlot;
  const int src = config_.layout.machine_of[from];
  const int dst = config_.layout.machine_of[msg.to];
  const uint32_t slot = AllocSlot();
  const ActorId to = msg.to;
  slots_[slot].msg = std::move(msg);
  slots_[slot].sent = now_;
  slots_[slot].written = false;
  slots_[slot].write_start = 0;
  if (src == dst) {
    // Actors on one machine talk through memory; the copy is not modelled (but the host CPU of
    // the message is, when it is: NetworkSpec::host_cores), unless the processes are on devices
    // whose copies the interconnect times (SimJobConfig::local_copy_devices).
    const std::optional<cost::IntraOp> copy = LocalCopy(from, to);
    if (copy) {
      const uint64_t tag = kMessageCopyTag | slot;
      ScheduleIntra(src, intra_->Start(now_, src, *copy, slots_[slot].msg.wire_bytes(), tag));
      return slot;
    }
    Arrive(now_, slot);
    return slot;
  }
  ++run_.network_messages;
  run_.network_payload_bytes += slots_[slot].msg.payload_bytes;
  Connection& c = ConnectionOf(src, dst, from, to);
  SendBuffer* buffer = nullptr;
  if (config_.network.send_buffer_bytes > 0) {
    buffer = &send_buffers_[ConnectionKey(src, dst, from, to)];
    if (buffer->first_unwritten < 0) buffer->first_unwritten = static_cast<int32_t>(slot);
  }
  const bool writes_cost = buffer != nullptr && config_.network.host_write_share > 0;
  const bool opens = !c.busy;  // the connection was idle: this message goes out first
  if (c.busy) {
    if (c.tail >= 0) {
      slots_[c.tail].next = static_cast<int32_t>(slot);
    } else {
      c.head = static_cast<int32_t>(slot);
    }
    c.tail = static_cast<int32_t>(slot);
  } else {
    c.busy = true;
    if (buffer) buffer->in_flight = static_cast<int32_t>(slot);
    // With host_write_share it is written first (below): its first byte leaves once the write
    // has begun.
    if (!writes_cost) StartFlowAfterQueue(src, dst, slot, /*continues_stream=*/false);
  }
  if (buffer) WriteIntoSendBuffer(c, *buffer);
  if (writes_cost && opens) StartFlowOnceWriting(src, dst, slot, /*continues_stream=*/false);
  return slot;
}

void SimJob::WriteIntoSendBuffer(const Connection& c, SendBuffer& b) {
  const int64_t capacity = config_.network.send_buffer_bytes;
  int32_t cur = b.first_unwritten;
  while (cur >= 0) {
    Slot& s = slots_[static_cast<size_t>(cur)];
    if (b.written_bytes + s.msg.payload_bytes > capacity) break;
    s.written = true;
    b.written_bytes += s.msg.payload_bytes;
    if (!replaying_) {
      const TimeNs at = config_.network.host_write_share > 0 ? BookWrite(s) : now_;
      written_.emplace(++written_sequence_, s.msg);
      queue_.Push(at, kWritten, static_cast<uint32_t>(s.msg.from), written_sequence_);
    }
    cur = cur == b.in_flight ? c.head : s.next;
  }
  b.first_unwritten = cur;
}

void SimJob::StartFlowAfterQueue(int src, int dst, uint32_t slot, bool continues_stream) {
  const int64_t q = config_.network.sender_queue_bytes;
  if (q <= 0) {
    StartFlow(src, dst, slot);
    return;
  }
  // Messages of at least q bytes keep q queued from their start (or their turn in the queue) to
  // their end; smaller ones are not counted. One that opened onto a NIC with none of them sent
  // its first bytes straight out (an idle link's burst) and its queue fills behind them as the
  // link drains: live, a second connection opened 50 us after the first waits one GSO packet
  // behind it, not two (docs/validation.md, "A queue that has not filled yet").
  // A message written while its connection was still sending continues that stream, which
  // already has its turn at the NIC: it does not queue behind the others again.
  const double rate = config_.network.host_bandwidth_Bps;
  std::vector<AtNic>& at_nic = sending_[static_cast<size_t>(src)];
  double ahead = 0;  // bytes
  if (!continues_stream) {
    for (const AtNic& m : at_nic) {
      ahead += m.opened_idle ? std::min(static_cast<double>(q),
                                        rate * static_cast<double>(now_ - m.since) * 1e-9)
                             : static_cast<double>(q);
    }
  }
  if (slots_[slot].msg.wire_bytes() >= q) {
    at_nic.push_back({slot, now_, /*opened_idle=*/at_nic.empty() && !continues_stream});
  }
  if (ahead > 0) {
    queue_.Push(now_ + static_cast<TimeNs>(std::ceil(ahead / rate * 1e9)), kStartFlow,
                static_cast<uint32_t>(src), (static_cast<uint64_t>(dst) << 32) | slot);
    return;
  }
  StartFlow(src, dst, slot);
}

uint64_t SimJob::ConnectionKey(int src, int dst, ActorId from, ActorId to) const {
  if (config_.network.connections == config::ConnectionKind::kProcessPair) {
    return static_cast<uint64_t>(from) * static_cast<uint64_t>(config_.layout.num_actors()) +
           static_cast<uint64_t>(to);
  }
  return MachinePairConnection(src, dst, config_.layout.num_machines);
}

std::string SimJob::ConnectionName(uint64_t key) const {
  const core::JobLayout& layout = config_.layout;
  if (config_.network.connections == config::ConnectionKind::kProcessPair) {
    const auto n = static_cast<uint64_t>(layout.num_actors());
    return layout.ActorName(static_cast<ActorId>(key / n)) + " -> " +
           layout.ActorName(static_cast<ActorId>(key % n));
  }
  const auto m = static_cast<uint64_t>(layout.num_machines);
  return "machine " + std::to_string(key / m) + " -> machine " + std::to_string(key % m);
}

void SimJob::CollectWindows() {
  std::map<uint64_t, size_t> index;
  for (const ConnectionWindow& w : network_->Windows()) {
    index[w.connection] = run_.windows.size();
    run_.windows.push_back({ConnectionName(w.connection), {}, w.window_bytes, w.threshold_bytes});
  }
  for (const WindowLoss& loss : window_log_) {
    run_.windows[index.at(loss.connection)].losses.push_back(loss);
  }
}

SimJob::Connection& SimJob::ConnectionOf(int src, int dst, ActorId from, ActorId to) {
  const uint64_t key = ConnectionKey(src, dst, from, to);
  uint64_t space = static_cast<uint64_t>(config_.network.connections ==
                                                 config::ConnectionKind::kProcessPair
                                             ? config_.layout.num_actors()
                                             : config_.layout.num_machines);
  // Up to kDenseConnections pairs, a flat table (a hash map's lookups and rehashes cost ~5% of a
  // 1,024-machine run); beyond, the map holds only the pairs that talk.
  space *= space;
  if (space <= kDenseConnections) {
    if (dense_connections_.empty()) dense_connections_.resize(space);
    return dense_connections_[key];
  }
  return connections_[key];
}

void SimJob::Arrive(TimeNs at, uint32_t slot) {
  const ActorId to = slots_[slot].msg.to;
  if (config_.network.host_cores <= 0 && config_.network.process_ns_per_byte <= 0) {
    queue_.Push(at, kDeliver, static_cast<uint32_t>(to), slot);
    return;
  }
  queue_.Push(at, kArrive, static_cast<uint32_t>(to), slot);
}

void SimJob::EnsureHostCpuState() {
  if (!process_free_.empty()) return;
  core_free_.assign(static_cast<size_t>(config_.network.host_cores), 0);
  process_free_.assign(static_cast<size_t>(config_.layout.num_actors()), 0);
  process_cpu_ns_.assign(static_cast<size_t>(config_.layout.num_actors()), 0.0);
}

void SimJob::AddProcessCpu(ActorId actor, double cpu_ns) {
  if (!config_.record_host_cpu || !config_.record_trace || cpu_ns <= 0) return;
  double& total = process_cpu_ns_[static_cast<size_t>(actor)];
  total += cpu_ns;
  run_.trace.push_back(core::ProcessCpuEvent(actor, now_, std::llround(total)));
}

TimeNs SimJob::ProtocolThreadStart(ActorId actor) const {
  if (!ProtocolThreadAsleep(actor)) return process_free_[static_cast<size_t>(actor)];  // busy
  return now_ + static_cast<TimeNs>(std::llround(config_.network.host_wakeup_ns));
}

bool SimJob::ProtocolThreadAsleep(ActorId actor) const {
  return process_free_[static_cast<size_t>(actor)] <= now_;
}

TimeNs SimJob::BookSharedCore(double cpu_ns) {
  auto core = std::min_element(core_free_.begin(), core_free_.end());
  *core = std::max(now_, *core) + std::llround(cpu_ns);
  return *core;
}

double SimJob::ReceiverNsPerByte(const Message& msg, bool between_machines) const {
  // A message between machines that fits its send buffer was written into it, and its writer
  // spent its share of the per-byte CPU there (BookWrite).
  const config::NetworkSpec& n = config_.network;
  const bool written =
      between_machines && n.host_write_share > 0 && msg.payload_bytes <= n.send_buffer_bytes;
  return n.host_ns_per_byte * (written ? 1 - n.host_write_share : 1.0);
}

std::pair<TimeNs, TimeNs> SimJob::BookProcessAndCore(ActorId actor, double cpu_ns) {
  auto core = std::min_element(core_free_.begin(), core_free_.end());
  TimeNs& process = process_free_[static_cast<size_t>(actor)];
  const TimeNs start = std::max({now_, *core, process});
  *core = process = start + std::llround(cpu_ns);
  return {start, process};
}

TimeNs SimJob::BookWrite(Slot& s) {
  EnsureHostCpuState();
  const config::NetworkSpec& n = config_.network;
  const double write_ns =
      n.host_write_share * n.host_ns_per_byte * static_cast<double>(s.msg.payload_bytes);
  const auto [start, end] = BookProcessAndCore(s.msg.from, write_ns);
  AddProcessCpu(s.msg.from, write_ns);
  s.write_start = start;
  return end;
}

void SimJob::StartFlowOnceWriting(int src, int dst, uint32_t slot, bool continues_stream) {
  Slot& s = slots_[slot];
  if (s.written && s.write_start > now_) {
    s.continues_stream = continues_stream;
    queue_.Push(s.write_start, kWriteBegun, static_cast<uint32_t>(src),
                (static_cast<uint64_t>(dst) << 32) | slot);
    return;
  }
  StartFlowAfterQueue(src, dst, slot, continues_stream);
}

void SimJob::BookStreamedCpu(uint32_t slot) {
  const config::NetworkSpec& n = config_.network;
  if (n.host_cores <= 0 || n.host_byte_cpu != config::HostByteCpu::kStreamed) return;
  EnsureHostCpuState();
  // The receiver's kernel and process handle the bytes as they come in: their CPU is booked from
  // the first byte, each on the earliest free core, and the message is the process's once both
  // are done (ProcessArrival).
  Slot& s = slots_[slot];
  const double kernel_ns = n.host_kernel_ns_per_byte * static_cast<double>(s.msg.wire_bytes());
  const double read_ns = ReceiverNsPerByte(s.msg, true) * static_cast<double>(s.msg.payload_bytes);
  AddProcessCpu(s.msg.to, read_ns);
  if (n.host_reads_hold_receiver) {
    // The kernel's path runs on the receiver's core and the process reads what it brings: both
    // hold the receiving process's thread (its messages one after another) and a shared core.
    s.bytes_read = BookProcessAndCore(s.msg.to, kernel_ns + read_ns).second;
    return;
  }
  const TimeNs kernel_done = n.host_kernel_ns_per_byte > 0 ? BookSharedCore(kernel_ns) : now_;
  s.bytes_read = std::max(kernel_done, BookSharedCore(read_ns));
}

void SimJob::ProcessArrival(uint32_t slot) {
  // Arrivals are processed in the order they arrive (events in time order): on the receiving
  // process, one message at a time, and on the earliest free of the shared cores.
  const config::NetworkSpec& n = config_.network;
  EnsureHostCpuState();
  const ActorId to = slots_[slot].msg.to;
  if (n.host_cores <= 0) {
    // A real machine's process (process_ns_per_byte): on its own core, one message at a time.
    TimeNs& process = process_free_[static_cast<size_t>(to)];
    const TimeNs start = std::max(now_, process);
    process =
        start + static_cast<TimeNs>(std::llround(
                    n.process_ns_per_byte * static_cast<double>(slots_[slot].msg.payload_bytes)));
    queue_.Push(process, kDeliver, static_cast<uint32_t>(to), slot);
    return;
  }
  const Slot& s = slots_[slot];
  const bool between_machines = !config_.layout.SameMachine(s.msg.from, to);
  // Streamed (NetworkSpec::host_byte_cpu): the per-byte work was booked when the first byte left
  // (StartFlow), and the process has the bytes once it is done (busy cores can hold that past
  // the last byte's arrival); otherwise it runs now.
  const bool streamed = between_machines && n.host_byte_cpu == config::HostByteCpu::kStreamed;
  if (!streamed && n.host_kernel_ns_per_byte > 0 && between_machines) {
    // The kernel's share, on the earliest free core, beside the receiving process.
    BookSharedCore(n.host_kernel_ns_per_byte * static_cast<double>(s.msg.wire_bytes()));
  }
  const double payload = static_cast<double>(s.msg.payload_bytes);
  auto core = std::min_element(core_free_.begin(), core_free_.end());
  TimeNs& process = process_free_[static_cast<size_t>(to)];
  const bool asleep = ProtocolThreadAsleep(to);
  const TimeNs start = std::max({ProtocolThreadStart(to), *core, streamed ? s.bytes_read : now_});
  const double after_last_byte_per_byte =
      (streamed ? 0.0 : ReceiverNsPerByte(s.msg, between_machines)) + n.host_tag_ns_per_byte;
  const TimeNs cost = static_cast<TimeNs>(
      std::llround(n.host_message_ns + after_last_byte_per_byte * payload +
                   (asleep && n.host_wakeup_ns > 0 ? n.host_wakeup_cpu_ns : 0)));
  *core = process = start + cost;
  AddProcessCpu(to, static_cast<double>(cost));
  queue_.Push(start + cost, kDeliver, static_cast<uint32_t>(to), slot);
}

void SimJob::FreeSlot(uint32_t slot) {
  slots_[slot].msg = Message();
  slots_[slot].next = free_slot_;
  free_slot_ = static_cast<int32_t>(slot);
}

void SimJob::StartWrittenFlow(const Event& ev) {
  const auto slot = static_cast<uint32_t>(ev.arg & 0xffffffffu);
  StartFlowAfterQueue(static_cast<int>(ev.target), static_cast<int>(ev.arg >> 32), slot,
                      slots_[slot].continues_stream);
}

void SimJob::StartQueuedFlow(const Event& ev) {
  StartFlow(static_cast<int>(ev.target), static_cast<int>(ev.arg >> 32),
            static_cast<uint32_t>(ev.arg & 0xffffffffu));
}

void SimJob::StartFlow(int src, int dst, uint32_t slot) {
  largest_network_message_ = std::max(largest_network_message_, slots_[slot].msg.wire_bytes());
  BookStreamedCpu(slot);
  const Message& m = slots_[slot].msg;
  network_->StartConnectionFlow(now_, src, dst, m.wire_bytes(), slot,
                                ConnectionKey(src, dst, m.from, m.to));
  NicChange(src, +1);
  NicChange(dst, +1);
  if (intra_ && replaying_ == false) {
    if (nic_tx_[static_cast<size_t>(src)]++ == 0) NicDirections(src);
    if (nic_rx_[static_cast<size_t>(dst)]++ == 0) NicDirections(dst);
  }
  ScheduleNetworkNow();
}

void SimJob::NicDirections(int machine) {
  const auto m = static_cast<size_t>(machine);
  const int directions = (nic_tx_[m] > 0 ? 1 : 0) + (nic_rx_[m] > 0 ? 1 : 0);
  ScheduleIntra(machine, intra_->SetNic(now_, machine, directions));
}

void SimJob::ScheduleIntra(int machine, TimeNs at) {
  // Every call re-solves the machine's rates: the events scheduled before are superseded.
  const uint64_t generation = ++intra_generation_[static_cast<size_t>(machine)];
  if (at != kNever) queue_.Push(std::max(at, now_), kIntra, static_cast<uint32_t>(machine), generation);
}

void SimJob::OnIntraEvent(int machine, uint64_t generation) {
  if (generation != intra_generation_[static_cast<size_t>(machine)]) return;  // superseded
  intra_done_.clear();
  const TimeNs next = intra_->Advance(now_, machine, &intra_done_);
  ScheduleIntra(machine, next);
  const std::vector<uint64_t> done = intra_done_;  // TaskDone may start more ops
  for (uint64_t tag : done) {
    if (tag & kMessageCopyTag) {
      Arrive(now_, static_cast<uint32_t>(tag & 0xffffffffu));  // a message copied across devices
    } else {
      TaskDone(static_cast<ActorId>(tag >> 32), static_cast<int>(tag & 0xffffffffu));
    }
  }
}

std::optional<cost::IntraOp> SimJob::LocalCopy(core::ActorId from, core::ActorId to) const {
  if (config_.local_copy_devices < 2 || from == to) return std::nullopt;
  const core::JobLayout& l = config_.layout;
  const bool from_device = l.IsWorker(from), to_device = l.IsWorker(to);
  if (from_device && to_device) return cost::IntraOp::kPeerCopy;
  if (from_device && l.IsServer(to)) return cost::IntraOp::kToHost;
  if (to_device && l.IsServer(from)) return cost::IntraOp::kFromHost;
  return std::nullopt;  // the coordinator's messages, shard to shard: host memory, not timed
}

void SimJob::ScheduleNetworkNow() {
  // All sends of this instant are handed to the network before it is asked for its next
  // event, so simultaneous flows cost one re-solve.
  if (net_pending_at_ <= now_) return;
  net_pending_at_ = now_;
  queue_.Push(now_, kNetwork, 0, ++net_generation_);
}

void SimJob::OnNetworkEvent(uint64_t generation) {
  if (generation != net_generation_) return;  // superseded
  done_scratch_.clear();
  network_->AdvanceTo(now_, &done_scratch_);
  for (const FlowDone& d : done_scratch_) {
    const Slot& s = slots_[d.tag];
    const int src = config_.layout.machine_of[s.msg.from];
    const int dst = config_.layout.machine_of[s.msg.to];
    NicChange(src, -1);
    NicChange(dst, -1);
    if (intra_ && !replaying_) {
      if (--nic_tx_[static_cast<size_t>(src)] == 0) NicDirections(src);
      if (--nic_rx_[static_cast<size_t>(dst)] == 0) NicDirections(dst);
    }
    if (config_.network.sender_queue_bytes > 0 &&
        s.msg.wire_bytes() >= config_.network.sender_queue_bytes) {
      std::vector<AtNic>& at_nic = sending_[static_cast<size_t>(src)];
      const auto it = std::find_if(at_nic.begin(), at_nic.end(),
                                   [&](const AtNic& m) { return m.slot == d.tag; });
      if (it != at_nic.end()) at_nic.erase(it);
    }
    Arrive(d.delivered_at, d.tag);
    const ActorId from = s.msg.from;
    Connection& c = ConnectionOf(src, dst, from, s.msg.to);
    SendBuffer* buffer = config_.network.send_buffer_bytes > 0
                             ? &send_buffers_[ConnectionKey(src, dst, from, s.msg.to)]
                             : nullptr;
    int32_t started = -1;
    const bool writes_cost = buffer != nullptr && config_.network.host_write_share > 0;
    if (c.head >= 0) {
      const uint32_t next = static_cast<uint32_t>(c.head);
      c.head = slots_[next].next;
      if (c.head < 0) c.tail = -1;
      slots_[next].next = -1;
      started = static_cast<int32_t>(next);
      // With host_write_share the next message may not be written yet: it is written below,
      // and its flow starts once that write has begun.
      if (!writes_cost) StartFlowAfterQueue(src, dst, next, /*continues_stream=*/true);
    } else {
      c.busy = false;
    }
    if (buffer) {
      buffer->in_flight = started;
      if (s.written) {
        buffer->written_bytes -= s.msg.payload_bytes;
      } else {
        buffer->first_unwritten = started;  // it was the first unwritten one: told below
      }
      WriteIntoSendBuffer(c, *buffer);
    }
    if (writes_cost && started >= 0) {
      StartFlowOnceWriting(src, dst, static_cast<uint32_t>(started), /*continues_stream=*/true);
    }
    if (buffer && s.written) continue;
    if (replaying_) continue;
    // May send more (and grow slots_): pass a copy.
    const Message sent = slots_[d.tag].msg;
    actors_[from]->OnSent(now_, sent);
  }
  TimeNs next = network_->NextEventTime();
  if (next == kNever) {
    net_pending_at_ = kNever;
    return;
  }
  POSEIDON_CHECK(next >= now_) << "network asked for the past: " << next << " < " << now_;
  net_pending_at_ = next;
  queue_.Push(next, kNetwork, 0, ++net_generation_);
}

void SimJob::NicChange(int machine, int delta) {
  int& active = nic_active_[machine];
  if (active == 0 && delta > 0) nic_since_[machine] = now_;
  active += delta;
  if (active == 0 && delta < 0) nic_busy_total_[machine] += now_ - nic_since_[machine];
}

void SimJob::StartCompute(ActorId actor, const ComputeTask& task) {
  const int slot = core::StreamSlot(task);
  StreamState& s = StreamAt(actor, slot);
  s.queue.push_back(task);
  if (!s.busy) StartNextTask(actor, slot);
}

void SimJob::StartNextTask(ActorId actor, int slot) {
  StreamState& s = StreamAt(actor, slot);
  if (s.queue.empty()) {
    s.busy = false;
    return;
  }
  s.busy = true;
  s.started = now_;
  s.woke = false;
  const ComputeTask& task = s.queue.front();
  if (task.kind == TaskKind::kLocalReduce || task.kind == TaskKind::kLocalBroadcast) {
    // Shares the machine's links and host memory: it ends when the intra-machine model says.
    const int machine = config_.layout.machine_of[static_cast<size_t>(actor)];
    const cost::IntraOp op = task.kind == TaskKind::kLocalReduce ? cost::IntraOp::kReduce : cost::IntraOp::kBroadcast;
    const uint64_t tag = (static_cast<uint64_t>(actor) << 32) | static_cast<uint32_t>(slot);
    ScheduleIntra(machine, intra_->Start(now_, machine, op, task.bytes, tag));
    return;
  }
  const TimeNs dur = TaskDuration(actor, task);
  // A forward pass starts once its batch is in (SimJobConfig::input_samples_per_s).
  const TimeNs ready =
      config_.input_samples_per_s > 0 && task.kind == TaskKind::kForward && task.layer == 0
          ? TakeInput(actor)
          : now_;
  s.started = ready;
  TimeNs end = ready + dur;
  const config::NetworkSpec& n = config_.network;
  if (n.host_cores > 0 && n.host_wakeup_ns > 0) {
    // As a live run that replays compute does: a task handed over within kReplayAbsorbNs of the
    // previous one's modelled end starts at that end. Its stream thread sleeps to its modelled
    // end and the protocol thread learns of it a wake-up later; a task whose end has passed
    // already is handed back at once, in a hand-off between threads that are awake.
    s.started = cost::ReplayedTaskStart(ready, s.last_end);
    s.last_end = s.started + dur;
    s.woke = s.last_end > ready;
    end = s.woke ? s.last_end + std::llround(n.host_wakeup_ns)
                 : ready + std::llround(n.host_handoff_ns);
  }
  queue_.Push(end, kTaskDone, static_cast<uint32_t>(actor), static_cast<uint64_t>(slot));
}

TimeNs SimJob::TakeInput(ActorId actor) {
  const size_t m = static_cast<size_t>(config_.layout.machine_of[static_cast<size_t>(actor)]);
  const double cap = config_.input_prefetch_samples;
  if (input_samples_.size() <= m) {
    input_samples_.resize(m + 1, 0.0);
    input_since_.resize(m + 1, 0);
  }
  const double per_ns = config_.input_samples_per_s * 1e-9;
  double& have = input_samples_[m];
  TimeNs& since = input_since_[m];
  if (now_ > since) {
    have = std::min(cap, have + per_ns * static_cast<double>(now_ - since));
    since = now_;
  }
  const double need = static_cast<double>(config_.input_batch);
  if (have >= need) {
    have -= need;
    return since;
  }
  since += static_cast<TimeNs>(std::ceil((need - have) / per_ns));
  have = 0;
  return since;
}

TimeNs SimJob::TaskDuration(ActorId actor, const ComputeTask& task) {
  const core::JobLayout& layout = config_.layout;
  switch (task.kind) {
    case TaskKind::kForward:
    case TaskKind::kBackward: {
      const int w = layout.WorkerIndex(actor);
      const cost::ComputeModel& c = config_.worker_compute[static_cast<size_t>(w)];
      const TimeNs base = task.kind == TaskKind::kForward ? c.fwd_ns(task.layer) : c.bwd_ns(task.layer);
      return Jittered(w, base);
    }
    case TaskKind::kSfbRebuild: {
      const int w = layout.WorkerIndex(actor);
      return Jittered(w, config_.worker_compute[static_cast<size_t>(w)].SfbRebuildNs(
                             task.layer,
                             core::SfbFactorRows(config_.model->layers()[static_cast<size_t>(task.layer)],
                                                 config_.protocol.batch)));
    }
    case TaskKind::kCopyToHost:
    case TaskKind::kCopyToDevice:
      return config_.worker_compute[static_cast<size_t>(layout.WorkerIndex(actor))].CopyNs(task.bytes);
    case TaskKind::kServerUpdate:
      return config_.worker_compute[0].UpdateNs(task.bytes);
    case TaskKind::kLocalReduce:
    case TaskKind::kLocalBroadcast:
      break;  // the intra-machine model times them (StartNextTask)
  }
  return 0;
}

TimeNs SimJob::Jittered(int worker, TimeNs base) {
  return jitter_[static_cast<size_t>(worker)].Apply(base);
}

void SimJob::Trace(const TraceEvent& e) {
  const core::JobLayout& layout = config_.layout;
  if (layout.IsWorker(e.actor) && e.kind == TraceKind::kLayerSynced) {
    ++iterations_done_;
    const size_t w = static_cast<size_t>(layout.WorkerIndex(e.actor));
    int64_t& v = layer_version_[w][static_cast<size_t>(e.layer)];
    const int64_t old = v;
    v = e.clock + 1;
    if (old == min_version_[w] && --at_min_[w] == 0) {
      int64_t m = kNever;
      for (int l : config_.model->param_layers()) m = std::min(m, layer_version_[w][static_cast<size_t>(l)]);
      int at = 0;
      for (int l : config_.model->param_layers()) at += layer_version_[w][static_cast<size_t>(l)] == m;
      for (int64_t k = min_version_[w]; k < m; ++k) run_.workers[w].synced.push_back(e.ts);
      min_version_[w] = m;
      at_min_[w] = at;
    }
  }
  if (layout.IsWorker(e.actor) && e.kind == TraceKind::kLayerSynced &&
      e.clock >= config_.warmup_iterations) {
    const auto& ends = backward_end_[static_cast<size_t>(layout.WorkerIndex(e.actor)) *
                                         run_.layers.size() +
                                     static_cast<size_t>(e.layer)];
    if (static_cast<size_t>(e.clock) < ends.size()) {
      LayerRun& lr = run_.layers[static_cast<size_t>(e.layer)];
      lr.sync += e.ts - ends[static_cast<size_t>(e.clock)];
      ++lr.samples;
    }
  }
  if (layout.IsWorker(e.actor)) {
    const int w = layout.WorkerIndex(e.actor);
    const int m = layout.machine_of[e.actor];
    const TimeNs nic_now =
        nic_busy_total_[m] + (nic_active_[m] > 0 ? now_ - nic_since_[m] : 0);
    WorkerRun& wr = run_.workers[w];
    if (e.kind == TraceKind::kIterationBegin) {
      wr.iteration_begin.push_back(e.ts);
      compute_busy_at_iter_begin_[w] = compute_busy_total_[w];
      nic_busy_at_iter_begin_[w] = nic_now;
    } else if (e.kind == TraceKind::kIterationEnd) {
      wr.iteration_end.push_back(e.ts);
      wr.compute_busy.push_back(compute_busy_total_[w] - compute_busy_at_iter_begin_[w]);
      wr.nic_busy.push_back(nic_now - nic_busy_at_iter_begin_[w]);
    }
  }
  if (config_.record_trace) run_.trace.push_back(e);
  if (config_.record_decisions) run_.decisions.Trace(e);
}

std::vector<TimeNs> SimJob::ReplayMessages(const std::vector<ReplayMessage>& messages) {
  POSEIDON_CHECK(run_.events == 0) << "ReplayMessages runs once, instead of Run";
  replaying_ = true;
  const core::JobLayout& layout = config_.layout;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ReplayMessage& m = messages[i];
    POSEIDON_CHECK(m.from >= 0 && m.from < layout.num_actors() && m.to >= 0 &&
                   m.to < layout.num_actors() && m.payload_bytes >= 0 && m.sent >= 0)
        << "replayed message " << i << ": " << m.from << " -> " << m.to;
    queue_.Push(m.sent, kReplaySend, 0, i);
  }
  std::vector<TimeNs> delivered(messages.size(), -1);
  std::vector<size_t> index_of_slot;  // slot -> message index
  Event ev;
  while (queue_.Pop(&ev)) {
    now_ = ev.time;
    ++run_.events;
    switch (ev.kind) {
      case kReplaySend: {
        const ReplayMessage& m = messages[static_cast<size_t>(ev.arg)];
        Message msg;
        msg.from = m.from;
        msg.to = m.to;
        msg.payload_bytes = m.payload_bytes;
        const uint32_t slot = Send(m.from, std::move(msg));
        if (slot == kNoSlot) break;  // dropped (SimJobConfig::drop_message): never delivered
        if (index_of_slot.size() <= slot) index_of_slot.resize(slot + 1);
        index_of_slot[slot] = static_cast<size_t>(ev.arg);
        break;
      }
      case kDeliver: {
        const uint32_t slot = static_cast<uint32_t>(ev.arg);
        delivered[index_of_slot[slot]] = now_;
        FreeSlot(slot);
        break;
      }
      case kNetwork:
        OnNetworkEvent(ev.arg);
        break;
      case kStartFlow:
        StartQueuedFlow(ev);
        break;
      case kWriteBegun:
        StartWrittenFlow(ev);
        break;
      case kArrive:
        ProcessArrival(static_cast<uint32_t>(ev.arg));
        break;
      default:
        POSEIDON_CHECK(false) << "event " << ev.kind << " while replaying messages";
    }
  }
  return delivered;
}

void SimJob::TaskDone(ActorId actor, int slot) {
  StreamState& s = StreamAt(actor, slot);
  const ComputeTask task = s.queue.front();
  const bool woke = s.woke;
  s.queue.pop_front();
  // The figures of a worker are its device 0's (every device of a machine runs alike).
  if (slot == static_cast<int>(core::Stream::kCompute) && config_.layout.IsWorker(actor)) {
    const int w = config_.layout.WorkerIndex(actor);
    compute_busy_total_[static_cast<size_t>(w)] += now_ - s.started;
    if (task.layer >= 0 && task.clock >= config_.warmup_iterations) {
      LayerRun& lr = run_.layers[static_cast<size_t>(task.layer)];
      if (task.kind == TaskKind::kForward) lr.fwd += now_ - s.started;
      if (task.kind == TaskKind::kBackward) lr.bwd += now_ - s.started;
    }
    if (task.kind == TaskKind::kForward || task.kind == TaskKind::kBackward) {
      ++iterations_done_;
    }
    if (task.kind == TaskKind::kBackward) {
      backward_end_[static_cast<size_t>(w) * run_.layers.size() +
                    static_cast<size_t>(task.layer)]
          .push_back(now_);
    }
  }
  if (config_.record_trace) run_.trace.push_back(core::TaskEvent(actor, task, s.started, now_));
  StartNextTask(actor, slot);
  if (config_.network.host_cores > 0 && config_.network.host_wakeup_ns > 0) {
    // The end reaches a protocol thread still busy with a message once it is free. A replayed
    // compute task's end includes its wake-up (StartNextTask); a local reduction or broadcast
    // ends when the intra-machine model says, and its stream thread then wakes the protocol
    // thread as a compute stream's does.
    EnsureHostCpuState();
    const bool local =
        task.kind == TaskKind::kLocalReduce || task.kind == TaskKind::kLocalBroadcast;
    const int wakes = (woke ? 1 : 0) + (ProtocolThreadAsleep(actor) ? 1 : 0);
    if (config_.network.host_wakeup_cpu_ns > 0 && wakes > 0) {
      // The wake-ups that brought the end here keep a shared core busy: the stream thread's, when
      // it slept to the task's end, and the protocol thread's, when it sleeps.
      BookSharedCore(wakes * config_.network.host_wakeup_cpu_ns);
      AddProcessCpu(actor, wakes * config_.network.host_wakeup_cpu_ns);
    }
    const TimeNs free = local ? ProtocolThreadStart(actor) : process_free_[static_cast<size_t>(actor)];
    if (free > now_) {
      // Keyed by a sequence number: ends reach the protocol thread in the order of their times,
      // which need not be the order the tasks ended in.
      done_pending_.emplace(++done_sequence_, task);
      queue_.Push(free, kComputeDone, static_cast<uint32_t>(actor), done_sequence_);
      return;
    }
  }
  actors_[actor]->OnComputeDone(now_, task);
}

SimRun SimJob::Run() {
  for (ActorId a = 0; a < config_.layout.num_actors(); ++a) {
    queue_.Push(0, kStartActor, static_cast<uint32_t>(a), 0);
  }
  Event ev;
  TimeNs last_work = 0;  // the job ends with its last event that is not a timer's
  while (queue_.Pop(&ev)) {
    now_ = ev.time;
    if (ev.kind != kTimer) last_work = now_;
    if ((++run_.events & 0xffff) == 0 && config_.progress && iterations_total_ > 0) {
      config_.progress(std::min(1.0, static_cast<double>(iterations_done_) /
                                         static_cast<double>(iterations_total_)));
    }
    switch (ev.kind) {
      case kStartActor:
        actors_[ev.target]->OnStart(now_);
        break;
      case kDeliver: {
        const uint32_t slot = static_cast<uint32_t>(ev.arg);
        Message msg = std::move(slots_[slot].msg);
        const TimeNs sent = slots_[slot].sent;
        FreeSlot(slot);
        if (config_.record_trace) run_.trace.push_back(core::MessageEvent(msg, sent, now_));
        if (config_.layout.SameMachine(msg.from, msg.to)) actors_[msg.from]->OnSent(now_, msg);
        // The simulator's peers are its own actors: a refused message is a bug in the core.
        if (core::ProtocolError e = actors_[ev.target]->OnMessage(now_, msg)) {
          POSEIDON_CHECK(false) << config_.layout.ActorName(ev.target) << " refused "
                                << core::Describe(msg) << ": " << e.what;
        }
        break;
      }
      case kTaskDone:
        TaskDone(static_cast<ActorId>(ev.target), static_cast<int>(ev.arg));
        break;
      case kComputeDone: {
        auto it = done_pending_.find(ev.arg);
        const ComputeTask task = it->second;
        done_pending_.erase(it);
        actors_[ev.target]->OnComputeDone(now_, task);
        break;
      }
      case kNetwork:
        OnNetworkEvent(ev.arg);
        break;
      case kTimer:
        actors_[ev.target]->OnTimer(now_, ev.arg);
        break;
      case kStartFlow:
        StartQueuedFlow(ev);
        break;
      case kWriteBegun:
        StartWrittenFlow(ev);
        break;
      case kArrive:
        ProcessArrival(static_cast<uint32_t>(ev.arg));
        break;
      case kIntra:
        OnIntraEvent(static_cast<int>(ev.target), ev.arg);
        break;
      case kWritten: {
        const auto it = written_.find(ev.arg);
        const Message msg = std::move(it->second);
        written_.erase(it);
        actors_[ev.target]->OnSent(now_, msg);
        break;
      }
    }
  }
  now_ = last_work;
  run_.end_time = now_;
  for (const auto& a : actors_) {
    if (!a->finished()) {
      run_.deadlocked = true;
      run_.deadlock_report = DeadlockReport();
      break;
    }
  }
  run_.links = network_->Links(now_);
  if (config_.record_windows) CollectWindows();
  return std::move(run_);
}

std::string SimJob::DeadlockReport() const {
  std::string s;
  for (const auto& a : actors_) {
    if (!a->finished()) s += a->WaitingFor() + "\n";
  }
  return s;
}

}  // namespace poseidon::sim
