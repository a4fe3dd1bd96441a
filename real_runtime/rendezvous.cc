#include "real_runtime/rendezvous.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace poseidon::rt {

void ClockSync::OnPong(core::TimeNs sent, core::TimeNs coordinator, core::TimeNs received) {
  ++samples_;
  const core::TimeNs rtt = received - sent;
  if (rtt < 0 || rtt >= best_rtt_) return;
  best_rtt_ = rtt;
  offset_ = coordinator + rtt / 2 - received;
}

Rendezvous::Rendezvous(asio::io_context& io, Transport& transport, RendezvousOptions o,
                       Callbacks cb)
    : io_(io), transport_(transport), o_(std::move(o)), cb_(std::move(cb)) {
  for (int r = 0; r < o_.num_actors; ++r) {
    if (r != o_.rank) table_ranks_.insert(r);
  }
}

uint16_t Rendezvous::Start() {
  uint16_t port = 0;
  if (o_.rank == 0) {
    port = transport_.Listen(o_.listen_host, o_.coordinator_port);
    spdlog::info("coordinator listening on {}:{} for {} processes", o_.listen_host, port,
                 o_.num_actors - 1);
  } else {
    port = transport_.Listen(o_.listen_host, 0);
    addresses_[o_.rank] = {o_.advertise_host.empty() ? o_.listen_host : o_.advertise_host, port};
    transport_.Connect(0, o_.coordinator_host, o_.coordinator_port);
  }
  ArmTimeout();
  return port;
}

// No silent wait for a process that never comes (it failed to start, or cannot reach us): past
// the bound the process fails and says who is missing.
void Rendezvous::ArmTimeout() {
  if (o_.timeout.count() <= 0) return;
  timer_ = std::make_unique<asio::steady_timer>(io_, o_.timeout);
  timer_->async_wait([this](const std::error_code& ec) {
    if (ec || cb_.started()) return;
    // Missing: never connected to this process. On the coordinator, a process that connected
    // but has not registered is waiting for peers of its own (named apart: it is not the cause).
    std::vector<std::string> missing, waiting;
    if (o_.rank != 0 && !transport_.is_up(0)) missing.push_back("the coordinator (rank 0)");
    for (int r = 1; r < o_.num_actors; ++r) {
      if (r == o_.rank) continue;
      const std::string who = fmt::format("{} (rank {})", cb_.name(r), r);
      if (!transport_.is_up(r)) {
        missing.push_back(who);
      } else if (o_.rank == 0 && !cb_.registered(r)) {
        waiting.push_back(who);
      }
    }
    const int want = o_.num_actors - 1;
    const int in = want - static_cast<int>(missing.size() + waiting.size());
    cb_.fail(fmt::format(
        "rendezvous not done after {} s: {} of {} {} {}; missing: {}{}. Were they started, with "
        "--coordinator pointing here, the same scenario and secret? (their logs say why not; "
        "--rendezvous-timeout SECONDS waits longer)",
        o_.timeout.count(), in, want, o_.rank == 0 ? "processes" : "peers",
        o_.rank == 0 ? "registered" : "connected",
        missing.empty() ? std::string("none") : fmt::format("{}", fmt::join(missing, ", ")),
        waiting.empty() ? std::string()
                        : fmt::format(" (connected, waiting for the missing: {})",
                                      fmt::join(waiting, ", "))));
  });
}

void Rendezvous::OnPeerUp(int peer) {
  if (o_.rank != 0 && peer == 0) {
    transport_.SendControl(0, kCtlHello, EncodeHelloCtl(addresses_[o_.rank]));
    transport_.SendControl(0, kCtlClockPing, EncodeI64(cb_.local()));
  }
}

bool Rendezvous::Handles(uint8_t type) {
  return type == kCtlHello || type == kCtlPeers || type == kCtlClockPing || type == kCtlClockPong;
}

bool Rendezvous::OnControl(int peer, uint8_t type, const std::vector<uint8_t>& body) {
  switch (type) {
    case kCtlHello: {
      PeerAddress a;
      if (o_.rank != 0 || !DecodeHelloCtl(body, &a)) return false;
      const bool rejoin = static_cast<int>(addresses_.size()) == o_.num_actors - 1;
      addresses_[peer] = a;
      if (rejoin) {
        SendPeerTable(peer);  // a restarted process: the table of everyone alive
      } else if (static_cast<int>(addresses_.size()) == o_.num_actors - 1) {
        SendPeerTable(-1);
      }
      return true;
    }
    case kCtlPeers: {
      std::map<int, PeerAddress> table;
      if (peer != 0 || table_received_ || !DecodePeers(body, o_.num_actors, &table)) return false;
      table_received_ = true;
      if (o_.rejoin) table_ranks_ = {0};
      for (const auto& [rank, addr] : table) {
        if (rank == o_.rank) continue;
        addresses_[rank] = addr;
        // Everyone dials the peers of lower rank; a restarted process dials all (they listen).
        if (o_.rejoin) table_ranks_.insert(rank);
        if (rank < o_.rank || o_.rejoin) transport_.Connect(rank, addr.host, addr.port);
      }
      cb_.progressed();
      return true;
    }
    case kCtlClockPing: {
      int64_t sent = 0;
      if (o_.rank != 0 || !DecodeI64(body, &sent)) return false;
      transport_.SendControl(peer, kCtlClockPong, EncodePong(sent, cb_.local()));
      return true;
    }
    case kCtlClockPong: {
      int64_t sent = 0, coordinator = 0;
      if (peer != 0 || !DecodePong(body, &sent, &coordinator) || clock_.done()) return false;
      clock_.OnPong(sent, coordinator, cb_.local());
      if (!clock_.done()) {
        transport_.SendControl(0, kCtlClockPing, EncodeI64(cb_.local()));
      } else {
        spdlog::info("{}: clock offset to the coordinator {} us (round trip {} us)",
                     cb_.name(o_.rank), clock_.offset() / 1000, clock_.round_trip() / 1000);
      }
      cb_.progressed();
      return true;
    }
    default:
      return false;
  }
}

// To everyone (to = -1) at the start, or to one restarted process: then only the peers alive.
void Rendezvous::SendPeerTable(int to) {
  std::map<int, PeerAddress> table;
  for (const auto& [rank, addr] : addresses_) {
    if (to < 0 || rank == to || cb_.alive(rank)) table[rank] = addr;
  }
  const std::vector<uint8_t> b = EncodePeers(table);
  if (to >= 0) {
    transport_.SendControl(to, kCtlPeers, b);
    return;
  }
  for (const auto& [rank, addr] : addresses_) transport_.SendControl(rank, kCtlPeers, b);
}

bool Rendezvous::Complete() const {
  if (o_.rank == 0 || !table_received_ || !clock_.done()) return false;
  for (int r : table_ranks_) {
    if (!transport_.is_up(r)) return false;
  }
  return true;
}

// A restarted process may dial a peer before that peer noticed the old incarnation's close:
// try again a few times.
void Rendezvous::Redial(int peer) {
  if (++redials_[peer] > 20) {
    cb_.fail(fmt::format("cannot reconnect to {} after 20 tries", cb_.name(peer)));
    return;
  }
  auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(250));
  t->async_wait([this, t, peer](const std::error_code& ec) {
    if (ec) return;
    if (peer == 0) {
      transport_.Connect(0, o_.coordinator_host, o_.coordinator_port);
    } else if (auto it = addresses_.find(peer); it != addresses_.end()) {
      transport_.Connect(peer, it->second.host, it->second.port);
    }
  });
}

}  // namespace poseidon::rt
