// config/measurement_loader.h: published whole-model GPU timings (scenarios/devices/measurements/),
// the ground truth of the cudnn compute model (cost/gpu_kernel_model.h, `poseidon gpu-model`).
//
//   schema_version: 1
//   source: "jcjohnson/cnn-benchmarks README.md, commit 2ee75e2..."   # required: where from
//   url: "https://github.com/jcjohnson/cnn-benchmarks"                 # optional
//   framework: "Torch7 + cudnn.torch, CUDA 8.0"                        # optional
//   measurements:                                                      # required, non-empty
//     - {model: resnet50, device: gtx1080, cudnn: "5.1.05", batch: 16,
//        fwd_ms: 50.64, bwd_ms: 99.18, set: fit}
//
// Row keys: model (a name under scenarios/models/ or a path), device (a name under
// scenarios/devices/), batch (> 0), fwd_ms and bwd_ms (> 0, the whole minibatch), set (`fit` or
// `heldout`: which half a fit may read), and optionally cudnn (the library version measured),
// input (square input size when the benchmark ran the model at another size than its file),
// without (groups of the model to leave out), bwd_from_total (the published total when bwd_ms was
// derived from it). Every bad value is one ConfigError "FILE:LINE:COL: error: ...; what to do".
//
// A row may instead give a whole training iteration (forward, backward and optimizer step) of one
// GPU, as framework benchmark tables publish it: samples_per_s (images or sequences per second)
// or iteration_ms, with precision (fp32 | tf32 | fp16 | bf16: fp16/bf16 = automatic mixed
// precision; default fp32), optimizer (sgd | adam | adamw | rmsprop | lamb | unknown; default sgd),
// tokens (sequence length, for a transformer run at another length than its file's) and ref (where
// in the source). Such rows are priced by the `framework` compute model. File key fp32_runs_tf32:
// true says the framework let cuDNN and cuBLAS run fp32 work as TF32 on Ampere and later (NGC
// containers do unless NVIDIA_TF32_OVERRIDE=0): those rows are priced as tf32 there. Key
// memory_format (nchw | nhwc, default nchw), in the file or a row (the row's wins): the layout
// the convolutions ran in (config::MemoryFormat); batchnorm_fusion (none | bn_relu | bn_add_relu,
// default none), likewise: what the benchmark's code fused into batch norm
// (config::BatchNormFusion); cuda_version ("10.2", default a current release), likewise: the
// CUDA release the framework's cuBLAS and cuDNN were built for (config::DeviceSpec::cuda_version).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "config/specs.h"
#include "core/model.h"

namespace poseidon::config {

struct PublishedTiming {
  std::string model;
  std::set<std::string> without;
  int64_t input = 0;  // 0 = the model file's input size
  std::string device;
  std::string library;  // cuDNN version as published
  int64_t batch = 0;
  double fwd_ms = 0, bwd_ms = 0;  // per pass (0 for a whole-iteration row)
  // A whole-iteration row: iteration_ms > 0 (from samples_per_s: batch / samples_per_s).
  double iteration_ms = 0;
  Precision precision = Precision::kFp32;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  int64_t tokens = 0;  // 0 = the model file's sequence length
  MemoryFormat memory_format = MemoryFormat::kNchw;  // the row's, else the file's
  BatchNormFusion batchnorm_fusion = BatchNormFusion::kNone;  // the row's, else the file's
  int cuda_version = 0;  // the row's, else the file's; 0: a current release
  std::string ref;
  bool fit = false;  // `set: fit` (else held out)
  core::SourceLoc loc;
};

struct PublishedTimings {
  std::string source, url, framework;
  bool fp32_runs_tf32 = false;
  MemoryFormat memory_format = MemoryFormat::kNchw;
  BatchNormFusion batchnorm_fusion = BatchNormFusion::kNone;
  int cuda_version = 0;
  std::vector<PublishedTiming> rows;
  core::SourceLoc loc;
};

PublishedTimings LoadPublishedTimings(const std::string& path);
PublishedTimings ParsePublishedTimings(const std::string& text, const std::string& name);

}  // namespace poseidon::config
