// The control-frame codec (real_runtime/control.h): what the encoders write decodes to the same
// values, and every decoder refuses a body of another size, a rank outside the job, an empty or
// overlong host, a duplicate rank.
#include "real_runtime/control.h"

#include <gtest/gtest.h>

#include <cmath>

namespace poseidon::rt {
namespace {

TEST(Control, EveryBodyRoundTrips) {
  PeerAddress a;
  ASSERT_TRUE(DecodeHelloCtl(EncodeHelloCtl({"10.0.0.7", 7070}), &a));
  EXPECT_EQ(a, (PeerAddress{"10.0.0.7", 7070}));
  const std::map<int, PeerAddress> table = {{1, {"a", 1}}, {4, {"node-4", 65535}}};
  std::map<int, PeerAddress> got;
  ASSERT_TRUE(DecodePeers(EncodePeers(table), 5, &got));
  EXPECT_EQ(got, table);
  int64_t c = 0, d = 0;
  double l = 0;
  ASSERT_TRUE(DecodeLoss(EncodeLoss(12, 0.53), &c, &l));
  EXPECT_EQ(c, 12);
  EXPECT_EQ(l, 0.53);
  ASSERT_TRUE(DecodeI64(EncodeI64(-5), &c));
  EXPECT_EQ(c, -5);
  ASSERT_TRUE(DecodeF64(EncodeF64(NAN), &l));
  EXPECT_TRUE(std::isnan(l));
  ASSERT_TRUE(DecodePong(EncodePong(3, 4), &c, &d));
  EXPECT_EQ(c, 3);
  EXPECT_EQ(d, 4);
  std::string text;
  ASSERT_TRUE(DecodeStatus(EncodeStatus("shard 0: waiting"), &text));
  EXPECT_EQ(text, "shard 0: waiting");
  EXPECT_EQ(EncodeStatus(std::string(5000, 'x')).size(), kMaxStatusBytes);
  EXPECT_STREQ(ControlName(kCtlPeers), "peer table");
  EXPECT_STREQ(ControlName(200), "unknown");
}

TEST(Control, MalformedBodiesAreRefused) {
  PeerAddress a;
  EXPECT_FALSE(DecodeHelloCtl({1, 2}, &a));  // a port, no host
  EXPECT_FALSE(DecodeHelloCtl(EncodeHelloCtl({std::string(256, 'h'), 1}), &a));
  std::map<int, PeerAddress> t;
  EXPECT_FALSE(DecodePeers(EncodePeers({{0, {"h", 1}}}), 5, &t));  // the coordinator's rank
  EXPECT_FALSE(DecodePeers(EncodePeers({{5, {"h", 1}}}), 5, &t));  // outside the job
  EXPECT_FALSE(DecodePeers(EncodePeers({{1, {"", 1}}}), 5, &t));   // no host
  std::vector<uint8_t> twice = EncodePeers({{1, {"h", 1}}, {2, {"h", 1}}});
  twice[4] = 1;  // the second entry's rank written over with the first's: a duplicate
  twice[4 + 4 + 2 + 1 + 1] = 1;
  EXPECT_FALSE(DecodePeers(twice, 5, &t));
  std::vector<uint8_t> trailing = EncodePeers({{1, {"h", 1}}});
  trailing.push_back(0);
  EXPECT_FALSE(DecodePeers(trailing, 5, &t));
  int64_t c = 0;
  double l = 0;
  std::vector<uint8_t> loss = EncodeLoss(1, 2);
  loss.push_back(0);
  EXPECT_FALSE(DecodeLoss(loss, &c, &l));
  EXPECT_FALSE(DecodeI64({1, 2, 3}, &c));
  EXPECT_FALSE(DecodeF64({}, &l));
  std::string text;
  EXPECT_FALSE(DecodeStatus(std::vector<uint8_t>(kMaxStatusBytes + 1, 'x'), &text));
}

}  // namespace
}  // namespace poseidon::rt
