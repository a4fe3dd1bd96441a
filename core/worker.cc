#include "core/worker.h"

#include <algorithm>

#include "core/ring.h"

namespace poseidon::core {

Worker::Worker(ActorId id, const Model& model, const Placement& placement,
               const JobLayout& layout, const ProtocolConfig& config, Host* host,
               WorkerStore* store)
    : id_(id),
      rank_(layout.WorkerIndex(id)),
      model_(model),
      placement_(placement),
      layout_(layout),
      config_(config),
      plan_(config.baseline.enabled()
                ? CollectivePlan(model, config.baseline, config.chunk_bytes,
                                 CollectivePlan::MayRunTree(config.baseline) ? TreeDepth(layout)
                                                                             : 0)
                : CollectivePlan()),
      shape_{&layout_, &config_, &placement_, &model_, config_.fault,
             config_.baseline.enabled() ? &plan_ : nullptr},
      host_(host),
      store_(store),
      send_queue_(host, config.priority_window_bytes),
      devices_(config.devices_per_machine),
      end_(config.iterations),
      copies_(config.device_copies && config.devices_per_machine == 1) {
  POSEIDON_CHECK(layout_.IsWorker(id_)) << "actor " << id_ << " is not a worker";
  POSEIDON_CHECK(devices_ >= 1) << "devices_per_machine " << devices_;
  dev_.resize(static_cast<size_t>(devices_));
  POSEIDON_CHECK(!model_.layers().empty()) << "model " << model_.name() << " has no layers";
  POSEIDON_CHECK(config_.gradient_wire == WireFormat::kFp32 || model_.layers()[0].value_words == 1)
      << "a " << WireFormatName(config_.gradient_wire) << " gradient wire needs fp32 values";
  const int P = layout_.num_workers;
  sync_.resize(model_.layers().size());
  for (int l : model_.param_layers()) {
    LayerSync& s = sync_[static_cast<size_t>(l)];
    s.scheme = config_.SchemeOf(l);
    const int chunks = static_cast<int>(placement_.chunks_of_layer(l).size());
    s.has_ps = chunks > 0;
    s.ps = ClockCounter(std::max(chunks, 1));
    s.has_sfb = s.scheme == Scheme::kSfb;
    s.sfb = ClockCounter(P);
    s.has_ring = s.scheme == Scheme::kAllreduce && !config_.baseline.enabled();
    s.has_fused = s.scheme == Scheme::kAllreduce && config_.baseline.enabled();
    if (s.has_ring) {
      int64_t total = 0;
      for (const ParamBlob& b : model_.layers()[l].blobs) total += b.bytes();
      for (int64_t off = 0; off < total; off += config_.chunk_bytes) {
        RingPiece p;
        p.bytes = std::min(config_.chunk_bytes, total - off);
        s.pieces.push_back(p);
      }
    }
    POSEIDON_CHECK(s.has_ps || s.has_sfb || s.has_ring || s.has_fused) << model_.layers()[l].name;
  }
  if (config_.baseline.enabled()) {
    POSEIDON_CHECK(config_.consistency == Consistency::kBsp)
        << "a baseline's collectives need BSP, not " << ConsistencyName(config_.consistency);
    layer_tensors_.resize(model_.layers().size());
    layer_tensors_left_.assign(model_.layers().size(), 0);
    for (size_t i = 0; i < plan_.tensors().size(); ++i) {
      const GradTensor& t = plan_.tensors()[i];
      POSEIDON_CHECK(sync_[static_cast<size_t>(t.layer)].has_fused)
          << "layer " << model_.layers()[static_cast<size_t>(t.layer)].name
          << " is not all-reduced under a baseline";
      layer_tensors_[static_cast<size_t>(t.layer)].push_back(static_cast<int>(i));
      ++layer_tensors_left_[static_cast<size_t>(t.layer)];
    }
    tensor_ready_.assign(plan_.tensors().size(), 0);
    if (config_.baseline.kind == Baseline::kDdp) fused_ = plan_.Ddp(0);
    if (CollectivePlan::MayRunTree(config_.baseline)) {
      for (int t = 0; t < 2; ++t) tree_links_[t] = AllreduceTreeLinks(layout_, rank_, t);
    }
    if (config_.baseline.kind == Baseline::kHorovod && rank_ == 0) {
      reports_.assign(static_cast<size_t>(P), {0, 0});
    }
  }
  chunk_version_.assign(placement_.chunks().size(), 0);
  pushed_.assign(placement_.chunks().size(), 0);
}

void Worker::EndAt(TimeNs now, int64_t clocks) {
  POSEIDON_CHECK(clocks >= clock_ && clocks <= config_.iterations)
      << "worker " << id_ << " cannot end after " << clocks << " clocks at clock " << clock_;
  end_ = clocks;
  // A forward pass of clock `clocks` already asked for (its parameters were fresh) will not run:
  // the host drops it; the devices are idle at the end.
  for (DeviceRun& dv : dev_) {
    if (clock_ == end_ && dv.phase == Phase::kForward) dv = DeviceRun{};
  }
  Advance(now);
}

void Worker::Rejoin() {
  const int off_ps = FirstLayerOffPs(model_, config_);
  POSEIDON_CHECK(off_ps < 0) << "worker " << id_ << " cannot rejoin: "
                             << OffPsReason(model_, config_, off_ps)
                             << "; rejoining needs every layer on the parameter server";
  rejoining_ = true;
  rejoined_ = true;
}

void Worker::OnStart(TimeNs now) {
  Message m;
  m.type = MsgType::kRegister;
  m.from = id_;
  m.to = JobLayout::coordinator();
  host_->Send(m);
  if (config_.fault.enabled()) host_->SetTimer(now + config_.fault.heartbeat_ns, kHeartbeatTimer);
}

void Worker::OnTimer(TimeNs now, uint64_t timer_id) {
  if (timer_id == kCycleTimer) {
    cycle_armed_ = false;
    cycle_start_ = now;
    Report(now);
    return;
  }
  if (timer_id != kHeartbeatTimer || finished_) return;
  TellCoordinator(MsgType::kHeartbeat);
  host_->SetTimer(now + config_.fault.heartbeat_ns, kHeartbeatTimer);
}

bool Worker::FreshEnough(int layer, int64_t clock) const {
  if (model_.layers()[layer].blobs.empty()) return true;
  return sync_[static_cast<size_t>(layer)].version >= clock - config_.Slack();
}

// Starts whatever compute may start now: the next iteration, the next forward layer, on every
// device.
void Worker::Advance(TimeNs now) {
  if (finished_ || !started_) return;
  for (int d = 0; d < devices_ && !finished_; ++d) AdvanceDevice(now, d);
}

void Worker::AdvanceDevice(TimeNs now, int device) {
  DeviceRun& dv = dev_[static_cast<size_t>(device)];
  if (dv.computing) return;
  const int n = static_cast<int>(model_.layers().size());
  if (dv.phase == Phase::kIdle) {
    if (clock_ == end_) {
      Finish(now);
      return;
    }
    // The machine's devices begin a clock together, once its gradients are reduced.
    if (dv.ended || reduces_running_ > 0) return;
    if (config_.gate == Gate::kAllLayers) {
      for (int l : model_.param_layers()) {
        if (!FreshEnough(l, clock_)) return;
      }
    }
    dv.phase = Phase::kForward;
    dv.fwd_next = 0;
  }
  if (dv.phase == Phase::kForward) {
    if (dv.fwd_next < n) {
      if (config_.gate == Gate::kPerLayer && !FreshEnough(dv.fwd_next, clock_)) return;
      if (dv.fwd_next == 0 && begun_ == clock_) {
        // An iteration runs from its first forward task to the next iteration's first.
        if (clock_ > 0) TraceInstant(TraceKind::kIterationEnd, now, -1, clock_ - 1);
        TraceInstant(TraceKind::kIterationBegin, now, -1, clock_);
        begun_ = clock_ + 1;
      }
      dv.computing = true;
      ComputeTask t{TaskKind::kForward, dv.fwd_next, -1, 0, clock_};
      t.device = device;
      host_->StartCompute(t);
      return;
    }
    dv.phase = Phase::kBackward;
    dv.computing = true;
    ComputeTask t{TaskKind::kBackward, n - 1, -1, 0, clock_};
    t.device = device;
    host_->StartCompute(t);
  }
}

// After the last iteration: done once every layer holds every update.
void Worker::Finish(TimeNs now) {
  for (int l : model_.param_layers()) {
    if (sync_[static_cast<size_t>(l)].version < end_) return;
  }
  TraceInstant(TraceKind::kIterationEnd, now, -1, clock_ - 1);
  finished_ = true;
  TellCoordinator(MsgType::kDone);
}

void Worker::TellCoordinator(MsgType type) {
  Message m;
  m.type = type;
  m.from = id_;
  m.to = JobLayout::coordinator();
  m.clock = clock_;
  host_->Send(m);
}

ProtocolError Worker::OnMessage(TimeNs now, const Message& msg) {
  if (auto it = blamed_.find(msg.from); it != blamed_.end()) return it->second;
  if (ProtocolError e = CheckMessageShape(shape_, id_, msg)) return e;
  switch (msg.type) {
    case MsgType::kStart:
      if (started_) return ProtocolError::Of(ProtocolErrorCode::kWrongState, "a second start");
      started_ = true;
      if (rejoining_) {
        for (int j = 0; j < layout_.num_servers; ++j) {
          if (!placement_.chunks_of_shard(j).empty()) SendRejoin(layout_.server(j));
        }
        if (!placement_.chunks().empty()) return {};
        rejoining_ = false;
      }
      Advance(now);
      return {};
    case MsgType::kParams:
      if (msg.step == kRejoinCurrent || msg.step == kRejoinPrevious) {
        return OnRejoinReply(now, msg);
      }
      OnParams(now, msg);
      return {};
    case MsgType::kMembership:
      // A shard that came back lost what its checkpoint did not hold: send it again (it
      // applies each push once, and answers those of clocks it already applied).
      if (msg.chunk == kMemberJoined && layout_.IsServer(msg.step)) {
        // Each chunk's first push there is marked (kPushResent), so that the shard can tell
        // whether what it was restored from reaches back to it: the oldest one kept, or, for a
        // chunk with none kept, the next one (its clock is then where the shard must be).
        const int shard = layout_.ServerIndex(msg.step);
        std::set<int32_t> resent;
        for (Message push : retained_[shard]) {
          push.step = kPushResent;
          resent.insert(push.chunk);
          Send(push, push.layer);
        }
        for (int32_t cid : placement_.chunks_of_shard(shard)) {
          if (!resent.count(cid)) mark_next_push_.insert(cid);
        }
        if (rejoining_ && started_) {
          // Rejoining while that shard was down: our first kRejoin to it was lost with it.
          SendRejoin(msg.step);
        }
      }
      return {};
    case MsgType::kFactors: {
      LayerSync& s = sync_[static_cast<size_t>(msg.layer)];
      if (msg.clock < s.sfb.version()) {
        return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                                 "factors of clock " + std::to_string(msg.clock) +
                                     ", which this layer has complete already");
      }
      const size_t w = static_cast<size_t>(layout_.WorkerIndex(msg.from));
      auto seen = s.sfb_from.find(msg.clock);
      if (seen != s.sfb_from.end() && seen->second[w]) {
        return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                                 "a second factors message of clock " +
                                     std::to_string(msg.clock) + " from that worker");
      }
      // The floats first (the store may refuse them: then nothing counts).
      store_->SfbReceive(msg);
      std::vector<bool>& from = s.sfb_from[msg.clock];
      from.resize(static_cast<size_t>(layout_.num_workers), false);
      from[w] = true;
      ComputeTask t{TaskKind::kSfbRebuild, msg.layer, -1, msg.payload_bytes, msg.clock};
      t.peer = msg.from;
      host_->StartCompute(t);
      return {};
    }
    case MsgType::kRing: {
      LayerSync& s = sync_.at(static_cast<size_t>(msg.layer));
      RingPiece& p = s.pieces.at(static_cast<size_t>(msg.chunk));
      if (msg.clock != s.ring_version && msg.clock != s.ring_version + 1) {
        return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                                 "a ring step of clock " + std::to_string(msg.clock) +
                                     ", but the ring of this layer is at clock " +
                                     std::to_string(s.ring_version));
      }
      const int P = layout_.num_workers;
      if ((msg.clock == s.ring_version ? p.recv : p.recv_next) >= 2 * (P - 1)) {
        return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                                 "more ring steps of clock " + std::to_string(msg.clock) +
                                     " than the ring has");
      }
      // The floats first (they may be refused: then the step does not count).
      const int seg = RingSegmentSent(layout_.WorkerIndex(msg.from), msg.step, P);
      const Layer& L = model_.layers()[msg.layer];
      store_->RingReceive(
          msg, RingSegmentFloats(L.params * 4, config_.chunk_bytes, msg.chunk, seg, P, L.value_words),
          /*reduce=*/msg.step < P - 1);
      if (msg.clock == s.ring_version) {
        ++p.recv;
      } else {
        ++p.recv_next;
      }
      RingStep(now, msg.layer, msg.chunk);
      return {};
    }
    case MsgType::kBucket:
      return OnBucketStep(now, msg, /*buffered=*/false);
    case MsgType::kReady:
      return Negotiate(now, layout_.WorkerIndex(msg.from), msg.clock, msg.chunk);
    case MsgType::kResponse:
      return TakeFused(now, msg.clock, msg.step, msg.chunk);
    default:
      return ProtocolError::Of(ProtocolErrorCode::kNotForThisActor,
                               std::string("a worker takes no ") + MsgTypeName(msg.type));
  }
}

void Worker::OnComputeDone(TimeNs now, const ComputeTask& task) {
  switch (task.kind) {
    case TaskKind::kForward: {
      DeviceRun& dv = dev_[static_cast<size_t>(task.device)];
      dv.computing = false;
      ++dv.fwd_next;
      Advance(now);
      return;
    }
    case TaskKind::kBackward:
      BackwardDone(now, task);
      return;
    case TaskKind::kLocalReduce:
      --reduces_running_;
      SyncReduced(now, task.layer, task.clock);
      Advance(now);  // a device may wait for the machine's reductions to begin its next clock
      return;
    case TaskKind::kLocalBroadcast: {
      LayerSync& s = sync_[static_cast<size_t>(task.layer)];
      s.broadcasting = false;
      SetVersion(now, task.layer, task.clock + 1);
      MaybeBroadcast(now, task.layer);
      return;
    }
    case TaskKind::kCopyToHost:
      PushLayer(now, task.layer, task.clock);
      return;
    case TaskKind::kCopyToDevice: {
      LayerSync& s = sync_[static_cast<size_t>(task.layer)];
      s.ps_copying = false;
      s.ps.Advance();
      UpdateVersion(now, task.layer);
      DrainPs(now, task.layer);
      return;
    }
    case TaskKind::kSfbRebuild:
      SfbContribution(now, task.layer, task.clock);
      return;
    default:
      POSEIDON_CHECK(false) << "worker " << id_ << " got a " << TaskKindName(task.kind) << " task";
  }
}

void Worker::BackwardDone(TimeNs now, const ComputeTask& task) {
  DeviceRun& dv = dev_[static_cast<size_t>(task.device)];
  dv.computing = false;
  const int l = task.layer;
  if (!model_.layers()[l].blobs.empty()) {
    // DWBP across the devices: the layer's sync starts when its backward has ended on all.
    LayerSync& s = sync_[static_cast<size_t>(l)];
    if (++s.devices_ended == devices_) {
      s.devices_ended = 0;
      if (config_.dwbp) {
        StartSync(now, l, clock_);
      } else {
        deferred_syncs_.push_back(l);
      }
    }
  }
  if (l > 0) {
    dv.computing = true;
    ComputeTask t{TaskKind::kBackward, l - 1, -1, 0, clock_};
    t.device = task.device;
    host_->StartCompute(t);
    return;
  }
  dv.phase = Phase::kIdle;
  if (devices_ > 1) {
    dv.ended = true;
    if (++devices_ended_ < devices_) return;
    devices_ended_ = 0;
    for (DeviceRun& d : dev_) d.ended = false;
  }
  ++clock_;
  std::vector<int> deferred;
  deferred.swap(deferred_syncs_);
  for (int d : deferred) StartSync(now, d, clock_ - 1);
  Advance(now);
}

void Worker::OnSent(TimeNs now, const Message& msg) {
  (void)now;
  send_queue_.OnSent(msg);
}

// Layer `layer`'s gradient of `clock` is ready on every device: reduce it on the machine first
// when there are several.
void Worker::StartSync(TimeNs now, int layer, int64_t clock) {
  if (devices_ == 1) {
    SyncReduced(now, layer, clock);
    return;
  }
  ++reduces_running_;
  host_->StartCompute({TaskKind::kLocalReduce, layer, -1, model_.layers()[layer].params * 4, clock});
}

void Worker::SyncReduced(TimeNs now, int layer, int64_t clock) {
  LayerSync& s = sync_[static_cast<size_t>(layer)];
  if (s.has_ps) {
    if (copies_) {
      host_->StartCompute(
          {TaskKind::kCopyToHost, layer, -1, placement_.layer_bytes(layer), clock});
    } else {
      PushLayer(now, layer, clock);
    }
  }
  if (s.has_sfb) {
    const Layer& L = model_.layers()[layer];
    const FloatBuffer factors = store_->SfbFactors(layer);
    store_->SfbAddOwn(layer, clock);
    for (int w = 0; w < layout_.num_workers; ++w) {
      if (w == rank_) continue;
      Message m;
      m.type = MsgType::kFactors;
      m.from = id_;
      m.to = layout_.worker(w);
      m.clock = clock;
      m.layer = layer;
      // Real factors have the rows of the batches just back-propagated (message_rules.h).
      const int64_t words =
          factors ? static_cast<int64_t>(factors->size()) : SfbFactorFloats(L, config_.batch);
      m.payload_bytes = WirePayloadBytes(config_.gradient_wire, words * 4, words);
      m.wire = config_.gradient_wire;
      m.data = factors;
      Send(std::move(m), layer);
    }
    SfbContribution(now, layer, clock);  // the worker's own gradient
  }
  if (s.has_ring) {
    store_->RingBegin(layer, clock);
    s.ring_ready = clock + 1;
    RingReady(now, layer);
  }
  if (s.has_fused) FusedReady(now, layer, clock);
}

void Worker::PushLayer(TimeNs now, int layer, int64_t clock) {
  (void)now;
  for (int32_t cid : placement_.chunks_of_layer(layer)) {
    const Chunk& c = placement_.chunks()[cid];
    Message m;
    m.type = MsgType::kPushGrad;
    m.from = id_;
    m.to = layout_.server(c.shard);
    m.clock = clock;
    m.chunk = c.id;
    m.layer = c.layer;
    m.payload_bytes = WirePayloadBytes(config_.gradient_wire, c.bytes(), c.count);
    m.wire = config_.gradient_wire;
    m.data = store_->GradientChunk(c);
    pushed_[static_cast<size_t>(c.id)] = clock + 1;
    if (config_.fault.checkpoint_every > 0) Retain(m);
    if (mark_next_push_.erase(c.id)) m.step = kPushResent;
    Send(std::move(m), layer);
  }
}

// Takes each chunk's answers once and in clock order: one already taken was sent again after a
// restart; one ahead of order waits for those before it (a shard that came back from a
// checkpoint answers the clocks it replays, in order, before new ones).
void Worker::OnParams(TimeNs now, const Message& msg) {
  const size_t c = static_cast<size_t>(msg.chunk);
  // BSP: an answer to a push this process has not made yet answers its previous incarnation's
  // push (it was restarted and rejoined; the shard applied the old push after all). Taking it
  // would run clock msg.clock with the values after that clock's update, and BSP would not be
  // exact any more. Drop it: the shard answers this process's own push of that clock again (a
  // duplicate of an applied clock is answered with the chunk's current values, which under BSP
  // are those of msg.clock + 1).
  if (config_.consistency == Consistency::kBsp && msg.clock >= pushed_.at(c)) return;
  if (rejoining_ || msg.clock > chunk_version_.at(c)) {
    early_[msg.chunk][msg.clock] = msg;
    return;
  }
  if (msg.clock < chunk_version_[c]) return;  // taken already
  TakeParams(now, msg);
  auto it = early_.find(msg.chunk);
  while (it != early_.end() && !it->second.empty()) {
    auto first = it->second.begin();
    if (first->first > chunk_version_[c]) break;
    const Message next = std::move(first->second);
    it->second.erase(first);
    if (next.clock == chunk_version_[c]) TakeParams(now, next);
  }
}

void Worker::TakeParams(TimeNs now, const Message& msg) {
  const Chunk& chunk = placement_.chunks().at(static_cast<size_t>(msg.chunk));
  ++chunk_version_[static_cast<size_t>(msg.chunk)];
  store_->WriteParams(chunk, msg);
  sync_[static_cast<size_t>(chunk.layer)].ps.Add(msg.clock);
  if (config_.fault.checkpoint_every > 0) TrimRetained(chunk.shard);
  DrainPs(now, chunk.layer);
}

// Asks a shard for its chunks' current values (a restarted worker).
void Worker::SendRejoin(ActorId shard) {
  Message m;
  m.type = MsgType::kRejoin;
  m.from = id_;
  m.to = shard;
  host_->Send(m);
}

void Worker::Retain(const Message& push) {
  retained_[placement_.chunks()[static_cast<size_t>(push.chunk)].shard].push_back(push);
}

// A shard checkpoints when the clocks it applied reach a multiple of checkpoint_every, before
// it answers them: once every chunk of shard j is at version >= k (a multiple), pushes of clocks
// below k are durable there.
void Worker::TrimRetained(int shard) {
  int64_t v = ProtocolConfig::kUnbounded;
  for (int32_t cid : placement_.chunks_of_shard(shard)) {
    v = std::min(v, chunk_version_[static_cast<size_t>(cid)]);
  }
  const int64_t floor = v / config_.fault.checkpoint_every * config_.fault.checkpoint_every;
  std::deque<Message>& q = retained_[shard];
  while (!q.empty() && q.front().clock < floor) q.pop_front();
}

size_t Worker::retained_pushes() const {
  size_t n = 0;
  for (const auto& [shard, q] : retained_) n += q.size();
  return n;
}

// Collects every chunk's current values (and, under BSP, previous ones); once all are in,
// continues at the oldest version v among them with every chunk at version v.
ProtocolError Worker::OnRejoinReply(TimeNs now, const Message& msg) {
  if (!rejoining_) {
    // Under BSP every shard sends the previous values of all its chunks at a version > 0, and
    // the rejoin completes without those of chunks that were not one clock ahead: such a late
    // answer is expected; so is a second answer from a shard we asked again when it came back
    // (the first request may have reached it after all). Nothing comes before a rejoin.
    if (!rejoined_) {
      return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                               "a rejoin answer this worker did not ask for");
    }
    return {};
  }
  (msg.step == kRejoinCurrent ? rejoin_current_ : rejoin_previous_)[msg.chunk] = msg;
  if (rejoin_current_.size() < placement_.chunks().size()) return {};
  int64_t v = ProtocolConfig::kUnbounded;
  for (const auto& [cid, m] : rejoin_current_) v = std::min(v, m.clock);
  // Under BSP a chunk one clock ahead gives its previous values; the shard sends those with its
  // current ones, so wait for them too.
  for (const auto& [cid, m] : rejoin_current_) {
    if (m.clock == v + 1 && config_.consistency == Consistency::kBsp &&
        !rejoin_previous_.count(cid)) {
      return {};
    }
  }
  rejoining_ = false;
  for (const auto& [cid, m] : rejoin_current_) {
    const Chunk& chunk = placement_.chunks()[static_cast<size_t>(cid)];
    auto prev = rejoin_previous_.find(cid);
    const bool use_prev = m.clock == v + 1 && prev != rejoin_previous_.end();
    store_->WriteParams(chunk, use_prev ? prev->second : m);
    chunk_version_[static_cast<size_t>(cid)] = v;
  }
  rejoin_current_.clear();
  rejoin_previous_.clear();
  clock_ = std::min(v, end_);
  begun_ = clock_;
  for (int l : model_.param_layers()) {
    LayerSync& s = sync_[static_cast<size_t>(l)];
    s.ps.ResetTo(clock_);
    if (devices_ == 1) {
      s.version = clock_;
    } else {
      // The values are the machine's; its devices get them by broadcast.
      s.machine_version = clock_;
      MaybeBroadcast(now, l);
    }
  }
  // Answers that came while we waited: take those now in order (older ones are dropped).
  std::map<int32_t, std::map<int64_t, Message>> early;
  early.swap(early_);
  for (auto& [cid, by_clock] : early) {
    for (auto& [clock, m] : by_clock) OnParams(now, m);
  }
  Advance(now);
  return {};
}

// Moves the layer's PS part past every complete clock (copying to the device first, when the
// parameters live there: one copy at a time).
void Worker::DrainPs(TimeNs now, int layer) {
  LayerSync& s = sync_[static_cast<size_t>(layer)];
  while (s.ps.FrontComplete() && !s.ps_copying) {
    if (copies_) {
      s.ps_copying = true;
      host_->StartCompute(
          {TaskKind::kCopyToDevice, layer, -1, placement_.layer_bytes(layer), s.ps.version()});
      return;
    }
    s.ps.Advance();
    UpdateVersion(now, layer);
  }
}

void Worker::SfbContribution(TimeNs now, int layer, int64_t clock) {
  LayerSync& s = sync_[static_cast<size_t>(layer)];
  s.sfb.Add(clock);
  while (s.sfb.FrontComplete()) {
    store_->SfbApply(layer, s.sfb.version(), layout_.num_workers);
    s.sfb_from.erase(s.sfb.version());
    s.sfb.Advance();
    UpdateVersion(now, layer);
  }
}

// Sends every ring step of every piece that may go now (the layer's own gradient just became
// ready), then moves on.
void Worker::RingReady(TimeNs now, int layer) {
  LayerSync& s = sync_[static_cast<size_t>(layer)];
  for (int p = 0; p < static_cast<int>(s.pieces.size()); ++p) RingStep(now, layer, p);
  (void)s;
}

// Ring all-reduce of one piece among the P workers (ring order by worker index): 2(P-1) steps;
// in step t worker i sends one segment of the piece to worker i+1: segment (i - t) mod P while
// reducing (t < P-1), then segment (i + 1 - (t - (P-1))) mod P while gathering (core/ring.h).
// Step t may go once step t-1 has arrived from worker i-1 (step 0 once the own gradient is
// ready). The store supplies the floats: the segment's running sum while reducing (what arrived
// in step t-1 plus the own gradient), the fully reduced segment while gathering.
void Worker::RingStep(TimeNs now, int layer, int piece) {
  LayerSync& s = sync_[static_cast<size_t>(layer)];
  if (s.ring_ready <= s.ring_version) return;  // own gradient of this clock not ready yet
  const int P = layout_.num_workers;
  const int steps = 2 * (P - 1);
  RingPiece& p = s.pieces[static_cast<size_t>(piece)];
  if (p.done) return;  // waiting for the layer's other pieces
  while (p.sent < steps && (p.sent == 0 || p.recv >= p.sent)) {
    const int t = p.sent;
    const int seg = RingSegmentSent(rank_, t, P);
    Message m;
    m.type = MsgType::kRing;
    m.from = id_;
    m.to = layout_.worker((rank_ + 1) % P);
    m.clock = s.ring_version;
    m.layer = layer;
    m.chunk = piece;
    m.step = t;
    const Layer& L = model_.layers()[layer];
    const RingSpan span =
        RingSegmentFloats(L.params * 4, config_.chunk_bytes, piece, seg, P, L.value_words);
    m.payload_bytes =
        WirePayloadBytes(config_.gradient_wire, RingSegmentBytes(p.bytes, seg, P), span.count);
    m.wire = config_.gradient_wire;
    m.data = store_->RingSegment(layer, s.ring_version, span);
    Send(std::move(m), layer);
    ++p.sent;
  }
  if (p.sent < steps || p.recv < steps) return;
  p.done = true;
  if (++s.ring_pieces_done < static_cast<int>(s.pieces.size())) return;
  // Every piece of this clock is reduced and gathered.
  store_->RingApply(layer, s.ring_version, P);
  s.ring_pieces_done = 0;
  ++s.ring_version;
  for (RingPiece& q : s.pieces) {
    q.sent = 0;
    q.done = false;
    q.recv = q.recv_next;
    q.recv_next = 0;
  }
  UpdateVersion(now, layer);
  if (s.ring_ready > s.ring_version) RingReady(now, layer);
}

void Worker::UpdateVersion(TimeNs now, int layer) {
  LayerSync& s = sync_[static_cast<size_t>(layer)];
  int64_t v = ProtocolConfig::kUnbounded;
  if (s.has_ps) v = std::min(v, s.ps.version());
  if (s.has_sfb) v = std::min(v, s.sfb.version());
  if (s.has_ring || s.has_fused) v = std::min(v, s.ring_version);
  if (devices_ == 1) {
    if (v > s.version) SetVersion(now, layer, v);
    return;
  }
  if (v <= s.machine_version) return;
  s.machine_version = v;
  MaybeBroadcast(now, layer);
}

// D > 1: sends the machine's newest version of the layer out to the devices, one broadcast at a
// time per layer (one that lands covers every version synced meanwhile).
void Worker::MaybeBroadcast(TimeNs now, int layer) {
  (void)now;
  LayerSync& s = sync_[static_cast<size_t>(layer)];
  if (s.broadcasting || s.machine_version <= s.version) return;
  s.broadcasting = true;
  host_->StartCompute({TaskKind::kLocalBroadcast, layer, -1, model_.layers()[layer].params * 4,
                       s.machine_version - 1});
}

// The devices hold the layer's updates of clocks 0..version-1.
void Worker::SetVersion(TimeNs now, int layer, int64_t version) {
  sync_[static_cast<size_t>(layer)].version = version;
  TraceInstant(TraceKind::kLayerSynced, now, layer, version - 1);
  Advance(now);
}

void Worker::Send(Message m, int layer) { send_queue_.Send(std::move(m), layer); }

void Worker::TraceInstant(TraceKind kind, TimeNs now, int layer, int64_t clock) {
  TraceEvent e;
  e.kind = kind;
  e.ts = now;
  e.actor = id_;
  e.layer = layer;
  e.clock = clock;
  host_->Trace(e);
}

std::string Worker::WaitingFor() const {
  std::string who = layout_.ActorName(id_);
  if (finished_) return who + ": finished";
  if (!started_) return who + ": waiting for the coordinator's start";
  for (const DeviceRun& d : dev_) {
    if (d.computing) return who + ": computing clock " + std::to_string(clock_);
  }
  if (reduces_running_ > 0) return who + ": reducing its devices' gradients of clock " + std::to_string(clock_ - 1);
  if (config_.baseline.enabled() && fused_next_ < fused_.size()) {
    const Collective& c = fused_[fused_next_];
    return who + ": at clock " + std::to_string(clock_) + ", " +
           (fused_running_ ? "running" : "waiting for its gradients of") + " " +
           BaselineName(config_.baseline.kind) + " collective " + std::to_string(fused_next_) +
           " of clock " + std::to_string(fused_clock_) + " (tensors " + std::to_string(c.first) +
           ".." + std::to_string(c.end - 1) + ", " + std::to_string(ready_prefix_) + " ready)";
  }
  std::string s = who + ": at clock " + std::to_string(clock_) + ", waiting for fresh parameters of";
  int listed = 0;
  for (int l : model_.param_layers()) {
    const int64_t need = clock_ == end_ ? end_ : clock_ - config_.Slack();
    if (sync_[static_cast<size_t>(l)].version < need) {
      if (listed++ < 4) {
        s += " " + model_.layers()[l].name + " (version " +
             std::to_string(sync_[static_cast<size_t>(l)].version) + ", needs " +
             std::to_string(need) + ")";
      }
    }
  }
  if (listed > 4) s += " and " + std::to_string(listed - 4) + " more layers";
  return s;
}

// ---- Baselines (ProtocolConfig::baseline; core/collectives.h) ----

// Layer `layer`'s gradient of `clock` is ready (on every device of the machine): its tensors
// join the ready order, and a collective waiting for them may begin.
void Worker::FusedReady(TimeNs now, int layer, int64_t clock) {
  POSEIDON_CHECK(clock == fused_clock_)
      << "worker " << id_ << ": gradient of clock " << clock << " ready while its collectives "
      << "reduce clock " << fused_clock_ << " (a baseline needs BSP)";
  store_->RingBegin(layer, clock);
  for (int i : layer_tensors_[static_cast<size_t>(layer)]) {
    tensor_ready_[static_cast<size_t>(i)] = 1;
  }
  const int n = static_cast<int>(tensor_ready_.size());
  while (ready_prefix_ < n && tensor_ready_[static_cast<size_t>(ready_prefix_)]) ++ready_prefix_;
  MaybeArmCycle(now);
  StartFused(now);
}

// Begins the next collective once the previous one is done and all its tensors are ready here
// (DDP's Reducer::mark_bucket_ready: strictly in order; one collective at a time).
void Worker::StartFused(TimeNs now) {
  if (fused_running_ || fused_next_ >= fused_.size()) return;
  const Collective& c = fused_[fused_next_];
  if (ready_prefix_ < c.end) return;
  fused_running_ = true;
  fused_pieces_.assign(static_cast<size_t>(c.pieces), RingPiece{});
  for (int p = 0; p < c.pieces; ++p) {
    fused_pieces_[static_cast<size_t>(p)].bytes =
        std::min(c.piece_bytes, c.bytes - static_cast<int64_t>(p) * c.piece_bytes);
  }
  fused_pieces_done_ = 0;
  if (c.algorithm == AllreduceAlgorithm::kTree) {
    tree_pieces_.assign(static_cast<size_t>(c.pieces), TreePiece{});
    for (int p = 0; p < c.pieces; ++p) TreeStepPiece(now, p);
  } else {
    for (int p = 0; p < c.pieces; ++p) FusedStep(now, p);
  }
  if (fused_pieces_done_ == c.pieces) FusedDone(now);
}

// The running collective's tree all-reduce (core/tree.h), piece by piece and half by half: a
// half's partial sum goes up once every child's has arrived (and been added here), the sum goes
// down once it is here (at the root: once the children's are in; elsewhere: once the parent's
// copy arrived).
void Worker::TreeStepPiece(TimeNs now, int piece) {
  (void)now;
  const Collective& c = fused_[fused_next_];
  TreePiece& p = tree_pieces_[static_cast<size_t>(piece)];
  if (p.done) return;
  auto it = tree_recv_.find({fused_clock_, c.piece_base + piece});
  const TreeRecv r = it == tree_recv_.end() ? TreeRecv{} : it->second;
  bool done = true;
  for (int half = 0; half < 2; ++half) {
    const TreeLinks& t = tree_links_[half];
    if (!p.up_sent[half] && r.up[half] == static_cast<int>(t.children.size())) {
      if (t.parent >= 0) SendTreeHalf(c, piece, half, /*down=*/false, t.parent);
      p.up_sent[half] = true;
    }
    if (p.up_sent[half] && !p.down_sent[half] && (t.parent < 0 || r.down[half])) {
      for (int child : t.children) SendTreeHalf(c, piece, half, /*down=*/true, child);
      p.down_sent[half] = true;
    }
    done = done && p.down_sent[half];
  }
  if (!done) return;
  p.done = true;
  ++fused_pieces_done_;
}

// Half `half` of piece `piece` of collective `c`, up to worker `to` (the running partial sum) or
// down to it (the sum).
void Worker::SendTreeHalf(const Collective& c, int piece, int half, bool down, int to) {
  const RingSpan span =
      RingSegmentFloats(c.bytes, c.piece_bytes, piece, half, 2, plan_.value_words());
  const int64_t piece_bytes =
      std::min(c.piece_bytes, c.bytes - static_cast<int64_t>(piece) * c.piece_bytes);
  Message m;
  m.type = MsgType::kBucket;
  m.from = id_;
  m.to = layout_.worker(to);
  m.clock = fused_clock_;
  m.layer = c.first_layer;
  m.chunk = c.piece_base + piece;
  m.step = TreeStep(half, down);
  m.payload_bytes = WirePayloadBytes(config_.gradient_wire,
                                     RingSegmentBytes(piece_bytes, half, 2), span.count);
  m.wire = config_.gradient_wire;
  m.data = CollectiveSegment(c, span);
  Send(std::move(m), c.first_layer);
}

// The running collective's ring, piece by piece: exactly the per-layer ring's steps (RingStep)
// over the collective's bytes.
void Worker::FusedStep(TimeNs now, int piece) {
  (void)now;
  const Collective& c = fused_[fused_next_];
  RingPiece& p = fused_pieces_[static_cast<size_t>(piece)];
  if (p.done) return;
  const int P = layout_.num_workers;
  const int steps = 2 * (P - 1);
  auto it = fused_recv_.find({fused_clock_, c.piece_base + piece});
  const int recv = it == fused_recv_.end() ? 0 : it->second;
  while (p.sent < steps && (p.sent == 0 || recv >= p.sent)) {
    const int t = p.sent;
    const int seg = RingSegmentSent(rank_, t, P);
    const RingSpan span =
        RingSegmentFloats(c.bytes, c.piece_bytes, piece, seg, P, plan_.value_words());
    Message m;
    m.type = MsgType::kBucket;
    m.from = id_;
    m.to = layout_.worker((rank_ + 1) % P);
    m.clock = fused_clock_;
    m.layer = c.first_layer;
    m.chunk = c.piece_base + piece;
    m.step = t;
    m.payload_bytes =
        WirePayloadBytes(config_.gradient_wire, RingSegmentBytes(p.bytes, seg, P), span.count);
    m.wire = config_.gradient_wire;
    m.data = CollectiveSegment(c, span);
    Send(std::move(m), c.first_layer);
    ++p.sent;
  }
  if (p.sent < steps || recv < steps) return;
  p.done = true;
  ++fused_pieces_done_;
}

// The floats `span` of collective `c`'s buffer: its tensors' parts in the layers' ring buffers
// (WorkerStore::RingSegment), end to end; null when the store is phantom.
FloatBuffer Worker::CollectiveSegment(const Collective& c, RingSpan span) {
  const std::vector<TensorPart> parts = SplitCollectiveSpan(plan_.tensors(), c.first, c.end, span);
  if (parts.size() == 1) return store_->RingSegment(parts[0].layer, fused_clock_, parts[0].span);
  auto out = std::make_shared<std::vector<float>>();
  out->reserve(static_cast<size_t>(span.count));
  for (const TensorPart& part : parts) {
    const FloatBuffer b = store_->RingSegment(part.layer, fused_clock_, part.span);
    if (!b) return nullptr;
    out->insert(out->end(), b->begin(), b->end());
  }
  return out;
}

// The running collective is reduced and gathered everywhere: the layers whose every tensor is
// now reduced take the mean (WorkerStore::RingApply) and move to the next version.
void Worker::FusedDone(TimeNs now) {
  const Collective c = fused_[fused_next_];
  const int64_t clock = fused_clock_;
  const int P = layout_.num_workers;
  fused_running_ = false;
  ++fused_next_;
  for (int p = 0; p < c.pieces; ++p) {
    fused_recv_.erase({clock, c.piece_base + p});
    tree_recv_.erase({clock, c.piece_base + p});
  }
  std::vector<int> synced;
  for (int i = c.first; i < c.end; ++i) {
    const int layer = plan_.tensors()[static_cast<size_t>(i)].layer;
    if (--layer_tensors_left_[static_cast<size_t>(layer)] == 0) {
      store_->RingApply(layer, clock, P);
      synced.push_back(layer);
    }
  }
  if (c.end == static_cast<int>(plan_.tensors().size())) {
    // Every gradient of the clock is reduced: the next clock's collectives.
    ++fused_clock_;
    std::fill(tensor_ready_.begin(), tensor_ready_.end(), 0);
    ready_prefix_ = 0;
    reported_ = 0;
    for (size_t l = 0; l < layer_tensors_.size(); ++l) {
      layer_tensors_left_[l] = static_cast<int>(layer_tensors_[l].size());
    }
    fused_.clear();
    if (config_.baseline.kind == Baseline::kDdp) fused_ = plan_.Ddp(fused_clock_);
    fused_next_ = 0;
  }
  if (config_.baseline.kind == Baseline::kHorovod && fused_next_ == fused_.size()) {
    // Horovod's loop begins its next cycle when the collectives are done, but not before
    // cycle_ns after the previous one began.
    cycle_start_ = std::max(cycle_start_, now - config_.baseline.cycle_ns);
  }
  for (int layer : synced) {
    sync_[static_cast<size_t>(layer)].ring_version = clock + 1;
    UpdateVersion(now, layer);
  }
  MaybeArmCycle(now);
  StartFused(now);
}

// A ring step of a collective. Its floats go into the layers' ring buffers at once (a step of a
// collective this worker has not begun, even of the next clock, is a predecessor running ahead);
// under Horovod a step of a collective the coordinator's answer has not announced here yet waits
// for it (`buffered`: such a step taken again once it has).
ProtocolError Worker::OnBucketStep(TimeNs now, const Message& msg, bool buffered) {
  if (msg.clock < fused_clock_) {
    return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                             "a bucket step of clock " + std::to_string(msg.clock) +
                                 ", whose collectives this worker has done");
  }
  const bool ddp = config_.baseline.kind == Baseline::kDdp;
  const std::vector<Collective>* cs = msg.clock == fused_clock_ ? &fused_
                                      : ddp                     ? &plan_.Ddp(msg.clock)
                                                                : nullptr;
  const Collective* c = cs ? CollectivePlan::Holding(*cs, msg.chunk) : nullptr;
  if (!c) {
    if (ddp || msg.clock > fused_clock_ + 1) {
      return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                               "a bucket step for piece " + std::to_string(msg.chunk) +
                                   " of clock " + std::to_string(msg.clock) +
                                   ", which this worker's collectives do not have");
    }
    POSEIDON_CHECK(!buffered) << "worker " << id_ << ": a buffered step is still unknown";
    fused_early_.push_back(msg);
    return {};
  }
  if (!ddp) {
    // Under DDP CheckMessageShape did this; under Horovod the collective is known only now.
    if (ProtocolError e = CheckCollectiveStep(shape_, id_, *c, msg)) return e;
  }
  const int P = layout_.num_workers;
  const int piece = msg.chunk - c->piece_base;
  RingSpan span;
  bool reduce = true;
  const bool tree = c->algorithm == AllreduceAlgorithm::kTree;
  if (tree) {
    // The sender is a child (up) or the parent (down) of this half: CheckMessageShape made sure,
    // or, for a collective whose algorithm is its own (auto), CheckCollectiveStep.
    const int half = TreeHalf(msg.step);
    TreeRecv& r = tree_recv_[{msg.clock, msg.chunk}];
    reduce = !TreePhaseDown(msg.step);
    if (reduce ? r.up[half] >= static_cast<int>(tree_links_[half].children.size())
               : r.down[half]) {
      return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                               "tree step " + std::to_string(msg.step) + " of piece " +
                                   std::to_string(msg.chunk) + " of clock " +
                                   std::to_string(msg.clock) + " again");
    }
    span = RingSegmentFloats(c->bytes, c->piece_bytes, piece, half, 2, plan_.value_words());
    if (reduce) {
      ++r.up[half];
    } else {
      r.down[half] = true;
    }
  } else {
    int& recv = fused_recv_[{msg.clock, msg.chunk}];
    if (recv >= 2 * (P - 1)) {
      return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                               "more ring steps of piece " + std::to_string(msg.chunk) +
                                   " of clock " + std::to_string(msg.clock) +
                                   " than the ring has");
    }
    const int seg = RingSegmentSent(layout_.WorkerIndex(msg.from), msg.step, P);
    span = RingSegmentFloats(c->bytes, c->piece_bytes, piece, seg, P, plan_.value_words());
    reduce = msg.step < P - 1;
    ++recv;
  }
  const std::vector<TensorPart> parts =
      SplitCollectiveSpan(plan_.tensors(), c->first, c->end, span);
  for (const TensorPart& part : parts) {
    Message sub = msg;
    sub.layer = part.layer;
    if (msg.data && parts.size() > 1) {
      const auto b = msg.data->begin() + part.at;
      sub.data = std::make_shared<const std::vector<float>>(b, b + part.span.count);
    }
    store_->RingReceive(sub, part.span, reduce);
  }
  if (cs == &fused_ && fused_running_ && c == &fused_[fused_next_]) {
    if (tree) {
      TreeStepPiece(now, piece);
    } else {
      FusedStep(now, piece);
    }
    if (fused_pieces_done_ == c->pieces) FusedDone(now);
  }
  return {};
}

// Horovod: tensors [from, to) of `clock` are ready on every worker (worker 0's answer): they are
// all-reduced, fused by the threshold, after those answered before.
ProtocolError Worker::TakeFused(TimeNs now, int64_t clock, int from, int to) {
  const int known = fused_.empty() ? 0 : fused_.back().end;
  if (clock != fused_clock_ || from != known) {
    return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                             "an answer for tensors " + std::to_string(from) + ".." +
                                 std::to_string(to - 1) + " of clock " + std::to_string(clock) +
                                 ", but this worker reduces clock " +
                                 std::to_string(fused_clock_) + " from tensor " +
                                 std::to_string(known));
  }
  plan_.Append(FuseTensors(plan_.tensors(), from, to, config_.baseline.fusion_threshold_bytes),
               &fused_);
  // Steps that came before the answer. A step that then does not fit its collective is its
  // sender's error, never an abort, and not the error of whoever brought the answer (worker 0,
  // or this worker's own cycle): the step is dropped and its sender's next message is refused
  // with that error (blamed_), so that the host closes that sender's connection. The config
  // refuses Horovod live today, but the rule holds for every message from a peer.
  std::vector<Message> early;
  early.swap(fused_early_);
  for (const Message& m : early) {
    if (m.clock == fused_clock_ && CollectivePlan::Holding(fused_, m.chunk)) {
      if (ProtocolError e = OnBucketStep(now, m, /*buffered=*/true)) blamed_.emplace(m.from, e);
    } else {
      fused_early_.push_back(m);
    }
  }
  StartFused(now);
  return {};
}

// Horovod: tells the coordinator what is ready at the next cycle, unless the worker is running
// collectives (Horovod's loop negotiates between them) or has nothing new.
void Worker::MaybeArmCycle(TimeNs now) {
  if (config_.baseline.kind != Baseline::kHorovod || cycle_armed_ || finished_) return;
  if (fused_next_ < fused_.size() || ready_prefix_ <= reported_) return;
  const TimeNs cycle = config_.baseline.cycle_ns;
  TimeNs at = cycle_start_ + cycle;
  if (at < now) at = cycle_start_ + (now - cycle_start_ + cycle - 1) / cycle * cycle;
  cycle_armed_ = true;
  host_->SetTimer(at, kCycleTimer);
}

void Worker::Report(TimeNs now) {
  reported_ = ready_prefix_;
  if (rank_ == 0) {
    const ProtocolError e = Negotiate(now, 0, fused_clock_, reported_);
    POSEIDON_CHECK(!e) << "worker " << id_ << ": " << e.what;
    return;
  }
  Message m;
  m.type = MsgType::kReady;
  m.from = id_;
  m.to = layout_.worker(0);
  m.clock = fused_clock_;
  m.chunk = reported_;
  host_->Send(m);
}

// Worker 0, Horovod's coordinator: worker `rank` has tensors 0..prefix-1 of `clock` ready.
// Answers every worker (itself included) with the tensors now ready on all of them.
ProtocolError Worker::Negotiate(TimeNs now, int rank, int64_t clock, int prefix) {
  std::pair<int64_t, int>& r = reports_.at(static_cast<size_t>(rank));
  if (clock < r.first || (clock == r.first && prefix < r.second)) {
    return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                             "a ready report of " + std::to_string(prefix) + " tensors of clock " +
                                 std::to_string(clock) + " after one of " +
                                 std::to_string(r.second) + " of clock " +
                                 std::to_string(r.first));
  }
  r = {clock, prefix};
  const int n = static_cast<int>(plan_.tensors().size());
  for (;;) {
    int ready = n;
    for (const auto& [c, k] : reports_) {
      ready = std::min(ready, c == neg_clock_ ? k : c > neg_clock_ ? n : 0);
    }
    if (ready <= responded_) return {};
    const int64_t answered = neg_clock_;
    const int from = responded_;
    responded_ = ready;
    if (responded_ == n) {
      ++neg_clock_;
      responded_ = 0;
    }
    for (int w = 1; w < layout_.num_workers; ++w) {
      Message m;
      m.type = MsgType::kResponse;
      m.from = id_;
      m.to = layout_.worker(w);
      m.clock = answered;
      m.step = from;
      m.chunk = ready;
      host_->Send(m);
    }
    if (ProtocolError e = TakeFused(now, answered, from, ready)) return e;
  }
}

}  // namespace poseidon::core
