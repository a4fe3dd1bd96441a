#include "core/send_queue.h"

namespace poseidon::core {

void SendQueue::Send(Message msg, int priority) {
  if (window_ <= 0) {
    host_->Send(std::move(msg));
    return;
  }
  Dest& d = dests_[msg.to];
  d.queue.push(Pending{priority, seq_++, std::move(msg)});
  ++queued_;
  Pump(d);
}

void SendQueue::OnSent(const Message& msg) {
  if (window_ <= 0) return;
  auto it = dests_.find(msg.to);
  if (it == dests_.end()) return;
  it->second.in_flight -= msg.payload_bytes;
  POSEIDON_CHECK(it->second.in_flight >= 0) << Describe(msg);
  Pump(it->second);
}

void SendQueue::Pump(Dest& d) {
  while (!d.queue.empty() && (d.in_flight == 0 || d.in_flight < window_)) {
    Message m = d.queue.top().msg;
    d.queue.pop();
    --queued_;
    d.in_flight += m.payload_bytes;
    host_->Send(std::move(m));
  }
}

}  // namespace poseidon::core
