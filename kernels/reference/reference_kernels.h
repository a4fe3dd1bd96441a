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
// Transformer layers (PyTorch's semantics; reference_transformer.cc). A sequence [S, D] is S
// rows of D contiguous values per image:
//   embedding    token ids [S] given as float values (rounded to the nearest integer; an id
//                outside [0, vocab) is a KernelError naming the layer, the id and the vocab) ->
//                rows of the {vocab, D} table; no gradient into the ids (bottom grad zeroed).
//                The form on a sequence [S, D] (a lookup by side ids added to it) needs a second
//                input of ids the model does not have: refused with a KernelError
//   pos_embedding y = x + P[0:S] (P is {max_len, D}; rows past S get zero gradient)
//   layernorm    over the last dimension, biased variance, eps kLayerNormEps (1e-5), gamma, beta
//   linear       y = x W^T + b over the last dimension, W {N, D} (out x in). With `tie` the
//                weight is the embedding layer's table: the Net passes params {table, bias?} and
//                param_grads {a scratch for the table's gradient, bias?}, and adds that scratch
//                to the embedding's own gradient after the embedding's backward (kernels/net.cc)
//   attention    nn.MultiheadAttention self-attention: Q = x Wq^T + bq, K, V likewise (weights
//                out x in; blobs q, k, v, o weight [+ bias] in that order); per head of
//                dh = D / heads: softmax(Q_h K_h^T / sqrt(dh)) over the keys, `causal` setting
//                scores j > i to -inf first; context P_h V_h concatenated over heads;
//                y = ctx Wo^T + bo
//   gelu         exact: 0.5 x (1 + erf(x / sqrt 2)) (nn.GELU's default); tanh
//   softmax      over the last dimension
//   patch_embed  a conv with kernel = stride = patch, bias; tokens in row-major patch order
//   cls_token    the {1, D} token prepended as row 0
//   token_pool   mean over the tokens, or the first token (`method: first`)
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
// Layer-norm epsilon (PyTorch's nn.LayerNorm default), shared likewise.
inline constexpr double kLayerNormEps = 1e-5;

std::unique_ptr<LayerKernel> MakeReferenceKernel(const core::Layer& layer, int64_t batch,
                                                 uint64_t seed);

// The transformer layer kinds (reference_transformer.cc); null for any other kind. Throws
// KernelError for a form the backend refuses (embedding on a sequence).
std::unique_ptr<LayerKernel> MakeReferenceTransformerKernel(const core::Layer& layer,
                                                            int64_t batch);

}  // namespace poseidon::kernels
