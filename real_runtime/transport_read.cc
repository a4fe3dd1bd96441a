// real_runtime/transport_read.cc: reading frames: every header field checked before anything is
// allocated, bodies read into pooled vectors, each frame's tag verified before it is used.
#include "real_runtime/transport_impl.h"

#include "real_runtime/half.h"

#include <endian.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

namespace poseidon::rt {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

void Transport::Impl::ReadHeader(const std::shared_ptr<Conn>& c) {
  c->WithStream([&](auto& s) {
    s.async_read_some(asio::buffer(c->hdr.data() + c->hdr_got, kFrameHeaderBytes - c->hdr_got),
                      [self = shared_from_this(), c](asio::error_code ec, size_t n) {
                        self->OnHeaderBytes(c, ec, n);
                      });
  });
}

void Transport::Impl::ArmFrameTimer(const std::shared_ptr<Conn>& c) {
  const uint64_t gen = ++c->frame_gen;
  c->frame_timer.expires_after(o_.frame_timeout);
  c->frame_timer.async_wait([self = shared_from_this(), c, gen](asio::error_code ec) {
    if (ec || c->state == ConnState::kClosed || c->frame_gen != gen) return;
    self->Fail(c,
               fmt::format("stalled partial frame: the frame at stream offset {} is "
                           "incomplete after {} ms ({} bytes of it received)",
                           c->frame_off, self->o_.frame_timeout.count(), c->rx_off - c->frame_off));
  });
}

// Inside TLS, bytes that fail the record layer's checks (altered or injected on the path) are
// a refusal, not the peer hanging up: true when `ec` is one and c was closed for it.
bool Transport::Impl::TlsRefused(const std::shared_ptr<Conn>& c, asio::error_code ec) {
  if (!c->tls || ec.category() != asio::error::get_ssl_category()) return false;
  Fail(c, fmt::format("TLS refused the bytes after stream offset {} ({}): they were altered or "
                      "injected on the path",
                      c->rx_off, ec.message()));
  return true;
}

// A read failed: the peer went away or the socket broke.
void Transport::Impl::ReadFailed(const std::shared_ptr<Conn>& c, asio::error_code ec,
                                 const char* what) {
  if (c->state == ConnState::kClosed) return;
  if (TlsRefused(c, ec)) return;
  Fail(c,
       fmt::format("connection lost ({}) at stream offset {} in the middle of the frame that "
                   "starts at offset {}: truncated {}",
                   ec.message(), c->rx_off, c->frame_off, what),
       /*peer_hung_up=*/true);
}

void Transport::Impl::OnHeaderBytes(const std::shared_ptr<Conn>& c, asio::error_code ec, size_t n) {
  if (c->state == ConnState::kClosed || closed_) return;
  if (ec) {
    if (TlsRefused(c, ec)) return;
    if (c->hdr_got == 0) return PeerClosed(c, ec.message());
    return ReadFailed(c, ec, "header");
  }
  if (c->hdr_got == 0 && n > 0) {
    c->frame_off = c->rx_off;
    ArmFrameTimer(c);
  }
  c->hdr_got += n;
  c->rx_off += n;
  if (c->hdr_got < kFrameHeaderBytes) return ReadHeader(c);

  const bool up = c->state == ConnState::kUp;
  const uint32_t limit = up ? o_.max_payload_bytes : kMaxHandshakeFrameBytes;
  // Frames carry their sender's epoch (its incarnation): before the HELLO, whatever the
  // header says (the HELLO's body must repeat it); afterwards the one the HELLO bound.
  uint32_t header_epoch = 0;
  std::memcpy(&header_epoch, c->hdr.data() + 24, sizeof header_epoch);
  const uint32_t want_epoch = c->have_hello ? c->theirs.epoch : le32toh(header_epoch);
  DecodeResult r = DecodeFrameHeader(c->hdr.data(), c->frame_off, limit, c->rx_seq, want_epoch);
  if (!r.ok) {
    if (!up && r.error.find("exceeds the limit") != std::string::npos) {
      r.error += " (the limit before authentication)";
    }
    return Fail(c, r.error);
  }
  const FrameHeader& h = r.header;
  // Only a core message's frame has flags: its wire format (DecodeMessageFixed checks them).
  if (h.flags != 0 && !(up && IsCoreMessageType(h.type))) {
    return Fail(
        c, fmt::format("unknown flags 0x{:02x} at stream offset {}", h.flags, c->frame_off + 7));
  }
  if (up && h.sender != static_cast<uint32_t>(c->peer)) {
    return Fail(c, fmt::format("sender rank {} at stream offset {}, but this connection is "
                               "authenticated as rank {}",
                               h.sender, c->frame_off + 8, c->peer));
  }
  ++c->rx_seq;
  c->cur = h;
  if (c->state == ConnState::kTls || c->state == ConnState::kHandshake) {
    const uint8_t want = c->have_hello ? kFrameAuth : kFrameHello;
    // The acceptor may answer a dialer's AUTH with a refusal instead.
    const bool refusal = h.type == kFrameRefused && c->dialer && c->have_hello;
    if (h.type != want && !refusal) {
      return Fail(c, fmt::format("frame type {} at stream offset {} before the handshake "
                                 "finished (expected {}); the peer must authenticate first",
                                 h.type, c->frame_off + 6, want == kFrameHello ? "HELLO" : "AUTH"));
    }
    return ReadBody(c);
  }
  if (IsCoreMessageType(h.type)) {
    if (h.length < kMessageFixedBytes) {
      return Fail(c, fmt::format("a {} frame of {} bytes at stream offset {} is shorter than "
                                 "its {}-byte fixed part",
                                 core::MsgTypeName(static_cast<core::MsgType>(h.type)), h.length,
                                 c->frame_off, kMessageFixedBytes));
    }
    c->WithStream([&](auto& s) {
      asio::async_read(s, asio::buffer(c->fixed),
                       [self = shared_from_this(), c](asio::error_code e, size_t got) {
                         self->OnFixed(c, e, got);
                       });
    });
    return;
  }
  if (h.type >= kFrameControlMin) return ReadBody(c);
  Fail(c, fmt::format("unexpected frame type {} at stream offset {} on an authenticated "
                      "connection",
                      h.type, c->frame_off + 6));
}

void Transport::Impl::ReadBody(const std::shared_ptr<Conn>& c) {
  c->body.assign(c->cur.length, 0);  // the length was checked against its limit
  std::vector<asio::mutable_buffer> bufs;
  if (!c->body.empty()) bufs.push_back(asio::buffer(c->body));
  if (c->state == ConnState::kUp) bufs.push_back(asio::buffer(c->rx_tag));
  if (bufs.empty()) return OnBody(c, {}, 0);
  c->WithStream([&](auto& s) {
    asio::async_read(s, bufs, [self = shared_from_this(), c](asio::error_code e, size_t got) {
      self->OnBody(c, e, got);
    });
  });
}

void Transport::Impl::OnFixed(const std::shared_ptr<Conn>& c, asio::error_code ec, size_t got) {
  if (c->state == ConnState::kClosed || closed_) return;
  c->rx_off += got;
  if (ec) return ReadFailed(c, ec, "message body");
  MessageFixedResult r = DecodeMessageFixed(c->fixed.data(), c->cur.type, c->cur.length,
                                            c->frame_off + kFrameHeaderBytes, c->cur.flags);
  if (!r.ok) return Fail(c, r.error);
  c->mf = r.fixed;
  std::vector<asio::mutable_buffer> rest;
  if (c->mf.float_count > 0) {
    // The length was checked against its limit, and the float count against the length.
    c->floats = pool_->Get(c->mf.float_count);
    if (c->mf.msg.wire == core::WireFormat::kFp32) {
      rest.push_back(asio::buffer(c->floats->data(), c->floats->size() * sizeof(float)));
    } else {
      c->values16.resize(c->mf.float_count);
      rest.push_back(asio::buffer(c->values16.data(), c->values16.size() * sizeof(uint16_t)));
    }
  }
  rest.push_back(asio::buffer(c->rx_tag));  // a message travels only on an authenticated link
  c->WithStream([&](auto& s) {
    asio::async_read(s, rest, [self = shared_from_this(), c](asio::error_code e, size_t n) {
      if (c->state == ConnState::kClosed || self->closed_) return;
      c->rx_off += n;
      if (e) return self->ReadFailed(c, e, "message payload");
      self->OnMessageRead(c);
    });
  });
}

// Before a frame's contents are used: only its header and a message's sizes (to read the rest
// into a buffer of the checked length) are looked at before its tag verifies.
bool Transport::Impl::TagChecks(const std::shared_ptr<Conn>& c, Bytes body, Bytes more) {
  const bool ok = c->rx_mac->Verify(c->cur.seq, {Bytes(c->hdr.data(), c->hdr.size()), body, more},
                                    c->rx_tag.data());
  if (ok) return true;
  Fail(c, fmt::format("the frame at stream offset {} (type {}, sequence number {}) fails its "
                      "authentication tag at stream offset {}: it was altered, injected, "
                      "reflected or relayed on the path, or sent under another session's key; "
                      "frame refused",
                      c->frame_off, c->cur.type, c->cur.seq,
                      c->frame_off + kFrameHeaderBytes + c->cur.length));
  return false;
}

void Transport::Impl::OnMessageRead(const std::shared_ptr<Conn>& c) {
  const bool wide = c->mf.msg.wire == core::WireFormat::kFp32;
  const Bytes values =
      !c->floats ? Bytes()
      : wide     ? Bytes(reinterpret_cast<const uint8_t*>(c->floats->data()),
                         c->floats->size() * sizeof(float))
                 : Bytes(reinterpret_cast<const uint8_t*>(c->values16.data()),
                         c->values16.size() * sizeof(uint16_t));
  if (!TagChecks(c, Bytes(c->fixed.data(), c->fixed.size()), values)) return;
  if (c->floats && !wide) {
    DecodeValues(c->mf.msg.wire, c->values16.data(), c->values16.size(), c->floats->data());
  }
  const uint64_t body_off = c->frame_off + kFrameHeaderBytes;
  if (c->mf.msg.from != c->peer) {
    return Fail(c, fmt::format("message from rank {} at stream offset {}, but this connection "
                               "is authenticated as rank {}",
                               c->mf.msg.from, body_off, c->peer));
  }
  if (c->mf.msg.to != rank_) {
    return Fail(c, fmt::format("message to rank {} at stream offset {}, but this is rank {}",
                               c->mf.msg.to, body_off + 4, rank_));
  }
  Deliver(c);
}

void Transport::Impl::FrameDone(const std::shared_ptr<Conn>& c) {
  ++c->frame_gen;
  c->frame_timer.cancel();
  c->hdr_got = 0;
}

void Transport::Impl::Deliver(const std::shared_ptr<Conn>& c) {
  FrameDone(c);
  core::Message m = std::move(c->mf.msg);
  m.data = std::move(c->floats);
  c->floats.reset();
  ReadHeader(c);
  if (cb_.on_message) cb_.on_message(std::move(m));
}

void Transport::Impl::OnBody(const std::shared_ptr<Conn>& c, asio::error_code ec, size_t got) {
  if (c->state == ConnState::kClosed || closed_) return;
  c->rx_off += got;
  if (ec) return ReadFailed(c, ec, "frame body");
  FrameDone(c);
  const uint64_t body_off = c->frame_off + kFrameHeaderBytes;
  if (c->state == ConnState::kUp) {
    if (!TagChecks(c, Bytes(c->body.data(), c->body.size()))) return;
    std::vector<uint8_t> body = std::move(c->body);
    c->body.clear();
    const uint8_t type = c->cur.type;
    ReadHeader(c);
    if (cb_.on_control) cb_.on_control(c->peer, type, std::move(body));
    return;
  }
  if (!c->have_hello) return OnHello(c, body_off);
  if (c->cur.type == kFrameRefused) {
    const uint8_t code = c->body.size() == 1 ? c->body[0] : 0;
    return Fail(c, code == kRefusedAuthFailed
                       ? "the peer refused this node's AUTH: HMAC-SHA256 authentication failed "
                         "(are the secret files identical?)"
                       : fmt::format("the peer refused the handshake (refusal code {})", code));
  }
  OnAuth(c, body_off);
}

}  // namespace poseidon::rt
