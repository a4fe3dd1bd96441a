#include "core/server.h"

namespace poseidon::core {

ServerShard::ServerShard(ActorId id, const Placement& placement, const JobLayout& layout,
                         const ProtocolConfig& config, Host* host, ShardStore* store)
    : id_(id),
      shard_(layout.ServerIndex(id)),
      placement_(placement),
      layout_(layout),
      config_(config),
      host_(host),
      store_(store),
      send_queue_(host, config.priority_window_bytes) {
  POSEIDON_CHECK(layout_.IsServer(id_)) << "actor " << id_ << " is not a server shard";
  pushes_.assign(placement_.chunks().size(), ClockCounter(layout_.num_workers));
  updating_.assign(placement_.chunks().size(), false);
  applied_.assign(placement_.chunks().size(), 0);
}

void ServerShard::OnStart(TimeNs now) {
  (void)now;
  Message m;
  m.type = MsgType::kRegister;
  m.from = id_;
  m.to = JobLayout::coordinator();
  host_->Send(m);
}

void ServerShard::OnMessage(TimeNs now, const Message& msg) {
  (void)now;
  if (msg.type == MsgType::kStart) return;
  POSEIDON_CHECK(msg.type == MsgType::kPushGrad) << "shard " << shard_ << " got " << Describe(msg);
  const Chunk& c = placement_.chunks().at(static_cast<size_t>(msg.chunk));
  POSEIDON_CHECK(c.shard == shard_) << "shard " << shard_ << " does not own " << Describe(msg);
  store_->Accumulate(c, msg);
  if (config_.consistency == Consistency::kAsp) {
    ComputeTask t{TaskKind::kServerUpdate, c.layer, c.id, c.bytes(), msg.clock};
    t.peer = msg.from;
    host_->StartCompute(t);
    return;
  }
  pushes_[c.id].Add(msg.clock);
  MaybeUpdate(c);
}

void ServerShard::MaybeUpdate(const Chunk& c) {
  if (updating_[c.id] || !pushes_[c.id].FrontComplete()) return;
  updating_[c.id] = true;
  host_->StartCompute(
      {TaskKind::kServerUpdate, c.layer, c.id, c.bytes(), pushes_[c.id].version()});
}

void ServerShard::OnComputeDone(TimeNs now, const ComputeTask& task) {
  POSEIDON_CHECK(task.kind == TaskKind::kServerUpdate) << TaskKindName(task.kind);
  const Chunk& c = placement_.chunks()[static_cast<size_t>(task.chunk)];
  const bool asp = config_.consistency == Consistency::kAsp;
  // BSP/SSP: the mean of the clock's P pushes. ASP: each push alone, as one P-th of a clock's
  // update, so that a learning rate means the same under every consistency model.
  store_->Apply(c, task.clock, layout_.num_workers);
  TraceEvent e;
  e.kind = TraceKind::kClockApplied;
  e.ts = now;
  e.actor = id_;
  e.layer = c.layer;
  e.chunk = c.id;
  e.clock = task.clock;
  host_->Trace(e);
  FloatBuffer values = store_->Read(c);
  auto send_to = [&](ActorId worker) {
    Message m;
    m.type = MsgType::kParams;
    m.from = id_;
    m.to = worker;
    m.clock = task.clock;
    m.chunk = c.id;
    m.layer = c.layer;
    m.payload_bytes = c.bytes();
    m.data = values;
    send_queue_.Send(std::move(m), c.layer);
  };
  if (asp) {
    ++applied_[c.id];
    send_to(task.peer);
    return;
  }
  for (int w = 0; w < layout_.num_workers; ++w) send_to(layout_.worker(w));
  pushes_[c.id].Advance();
  updating_[c.id] = false;
  MaybeUpdate(c);
}

void ServerShard::OnSent(TimeNs now, const Message& msg) {
  (void)now;
  send_queue_.OnSent(msg);
}

bool ServerShard::finished() const {
  const bool asp = config_.consistency == Consistency::kAsp;
  for (int32_t cid : placement_.chunks_of_shard(shard_)) {
    const int64_t done = asp ? applied_[cid] : pushes_[cid].version() * layout_.num_workers;
    if (done < config_.iterations * layout_.num_workers) return false;
  }
  return true;
}

std::string ServerShard::WaitingFor() const {
  std::string s = layout_.ActorName(id_);
  for (int32_t cid : placement_.chunks_of_shard(shard_)) {
    const ClockCounter& p = pushes_[cid];
    if (p.version() < config_.iterations) {
      return s + ": chunk " + std::to_string(cid) + " at clock " + std::to_string(p.version()) +
             " has " + std::to_string(p.Count(p.version())) + " of " +
             std::to_string(layout_.num_workers) + " pushes";
    }
  }
  return s + ": finished";
}

}  // namespace poseidon::core
