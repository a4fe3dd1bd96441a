#include "core/server.h"

#include <algorithm>

namespace poseidon::core {

ServerShard::ServerShard(ActorId id, const Placement& placement, const JobLayout& layout,
                         const ProtocolConfig& config, Host* host, ShardStore* store)
    : id_(id),
      shard_(layout.ServerIndex(id)),
      placement_(placement),
      layout_(layout),
      config_(config),
      shape_{&layout_, &config_, &placement_, nullptr, config_.fault},
      host_(host),
      store_(store),
      send_queue_(host, config.priority_window_bytes) {
  POSEIDON_CHECK(layout_.IsServer(id_)) << "actor " << id_ << " is not a server shard";
  const size_t n = placement_.chunks().size();
  version_.assign(n, 0);
  received_.resize(n);
  updating_.assign(n, false);
  // ASP only, and only for this shard's chunks: every shard holding a per-worker vector for every
  // chunk of the model would be shards x chunks x workers (7.8 GB at 1,024 workers).
  if (config_.consistency == Consistency::kAsp) {
    asp_applied_.resize(n);
    for (int32_t cid : placement_.chunks_of_shard(shard_)) {
      asp_applied_[static_cast<size_t>(cid)].assign(static_cast<size_t>(layout_.num_workers), 0);
    }
    asp_received_ = asp_applied_;
  }
  member_.assign(static_cast<size_t>(layout_.num_workers), true);
  last_checkpoint_.assign(static_cast<size_t>(layout_.num_workers), 0);
}

void ServerShard::Restore(const ShardCheckpoint& state) {
  for (const ChunkProgress& p : state.chunks) {
    POSEIDON_CHECK(p.chunk >= 0 && p.chunk < static_cast<int32_t>(version_.size()) &&
                   placement_.chunks()[static_cast<size_t>(p.chunk)].shard == shard_)
        << "checkpoint names chunk " << p.chunk << ", which shard " << shard_ << " does not own";
    version_[static_cast<size_t>(p.chunk)] = p.version;
    // Per-worker progress is ASP's; another model's chunk version says it all.
    if (!p.applied_by_worker.empty() && !asp_applied_.empty()) {
      POSEIDON_CHECK(static_cast<int>(p.applied_by_worker.size()) == layout_.num_workers);
      asp_applied_[static_cast<size_t>(p.chunk)] = p.applied_by_worker;
      asp_received_[static_cast<size_t>(p.chunk)] = p.applied_by_worker;
    }
  }
  checkpointed_floor_ = state.floor;
  for (int w = 0; w < layout_.num_workers; ++w) {
    last_checkpoint_[static_cast<size_t>(w)] = std::min(Progress(w), config_.iterations);
  }
}

// Clocks of worker w's pushes applied to every chunk of this shard (kUnbounded without chunks).
int64_t ServerShard::Progress(int w) const {
  const bool asp = config_.consistency == Consistency::kAsp;
  int64_t progress = ProtocolConfig::kUnbounded;
  for (int32_t cid : placement_.chunks_of_shard(shard_)) {
    progress = std::min(progress, asp ? asp_applied_[cid][static_cast<size_t>(w)] : version_[cid]);
  }
  return progress;
}

void ServerShard::OnStart(TimeNs now) {
  Message m;
  m.type = MsgType::kRegister;
  m.from = id_;
  m.to = JobLayout::coordinator();
  host_->Send(m);
  if (config_.fault.enabled()) host_->SetTimer(now + config_.fault.heartbeat_ns, kHeartbeatTimer);
}

void ServerShard::OnTimer(TimeNs now, uint64_t timer_id) {
  if (timer_id != kHeartbeatTimer) return;
  Message m;
  m.type = MsgType::kHeartbeat;
  m.from = id_;
  m.to = JobLayout::coordinator();
  if (finished()) {
    // Nothing left to do: heartbeats stop (so that the job's events run out), and the
    // coordinator hears why, or it would take the silence for a death (a shard without chunks
    // is finished from the start).
    m.type = MsgType::kDone;
    host_->Send(m);
    return;
  }
  host_->Send(m);
  host_->SetTimer(now + config_.fault.heartbeat_ns, kHeartbeatTimer);
}

ProtocolError ServerShard::OnMessage(TimeNs now, const Message& msg) {
  (void)now;
  if (ProtocolError e = CheckMessageShape(shape_, id_, msg)) return e;
  switch (msg.type) {
    case MsgType::kStart:
      return {};
    case MsgType::kPushGrad:
      return OnPush(msg);
    case MsgType::kMembership:
      OnMembership(msg);
      return {};
    case MsgType::kRejoin:
      OnRejoin(msg);
      return {};
    default:
      return ProtocolError::Of(ProtocolErrorCode::kNotForThisActor,
                               std::string("a shard takes no ") + MsgTypeName(msg.type));
  }
}

ProtocolError ServerShard::OnPush(const Message& msg) {
  const Chunk& c = placement_.chunks()[static_cast<size_t>(msg.chunk)];  // checked: ours
  const int w = layout_.WorkerIndex(msg.from);
  if (msg.step == kPushResent && resend_checked_.insert({c.id, w}).second) {
    if (ProtocolError e = CheckResendStart(c, w, msg.clock)) return e;
  }
  if (config_.consistency == Consistency::kAsp) {
    int64_t& got = asp_received_[c.id][static_cast<size_t>(w)];
    if (msg.clock < got) {
      // Sent again after a restart: applied (or being applied) already.
      ++duplicates_;
      if (msg.clock < asp_applied_[c.id][static_cast<size_t>(w)]) {
        SendParams(c, msg.from, msg.clock, -1, store_->Read(c));
      }
      return {};
    }
    if (msg.clock > got && config_.fault.checkpoint_every > 0) {
      // Ahead of order: this shard came back from a checkpoint and the worker's pushes since
      // then went to the old process, or to none. The worker still keeps them and sends them
      // again, this one with them, once it hears the shard is back; applying this one first
      // would break the order, so drop it.
      return {};
    }
    if (msg.clock != got) {
      return ProtocolError::Of(ProtocolErrorCode::kWrongState,
                               "a push of clock " + std::to_string(msg.clock) + " for chunk " +
                                   std::to_string(c.id) + ", but this shard expects clock " +
                                   std::to_string(got) + " from that worker");
    }
    ++got;
    store_->Accumulate(c, msg);
    ComputeTask t{TaskKind::kServerUpdate, c.layer, c.id, c.bytes(), msg.clock};
    t.peer = msg.from;
    host_->StartCompute(t);
    return {};
  }
  if (msg.clock < version_[c.id]) {
    // The clock was applied: the worker lost our answer (we or it restarted). Answer again
    // with the current values; the push itself was applied once already.
    ++duplicates_;
    SendParams(c, msg.from, msg.clock, -1, store_->Read(c));
    return {};
  }
  if (!member_[static_cast<size_t>(w)]) return {};  // evicted: its late pushes no longer count
  std::vector<bool>& who = received_[c.id][msg.clock].who;
  if (who.empty()) who.assign(static_cast<size_t>(layout_.num_workers), false);
  if (who[static_cast<size_t>(w)]) {
    ++duplicates_;  // sent again after a restart, still waiting for the clock's other pushes
    return {};
  }
  who[static_cast<size_t>(w)] = true;
  store_->Accumulate(c, msg);
  MaybeUpdate(c);
  return {};
}

// A worker resends the pushes it keeps since what it knows to be this shard's last checkpoint,
// oldest first. The first of them for a chunk must not be past what this shard holds: if it is,
// the clocks in between were applied by the old process and are in no file (the checkpoint is
// missing or older than the newest), so the job can never go on.
ProtocolError ServerShard::CheckResendStart(const Chunk& c, int w, int64_t first) const {
  const bool asp = config_.consistency == Consistency::kAsp;
  if (!asp && !member_[static_cast<size_t>(w)]) return {};  // evicted: its pushes do not count
  const int64_t have =
      asp ? asp_received_[c.id][static_cast<size_t>(w)] : version_[c.id];
  if (first <= have) return {};
  return ProtocolError::Of(
      ProtocolErrorCode::kStateLost,
      "chunk " + std::to_string(c.id) + " (layer " + std::to_string(c.layer) + ") is at clock " +
          std::to_string(have) + " here, but worker " + std::to_string(w) +
          " keeps its pushes only from clock " + std::to_string(first) +
          " on: the pushes of clocks " + std::to_string(have) + ".." + std::to_string(first - 1) +
          " were applied by this shard's previous process and are in no checkpoint it was "
          "restored from");
}

void ServerShard::MaybeUpdate(const Chunk& c) {
  if (updating_[c.id]) return;
  auto it = received_[c.id].find(version_[c.id]);
  if (it == received_[c.id].end()) return;
  ClockPushes& p = it->second;
  if (p.scan_epoch != member_epoch_) {
    p.scan_next = 0;
    p.scan_epoch = member_epoch_;
  }
  for (; p.scan_next < layout_.num_workers; ++p.scan_next) {
    const auto w = static_cast<size_t>(p.scan_next);
    if (member_[w] && !p.who[w]) return;  // a member's push is missing
  }
  const int pushes = static_cast<int>(std::count(p.who.begin(), p.who.end(), true));
  updating_[c.id] = true;
  ComputeTask t{TaskKind::kServerUpdate, c.layer, c.id, c.bytes(), version_[c.id]};
  t.peer = pushes;  // BSP/SSP: how many pushes the update averages (P without evictions)
  host_->StartCompute(t);
}

void ServerShard::OnComputeDone(TimeNs now, const ComputeTask& task) {
  POSEIDON_CHECK(task.kind == TaskKind::kServerUpdate) << TaskKindName(task.kind);
  const Chunk& c = placement_.chunks()[static_cast<size_t>(task.chunk)];
  const bool asp = config_.consistency == Consistency::kAsp;
  // BSP/SSP: the mean of the clock's pushes (P of them unless a worker was evicted). ASP: each
  // push alone, as one P-th of a clock's update, so that a learning rate means the same under
  // every consistency model.
  store_->Apply(c, task.clock, asp ? layout_.num_workers : static_cast<int>(task.peer));
  TraceEvent e;
  e.kind = TraceKind::kClockApplied;
  e.ts = now;
  e.actor = id_;
  e.layer = c.layer;
  e.chunk = c.id;
  e.clock = task.clock;
  host_->Trace(e);
  if (asp) {
    ++asp_applied_[c.id][static_cast<size_t>(layout_.WorkerIndex(task.peer))];
  } else {
    received_[c.id].erase(task.clock);
    ++version_[c.id];
    updating_[c.id] = false;
  }
  // Durable before anyone hears of the update that completed it.
  MaybeCheckpoint();
  if (asp) {
    SendParams(c, task.peer, task.clock, -1, store_->ReadFor(c, task.peer));
    return;
  }
  FloatBuffer values = store_->Read(c);
  for (int w = 0; w < layout_.num_workers; ++w) {
    if (member_[static_cast<size_t>(w)]) SendParams(c, layout_.worker(w), task.clock, -1, values);
  }
  MaybeUpdate(c);
}

void ServerShard::SendParams(const Chunk& c, ActorId worker, int64_t clock, int32_t step,
                             FloatBuffer values) {
  Message m;
  m.type = MsgType::kParams;
  m.from = id_;
  m.to = worker;
  m.clock = clock;
  m.chunk = c.id;
  m.layer = c.layer;
  m.step = step;
  m.payload_bytes = c.bytes();
  m.data = std::move(values);
  send_queue_.Send(std::move(m), c.layer);
}

// Checkpoints once the pushes every worker sent are applied up to a new multiple of
// checkpoint_every clocks (for any worker: under ASP they progress separately, and a worker
// drops its kept pushes by its own progress).
void ServerShard::MaybeCheckpoint(bool force) {
  const int64_t every = config_.fault.checkpoint_every;
  if (every <= 0 && !force) return;
  const bool asp = config_.consistency == Consistency::kAsp;
  ShardCheckpoint state;
  state.floor = ProtocolConfig::kUnbounded;
  bool crossed = false;
  for (int w = 0; w < layout_.num_workers; ++w) {
    const int64_t progress = Progress(w);
    if (progress == ProtocolConfig::kUnbounded) return;  // a shard without chunks
    state.floor = std::min(state.floor, progress);
    if (force || progress / every > last_checkpoint_[static_cast<size_t>(w)] / every) crossed = true;
  }
  if (!crossed) return;
  for (int32_t cid : placement_.chunks_of_shard(shard_)) {
    ChunkProgress p;
    p.chunk = cid;
    p.version = version_[cid];
    if (asp) p.applied_by_worker = asp_applied_[cid];
    state.chunks.push_back(std::move(p));
  }
  store_->Checkpoint(state);
  for (int w = 0; w < layout_.num_workers; ++w) last_checkpoint_[static_cast<size_t>(w)] = Progress(w);
  checkpointed_floor_ = state.floor;
}

void ServerShard::OnMembership(const Message& msg) {
  const ActorId who = msg.step;
  if (!layout_.IsWorker(who)) return;  // shards and the coordinator: nothing changes here
  const size_t w = static_cast<size_t>(layout_.WorkerIndex(who));
  if (msg.chunk == kMemberDead) {
    if (!config_.fault.evict_dead_workers || !member_[w]) return;
    member_[w] = false;
    ++member_epoch_;
    // The clocks that waited only for it may go now.
    for (int32_t cid : placement_.chunks_of_shard(shard_)) {
      MaybeUpdate(placement_.chunks()[static_cast<size_t>(cid)]);
    }
  } else {
    member_[w] = true;
    ++member_epoch_;
  }
}

void ServerShard::OnRejoin(const Message& msg) {  // from a worker (checked)
  member_[static_cast<size_t>(layout_.WorkerIndex(msg.from))] = true;
  ++member_epoch_;
  const bool asp = config_.consistency == Consistency::kAsp;
  const size_t w = static_cast<size_t>(layout_.WorkerIndex(msg.from));
  for (int32_t cid : placement_.chunks_of_shard(shard_)) {
    const Chunk& c = placement_.chunks()[static_cast<size_t>(cid)];
    const int64_t version = asp ? asp_applied_[cid][w] : version_[cid];
    SendParams(c, msg.from, version, kRejoinCurrent, store_->Read(c));
    if (version > 0 && config_.consistency == Consistency::kBsp) {
      SendParams(c, msg.from, version - 1, kRejoinPrevious, store_->ReadPrevious(c));
    }
  }
}

void ServerShard::OnSent(TimeNs now, const Message& msg) {
  (void)now;
  send_queue_.OnSent(msg);
}

bool ServerShard::finished() const {
  const bool asp = config_.consistency == Consistency::kAsp;
  for (int32_t cid : placement_.chunks_of_shard(shard_)) {
    for (int w = 0; w < layout_.num_workers; ++w) {
      if (!member_[static_cast<size_t>(w)]) continue;
      const int64_t done = asp ? asp_applied_[cid][static_cast<size_t>(w)] : version_[cid];
      if (done < config_.iterations) return false;
    }
  }
  return true;
}

std::string ServerShard::WaitingFor() const {
  std::string s = layout_.ActorName(id_);
  for (int32_t cid : placement_.chunks_of_shard(shard_)) {
    if (version_[cid] < config_.iterations &&
        config_.consistency != Consistency::kAsp) {
      auto it = received_[cid].find(version_[cid]);
      int got = 0;
      if (it != received_[cid].end()) {
        for (bool b : it->second.who) got += b ? 1 : 0;
      }
      return s + ": chunk " + std::to_string(cid) + " at clock " +
             std::to_string(version_[cid]) + " has " + std::to_string(got) + " of " +
             std::to_string(layout_.num_workers) + " pushes";
    }
  }
  return s + ": finished";
}

}  // namespace poseidon::core
