// real_runtime/half.h: gradients as 16-bit values on the wire (protocol.gradient_wire fp16 or
// bf16, core::WireFormat): IEEE-754 binary16 and bfloat16, converted from fp32 with round to
// nearest, ties to even, and back exactly. The one place the live runtime converts: the transport
// encodes a gradient message's floats when it writes the frame and decodes them into floats when
// it reads one (frame.h), and the worker stores round what they keep of a value they send the
// same way (RoundThroughWire), so that every replica holds what its peers decoded.
//
//   fp16: 1 sign, 5 exponent, 10 mantissa bits; largest finite 65504, smaller magnitudes down to
//         2^-24 as subnormals; an fp32 value past 65520 becomes infinity, one below 2^-25 zero.
//   bf16: fp32's upper 16 bits, rounded: fp32's range, 8 mantissa bits (7 stored).
// Infinities keep their sign; a NaN stays a (quiet) NaN with its sign. The scalar functions are
// integer arithmetic: the floating-point environment (rounding mode, flush-to-zero) does not change
// a result. The bulk fp16 ones use the CPU's F16C instructions where it has them (x86-64, checked
// at run time): the same bits, 8 values at a time (about 0.3 ns a value against 5 here).
//
//   std::vector<uint16_t> wire(n);
//   EncodeValues(core::WireFormat::kFp16, g.data(), n, wire.data());
//   DecodeValues(core::WireFormat::kFp16, wire.data(), n, out.data());   // out[i] ~ g[i]
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/messages.h"

namespace poseidon::rt {

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t b);

// Bytes one value takes on the wire: 4 (kFp32), 2 (kFp16, kBf16).
inline size_t WireValueBytes(core::WireFormat w) { return w == core::WireFormat::kFp32 ? 4 : 2; }

// n values in a 16-bit format `w` (kFp16 or kBf16; kFp32 is a broken invariant: no conversion).
void EncodeValues(core::WireFormat w, const float* in, size_t n, uint16_t* out);
void DecodeValues(core::WireFormat w, const uint16_t* in, size_t n, float* out);
// v[i] = Decode(Encode(v[i])): what a peer receives of v. Does nothing for kFp32.
void RoundThroughWire(core::WireFormat w, float* v, size_t n);

}  // namespace poseidon::rt
