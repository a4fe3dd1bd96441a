// The 16-bit wire formats (real_runtime/half.h): every fp16 and bf16 value survives a round trip
// through fp32 bit for bit; fp32 values round to nearest, ties to even, as a reference computed in
// double arithmetic says; overflow, underflow, infinities, NaNs and signed zeros.
#include "real_runtime/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace poseidon::rt {
namespace {

using core::WireFormat;

// The value an fp32 rounds to in a format of `mantissa` stored bits, smallest normal exponent
// `min_exp` and largest finite `max_finite`, rounding to nearest even in double arithmetic.
double Reference(float f, int mantissa, int min_exp, double max_finite) {
  const double v = f;
  if (v == 0 || !std::isfinite(v)) return v;
  int e = 0;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const int exp = std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, exp - mantissa);
  const double q = std::nearbyint(v / ulp) * ulp;  // the default rounding: to nearest even
  // Past the largest finite value by half an ulp or more: infinity.
  const double limit = max_finite + std::ldexp(1.0, static_cast<int>(std::log2(max_finite)) - mantissa) / 2;
  if (std::abs(v) >= limit) return std::copysign(std::numeric_limits<double>::infinity(), v);
  return q;
}

double HalfRef(float f) { return Reference(f, 10, -14, 65504.0); }
double Bf16Ref(float f) { return Reference(f, 7, -126, std::ldexp(255.0, 120)); }

TEST(Half, EveryHalfAndBf16ValueRoundTripsExactly) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    const float b = Bf16ToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << std::hex << i;
      EXPECT_EQ(std::signbit(HalfToFloat(FloatToHalf(f))), std::signbit(f)) << std::hex << i;
    } else {
      ASSERT_EQ(FloatToHalf(f), h) << std::hex << i;
    }
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(b)))) << std::hex << i;
    } else {
      ASSERT_EQ(FloatToBf16(b), h) << std::hex << i;
    }
  }
}

TEST(Half, RoundsToNearestEvenLikeTheReference) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> cases;
  for (int i = 0; i < 1000000; ++i) cases.push_back(std::bit_cast<float>(bits(rng)));
  // Dense around the edges: fp16's subnormals and its largest values, ties of both formats.
  for (uint32_t x = 0x33000000u - 4096; x < 0x38800000u + 4096; x += 37) cases.push_back(std::bit_cast<float>(x));
  for (uint32_t x = 0x477fe000u - 8192; x < 0x47800000u + 8192; ++x) cases.push_back(std::bit_cast<float>(x));
  for (uint32_t x = 0x3f800000u; x < 0x3f800000u + (1u << 17); x += 0x800u) {
    cases.push_back(std::bit_cast<float>(x));  // every fp16 tie in [1, 2) and its neighbours
    cases.push_back(std::bit_cast<float>(x + 1));
    cases.push_back(std::bit_cast<float>(x - 1));
  }
  cases.push_back(std::numeric_limits<float>::max());
  cases.push_back(std::numeric_limits<float>::denorm_min());
  for (float f : cases) {
    if (std::isnan(f)) continue;
    const double h = HalfRef(f), b = Bf16Ref(f);
    ASSERT_EQ(static_cast<double>(HalfToFloat(FloatToHalf(f))), h) << std::hexfloat << f;
    ASSERT_EQ(static_cast<double>(Bf16ToFloat(FloatToBf16(f))), b) << std::hexfloat << f;
    // The sign of a zero is kept.
    if (h == 0) {
      ASSERT_EQ(std::signbit(HalfToFloat(FloatToHalf(f))), std::signbit(f));
    }
  }
}

TEST(Half, NamedValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);    // largest finite
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);  // below the tie
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);    // the tie rounds to even: infinity
  EXPECT_EQ(FloatToHalf(1e9f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-inf), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie: to even, zero
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::bit_cast<float>(0x7f800001u)))));  // sNaN
  EXPECT_EQ(HalfToFloat(0x7c00), inf);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));

  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie: to even
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up: infinity
  EXPECT_EQ(FloatToBf16(-inf), 0xff80);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  // A NaN whose payload is only in the low bits stays a NaN (rounding would make it infinity).
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::bit_cast<float>(0xffffffffu)))));
  EXPECT_TRUE(std::signbit(Bf16ToFloat(FloatToBf16(std::bit_cast<float>(0xffffffffu)))));
}

TEST(Half, BulkConversionsAgreeWithTheScalarOnes) {
  std::vector<float> v = {0.1f, -3.3f, 1e-6f, 7e4f, 123.456f, -0.0f};
  for (WireFormat w : {WireFormat::kFp16, WireFormat::kBf16}) {
    std::vector<uint16_t> enc(v.size());
    EncodeValues(w, v.data(), v.size(), enc.data());
    std::vector<float> dec(v.size());
    DecodeValues(w, enc.data(), enc.size(), dec.data());
    std::vector<float> rounded = v;
    RoundThroughWire(w, rounded.data(), rounded.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t one = w == WireFormat::kFp16 ? FloatToHalf(v[i]) : FloatToBf16(v[i]);
      EXPECT_EQ(enc[i], one);
      EXPECT_EQ(std::bit_cast<uint32_t>(dec[i]), std::bit_cast<uint32_t>(rounded[i]));
    }
    EXPECT_EQ(WireValueBytes(w), 2u);
  }
  std::vector<float> same = v;
  RoundThroughWire(WireFormat::kFp32, same.data(), same.size());
  EXPECT_EQ(same, v);
  EXPECT_EQ(WireValueBytes(WireFormat::kFp32), 4u);
}

// The bulk conversions (F16C's 8 at a time where the CPU has it) give the scalar functions' bits
// for every input: random patterns (NaNs with payloads, infinities, subnormals) and every half.
TEST(Half, TheFastBulkPathGivesTheScalarBits) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> in(1 << 20);
  for (float& f : in) f = std::bit_cast<float>(bits(rng));
  for (uint32_t x = 0x33000000u; x < 0x38800000u; x += 4099) in.push_back(std::bit_cast<float>(x));
  for (WireFormat w : {WireFormat::kFp16, WireFormat::kBf16}) {
    std::vector<uint16_t> enc(in.size() + 3);
    EncodeValues(w, in.data() + 3, in.size() - 3, enc.data());  // unaligned, a ragged tail
    for (size_t i = 3; i < in.size(); ++i) {
      const uint16_t one = w == WireFormat::kFp16 ? FloatToHalf(in[i]) : FloatToBf16(in[i]);
      ASSERT_EQ(enc[i - 3], one) << std::hex << std::bit_cast<uint32_t>(in[i]);
    }
    std::vector<uint16_t> every(65536);
    for (uint32_t i = 0; i < 65536; ++i) every[i] = static_cast<uint16_t>(i);
    std::vector<float> dec(every.size());
    DecodeValues(w, every.data(), every.size(), dec.data());
    for (uint32_t i = 0; i < 65536; ++i) {
      const float one = w == WireFormat::kFp16 ? HalfToFloat(static_cast<uint16_t>(i))
                                               : Bf16ToFloat(static_cast<uint16_t>(i));
      if (std::isnan(one)) {
        ASSERT_TRUE(std::isnan(dec[i])) << std::hex << i;
        ASSERT_EQ(std::signbit(dec[i]), std::signbit(one)) << std::hex << i;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(dec[i]), std::bit_cast<uint32_t>(one)) << std::hex << i;
      }
    }
  }
}

}  // namespace
}  // namespace poseidon::rt
