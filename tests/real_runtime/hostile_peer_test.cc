// The attacks handshake v2 and the frame tags exist to stop (real_runtime/handshake.h), each
// over plain TCP and over TLS (the attacker then holds the job's TLS identity but not its
// secret): a relay of proofs between two connections, a proof reflected back to its author, a
// recorded session replayed, a frame injected, a frame reflected. Each is refused with one log
// line naming the peer's address and the rank it claims, nothing it sent is delivered, and the
// good connection V-W goes on carrying messages (the job is unaffected).
#include <gtest/gtest.h>

#include <filesystem>

#include "real_runtime/frame.h"
#include "real_runtime/frame_mac.h"
#include "real_runtime/handshake.h"
#include "tests/real_runtime/transport_helpers.h"

namespace poseidon::rt {
namespace {

using namespace poseidon::rt::test;  // NOLINT: the fixture and its helpers

class HostilePeerTest : public TransportTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    TransportTest::SetUp();
    if (Tls()) {
      std::string tmpl = std::filesystem::temp_directory_path() / "poseidon-hostile-XXXXXX";
      dir_ = mkdtemp(tmpl.data());
      files_ = WriteJobTlsFiles(dir_, {});
      v_opts_ = WithTls(v_opts_, files_);
      w_opts_ = WithTls(w_opts_, files_);
    }
  }
  void TearDown() override {
    TransportTest::TearDown();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  bool Tls() const { return GetParam(); }
  TransportOptions Opts() const { return Tls() ? WithTls(Options(), files_) : Options(); }
  const TlsFiles* Identity() const { return Tls() ? &files_ : nullptr; }

  // X (rank 2) up with V through a relay that records both directions.
  void ConnectXThrough(RecordingRelay& relay) {
    Make(&x_, 2, Opts());
    loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", relay.port()); });
    ASSERT_TRUE(x_.ev.WaitFor([&] { return x_.ev.up.size() == 1; })) << Log();
    ASSERT_TRUE(v_.ev.WaitFor([&] { return v_.ev.up.size() == 2; })) << Log();
  }

  std::filesystem::path dir_;
  TlsFiles files_;
};

// A peer of the wire protocol before handshake v2 is told what is wrong: upgrade it.
TEST_P(HostilePeerTest, AVersion1PeerIsToldToUpgrade) {
  StartGoodPair();
  RawPeer p(port_, Identity());
  FrameHeader h;
  h.version = 1;
  h.type = kFrameHello;
  h.sender = 2;
  h.length = 44 + 8;  // v1's HELLO: 44 bytes and the job id
  const auto hb = EncodeFrameHeader(h);
  p.Write(std::vector<uint8_t>(hb.begin(), hb.end()));
  ExpectRefused(0, "protocol version 1 at stream offset 4, this build speaks 2 (the peer runs an "
                   "older Poseidon",
                "unauthenticated peer");
  EXPECT_TRUE(p.ClosedByPeer());
  ExpectGoodTraffic();
}

// The attack that got through handshake v1: an outsider dials X claiming to be Y (with a later
// epoch, so that it would replace Y's connection), takes the proof X computes, and presents it
// to Y as X on a second connection. Under v2 an acceptor proves only after the dialer did, so
// neither V nor X ever sends the outsider a proof: each answers HELLO, then refuses the AUTH the
// outsider has to make up, and V's connection with the real W (rank 1) stays up in epoch 0.
TEST_P(HostilePeerTest, AnOutsiderWhoDialsObtainsNoProofToRelay) {
  StartGoodPair();
  Make(&x_, 2, Opts());
  const uint16_t x_port = loop_.Run([&] { return x_.t->Listen("127.0.0.1", 0); });
  RawPeer to_x(x_port, Identity());  // claims rank 1 (W), epoch 1
  RawPeer to_v(port_, Identity());   // claims rank 1 (W) too, epoch 1, towards V
  to_x.SendHello(/*rank=*/1, /*peer_rank=*/2, /*epoch=*/1);
  uint8_t type = 0;
  const std::vector<uint8_t> x_hello = to_x.ReadFrame(&type);
  ASSERT_EQ(type, kFrameHello);
  Hello xh;
  std::string err;
  ASSERT_TRUE(DecodeHello(x_hello, 0, &xh, &err)) << err;
  to_v.SendHello(/*rank=*/1, /*peer_rank=*/0, /*epoch=*/1, kJob, &xh.nonce);  // X's nonce
  const std::vector<uint8_t> v_hello = to_v.ReadFrame(&type);
  ASSERT_EQ(type, kFrameHello);
  // Both now wait for the dialer's proof. What the outsider has to offer: bytes of the other
  // side's HELLO, shaped as a proof.
  const size_t before = Refusals();
  auto as_proof = [](const std::vector<uint8_t>& b) {
    return std::vector<uint8_t>(b.begin() + 15, b.begin() + 15 + kMacBytes);  // a nonce
  };
  to_v.Write(RawPeer::Frame(kFrameAuth, 1, 1, as_proof(x_hello), 1));
  to_x.Write(RawPeer::Frame(kFrameAuth, 1, 1, as_proof(v_hello), 1));
  ASSERT_NO_FATAL_FAILURE(
      ExpectRefused(before, "HMAC-SHA256 authentication failed", "(claims rank 1)"));
  // Each side's last word is a refusal, never a proof.
  for (RawPeer* p : {&to_v, &to_x}) {
    const std::vector<uint8_t> body = p->ReadFrame(&type);
    EXPECT_EQ(type, kFrameRefused);
    EXPECT_EQ(body, std::vector<uint8_t>{1});
    EXPECT_TRUE(p->ClosedByPeer());
  }
  ASSERT_TRUE(x_.ev.WaitFor([&] { return !x_.ev.refused.empty(); }));
  {
    std::lock_guard<std::mutex> l(x_.ev.mu);
    EXPECT_NE(x_.ev.refused[0].first.find("unauthenticated peer at 127.0.0.1:"), std::string::npos);
    EXPECT_NE(x_.ev.refused[0].first.find("(claims rank 1)"), std::string::npos);
    EXPECT_TRUE(x_.ev.up.empty());
  }
  EXPECT_TRUE(loop_.Run([&] { return v_.t->is_up(1) && v_.t->peer_epoch(1) == 0; }))
      << "the genuine W was replaced";
  ExpectGoodTraffic();
}

// X dials what it takes for rank 0 (a forged address), and the outsider there dials X back
// claiming rank 0: it answers X's HELLO with X's own acceptor nonce, so that X's dialer proof
// covers X's nonce, and hands that proof back to X on the second connection, and back again on
// the first as the acceptor's. Each transcript is another (other HELLOs, other roles): X refuses
// both.
TEST_P(HostilePeerTest, AProofReflectedBackToItsAuthorIsRefused) {
  Make(&x_, 2, Opts());
  const uint16_t x_port = loop_.Run([&] { return x_.t->Listen("127.0.0.1", 0); });
  asio::io_context io;
  tcp::acceptor trap(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const uint16_t trap_port = trap.local_endpoint().port();
  loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", trap_port); });
  RawPeer dialed(trap, Identity());
  uint8_t type = 0;
  const std::vector<uint8_t> x_dial_hello = dialed.ReadFrame(&type);
  ASSERT_EQ(type, kFrameHello);
  RawPeer back(x_port, Identity());
  back.SendHello(/*rank=*/0, /*peer_rank=*/2);
  const std::vector<uint8_t> x_acc_hello = back.ReadFrame(&type);
  ASSERT_EQ(type, kFrameHello);
  Hello xa;
  std::string err;
  ASSERT_TRUE(DecodeHello(x_acc_hello, 0, &xa, &err)) << err;
  // As rank 0 answering X's dial, with X's own acceptor nonce: X proves over it.
  Hello fake;
  fake.version = kProtocolVersion;
  fake.role = Role::kAcceptor;
  fake.rank = 0;
  fake.peer_rank = 2;
  fake.nonce = xa.nonce;
  fake.job_id = kJob;
  dialed.Write(RawPeer::Frame(kFrameHello, 0, 0, EncodeHello(fake)));
  const std::vector<uint8_t> x_proof = dialed.ReadFrame(&type);
  ASSERT_EQ(type, kFrameAuth) << "X, the dialer, proves first";
  back.Write(RawPeer::Frame(kFrameAuth, 0, 1, x_proof));
  dialed.Write(RawPeer::Frame(kFrameAuth, 0, 1, x_proof));
  ASSERT_TRUE(x_.ev.WaitFor([&] { return x_.ev.refused.size() >= 2; })) << Log();
  {
    std::lock_guard<std::mutex> l(x_.ev.mu);
    for (const auto& [who, why] : x_.ev.refused) {
      EXPECT_NE(why.find("HMAC-SHA256 authentication failed"), std::string::npos) << why;
      EXPECT_NE(who.find("127.0.0.1:"), std::string::npos) << who;
      EXPECT_TRUE(who.find("(claims rank 0)") != std::string::npos ||
                  who.find("rank 0 at 127.0.0.1") != std::string::npos)
          << who;
    }
    EXPECT_TRUE(x_.ev.up.empty());
  }
  EXPECT_NE(Log().find("rank 2: closing connection with rank 0 at 127.0.0.1:"), std::string::npos);
  EXPECT_TRUE(back.ClosedByPeer());
}

// A recorded session of X's, replayed byte for byte on a new connection once X has left: the
// AUTH proved the secret over a transcript with V's nonce of that day, not the fresh one. Over
// TLS the replay goes inside the outsider's own TLS connection (the record layer's bytes cannot
// be replayed at all), so the recording is taken from a plain session of the same job.
TEST_P(HostilePeerTest, ARecordedSessionReplayedIsRefused) {
  // The recording: a plain-TCP session between X and a listener of the same job and secret.
  std::vector<uint8_t> recorded;
  {
    Node rec;
    Make(&rec, 0, Options());
    const uint16_t rec_port = loop_.Run([&] { return rec.t->Listen("127.0.0.1", 0); });
    RecordingRelay relay(rec_port);
    Make(&x_, 2, Options());
    loop_.Run([&] { x_.t->Connect(0, "127.0.0.1", relay.port()); });
    ASSERT_TRUE(x_.ev.WaitFor([&] { return x_.ev.up.size() == 1; })) << Log();
    ASSERT_TRUE(loop_.Run([&] {
      return x_.t->Send(Msg(core::MsgType::kPushGrad, 2, 0, Floats(64, 1.0f), 1));
    }));
    ASSERT_TRUE(rec.ev.WaitFor([&] { return rec.ev.msgs.size() == 1; }));
    recorded = relay.Recorded();
    loop_.Run([&] {
      x_.t->Close();
      rec.t->Close();
      rec.t.reset();
      x_.t.reset();
    });
  }
  ASSERT_EQ(SplitFrames(recorded).size(), 3u);
  StartGoodPair();
  const size_t before = Refusals();
  RawPeer p(port_, Identity());
  p.Write(recorded);
  ASSERT_NO_FATAL_FAILURE(ExpectRefused(before, "HMAC-SHA256 authentication failed",
                                        "(claims rank 2)"));
  EXPECT_TRUE(p.ClosedByPeer());
  EXPECT_EQ(CountFrom(v_.ev, 2), 0u) << "a replayed message was delivered";
  EXPECT_FALSE(loop_.Run([&] { return v_.t->is_up(2); }));
  ExpectGoodTraffic();
}

// A man in the middle of X's authenticated connection writes a frame of its own towards V: the
// next sequence number, X's rank, a valid header checksum, a plausible message, and a tag it
// cannot compute. V closes X's connection without delivering the frame. (Over TLS the record
// layer refuses the bytes before the transport sees a frame.)
TEST_P(HostilePeerTest, AFrameInjectedAfterTheHandshakeIsRefused) {
  StartGoodPair();
  RecordingRelay relay(port_);
  ASSERT_NO_FATAL_FAILURE(ConnectXThrough(relay));
  ASSERT_TRUE(loop_.Run([&] {
    return x_.t->Send(Msg(core::MsgType::kPushGrad, 2, 0, Floats(64, 1.0f), 1));
  }));
  ASSERT_TRUE(v_.ev.WaitFor([&] {
    return std::count_if(v_.ev.msgs.begin(), v_.ev.msgs.end(),
                         [](const core::Message& m) { return m.from == 2; }) == 1;
  }));
  ASSERT_TRUE(x_.ev.WaitFor([&] { return x_.ev.sent.size() == 1; }));
  const size_t before = Refusals();
  std::vector<uint8_t> forged = RawPeer::Frame(
      static_cast<uint8_t>(core::MsgType::kPushGrad), 2, /*seq=*/3,
      RawPeer::MessageBody(Msg(core::MsgType::kPushGrad, 2, 0, Floats(64, 9.0f), 2)));
  const Nonce junk = RandomNonce();
  forged.insert(forged.end(), junk.begin(), junk.begin() + kFrameTagBytes);
  const size_t at = relay.Recorded().size();  // the stream offset the forged frame lands at
  relay.Inject(forged);
  if (Tls()) {
    ASSERT_NO_FATAL_FAILURE(ExpectRefused(before, "TLS refused the bytes", "rank 2 at"));
  } else {
    ASSERT_NO_FATAL_FAILURE(ExpectRefused(
        before,
        fmt::format("the frame at stream offset {} (type {}, sequence number 3) fails its "
                    "authentication tag",
                    at,
                    static_cast<int>(core::MsgType::kPushGrad)),
        "rank 2 at"));
  }
  ASSERT_TRUE(v_.ev.WaitFor([&] { return !v_.ev.down.empty(); }));
  EXPECT_EQ(v_.ev.down[0].first, 2);
  EXPECT_EQ(CountFrom(v_.ev, 2), 1u) << "the injected message was delivered";
  ExpectGoodTraffic();
}

// A frame V sent to X, sent back to V as if from X: the man in the middle rewrites the header's
// sender and sequence number (and its checksum) and keeps V's tag. The tag was made under the
// V-to-X key for another header: V refuses it. (Plain TCP only: inside TLS the middle sees no
// frames to take.)
TEST_P(HostilePeerTest, AFrameReflectedBackToItsSenderIsRefused) {
  if (Tls()) GTEST_SKIP() << "inside TLS a man in the middle sees no frames to reflect";
  StartGoodPair();
  RecordingRelay relay(port_);
  ASSERT_NO_FATAL_FAILURE(ConnectXThrough(relay));
  ASSERT_TRUE(loop_.Run([&] {
    return v_.t->Send(Msg(core::MsgType::kParams, 0, 2, Floats(64, 3.0f), 1));
  }));
  ASSERT_TRUE(x_.ev.WaitFor([&] { return x_.ev.msgs.size() == 1; }));
  const auto from_v = SplitFrames(relay.RecordedFromServer());
  ASSERT_EQ(from_v.size(), 3u);  // HELLO, AUTH, the message
  std::vector<uint8_t> reflected = from_v[2];
  DecodeResult r = DecodeFrameHeader(reflected.data(), 0, 1u << 30, 2);
  ASSERT_TRUE(r.ok) << r.error;
  FrameHeader h = r.header;
  h.sender = 2;
  h.seq = 2;  // V has had HELLO and AUTH from X: the next it expects
  const auto hb = EncodeFrameHeader(h);
  std::copy(hb.begin(), hb.end(), reflected.begin());
  const size_t before = Refusals();
  relay.Inject(reflected);
  ASSERT_NO_FATAL_FAILURE(ExpectRefused(before, "fails its authentication tag", "rank 2 at"));
  EXPECT_EQ(CountFrom(v_.ev, 2), 0u) << "the reflected message was delivered";
  ExpectGoodTraffic();
}

INSTANTIATE_TEST_SUITE_P(PlainAndTls, HostilePeerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("Tls") : std::string("Plain");
                         });

}  // namespace
}  // namespace poseidon::rt
