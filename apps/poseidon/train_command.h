// apps/poseidon/train_command.h: `poseidon train`, single-process training of a model from the
// model library on Fashion-MNIST (IDX files), printing progress and writing the learning curve.
//
//   TrainOptions o;
//   o.model = "fmnist_mlp";  o.models_dir = "scenarios/models";  o.iterations = 2000;
//   RunTrain(o, std::cout);
//
// Returns the process exit status (0). Bad flags throw config::ConfigError; a model that does not
// build throws core::ModelError; missing or malformed data throws kernels::DataError; a backend
// that is not built in throws kernels::KernelError. main() prints the message.
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
};

int RunTrain(const TrainOptions& options, std::ostream& out);

}  // namespace poseidon::app
