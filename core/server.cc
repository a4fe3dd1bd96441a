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
      store_(store) {
  POSEIDON_CHECK(layout_.IsServer(id_)) << "actor " << id_ << " is not a server shard";
  pushes_.assign(placement_.chunks().size(), 0);
  clock_.assign(placement_.chunks().size(), 0);
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
  const Chunk& c = placement_.chunks().at(msg.chunk);
  POSEIDON_CHECK(c.shard == shard_) << "shard " << shard_ << " does not own " << Describe(msg);
  POSEIDON_CHECK(msg.clock == clock_[c.id])
      << "shard " << shard_ << " chunk " << c.id << " at clock " << clock_[c.id] << " got "
      << Describe(msg);
  store_->Accumulate(c, msg);
  if (++pushes_[c.id] == layout_.num_workers) {
    host_->StartCompute({TaskKind::kServerUpdate, c.layer, c.id, c.bytes(), clock_[c.id]});
  }
}

void ServerShard::OnComputeDone(TimeNs now, const ComputeTask& task) {
  POSEIDON_CHECK(task.kind == TaskKind::kServerUpdate) << TaskKindName(task.kind);
  const Chunk& c = placement_.chunks()[task.chunk];
  store_->Apply(c, clock_[c.id], pushes_[c.id]);
  TraceEvent e;
  e.kind = TraceKind::kClockApplied;
  e.ts = now;
  e.actor = id_;
  e.layer = c.layer;
  e.chunk = c.id;
  e.clock = clock_[c.id];
  host_->Trace(e);
  FloatBuffer values = store_->Read(c);
  for (int w = 0; w < layout_.num_workers; ++w) {
    Message m;
    m.type = MsgType::kParams;
    m.from = id_;
    m.to = layout_.worker(w);
    m.clock = clock_[c.id];
    m.chunk = c.id;
    m.layer = c.layer;
    m.payload_bytes = c.bytes();
    m.data = values;
    host_->Send(std::move(m));
  }
  pushes_[c.id] = 0;
  ++clock_[c.id];
}

bool ServerShard::finished() const {
  for (int32_t cid : placement_.chunks_of_shard(shard_)) {
    if (clock_[cid] < config_.iterations) return false;
  }
  return true;
}

std::string ServerShard::WaitingFor() const {
  std::string s = layout_.ActorName(id_);
  for (int32_t cid : placement_.chunks_of_shard(shard_)) {
    if (clock_[cid] < config_.iterations) {
      return s + ": chunk " + std::to_string(cid) + " at clock " + std::to_string(clock_[cid]) +
             " has " + std::to_string(pushes_[cid]) + " of " +
             std::to_string(layout_.num_workers) + " pushes";
    }
  }
  return s + ": finished";
}

}  // namespace poseidon::core
