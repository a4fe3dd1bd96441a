// core/ring.h: the geometry of the chunked ring all-reduce that core/worker.cc runs.
//
// A layer's parameters, flattened blob after blob in model order (L bytes), are cut into pieces
// of chunk_bytes (the last one shorter); the P workers reduce every piece independently:
//   piece k   bytes [k * chunk_bytes, min((k + 1) * chunk_bytes, L))
//   segment s of a piece of B bytes: bytes [B * s / P, B * (s + 1) / P) of the piece
// In step t (0 <= t < 2(P-1)) worker i sends one segment of the piece to worker i+1 (mod P):
// RingSegmentSent(i, t, P). Reduce-scatter steps (t < P-1) carry running partial sums, the
// all-gather steps the fully reduced segments.
//
// Phantom messages (the simulator) carry the segment's byte count. Real ones carry the floats
// that start inside the segment's bytes: floats [floor(b0 / 4), floor(b1 / 4)) for bytes
// [b0, b1) of the layer. Those spans partition the layer's floats (L is a multiple of 4) and
// differ from the byte count by less than one float per segment.
//
//   const int seg = RingSegmentSent(rank, step, P);
//   const RingSpan f = RingSegmentFloats(layer_bytes, chunk_bytes, piece, seg, P);
//   // floats f.offset .. f.offset + f.count - 1 of the layer
#pragma once

#include <algorithm>
#include <cstdint>

namespace poseidon::core {

// Floats [offset, offset + count) of a layer's flattened parameters.
struct RingSpan {
  int64_t offset = 0;
  int64_t count = 0;
};

// The segment worker `rank` sends in step `step` of a ring of P workers: (rank - step) mod P
// while reducing (step < P-1), then (rank + 1 - (step - (P-1))) mod P while gathering.
inline int RingSegmentSent(int rank, int step, int P) {
  return step < P - 1 ? ((rank - step) % P + P) % P
                      : ((rank + 1 - (step - (P - 1))) % P + P) % P;
}

// Pieces of a layer of `layer_bytes` bytes.
inline int RingPieces(int64_t layer_bytes, int64_t chunk_bytes) {
  return static_cast<int>((layer_bytes + chunk_bytes - 1) / chunk_bytes);
}

// Bytes of segment `seg` of a piece of `piece_bytes` bytes (what a phantom message carries).
inline int64_t RingSegmentBytes(int64_t piece_bytes, int seg, int P) {
  return piece_bytes * (seg + 1) / P - piece_bytes * seg / P;
}

// The floats (32-bit words) of segment `seg` of piece `piece` of a layer of `layer_bytes` bytes.
// With values of `value_words` words (2: fp64) a segment holds the whole values that start in
// its bytes, so that no value is split between two segments (pieces start on a whole value when
// chunk_bytes is a multiple of the value's bytes).
inline RingSpan RingSegmentFloats(int64_t layer_bytes, int64_t chunk_bytes, int piece, int seg,
                                  int P, int value_words = 1) {
  const int64_t piece_begin = static_cast<int64_t>(piece) * chunk_bytes;
  const int64_t piece_bytes = std::min(chunk_bytes, layer_bytes - piece_begin);
  const int64_t b0 = piece_begin + piece_bytes * seg / P;
  const int64_t b1 = piece_begin + piece_bytes * (seg + 1) / P;
  const int64_t v = 4 * static_cast<int64_t>(value_words);
  return {b0 / v * value_words, (b1 / v - b0 / v) * value_words};
}

}  // namespace poseidon::core
