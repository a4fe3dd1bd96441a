// apps/poseidon/evaluate_command.h: `poseidon evaluate`, the test loss and accuracy of a saved
// checkpoint (kernels/checkpoint.h) on the Fashion-MNIST test set.
//
//   EvaluateOptions o;
//   o.params = "ckpt";                      // what `train --save ckpt` or `launch --save` wrote
//   RunEvaluate(o, std::cout);              // "test accuracy 0.8512  test loss 0.4175 ..."
//
// The model defaults to the checkpoint's, the batch and backend to those it was trained with, so
// that the accuracy is the one `train` printed at the end, to the bit. Returns 0. A checkpoint
// that is missing, damaged or of another model throws config::ConfigError naming its file;
// missing data throws kernels::DataError.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace poseidon::app {

struct EvaluateOptions {
  std::string params;                // the checkpoint folder
  std::string model;                 // a name in models_dir or a .yaml path; empty: the checkpoint's
  std::string models_dir = "scenarios/models";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string backend;               // empty: the checkpoint's
  int64_t batch = 0;                 // 0: the checkpoint's
};

int RunEvaluate(const EvaluateOptions& options, std::ostream& out);

}  // namespace poseidon::app
