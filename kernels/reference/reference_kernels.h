// kernels/reference/reference_kernels.h: the naive, obviously-correct backend (the tests' oracle).
//
// Plain loops over NCHW host buffers, one class per core::LayerKind, written for clarity and not
// for speed: the oneDNN and CUDA backends are compared with these under explicit tolerances, and
// these are checked by seeded finite differences (tests/kernels/reference_test.cc). Semantics
// (Caffe's unless said otherwise):
//   conv         groups, stride, pad; weight {out, in/groups, kh, kw}, optional bias
//   pool         max or avg over windows clipped to the image; avg divides by the window clipped
//                to the padded input (Caffe); output sizes come from core::Layer (ceil rounding, or
//                floor with `round: floor`, where no window runs past the padded input)
//   lrn          ACROSS_CHANNELS: scale = k + alpha/n * sum of squares over local_size channels,
//                y = x * scale^-beta
//   fc           y = x W^T + b, W is N x M (input flattened to M = c*h*w)
//   dropout      inverted dropout: y = x * mask / (1 - p) at train (mask seeded), identity at test
//   softmax_loss softmax over each image's c*h*w values; loss = mean cross-entropy over the batch;
//                top = probabilities; backward (p - onehot) / batch
//   batchnorm    batch statistics (biased variance, eps 1e-5) at train, running averages
//                (momentum 0.9, unbiased variance) at test; optional affine scale/shift
//   add          elementwise sum of all bottoms; concat along channels
//
//   auto k = MakeReferenceKernel(layer, /*batch=*/8, /*seed=*/1);
//
// Thread-safety: a kernel is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "core/model.h"
#include "kernels/kernel.h"

namespace poseidon::kernels {

// Batch-norm constants shared with the other backends so that they compute the same function.
inline constexpr double kBatchNormEps = 1e-5;
inline constexpr double kBatchNormMomentum = 0.9;  // running = m * running + (1 - m) * batch

std::unique_ptr<LayerKernel> MakeReferenceKernel(const core::Layer& layer, int64_t batch,
                                                 uint64_t seed);

}  // namespace poseidon::kernels
