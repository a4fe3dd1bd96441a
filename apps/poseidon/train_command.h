// apps/poseidon/train_command.h: `poseidon train`, single-process training of a model from the
// model library on Fashion-MNIST (IDX files), printing progress and writing the learning curve.
//
//   TrainOptions o;
//   o.model = "fmnist_mlp";  o.models_dir = "scenarios/models";  o.iterations = 2000;
//   RunTrain(o, std::cout);
//   o.save_dir = "ckpt";  o.save_interval = 500;     // a checkpoint every 500 iterations
//   o.resume_dir = "ckpt";                            // ... and continue from the latest
//
// Returns the process exit status (0). Bad flags throw config::ConfigError; a model that does not
// build throws core::ModelError; missing or malformed data throws kernels::DataError; a backend
// that is not built in throws kernels::KernelError; a checkpoint that cannot be read or written,
// or one of another model, throws config::ConfigError naming its file. main() prints the message.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace poseidon::app {

struct TrainOptions {
  std::string model = "fmnist_mlp";  // a name in models_dir or a path to a .yaml file
  std::string models_dir = "scenarios/models";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";  // the IDX files (.gz or plain)
  int64_t iterations = 1000;
  int64_t batch = 64;
  std::string backend = "cpu";  // reference | cpu | cuda
  uint64_t seed = 1;            // parameters, dropout masks and the order of the examples
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  std::string lr_policy = "fixed";  // fixed | step | poly
  double gamma = 0.1;               // step: factor per stepsize iterations
  int64_t stepsize = 0;             // step: iterations; 0 means iterations / 3
  double power = 1.0;               // poly (over `iterations`)
  int64_t print_interval = 100;     // iterations between progress lines (and CSV rows)
  int64_t test_interval = 500;      // iterations between test-set evaluations; 0: only at the end
  std::string csv;                  // learning-curve CSV path; empty: none
  // Checkpoints (kernels/checkpoint.h, docs/checkpoints.md): written to save_dir every
  // save_interval iterations (0: only at the end) and at the end; resume_dir continues the run a
  // checkpoint holds, bit-identically to one that was never interrupted (same flags).
  std::string save_dir;
  int64_t save_interval = 0;
  std::string resume_dir;
  int64_t stop_after = 0;  // tests: end after this iteration as if killed (0: never)
};

int RunTrain(const TrainOptions& options, std::ostream& out);

}  // namespace poseidon::app
