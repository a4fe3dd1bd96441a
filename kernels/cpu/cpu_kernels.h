// kernels/cpu/cpu_kernels.h: the CPU backend, one LayerKernel per core::LayerKind on oneDNN 2.x.
//
// Each kernel owns one CPU engine and stream and creates its primitives once, in the constructor,
// for the fixed batch and the layer's shapes. Memory objects wrap the caller's raw host pointers
// (set_data_handle on every call). All interface layouts are plain (nchw, oihw / goihw for grouped
// weights, nc, oi, x). Convolution lets oneDNN choose its layouts (format_tag::any: blocked, JIT
// direct convolution instead of im2col + gemm) and pooling runs on nChw8c (JIT instead of the
// reference simple_nchw); both reorder at the interface into kernel-owned buffers, with the
// reorder primitives created in the constructor.
//
// Semantics are the reference backend's (kernels/reference/reference_kernels.h, Caffe's). Where
// oneDNN has no primitive or a different convention, plain code fills the gap:
//   pool avg     oneDNN's avg_include_padding divides by kh*kw; Caffe divides by the window clipped
//                to the padded input, which differs where ceil rounding adds extra right/bottom
//                padding; a per-output-position factor corrects it (forward and backward)
//   concat       backward is a plain copy of channel slices (oneDNN has no split)
//   add          forward is oneDNN's sum; backward copies top_grad to every bottom
//   softmax_loss softmax is oneDNN's; loss and gradient (p - onehot) / batch are plain code
//   dropout      plain code with a seeded generator
//   batchnorm    running averages (for train=false) are updated in plain code
//   transformer layers: see cpu_transformer.cc (matmul, layer_normalization, softmax, eltwise and
//                binary primitives; plain loops for gathers and copies)
//
//   auto k = MakeCpuKernel(layer, /*batch=*/32, /*seed=*/1);
//   k->Forward({x}, y, {w, b}, /*train=*/true);
//
// Thread-safety: a kernel is used by one thread at a time; oneDNN itself runs multi-threaded.
#pragma once

#include <cstdint>
#include <memory>

#include "core/model.h"
#include "kernels/kernel.h"

namespace poseidon::kernels {

// Throws KernelError when oneDNN cannot create a primitive for the layer (the message names it).
std::unique_ptr<LayerKernel> MakeCpuKernel(const core::Layer& layer, int64_t batch, uint64_t seed);

// The transformer layer kinds (cpu_transformer.cc, which lists the primitives each uses); null
// for any other kind. May throw dnnl::error (MakeCpuKernel turns it into a KernelError).
std::unique_ptr<LayerKernel> MakeCpuTransformerKernel(const core::Layer& layer, int64_t batch);

}  // namespace poseidon::kernels
