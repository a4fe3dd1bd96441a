// real_runtime/rendezvous.h: how the processes of a live job find each other and agree on one
// clock.
//
//   1. The coordinator (rank 0) listens at the known address; every other process listens on a
//      port of its own, dials the coordinator and says where it listens (kCtlHello).
//   2. Once all have, the coordinator sends the address table (kCtlPeers) and every process
//      dials the peers of lower rank, so that every pair shares one connection. A restarted
//      process (rejoin) gets the table of the processes alive and dials them all.
//   3. Meanwhile each process sends kClockPings pings to the coordinator and keeps the offset of
//      the sample with the smallest round trip (ClockSync, NTP-style): every process's trace then
//      shares the coordinator's time base (on one host to within microseconds; across hosts to
//      within half the smallest round trip).
//   4. A process is ready (Complete) once it has the table, its clock offset and a connection
//      to every process in the table; the host then starts its actor.
//
// No silent wait: the rendezvous must be done within `timeout`, or it fails naming who is
// missing. Single-threaded, on the io_context's thread; decides nothing about the protocol.
#pragma once

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/host.h"
#include "real_runtime/control.h"
#include "real_runtime/transport.h"

namespace poseidon::rt {

// Clock pings per process.
constexpr int kClockPings = 8;

// The offset of a local clock to the coordinator's, from ping round trips: the sample with the
// smallest round trip wins, the coordinator's reading taken as half-way through it.
class ClockSync {
 public:
  // A pong: `sent` and `received` on the local clock, `coordinator` the coordinator's time.
  void OnPong(core::TimeNs sent, core::TimeNs coordinator, core::TimeNs received);
  int samples() const { return samples_; }
  bool done() const { return samples_ >= kClockPings; }
  core::TimeNs offset() const { return offset_; }  // add to the local clock
  core::TimeNs round_trip() const { return best_rtt_; }

 private:
  core::TimeNs offset_ = 0;
  core::TimeNs best_rtt_ = std::numeric_limits<core::TimeNs>::max();
  int samples_ = 0;
};

struct RendezvousOptions {
  int rank = 0;
  int num_actors = 1;
  std::string coordinator_host = "127.0.0.1";
  uint16_t coordinator_port = 0;  // rank 0 listens here (0 = the OS picks)
  std::string listen_host = "127.0.0.1";
  std::string advertise_host;         // where peers reach this process; empty = listen_host
  bool rejoin = false;                // a restarted process
  std::chrono::seconds timeout{120};  // 0 = wait forever
};

class Rendezvous {
 public:
  struct Callbacks {
    std::function<std::string(int rank)> name;  // a rank's actor name, for messages
    std::function<core::TimeNs()> local;        // this process's clock
    std::function<bool(int rank)> alive;        // coordinator: not declared dead
    std::function<bool(int rank)> registered;   // coordinator: registered with its core
    // This process's part of the rendezvous is done, or it is failing or ending anyway (the
    // timeout then has nothing to report).
    std::function<bool()> started;
    std::function<void(const std::string& why)> fail;  // the process cannot go on
    std::function<void()> progressed;                  // maybe Complete now
  };

  Rendezvous(asio::io_context& io, Transport& transport, RendezvousOptions o, Callbacks cb);

  // Listens (and, but for the coordinator, dials it); arms the timeout. Returns the port.
  uint16_t Start();
  // A connection came up.
  void OnPeerUp(int peer);
  // The control frames of the rendezvous.
  static bool Handles(uint8_t type);
  // One of them from `peer`; false when it is malformed or not expected here (the caller logs
  // and drops it).
  bool OnControl(int peer, uint8_t type, const std::vector<uint8_t>& body);
  // A restarted process lost a peer before it joined: dial it again, a few times.
  void Redial(int peer);

  // Not the coordinator: the table arrived, the clock is synchronised and every process in the
  // table is connected.
  bool Complete() const;
  size_t peers() const { return table_ranks_.size(); }
  core::TimeNs clock_offset() const { return clock_.offset(); }

 private:
  void SendPeerTable(int to);
  void ArmTimeout();

  asio::io_context& io_;
  Transport& transport_;
  RendezvousOptions o_;
  Callbacks cb_;
  std::map<int, PeerAddress> addresses_;  // coordinator: the hellos; others: the table
  bool table_received_ = false;
  std::set<int> table_ranks_;  // the ranks this process must connect to
  std::map<int, int> redials_;
  ClockSync clock_;
  std::unique_ptr<asio::steady_timer> timer_;
};

}  // namespace poseidon::rt
