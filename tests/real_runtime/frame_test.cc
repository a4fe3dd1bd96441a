#include "real_runtime/frame.h"

#include <gtest/gtest.h>

namespace poseidon::rt {
namespace {

FrameHeader Sample() {
  FrameHeader h;
  h.type = 3;
  h.flags = 1;
  h.sender = 7;
  h.seq = 42;
  h.length = 4096;
  return h;
}

TEST(Frame, RoundTrips) {
  auto b = EncodeFrameHeader(Sample());
  DecodeResult r = DecodeFrameHeader(b.data(), 0, 1 << 20, 42);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.header.type, 3);
  EXPECT_EQ(r.header.sender, 7u);
  EXPECT_EQ(r.header.seq, 42u);
  EXPECT_EQ(r.header.length, 4096u);
}

TEST(Frame, EachHostileHeaderIsRefusedWithItsOffset) {
  auto good = EncodeFrameHeader(Sample());
  {
    auto b = good;
    b[0] ^= 0xff;
    DecodeResult r = DecodeFrameHeader(b.data(), 1000, 1 << 20, 42);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("bad magic"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("offset 1000"), std::string::npos) << r.error;
  }
  {
    auto b = good;
    b[21] ^= 0x01;  // flip a length bit: the checksum no longer matches
    DecodeResult r = DecodeFrameHeader(b.data(), 0, 1 << 20, 42);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("checksum"), std::string::npos) << r.error;
  }
  {
    FrameHeader h = Sample();
    h.version = 9;
    auto b = EncodeFrameHeader(h);
    DecodeResult r = DecodeFrameHeader(b.data(), 0, 1 << 20, 42);
    EXPECT_NE(r.error.find("protocol version 9"), std::string::npos) << r.error;
  }
  {
    FrameHeader h = Sample();
    h.length = 0xffffffffu;
    auto b = EncodeFrameHeader(h);
    DecodeResult r = DecodeFrameHeader(b.data(), 64, 1 << 20, 42);
    EXPECT_NE(r.error.find("exceeds the limit"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("offset 84"), std::string::npos) << r.error;
  }
  {
    DecodeResult r = DecodeFrameHeader(good.data(), 0, 1 << 20, 41);
    EXPECT_NE(r.error.find("sequence number 42"), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace poseidon::rt
