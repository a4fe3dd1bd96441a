#include "core/coordinator.h"

namespace poseidon::core {

Coordinator::Coordinator(const JobLayout& layout, Host* host) : layout_(layout), host_(host) {
  registered_.assign(layout_.num_actors(), false);
}

void Coordinator::OnStart(TimeNs now) { (void)now; }

void Coordinator::OnMessage(TimeNs now, const Message& msg) {
  switch (msg.type) {
    case MsgType::kRegister: {
      POSEIDON_CHECK(msg.from > 0 && msg.from < layout_.num_actors()) << Describe(msg);
      if (registered_[msg.from]) return;  // a repeated registration changes nothing
      registered_[msg.from] = true;
      if (++num_registered_ == layout_.num_actors() - 1) {
        for (ActorId a = 1; a < layout_.num_actors(); ++a) {
          Message m;
          m.type = MsgType::kStart;
          m.from = JobLayout::coordinator();
          m.to = a;
          host_->Send(m);
        }
      }
      return;
    }
    case MsgType::kDone:
      if (++done_ == layout_.num_workers) {
        TraceEvent e;
        e.kind = TraceKind::kJobDone;
        e.ts = now;
        e.actor = JobLayout::coordinator();
        host_->Trace(e);
      }
      return;
    default:
      POSEIDON_CHECK(false) << "coordinator cannot handle " << Describe(msg);
  }
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
  return "coordinator: " + std::to_string(done_) + " of " + std::to_string(layout_.num_workers) +
         " workers done";
}

}  // namespace poseidon::core
