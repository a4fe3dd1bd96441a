// real_runtime/transport_write.cc: the per-connection write queue: frames with their header and
// tag, scatter/gather writes, on_sent, backpressure. See transport_impl.h.
#include "real_runtime/transport_impl.h"

#include "real_runtime/half.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace poseidon::rt {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

void Transport::Impl::Enqueue(const std::shared_ptr<Conn>& c, uint8_t type, OutFrame f) {
  FrameHeader h;
  h.type = type;
  h.sender = static_cast<uint32_t>(rank_);
  h.seq = c->tx_seq++;
  h.epoch = o_.epoch;
  h.flags = f.flags;
  size_t body = f.body.size();
  if (f.is_message) body = kMessageFixedBytes + f.Values().size();
  h.length = static_cast<uint32_t>(body);
  f.header = EncodeFrameHeader(h);
  f.bytes = kFrameHeaderBytes + body;
  if (c->tx_mac) {
    // The tag is computed now, over the bytes that will be written: a message's floats must
    // not change until on_sent (Send's contract).
    const Bytes header(f.header.data(), f.header.size());
    if (f.is_message) {
      f.tag = c->tx_mac->Tag(h.seq, {header, Bytes(f.fixed.data(), f.fixed.size()), f.Values()});
    } else {
      f.tag = c->tx_mac->Tag(h.seq, {header, Bytes(f.body.data(), f.body.size())});
    }
    f.tagged = true;
    f.bytes += kFrameTagBytes;
  }
  c->queued_bytes += f.bytes;
  c->queue.push_back(std::move(f));
  if (!c->writing) DoWrite(c);
}

void Transport::Impl::DoWrite(const std::shared_ptr<Conn>& c) {
  c->bufs.clear();
  size_t n = 0;
  for (const OutFrame& f : c->queue) {
    if (n > 0 && c->bufs.size() + 4 > kMaxBuffersPerWrite) break;
    f.AppendBuffers(&c->bufs);
    ++n;
  }
  if (n == 0) return;
  c->writing = true;
  c->in_flight = n;
  c->WithStream([&](auto& s) {
    asio::async_write(s, c->bufs, [self = shared_from_this(), c](asio::error_code ec, size_t) {
      self->OnWritten(c, ec);
    });
  });
}

void Transport::Impl::OnWritten(const std::shared_ptr<Conn>& c, asio::error_code ec) {
  c->writing = false;
  if (c->state == ConnState::kClosed || closed_) return;
  if (ec) return Fail(c, "write failed: " + ec.message(), /*peer_hung_up=*/true);
  std::vector<core::Message> sent;
  for (size_t i = 0; i < c->in_flight; ++i) {
    OutFrame& f = c->queue.front();
    c->queued_bytes -= f.bytes;
    if (f.is_message) sent.push_back(std::move(f.msg));
    c->queue.pop_front();
  }
  c->in_flight = 0;
  if (!c->queue.empty()) DoWrite(c);
  if (cb_.on_sent) {
    for (const core::Message& m : sent) {
      if (closed_) return;
      cb_.on_sent(m);
    }
  }
}

bool Transport::Impl::Send(const core::Message& msg) {
  if (closed_) return false;
  auto it = up_.find(msg.to);
  if (it == up_.end()) {
    log_->warn("rank {}: cannot send {} to rank {}: not connected; message dropped", rank_,
               core::MsgTypeName(msg.type), msg.to);
    return false;
  }
  if (msg.from != rank_) {
    log_->error("rank {}: refusing to send a message whose from ({}) is not this rank", rank_,
                msg.from);
    return false;
  }
  const size_t floats = msg.data ? msg.data->size() : 0;
  const size_t body = kMessageFixedBytes + floats * WireValueBytes(msg.wire);
  if (body > o_.max_payload_bytes) {
    log_->error("rank {}: cannot send {} to rank {}: {} bytes exceed max_payload_bytes {}", rank_,
                core::MsgTypeName(msg.type), msg.to, body, o_.max_payload_bytes);
    return false;
  }
  const std::shared_ptr<Conn>& c = it->second;
  if (!HasRoom(*c, kFrameHeaderBytes + body + kFrameTagBytes)) return false;
  OutFrame f;
  f.is_message = true;
  f.msg = msg;
  f.fixed = EncodeMessageFixed(msg);
  if (msg.wire != core::WireFormat::kFp32) {
    // protocol.gradient_wire: the values go as 16-bit ones (the header's flags say which).
    f.flags = static_cast<uint8_t>(msg.wire);
    f.values16.resize(floats);
    if (floats > 0) EncodeValues(msg.wire, msg.data->data(), floats, f.values16.data());
  }
  Enqueue(c, static_cast<uint8_t>(msg.type), std::move(f));
  return true;
}

bool Transport::Impl::SendControl(int peer, uint8_t type, std::vector<uint8_t> body) {
  if (closed_) return false;
  if (type < kFrameControlMin) {
    log_->error("rank {}: control frame type {} is below {}; not sent", rank_, type,
                kFrameControlMin);
    return false;
  }
  auto it = up_.find(peer);
  if (it == up_.end()) {
    log_->warn("rank {}: cannot send control frame {} to rank {}: not connected", rank_, type,
               peer);
    return false;
  }
  if (body.size() > o_.max_payload_bytes) {
    log_->error("rank {}: control frame of {} bytes exceeds max_payload_bytes", rank_, body.size());
    return false;
  }
  if (!HasRoom(*it->second, kFrameHeaderBytes + body.size() + kFrameTagBytes)) return false;
  OutFrame f;
  f.body = std::move(body);
  Enqueue(it->second, type, std::move(f));
  return true;
}

bool Transport::Impl::HasRoom(const Conn& c, size_t bytes) const {
  if (c.queued_bytes == 0 || c.queued_bytes + bytes <= o_.max_queued_bytes_per_peer) return true;
  log_->debug(
      "rank {}: backpressure: {} bytes queued for rank {}, a {}-byte frame would pass "
      "max_queued_bytes_per_peer {}",
      rank_, c.queued_bytes, c.peer, bytes, o_.max_queued_bytes_per_peer);
  return false;
}

}  // namespace poseidon::rt
