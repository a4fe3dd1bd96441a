#include "real_runtime/half.h"

#include <algorithm>
#include <bit>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "core/types.h"

namespace poseidon::rt {
namespace {

#if defined(__x86_64__)
// x86's F16C instructions convert 8 values at a time, rounding to nearest even (the immediate, not
// MXCSR, says how) and quieting NaNs as FloatToHalf does: the same bits, 5-10x faster than the
// loop. Used when the CPU has them (checked once, at run time; the build targets no -march).
bool DetectF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
  if ((c & (osxsave | avx | f16c)) != (osxsave | avx | f16c)) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;  // the OS saves the XMM and YMM registers
}

bool HasF16c() {
  static const bool yes = DetectF16c();
  return yes;
}

__attribute__((target("avx,f16c"))) size_t EncodeHalfF16c(const float* in, size_t n,
                                                          uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t DecodeHalfF16c(const uint16_t* in, size_t n,
                                                          float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  return i;
}
#else
bool HasF16c() { return false; }
size_t EncodeHalfF16c(const float*, size_t, uint16_t*) { return 0; }
size_t DecodeHalfF16c(const uint16_t*, size_t, float*) { return 0; }
#endif

}  // namespace

uint16_t FloatToHalf(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t x = bits & 0x7fffffffu;
  if (x >= 0x7f800000u) {  // infinity, or NaN (quiet, its top payload bits kept)
    return static_cast<uint16_t>(sign | (x == 0x7f800000u ? 0x7c00u : 0x7e00u | ((x >> 13) & 0x1ffu)));
  }
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: rounds past 65504
  if (x >= 0x38800000u) {
    // A normal half (2^-14 <= |f|): drop 13 mantissa bits, ties to even; a carry out of the
    // mantissa moves into the exponent, which is what rounding up to the next binade is.
    const uint32_t rounded = x + 0xfffu + ((x >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded >> 13) - (112u << 10)));
  }
  // A subnormal half or zero: the value in units of 2^-24, rounded to nearest even.
  const uint32_t exp = x >> 23;
  if (exp < 102) return sign;  // below 2^-25 (fp32 subnormals included): zero
  const uint32_t mant = (x & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exp;  // 14..24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q may reach 0x400: the smallest normal
  return static_cast<uint16_t>(sign | q);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  uint32_t e = 113;  // a subnormal: normalise (mant x 2^-24 is exact in fp32)
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t FloatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  // Without a branch, so that the bulk loop vectorises: a NaN keeps its sign and top bits, quiet.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;  // may round to infinity
  const uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

float Bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

void EncodeValues(core::WireFormat w, const float* in, size_t n, uint16_t* out) {
  POSEIDON_CHECK(w != core::WireFormat::kFp32) << "fp32 values are not encoded";
  if (w == core::WireFormat::kFp16) {
    for (size_t i = HasF16c() ? EncodeHalfF16c(in, n, out) : 0; i < n; ++i) {
      out[i] = FloatToHalf(in[i]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
  }
}

void DecodeValues(core::WireFormat w, const uint16_t* in, size_t n, float* out) {
  POSEIDON_CHECK(w != core::WireFormat::kFp32) << "fp32 values are not decoded";
  if (w == core::WireFormat::kFp16) {
    for (size_t i = HasF16c() ? DecodeHalfF16c(in, n, out) : 0; i < n; ++i) {
      out[i] = HalfToFloat(in[i]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
  }
}

void RoundThroughWire(core::WireFormat w, float* v, size_t n) {
  if (w == core::WireFormat::kFp32) return;
  uint16_t buf[1024];
  for (size_t i = 0; i < n; i += 1024) {
    const size_t m = std::min<size_t>(1024, n - i);
    EncodeValues(w, v + i, m, buf);
    DecodeValues(w, buf, m, v + i);
  }
}

}  // namespace poseidon::rt
