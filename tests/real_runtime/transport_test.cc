// Loopback tests of the live transport: the handshake, every malformed input the transport must
// refuse (each refused with a logged reason while a good connection in the same process keeps
// delivering), backpressure, TLS and a half-open flood. The attacks on handshake v2 (relay,
// reflection, replay, injection) are in hostile_peer_test.cc. No sleeps: every wait is on a
// condition with a generous deadline.
#include "real_runtime/tls_files.h"
#include "real_runtime/transport.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <bit>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "real_runtime/frame.h"
#include "real_runtime/half.h"
#include "real_runtime/handshake.h"
#include "real_runtime/secret_file.h"
#include "real_runtime/socket_pacing.h"
#include "tests/real_runtime/transport_helpers.h"

namespace poseidon::rt {
namespace {

using namespace poseidon::rt::test;  // NOLINT: the fixture and its helpers

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST_F(TransportTest, HandshakeAndEveryMessageTypeRoundTripsBitExact) {
  StartGoodPair();
  auto special = std::make_shared<std::vector<float>>(std::vector<float>{
      0.0f, -0.0f, 1e-45f, std::numeric_limits<float>::infinity(), -3.5f,
      std::bit_cast<float>(0x7fc12345u), std::numeric_limits<float>::max()});
  std::vector<core::Message> want;
  for (int t = 1; t <= 7; ++t) {
    core::Message with = Msg(static_cast<core::MsgType>(t), 1, 0, special, t);
    with.step = t - 1;
    core::Message phantom = Msg(static_cast<core::MsgType>(t), 1, 0, nullptr, 100 + t);
    phantom.payload_bytes = 4096 + t;  // replayed compute: the field is kept, no floats sent
    want.push_back(with);
    want.push_back(phantom);
  }
  loop_.Run([&] {
    for (const auto& m : want) EXPECT_TRUE(w_.t->Send(m));
  });
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.msgs.size() == want.size(); }));
  ASSERT_TRUE(w_.ev.WaitFor([&] { return w_.ev.sent.size() == want.size(); }));
  std::lock_guard<std::mutex> l(v_.ev.mu);
  for (size_t i = 0; i < want.size(); ++i) {
    const core::Message& got = v_.ev.msgs[i];
    SCOPED_TRACE(core::Describe(want[i]));
    EXPECT_EQ(got.type, want[i].type);
    EXPECT_EQ(got.from, 1);
    EXPECT_EQ(got.to, 0);
    EXPECT_EQ(got.clock, want[i].clock);
    EXPECT_EQ(got.chunk, want[i].chunk);
    EXPECT_EQ(got.layer, want[i].layer);
    EXPECT_EQ(got.step, want[i].step);
    EXPECT_EQ(got.payload_bytes, want[i].payload_bytes);
    if (want[i].data) {
      ASSERT_TRUE(got.data);
      EXPECT_TRUE(SameBits(*got.data, *want[i].data));
    } else {
      EXPECT_FALSE(got.data);
    }
  }
  EXPECT_TRUE(v_.ev.refused.empty()) << v_.ev.refused[0].second;
}

TEST_F(TransportTest, ControlFramesAndBothDirections) {
  StartGoodPair();
  ASSERT_TRUE(loop_.Run([&] { return v_.t->SendControl(1, 70, {1, 2, 3}); }));
  EXPECT_FALSE(loop_.Run([&] { return v_.t->SendControl(1, 5, {1}); }));  // not a control type
  EXPECT_FALSE(loop_.Run([&] { return v_.t->Send(Msg(core::MsgType::kDone, 0, 9, nullptr)); }));
  ASSERT_TRUE(w_.ev.WaitFor([&] { return w_.ev.control.size() == 1; }));
  EXPECT_EQ(w_.ev.control[0].first, 0);
  EXPECT_EQ(w_.ev.control[0].second, (std::vector<uint8_t>{70, 1, 2, 3}));
  ExpectGoodTraffic();
}

// max_pacing_Bps (the scenario's network.connection_gbps): connections with a cap still carry
// every message, bit for bit, both ways.
TEST_F(TransportTest, PacedConnectionsCarryTraffic) {
  v_opts_.max_pacing_Bps = 50e6;
  w_opts_.max_pacing_Bps = 50e6;
  StartGoodPair();
  ExpectGoodTraffic();
}

// The cap itself: the kernel reports back the rate it was given, on a TCP socket of each family;
// a rate below 1 B/s is refused with the call named.
TEST(SocketPacing, TheKernelKeepsTheCapAndABadRateIsNamed) {
  for (int family : {AF_INET, AF_INET6}) {
    const int fd = ::socket(family, SOCK_STREAM, 0);
    if (fd < 0) continue;  // no IPv6 here
    std::string error;
    EXPECT_EQ(MaxPacingRate(fd), ~uint64_t{0});  // none yet
    ASSERT_TRUE(SetMaxPacingRate(fd, 625e6 + 0.9, &error)) << error;  // 5 Gbit/s
    EXPECT_EQ(MaxPacingRate(fd), 625'000'000u);
    EXPECT_FALSE(SetMaxPacingRate(fd, 0.5, &error));
    EXPECT_NE(error.find("SO_MAX_PACING_RATE"), std::string::npos) << error;
    EXPECT_NE(error.find(">= 1 B/s"), std::string::npos) << error;
    ::close(fd);
  }
}

TEST_F(TransportTest, WrongSecretIsRefusedOnBothSides) {
  StartGoodPair();
  TransportOptions o = Options();
  o.secret = "another-secret";
  Make(&x_, 2, o);
  loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", port_); });
  ExpectRefused(0, "HMAC-SHA256 authentication failed", "claims rank 2");
  ASSERT_TRUE(x_.ev.WaitFor([&] { return !x_.ev.down.empty(); }));
  EXPECT_EQ(x_.ev.down[0].first, 0);
  EXPECT_NE(x_.ev.down[0].second.find("authentication failed"), std::string::npos)
      << x_.ev.down[0].second;
  EXPECT_TRUE(x_.ev.up.empty());
  EXPECT_FALSE(loop_.Run([&] { return v_.t->is_up(2); }));
  ExpectGoodTraffic();
}

TEST_F(TransportTest, WrongJobIdIsRefused) {
  StartGoodPair();
  TransportOptions o = Options();
  o.job_id = "another-job";
  Make(&x_, 2, o);
  loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", port_); });
  ExpectRefused(0, "belongs to job 'another-job'", "claims rank 2");
  ASSERT_TRUE(x_.ev.WaitFor([&] { return !x_.ev.down.empty(); }));
  ExpectGoodTraffic();
}

TEST_F(TransportTest, FramesBeforeTheHandshakeAreRefused) {
  StartGoodPair();
  RawPeer p(port_);
  p.Write(GoodMessageFrame(0));
  ExpectRefused(0, "before the handshake finished", "unauthenticated peer");
  EXPECT_TRUE(p.ClosedByPeer());
  EXPECT_TRUE(v_.ev.down.empty());
  ExpectGoodTraffic();
}

TEST_F(TransportTest, BadMagicIsRefused) {
  auto f = GoodMessageFrame(2);
  f[1] ^= 0x5a;
  AttackAfterHandshake(f, "bad magic");
}

TEST_F(TransportTest, WrongVersionIsRefused) {
  FrameHeader h;
  h.version = kProtocolVersion + 1;
  h.type = static_cast<uint8_t>(core::MsgType::kDone);
  h.sender = 5;
  h.seq = 2;
  auto hb = EncodeFrameHeader(h);
  AttackAfterHandshake(std::vector<uint8_t>(hb.begin(), hb.end()),
                       fmt::format("protocol version {}", kProtocolVersion + 1));
}

TEST_F(TransportTest, FrameFromAnotherEpochIsRefused) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(core::MsgType::kDone);
  h.sender = 5;
  h.seq = 2;
  h.epoch = 1;  // the connection was bound to epoch 0 by its handshake
  auto hb = EncodeFrameHeader(h);
  AttackAfterHandshake(std::vector<uint8_t>(hb.begin(), hb.end()), "epoch 1 at stream offset");
}

TEST_F(TransportTest, HugeLengthIsRefusedBeforeAnyAllocation) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(core::MsgType::kPushGrad);
  h.sender = 5;
  h.seq = 2;
  h.length = 0xfffffff0u;  // only the header is sent: the refusal cannot wait for a body
  auto hb = EncodeFrameHeader(h);
  AttackAfterHandshake(std::vector<uint8_t>(hb.begin(), hb.end()), "exceeds the limit");
  // The raw peer's HELLO and AUTH frames come first; the length field is 20 bytes into the header.
  const size_t frame_off =
      2 * kFrameHeaderBytes + kHelloFixedBytes + std::strlen(kJob) + kMacBytes;
  EXPECT_NE(Log().find(fmt::format("stream offset {} exceeds", frame_off + 20)), std::string::npos)
      << Log();
}

TEST_F(TransportTest, StalledTruncatedBodyTimesOut) {
  auto f = GoodMessageFrame(2);
  f.resize(f.size() - 10);  // the last 10 bytes never come
  AttackAfterHandshake(f, "stalled partial frame");
}

TEST_F(TransportTest, BodyTruncatedByDisconnectIsReported) {
  StartGoodPair();
  RawPeer p(port_);
  ASSERT_TRUE(p.Handshake(5));
  auto f = GoodMessageFrame(2);
  f.resize(f.size() - 10);
  p.Write(f);
  p.Close();
  ExpectRefused(0, "truncated message payload", "rank 5 at");
  ExpectGoodTraffic();
}

TEST_F(TransportTest, OutOfSequenceFrameIsRefused) {
  AttackAfterHandshake(GoodMessageFrame(7), "sequence number 7");
}

TEST_F(TransportTest, SenderOtherThanTheAuthenticatedRankIsRefused) {
  AttackAfterHandshake(GoodMessageFrame(2, /*sender=*/1), "authenticated as rank 5");
}

TEST_F(TransportTest, MessageFromAnotherRankIsRefused) {
  AttackAfterHandshake(GoodMessageFrame(2, 5, /*from=*/1), "message from rank 1");
}

TEST_F(TransportTest, InconsistentLengthIsRefused) {
  auto body = RawPeer::MessageBody(Msg(core::MsgType::kPushGrad, 5, 0, Floats(16, 0.5f)));
  body.resize(body.size() - 4);  // the float count says 16, the frame carries 15
  AttackAfterHandshake(RawPeer::Frame(static_cast<uint8_t>(core::MsgType::kPushGrad), 5, 2, body),
                       "float count 16");
}

// protocol.gradient_wire: a gradient declared fp16 or bf16 travels as 2 bytes per value and
// arrives as the floats the format holds (half.h); the sender's on_sent has its own floats.
TEST_F(TransportTest, A16BitGradientArrivesAsTheFormatRoundsIt) {
  StartGoodPair();
  auto values = std::make_shared<std::vector<float>>(std::vector<float>{
      0.1f, -0.0f, 1e-7f, 70000.0f, -3.3e38f, std::numeric_limits<float>::infinity(), 1.0f / 3});
  std::vector<core::Message> want;
  for (core::WireFormat w : {core::WireFormat::kFp16, core::WireFormat::kBf16}) {
    for (core::MsgType t : {core::MsgType::kPushGrad, core::MsgType::kFactors, core::MsgType::kRing}) {
      core::Message m = Msg(t, 1, 0, values, static_cast<int64_t>(want.size()));
      m.wire = w;
      m.payload_bytes = 2 * static_cast<int64_t>(values->size());
      want.push_back(m);
    }
    core::Message empty = Msg(core::MsgType::kPushGrad, 1, 0, nullptr, 50);
    empty.wire = w;
    empty.payload_bytes = 4096;  // phantom (replayed compute): the size is kept
    want.push_back(empty);
  }
  loop_.Run([&] {
    for (const auto& m : want) EXPECT_TRUE(w_.t->Send(m));
  });
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.msgs.size() == want.size(); }));
  ASSERT_TRUE(w_.ev.WaitFor([&] { return w_.ev.sent.size() == want.size(); }));
  std::lock_guard<std::mutex> l(v_.ev.mu);
  for (size_t i = 0; i < want.size(); ++i) {
    const core::Message& got = v_.ev.msgs[i];
    SCOPED_TRACE(core::Describe(want[i]));
    EXPECT_EQ(got.type, want[i].type);
    EXPECT_EQ(got.wire, want[i].wire);
    EXPECT_EQ(got.clock, want[i].clock);
    EXPECT_EQ(got.payload_bytes, want[i].payload_bytes);
    if (!want[i].data) {
      EXPECT_FALSE(got.data);
      continue;
    }
    std::vector<float> rounded = *values;
    RoundThroughWire(want[i].wire, rounded.data(), rounded.size());
    ASSERT_TRUE(got.data);
    EXPECT_TRUE(SameBits(*got.data, rounded));
    EXPECT_FALSE(SameBits(*got.data, *values));
  }
  std::lock_guard<std::mutex> l2(w_.ev.mu);
  for (const core::Message& m : w_.ev.sent) {
    if (m.data) {
      EXPECT_TRUE(SameBits(*m.data, *values));
    }
  }
  EXPECT_TRUE(v_.ev.refused.empty()) << v_.ev.refused[0].second;
}

// A frame whose size does not fit the format its flags declare, or with flags no frame has, is
// refused naming the peer and the offset, as other malformed frames are.
TEST_F(TransportTest, A16BitFrameOfTheWrongSizeIsRefused) {
  core::Message m = Msg(core::MsgType::kPushGrad, 5, 0, Floats(16, 0.5f));
  m.wire = core::WireFormat::kFp16;
  auto body = RawPeer::MessageBody(m);  // 16 values of 4 bytes: an fp32 body
  AttackAfterHandshake(RawPeer::Frame(static_cast<uint8_t>(core::MsgType::kPushGrad), 5, 2, body,
                                      0, kFrameFlagsFp16),
                       "float count 16 in fp16 at stream offset");
}

TEST_F(TransportTest, A16BitFrameWhosePayloadBytesDisagreeIsRefused) {
  core::Message m = Msg(core::MsgType::kPushGrad, 5, 0, Floats(16, 0.5f));
  m.wire = core::WireFormat::kBf16;
  auto fixed = EncodeMessageFixed(m);
  std::vector<uint8_t> body(fixed.begin(), fixed.end());
  body[28] = 64;  // payload_bytes 64 (fp32's), the count 16 of 2 bytes
  body.resize(body.size() + 32, 0);
  AttackAfterHandshake(RawPeer::Frame(static_cast<uint8_t>(core::MsgType::kPushGrad), 5, 2, body,
                                      0, kFrameFlagsBf16),
                       "payload_bytes 64 at stream offset");
}

TEST_F(TransportTest, UnknownFlagsAreRefused) {
  AttackAfterHandshake(RawPeer::Frame(static_cast<uint8_t>(core::MsgType::kPushGrad), 5, 2,
                                      RawPeer::MessageBody(Msg(core::MsgType::kPushGrad, 5, 0,
                                                               Floats(16, 0.5f))),
                                      0, 3),
                       "unknown flags 0x03");
}

TEST_F(TransportTest, FlagsOnAControlFrameAreRefused) {
  AttackAfterHandshake(RawPeer::Frame(kFrameControlMin, 5, 2, {1, 2}, 0, kFrameFlagsFp16),
                       "unknown flags 0x01");
}

TEST_F(TransportTest, UnknownFrameTypeIsRefused) {
  AttackAfterHandshake(RawPeer::Frame(40, 5, 2, {1, 2}), "unexpected frame type 40");
}

TEST_F(TransportTest, SecondConnectionClaimingAConnectedRankIsRefused) {
  StartGoodPair();
  RawPeer p(port_);
  p.SendHello(/*rank=*/1, /*peer_rank=*/0);  // W's rank, already connected
  ExpectRefused(0, "rank 1 is already connected", "claims rank 1");
  EXPECT_TRUE(loop_.Run([&] { return v_.t->is_up(1); }));
  ExpectGoodTraffic();
}

// Fault tolerance: once rank 5's incarnation 0 is declared dead, its connection closes and a
// HELLO of that incarnation is refused; incarnation 1 (a restart) is welcome.
TEST_F(TransportTest, AnIncarnationDeclaredDeadIsRefusedAndALaterOneIsAccepted) {
  StartGoodPair();
  RawPeer old(port_);
  ASSERT_TRUE(old.Handshake(5));
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 2; }));
  loop_.Run([&] {
    v_.t->RefuseEpochsBelow(5, 1);
    return true;
  });
  EXPECT_TRUE(old.ClosedByPeer());
  EXPECT_FALSE(loop_.Run([&] { return v_.t->is_up(5); }));
  RawPeer again(port_);
  EXPECT_FALSE(again.Handshake(5, kSecret, kJob, /*epoch=*/0));
  ExpectRefused(0, "an old incarnation", "claims rank 5");
  RawPeer restarted(port_);
  ASSERT_TRUE(restarted.Handshake(5, kSecret, kJob, /*epoch=*/1));
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 3; }));
  EXPECT_EQ(loop_.Run([&] { return v_.t->peer_epoch(5); }), 1u);
  ExpectGoodTraffic();
}

// A later incarnation replaces a live connection of its rank, but only once it proved it holds
// the secret: a HELLO claiming a later epoch alone cannot kick a peer off.
TEST_F(TransportTest, ALaterIncarnationReplacesTheOldConnectionOnlyOnceAuthenticated) {
  StartGoodPair();
  RawPeer old(port_);
  ASSERT_TRUE(old.Handshake(5));
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 2; }));
  RawPeer impostor(port_);
  EXPECT_FALSE(impostor.Handshake(5, "not the secret", kJob, /*epoch=*/7));
  EXPECT_TRUE(loop_.Run([&] { return v_.t->is_up(5) && v_.t->peer_epoch(5) == 0; }));
  RawPeer restarted(port_);
  ASSERT_TRUE(restarted.Handshake(5, kSecret, kJob, /*epoch=*/1));
  EXPECT_TRUE(old.ClosedByPeer());
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 3; }));
  EXPECT_EQ(loop_.Run([&] { return v_.t->peer_epoch(5); }), 1u);
}

// X (rank 2) reaches V through a relay that records what X sends: its HELLO, its AUTH and three
// messages, all delivered. The recording, sent verbatim on a new connection, is refused: first
// while X is still connected (a second connection for rank 2), then after X has left, when
// only the AUTH stands between the replay and the job -- and that AUTH proved the secret over
// the nonce V sent *X*, not over the fresh one V sends the replay. Not one replayed message
// reaches on_message.
TEST_F(TransportTest, RecordedSessionReplayedOnANewConnectionIsRefused) {
  StartGoodPair();
  RecordingRelay relay(port_);
  Make(&x_, 2, Options());
  loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", relay.port()); });
  ASSERT_TRUE(x_.ev.WaitFor([&] { return x_.ev.up.size() == 1; })) << Log();
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 2; })) << Log();
  for (int64_t clock = 1; clock <= 3; ++clock) {
    ASSERT_TRUE(loop_.Run([&] {
      return x_.t->Send(Msg(core::MsgType::kPushGrad, 2, 0, Floats(64, 1.0f), clock));
    }));
  }
  ASSERT_TRUE(v_.ev.WaitFor([&] {
    return std::count_if(v_.ev.msgs.begin(), v_.ev.msgs.end(),
                         [](const core::Message& m) { return m.from == 2; }) == 3;
  }));
  const std::vector<uint8_t> recorded = relay.Recorded();
  const auto frames = SplitFrames(recorded);
  ASSERT_EQ(frames.size(), 5u);
  EXPECT_EQ(frames[0][6], kFrameHello);
  EXPECT_EQ(frames[1][6], kFrameAuth);
  for (size_t i = 2; i < 5; ++i) EXPECT_EQ(frames[i][6], static_cast<uint8_t>(core::MsgType::kPushGrad));

  // While X is connected: the replayed HELLO claims a rank that is already up.
  size_t before = Refusals();
  {
    RawPeer p(port_);
    p.Write(recorded);
    // (A fatal failure here returns before ClosedByPeer, which would wait forever.)
    ASSERT_NO_FATAL_FAILURE(ExpectRefused(before, "rank 2 is already connected", "claims rank 2"));
    EXPECT_TRUE(p.ClosedByPeer());
  }
  EXPECT_TRUE(loop_.Run([&] { return v_.t->is_up(2); })) << "the genuine connection stays up";

  // X leaves; the same bytes on a new connection fail the HMAC over V's fresh nonce.
  loop_.Run([&] { x_.t->Close(); });
  ASSERT_TRUE(v_.ev.WaitFor([&] { return !v_.ev.down.empty(); }));
  EXPECT_EQ(v_.ev.down[0].first, 2);
  before = Refusals();
  {
    RawPeer p(port_);
    p.Write(recorded);
    ASSERT_NO_FATAL_FAILURE(
        ExpectRefused(before,
                      fmt::format("AUTH at stream offset {}: HMAC-SHA256 authentication failed",
                                  frames[0].size() + kFrameHeaderBytes),
                      "claims rank 2"));
    EXPECT_TRUE(p.ClosedByPeer());
  }
  EXPECT_FALSE(loop_.Run([&] { return v_.t->is_up(2); }));
  EXPECT_EQ(CountFrom(v_.ev, 2), 3u) << "a replayed message was delivered";
  ExpectGoodTraffic();
}

// Replay inside a live, authenticated stream: the relay re-sends X's first message frame,
// byte for byte, after it was delivered. Its sequence number is one V has already seen, so V
// closes the connection instead of delivering the message twice. (OutOfSequenceFrameIsRefused
// covers a sequence number from the future; this is one from the past, taken off the wire.)
TEST_F(TransportTest, RecordedFrameInjectedAgainIntoTheLiveStreamIsRefused) {
  StartGoodPair();
  RecordingRelay relay(port_);
  Make(&x_, 2, Options());
  loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", relay.port()); });
  ASSERT_TRUE(x_.ev.WaitFor([&] { return x_.ev.up.size() == 1; })) << Log();
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 2; })) << Log();
  ASSERT_TRUE(loop_.Run([&] {
    return x_.t->Send(Msg(core::MsgType::kPushGrad, 2, 0, Floats(64, 1.0f), 1));
  }));
  ASSERT_TRUE(v_.ev.WaitFor([&] { return !v_.ev.msgs.empty(); }));
  ASSERT_TRUE(x_.ev.WaitFor([&] { return x_.ev.sent.size() == 1; }));
  const std::vector<uint8_t> recorded = relay.Recorded();
  const auto frames = SplitFrames(recorded);
  ASSERT_EQ(frames.size(), 3u);  // HELLO, AUTH, the message (sequence number 2)
  const size_t before = Refusals();
  relay.Inject(frames[2]);
  ASSERT_NO_FATAL_FAILURE(
      ExpectRefused(before,
                    fmt::format("sequence number 2 at stream offset {}, expected 3; frame replayed",
                                recorded.size() + 12),
                    "rank 2 at"));
  ASSERT_TRUE(v_.ev.WaitFor([&] { return !v_.ev.down.empty(); }));
  EXPECT_EQ(v_.ev.down[0].first, 2);
  EXPECT_EQ(CountFrom(v_.ev, 2), 1u) << "the replayed message was delivered";
  // The relay drops X's side too: X learns that its connection is gone.
  ASSERT_TRUE(x_.ev.WaitFor([&] { return !x_.ev.down.empty(); }));
  ExpectGoodTraffic();
}

TEST_F(TransportTest, BackpressureRefusesPastTheBoundAndDeliversWhatWasAccepted) {
  v_opts_.max_queued_bytes_per_peer = 1 << 20;
  v_opts_.socket_buffer_bytes = 64 << 10;
  StartGoodPair();
  RawPeer p(port_);
  ASSERT_TRUE(p.Handshake(5));
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 2; }));
  // The raw peer reads nothing: V's queue to it fills up to the bound, then Send says no.
  auto payload = Floats(64 << 10, 1.0f);  // 256 KiB per message
  int accepted = 0;
  size_t queued = 0;
  loop_.Run([&] {
    for (int i = 0; i < 100000; ++i) {
      if (!v_.t->Send(Msg(core::MsgType::kParams, 0, 5, payload, i))) break;
      ++accepted;
    }
    queued = v_.t->queued_bytes(5);
  });
  ASSERT_LT(accepted, 100000) << "Send never pushed back";
  EXPECT_GT(queued, 0u);
  EXPECT_LE(queued, size_t{1} << 20);
  ExpectGoodTraffic();  // the other peer is not held up
  // Drain: every accepted message arrives, in order, and on_sent fires for each.
  for (int i = 0; i < accepted; ++i) {
    uint8_t type = 0;
    std::vector<uint8_t> body = p.ReadFrame(&type);
    MessageFixedResult r = DecodeMessageFixed(body.data(), type,
                                              static_cast<uint32_t>(body.size()), 0);
    ASSERT_TRUE(r.ok) << r.error;
    ASSERT_EQ(r.fixed.msg.clock, i);
  }
  ASSERT_TRUE(v_.ev.WaitFor([&] {
    return static_cast<int>(v_.ev.sent.size()) >= accepted + 1;  // + the good-traffic message
  }));
  EXPECT_EQ(loop_.Run([&] { return v_.t->queued_bytes(5); }), 0u);
  EXPECT_TRUE(loop_.Run([&] { return v_.t->Send(Msg(core::MsgType::kParams, 0, 5, payload)); }));
}

TEST_F(TransportTest, HalfOpenFloodIsBoundedAndAGoodPeerStillConnects) {
  v_opts_.max_pending_handshakes = 4;
  v_opts_.handshake_timeout = 300ms;
  StartGoodPair();
  constexpr int kFlood = 20;
  std::vector<std::unique_ptr<RawPeer>> flood;
  for (int i = 0; i < kFlood; ++i) flood.push_back(std::make_unique<RawPeer>(port_));
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.refused.size() == kFlood; })) << Log();
  int over_limit = 0, timed_out = 0;
  {
    std::lock_guard<std::mutex> l(v_.ev.mu);
    for (auto& [who, why] : v_.ev.refused) {
      over_limit += why.find("max_pending_handshakes") != std::string::npos;
      timed_out += why.find("handshake not completed within 300 ms") != std::string::npos;
    }
  }
  EXPECT_EQ(over_limit + timed_out, kFlood);
  EXPECT_GE(over_limit, 1);
  EXPECT_GE(timed_out, 1);
  for (auto& p : flood) EXPECT_TRUE(p->ClosedByPeer());
  ExpectGoodTraffic();
  Make(&x_, 2, Options());  // a new good peer gets in once the flood is gone
  loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", port_); });
  ASSERT_TRUE(x_.ev.WaitFor([&] { return x_.ev.up.size() == 1; }));
  ASSERT_TRUE(loop_.Run([&] { return x_.t->Send(Msg(core::MsgType::kDone, 2, 0, nullptr)); }));
  ASSERT_TRUE(v_.ev.WaitFor([&] {
    for (auto& m : v_.ev.msgs) {
      if (m.from == 2) return true;
    }
    return false;
  }));
}

// Silent connections hold every handshake slot and will for a minute (handshake_timeout): a
// genuine peer still gets in, because a new connection past max_pending_handshakes closes the
// oldest handshaking one instead of being refused itself. (Refusing newcomers, as the transport
// once did, kept every peer out until the flood timed out: a job flooded during its rendezvous
// failed with exit code 3.)
TEST_F(TransportTest, GoodPeerGetsInWhileSilentConnectionsHoldEverySlot) {
  v_opts_.max_pending_handshakes = 4;
  v_opts_.handshake_timeout = 60s;  // far beyond X's connect_timeout (10 s): no slot frees itself
  StartGoodPair();
  constexpr int kFlood = 10;
  std::vector<std::unique_ptr<RawPeer>> flood;
  for (int i = 0; i < kFlood; ++i) flood.push_back(std::make_unique<RawPeer>(port_));
  // Every slot is taken: the 6 beyond the limit each closed an older one.
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.refused.size() == kFlood - 4; })) << Log();
  {
    std::lock_guard<std::mutex> l(v_.ev.mu);
    for (auto& [who, why] : v_.ev.refused) {
      EXPECT_NE(why.find("4 connections are handshaking (max_pending_handshakes); the oldest, "
                         "this one (0 bytes received), is closed to make room for a new one"),
                std::string::npos)
          << why;
      EXPECT_NE(who.find("unauthenticated peer at 127.0.0.1:"), std::string::npos) << who;
    }
  }
  Make(&x_, 2, Options());
  loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", port_); });
  ASSERT_TRUE(x_.ev.WaitFor([&] { return !x_.ev.up.empty() || !x_.ev.down.empty(); }));
  ASSERT_EQ(x_.ev.up.size(), 1u) << (x_.ev.down.empty() ? "" : x_.ev.down[0].second) << "\n"
                                 << Log();
  EXPECT_TRUE(loop_.Run([&] { return v_.t->is_up(2); }));
  EXPECT_EQ(Refusals(), static_cast<size_t>(kFlood - 4 + 1)) << "X's connection evicted one more";
  // The flood's oldest connections were closed; the newest still wait for their handshake.
  for (int i = 0; i < kFlood - 4 + 1; ++i) EXPECT_TRUE(flood[static_cast<size_t>(i)]->ClosedByPeer());
  ExpectGoodTraffic();
}

// A dialer whose connection the listener cuts off during the handshake (a listener that just
// evicted it, or one restarting) dials again, with backoff, until connect_timeout, instead of
// reporting the peer lost. Here the first listener on the port accepts and closes at once; the
// real one listens on the same port a moment later.
TEST_F(TransportTest, DialerCutOffDuringTheHandshakeDialsAgain) {
  asio::io_context io;
  tcp::acceptor fake(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const uint16_t port = fake.local_endpoint().port();
  Make(&x_, 2, Options());
  loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", port); });
  {
    tcp::socket s(io);
    fake.accept(s);
    s.close();
  }
  fake.close();
  ASSERT_TRUE(x_.ev.WaitFor([&] { return !x_.ev.refused.empty() || !x_.ev.down.empty(); }));
  {
    std::lock_guard<std::mutex> l(x_.ev.mu);
    ASSERT_TRUE(x_.ev.down.empty()) << x_.ev.down[0].second;
    EXPECT_NE(x_.ev.refused[0].second.find("connection closed by the peer during the handshake"),
              std::string::npos)
        << x_.ev.refused[0].second;
  }
  EXPECT_NE(Log().find("during the handshake at stream offset 0"), std::string::npos) << Log();
  EXPECT_NE(Log().find("; dialing again"), std::string::npos) << Log();
  Make(&v_, 0, v_opts_);
  ASSERT_EQ(loop_.Run([&] { return v_.t->Listen("127.0.0.1", port); }), port);
  ASSERT_TRUE(x_.ev.WaitFor([&] { return !x_.ev.up.empty() || !x_.ev.down.empty(); }));
  ASSERT_EQ(x_.ev.up.size(), 1u) << (x_.ev.down.empty() ? "" : x_.ev.down[0].second);
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 1; }));
  EXPECT_EQ(v_.ev.up[0], 2);
}

TEST_F(TransportTest, ConnectGivesUpAfterTheTimeout) {
  uint16_t closed_port = 0;
  {
    asio::io_context io;
    tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    closed_port = a.local_endpoint().port();
  }  // nothing listens there now
  TransportOptions o = Options();
  o.connect_timeout = 300ms;
  Make(&x_, 2, o);
  loop_.Run([&] { x_.t->Connect(7, "127.0.0.1", closed_port); });
  ASSERT_TRUE(x_.ev.WaitFor([&] { return !x_.ev.down.empty(); }));
  EXPECT_EQ(x_.ev.down[0].first, 7);
  EXPECT_NE(x_.ev.down[0].second.find("could not connect to rank 7"), std::string::npos);
}

// ---- TLS ------------------------------------------------------------------------------------

std::filesystem::path TempDir(const char* tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (std::string(tag) + "-XXXXXX"));
  return std::filesystem::path(mkdtemp(tmpl.data()));
}

TEST_F(TransportTest, TlsHandshakeAndRoundTrip) {
  const auto dir = TempDir("poseidon-tls");
  const TlsFiles files = WriteJobTlsFiles(dir, {});
  auto tls = [&](TransportOptions o) {
    o.tls = true;
    o.tls_cert = files.cert;
    o.tls_key = files.key;
    o.tls_ca = files.ca;
    return o;
  };
  v_opts_ = tls(v_opts_);
  Make(&v_, 0, v_opts_);
  Make(&w_, 1, tls(Options()));
  port_ = loop_.Run([&] { return v_.t->Listen("127.0.0.1", 0); });
  loop_.Run([&] { w_.t->Connect(0, "127.0.0.1", port_); });
  ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 1; })) << Log();
  ASSERT_TRUE(w_.ev.WaitFor([&] { return w_.ev.up.size() == 1; })) << Log();
  ExpectGoodTraffic();
  EXPECT_NE(Log().find("TLS)"), std::string::npos);
  // A plain-TCP peer speaking to the TLS listener is refused.
  RawPeer p(port_);
  p.Write(GoodMessageFrame(0));
  ExpectRefused(0, "TLS handshake failed", "unauthenticated peer");
  ExpectGoodTraffic();
  std::filesystem::remove_all(dir);
}

// The job's TLS files: a key only its owner reads, a certificate that is its own CA (the
// handshake above uses them), no silent overwrite, and a clear error for a folder without them.
TEST(JobTlsFiles, WritesAnOwnerOnlyKeyRefusesToOverwriteAndNamesMissingFiles) {
  const auto dir = TempDir("poseidon-tls-files");
  const std::string sub = dir / "job";
  const TlsFiles f = WriteJobTlsFiles(sub, {});
  EXPECT_EQ(f.cert, sub + "/cert.pem");
  EXPECT_EQ(f.ca, f.cert);
  struct stat st {};
  ASSERT_EQ(::stat(f.key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream cert(f.cert);
  std::string first;
  std::getline(cert, first);
  EXPECT_EQ(first, "-----BEGIN CERTIFICATE-----");
  const std::string key_before = [&] {
    std::ifstream k(f.key);
    return std::string(std::istreambuf_iterator<char>(k), {});
  }();
  try {
    WriteJobTlsFiles(sub, {});
    ADD_FAILURE() << "an existing identity was overwritten";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("exists already"), std::string::npos) << e.what();
  }
  TlsIdentityOptions force;
  force.overwrite = true;
  WriteJobTlsFiles(sub, force);
  std::ifstream k(f.key);
  EXPECT_NE(std::string(std::istreambuf_iterator<char>(k), {}), key_before);  // a new key
  EXPECT_EQ(JobTlsFiles(sub).ca, f.cert);
  { std::ofstream(sub + "/ca.pem") << "x"; }
  EXPECT_EQ(JobTlsFiles(sub).ca, sub + "/ca.pem");  // an organisation's own CA, when given
  ::chmod(f.key.c_str(), 0640);
  try {
    JobTlsFiles(sub);
    ADD_FAILURE() << "a key readable by the group was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("readable by group or others (mode 0640); chmod 600"),
              std::string::npos)
        << e.what();
  }
  ::chmod(f.key.c_str(), 0600);
  try {
    JobTlsFiles(dir);
    ADD_FAILURE() << "no error for a folder without the files";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cert.pem: no such file; create the job's TLS files "
                                         "with 'poseidon tls-init"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// ---- the secret file ------------------------------------------------------------------------

TEST(LoadSecretFile, ReadsTheBytesAndRefusesBadFiles) {
  const auto dir = TempDir("poseidon-secret");
  const std::string path = dir / "job.secret";
  auto expect_error = [&](const std::string& what) {
    try {
      LoadSecretFile(path);
      ADD_FAILURE() << "no error for " << what;
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  expect_error("No such file");
  { std::ofstream(path, std::ios::binary); }
  ::chmod(path.c_str(), 0600);
  expect_error("is empty");
  { std::ofstream(path, std::ios::binary) << std::string("ab\0c\n", 5); }
  ::chmod(path.c_str(), 0640);
  expect_error("chmod 600");
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(LoadSecretFile(path), std::string("ab\0c\n", 5));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace poseidon::rt
