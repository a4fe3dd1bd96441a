// real_runtime/transport_handshake.cc: handshake v2 on one connection: HELLO both ways, the
// transcript and session keys, AUTH (the dialer proves first). The rules are handshake.h's.
#include "real_runtime/transport_impl.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace poseidon::rt {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// The dialer speaks first; the acceptor answers a HELLO that passed its checks (OnBody).
void Transport::Impl::BeginHandshake(const std::shared_ptr<Conn>& c) {
  c->state = ConnState::kHandshake;
  if (c->dialer) SendHello(c, static_cast<uint32_t>(c->expected_peer));
  ReadHeader(c);
}

void Transport::Impl::SendHello(const std::shared_ptr<Conn>& c, uint32_t peer_rank) {
  c->mine.version = kProtocolVersion;
  c->mine.role = c->role();
  c->mine.rank = static_cast<uint32_t>(rank_);
  c->mine.epoch = o_.epoch;
  c->mine.peer_rank = peer_rank;
  c->mine.nonce = RandomNonce();
  c->mine.job_id = o_.job_id;
  c->mine_raw = EncodeHello(c->mine);
  OutFrame f;
  f.body = c->mine_raw;
  Enqueue(c, kFrameHello, std::move(f));
}

void Transport::Impl::SendAuth(const std::shared_ptr<Conn>& c) {
  const Mac proof = AuthProof(c->keys, c->role(), c->transcript);
  OutFrame f;
  f.body.assign(proof.begin(), proof.end());
  Enqueue(c, kFrameAuth, std::move(f));
  c->tx_mac = std::make_unique<FrameMac>(c->keys.Sending(c->role()));  // every later frame
}

// The peer's HELLO: the pure rules (CheckHello), then what needs this transport's state. The
// acceptor answers with its own HELLO; both sides then know the transcript and the keys, and
// the dialer proves first.
void Transport::Impl::OnHello(const std::shared_ptr<Conn>& c, uint64_t body_off) {
  Hello h;
  std::string err;
  if (!DecodeHello(c->body, body_off, &h, &err)) return Fail(c, err);
  if (h.rank == c->cur.sender) c->claimed = static_cast<int>(h.rank);
  HelloRules rules;
  rules.job_id = o_.job_id;
  rules.my_rank = static_cast<uint32_t>(rank_);
  rules.my_role = c->role();
  rules.num_ranks = o_.num_ranks;
  rules.expected_peer = c->expected_peer;
  rules.header_sender = c->cur.sender;
  rules.header_epoch = c->cur.epoch;
  if (err = CheckHello(h, rules, body_off); !err.empty()) return Fail(c, err);
  if (auto it = min_epoch_.find(c->claimed); it != min_epoch_.end() && h.epoch < it->second) {
    return Fail(c, fmt::format("HELLO at stream offset {}: rank {} in epoch {}, an old "
                               "incarnation (declared dead; this node accepts epoch {} or "
                               "later from it)",
                               body_off + 7, c->claimed, h.epoch, it->second));
  }
  if (auto err2 = Duplicate(*c, h.epoch); !err2.empty()) return Fail(c, err2);
  c->theirs = std::move(h);
  c->theirs_raw = std::move(c->body);
  c->body.clear();
  c->have_hello = true;
  if (!c->dialer) SendHello(c, c->theirs.rank);
  c->transcript = c->dialer ? TranscriptHash(c->mine_raw, c->theirs_raw)
                            : TranscriptHash(c->theirs_raw, c->mine_raw);
  c->keys = DeriveSessionKeys(o_.secret, c->transcript);
  if (c->dialer) SendAuth(c);
  ReadHeader(c);
}

// The peer's proof over this connection's transcript. The acceptor proves only once the
// dialer's proof checked out, so an outsider who dials never obtains a proof.
void Transport::Impl::OnAuth(const std::shared_ptr<Conn>& c, uint64_t body_off) {
  if (c->body.size() != kMacBytes) {
    return Fail(c, fmt::format("AUTH at stream offset {} has {} bytes, expected {}", body_off,
                               c->body.size(), kMacBytes));
  }
  const Role peer_role = c->dialer ? Role::kAcceptor : Role::kDialer;
  const Mac want = AuthProof(c->keys, peer_role, c->transcript);
  if (!MacEqual(want.data(), c->body.data())) {
    return Fail(c,
                fmt::format("AUTH at stream offset {}: HMAC-SHA256 authentication failed; the "
                            "peer does not hold this job's secret (are the secret files "
                            "identical?), or the handshake was relayed or replayed from "
                            "another connection",
                            body_off),
                /*peer_hung_up=*/false, c->dialer ? 0 : kRefusedAuthFailed);
  }
  if (auto it = up_.find(c->claimed);
      it != up_.end() && it->second->theirs.epoch < c->theirs.epoch) {
    // Authenticated, and a later incarnation: a restarted process replaces the connection of
    // its dead predecessor, whose close may not have reached us yet.
    log_->info("rank {}: rank {} is back in epoch {}; closing its epoch {} connection", rank_,
               c->claimed, c->theirs.epoch, it->second->theirs.epoch);
    Shutdown(it->second);
  }
  if (auto err = Duplicate(*c, c->theirs.epoch); !err.empty()) return Fail(c, err);
  c->rx_mac = std::make_unique<FrameMac>(c->keys.Receiving(c->role()));
  if (!c->dialer) SendAuth(c);
  c->state = ConnState::kUp;
  c->peer = c->claimed;
  if (c->pending_counted) {
    c->pending_counted = false;
    --pending_;
  }
  c->hs_timer.cancel();
  if (c->dial) {
    c->dial->done = true;
    c->dial.reset();
  }
  up_[c->peer] = c;
  log_->info("rank {}: connection with rank {} at {} is up ({}{})", rank_, c->peer, c->addr,
             c->dialer ? "dialed" : "accepted", c->tls ? ", TLS" : "");
  ReadHeader(c);
  if (cb_.on_peer_up) cb_.on_peer_up(c->peer);
}

// A connection claiming an already connected rank is refused, unless it claims a later epoch
// (a restarted process; it replaces the old connection once authenticated).
std::string Transport::Impl::Duplicate(const Conn& c, uint32_t epoch) const {
  auto it = up_.find(c.claimed);
  if (it == up_.end() || it->second->theirs.epoch < epoch) return {};
  return fmt::format(
      "rank {} is already connected from {}; a second connection claiming it is "
      "refused",
      c.claimed, it->second->addr);
}

}  // namespace poseidon::rt
