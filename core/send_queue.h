// core/send_queue.h: send order by priority with bounded bytes in flight (after P3 and
// ByteScheduler).
//
// With a window of 0 every message goes to the host at once, in the order it was produced
// (the original Poseidon). With a window W > 0, messages wait in one queue per destination,
// ordered by (clock, priority, order of arrival); a destination gets a new message only while
// its payload bytes in flight are below W (one message is always allowed). The host reports
// each message once it has left (the live transport: its last byte is in the socket) through
// OnSent, which frees its bytes. Workers and shards use the layer id as the priority: the layers
// the next forward pass needs first go first. An older clock goes before a newer one whatever
// its layers: under SSP a sender may hold several clocks' messages, and a peer needs an older
// clock complete before it may go on (ordered by layer alone, a newer clock's lower layers
// overtook an older clock's top layer for as long as the backlog lasted; docs/validation.md,
// "A sender's window and its socket").
#pragma once

#include <cstdint>
#include <map>
#include <queue>
#include <vector>

#include "core/host.h"

namespace poseidon::core {

class SendQueue {
 public:
  SendQueue(Host* host, int64_t window_bytes) : host_(host), window_(window_bytes) {}

  void Send(Message msg, int priority);
  // The host says `msg` (sent by this queue's owner) has left the machine.
  void OnSent(const Message& msg);
  int64_t queued() const { return queued_; }

 private:
  struct Pending {
    int priority;
    uint64_t seq;
    Message msg;
    bool operator>(const Pending& o) const {
      if (msg.clock != o.msg.clock) return msg.clock > o.msg.clock;
      return priority != o.priority ? priority > o.priority : seq > o.seq;
    }
  };
  struct Dest {
    std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> queue;
    int64_t in_flight = 0;
  };
  void Pump(Dest& d);

  Host* host_;
  int64_t window_;
  uint64_t seq_ = 0;
  int64_t queued_ = 0;
  std::map<ActorId, Dest> dests_;
};

}  // namespace poseidon::core
