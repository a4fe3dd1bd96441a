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
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/model.h"

namespace poseidon::config {

struct PublishedTiming {
  std::string model;
  std::set<std::string> without;
  int64_t input = 0;  // 0 = the model file's input size
  std::string device;
  std::string library;  // cuDNN version as published
  int64_t batch = 0;
  double fwd_ms = 0, bwd_ms = 0;
  bool fit = false;  // `set: fit` (else held out)
  core::SourceLoc loc;
};

struct PublishedTimings {
  std::string source, url, framework;
  std::vector<PublishedTiming> rows;
  core::SourceLoc loc;
};

PublishedTimings LoadPublishedTimings(const std::string& path);
PublishedTimings ParsePublishedTimings(const std::string& text, const std::string& name);

}  // namespace poseidon::config
