#include "core/coordinator.h"

namespace poseidon::core {

Coordinator::Coordinator(const JobLayout& layout, Host* host, FaultConfig fault)
    : layout_(layout), host_(host), fault_(fault) {
  shape_.layout = &layout_;
  shape_.fault = fault_;
  const size_t n = static_cast<size_t>(layout_.num_actors());
  registered_.assign(n, false);
  done_.assign(n, false);
  alive_.assign(n, true);
  last_heard_.assign(n, 0);
}

void Coordinator::OnStart(TimeNs now) { (void)now; }

ProtocolError Coordinator::OnMessage(TimeNs now, const Message& msg) {
  if (ProtocolError e = CheckMessageShape(shape_, JobLayout::coordinator(), msg)) return e;
  const size_t from = static_cast<size_t>(msg.from);
  last_heard_[from] = now;
  switch (msg.type) {
    case MsgType::kRegister: {
      if (started_) {
        // A restarted process: it starts at once and everyone hears it is back.
        alive_[from] = true;
        done_[from] = false;  // watched again until it says it is done
        Message m;
        m.type = MsgType::kStart;
        m.from = JobLayout::coordinator();
        m.to = msg.from;
        host_->Send(m);
        // It starts from what it had (a checkpoint, or nothing): tell it who is dead now, so
        // that a restored shard does not wait for an evicted worker.
        for (ActorId a = 1; a < layout_.num_actors(); ++a) {
          if (alive_[static_cast<size_t>(a)] || a == msg.from) continue;
          SendMembership(msg.from, a, kMemberDead);
        }
        Announce(now, msg.from, kMemberJoined);
        return {};
      }
      if (registered_[from]) return {};  // a repeated registration changes nothing
      registered_[from] = true;
      if (++num_registered_ == layout_.num_actors() - 1) {
        started_ = true;
        for (ActorId a = 1; a < layout_.num_actors(); ++a) {
          last_heard_[static_cast<size_t>(a)] = now;
          Message m;
          m.type = MsgType::kStart;
          m.from = JobLayout::coordinator();
          m.to = a;
          host_->Send(m);
        }
        if (fault_.enabled()) host_->SetTimer(now + fault_.heartbeat_ns, kFailureCheckTimer);
      }
      return {};
    }
    case MsgType::kHeartbeat:
      // (A heartbeat from an actor declared dead -- a stopped process continued -- changes
      // nothing: it stays out until it registers again; hosts refuse its old connections.)
      return {};
    case MsgType::kDone:
      // From a worker: its last iteration is done. From a shard (fault tolerance only): it
      // has nothing left to do and stops heartbeating, so its silence is no failure.
      if (done_[from]) return {};
      {
        const bool was_finished = finished();
        done_[from] = true;
        if (!was_finished && finished()) TraceJobDone(now);
      }
      return {};
    default:
      return ProtocolError::Of(ProtocolErrorCode::kNotForThisActor,
                               std::string("the coordinator takes no ") + MsgTypeName(msg.type));
  }
}

void Coordinator::OnTimer(TimeNs now, uint64_t timer_id) {
  if (timer_id != kFailureCheckTimer || finished()) return;
  for (ActorId a = 1; a < layout_.num_actors(); ++a) {
    const size_t i = static_cast<size_t>(a);
    if (!alive_[i] || done_[i]) continue;
    if (now - last_heard_[i] > fault_.failure_timeout_ns) {
      alive_[i] = false;
      Announce(now, a, kMemberDead);
    }
  }
  if (finished()) {
    // The workers just evicted were the last ones the job waited for.
    TraceJobDone(now);
    return;
  }
  host_->SetTimer(now + fault_.heartbeat_ns, kFailureCheckTimer);
}

void Coordinator::TraceJobDone(TimeNs now) {
  TraceEvent e;
  e.kind = TraceKind::kJobDone;
  e.ts = now;
  e.actor = JobLayout::coordinator();
  host_->Trace(e);
}

// Bumps the epoch and tells every live actor (and, for a rejoin, the one that is back).
void Coordinator::Announce(TimeNs now, ActorId who, int32_t what) {
  (void)now;
  ++epoch_;
  for (ActorId a = 1; a < layout_.num_actors(); ++a) {
    if (alive_[static_cast<size_t>(a)] && a != who) SendMembership(a, who, what);
  }
}

// Tells `to` that `who` died or came back (kMemberDead / kMemberJoined), in the current epoch.
void Coordinator::SendMembership(ActorId to, ActorId who, int32_t what) {
  Message m;
  m.type = MsgType::kMembership;
  m.from = JobLayout::coordinator();
  m.to = to;
  m.clock = epoch_;
  m.step = who;
  m.chunk = what;
  host_->Send(m);
}

bool Coordinator::finished() const {
  for (int w = 0; w < layout_.num_workers; ++w) {
    const size_t i = static_cast<size_t>(layout_.worker(w));
    const bool evicted = fault_.evict_dead_workers && !alive_[i];
    if (!done_[i] && !evicted) return false;
  }
  return true;
}

void Coordinator::OnComputeDone(TimeNs now, const ComputeTask& task) {
  (void)now;
  POSEIDON_CHECK(false) << "coordinator got a " << TaskKindName(task.kind) << " task";
}

std::string Coordinator::WaitingFor() const {
  if (num_registered_ < layout_.num_actors() - 1) {
    return "coordinator: " + std::to_string(num_registered_) + " of " +
           std::to_string(layout_.num_actors() - 1) + " actors registered";
  }
  int done = 0, dead = 0;
  for (ActorId a = 1; a < layout_.num_actors(); ++a) {
    done += done_[static_cast<size_t>(a)] && layout_.IsWorker(a) ? 1 : 0;
    dead += alive_[static_cast<size_t>(a)] ? 0 : 1;
  }
  return "coordinator: " + std::to_string(done) + " of " + std::to_string(layout_.num_workers) +
         " workers done, " + std::to_string(dead) + " actors dead (epoch " +
         std::to_string(epoch_) + ")";
}

}  // namespace poseidon::core
