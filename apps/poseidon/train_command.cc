// apps/poseidon/train_command.cc: the training loop of `poseidon train` (one process, one replica).
#include "apps/poseidon/train_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "config/model_loader.h"
#include "config/yaml_reader.h"
#include "core/model.h"
#include "kernels/data/idx.h"
#include "kernels/kernel.h"
#include "kernels/memory_estimate.h"
#include "kernels/net.h"
#include "kernels/sgd.h"
#include "kernels/training.h"

namespace poseidon::app {
using config::ConfigError;

int RunTrain(const TrainOptions& o, std::ostream& out) {
  kernels::Backend backend;
  if (!kernels::BackendFromName(o.backend, &backend)) {
    throw ConfigError(
        fmt::format("error: --backend: unknown backend '{}'; known: reference, cpu, "
                    "cuda",
                    o.backend));
  }
  kernels::SgdOptions sgd_options;
  if (!kernels::LrPolicyFromName(o.lr_policy, &sgd_options.policy)) {
    throw ConfigError(fmt::format("error: --lr-policy: unknown policy '{}'; known: {}", o.lr_policy,
                                  kernels::KnownLrPolicies()));
  }
  if (o.iterations <= 0) throw ConfigError("error: --iterations must be positive");
  if (o.batch <= 0) throw ConfigError("error: --batch must be positive");
  if (o.print_interval <= 0) throw ConfigError("error: --print-interval must be positive");
  if (o.test_interval < 0) throw ConfigError("error: --test-interval must not be negative");
  if (!(o.lr >= 0) || !(o.momentum >= 0 && o.momentum < 1) || !(o.weight_decay >= 0)) {
    throw ConfigError("error: --lr and --weight-decay must be >= 0 and --momentum in [0, 1)");
  }
  sgd_options.base_lr = o.lr;
  sgd_options.momentum = o.momentum;
  sgd_options.weight_decay = o.weight_decay;
  sgd_options.gamma = o.gamma;
  sgd_options.stepsize = o.stepsize > 0 ? o.stepsize : std::max<int64_t>(1, o.iterations / 3);
  sgd_options.power = o.power;
  sgd_options.max_iter = o.iterations;

  const core::Model model =
      core::Model::Build(config::LoadModelFile(config::FindModelFile(o.model, o.models_dir)));
  const int loss_layer = kernels::MainLossLayer(model);
  if (loss_layer < 0) {
    throw ConfigError(
        fmt::format("error: model '{}' has no softmax_loss layer to train", model.name()));
  }

  const kernels::IdxDataset train = kernels::FashionMnistTrain(o.data_dir);
  const kernels::IdxDataset test = kernels::FashionMnistTest(o.data_dir);
  const core::Shape in = model.input_shape();
  if (in.c != 1 || in.h != train.rows || in.w != train.cols) {
    throw ConfigError(fmt::format(
        "error: model '{}' expects {}x{}x{} input but the data in {} is 1x{}x{}; pick a model "
        "for this data set (e.g. fmnist_mlp, fmnist_cnn)",
        model.name(), in.c, in.h, in.w, o.data_dir, train.rows, train.cols));
  }
  const int64_t classes = model.layers()[static_cast<size_t>(loss_layer)].out.count();
  if (std::max(train.num_classes, test.num_classes) > classes) {
    throw ConfigError(fmt::format("error: the data has {} classes but model '{}' outputs {}",
                                  std::max(train.num_classes, test.num_classes), model.name(),
                                  classes));
  }
  if (train.count == 0) throw ConfigError("error: the training set in " + o.data_dir + " is empty");

  try {
    kernels::CheckNetFits(model, o.batch);  // before anything is allocated
  } catch (const kernels::MemoryError& e) {
    throw ConfigError(e.what());
  }
  kernels::Net net(model, backend, o.batch, o.seed);
  kernels::Sgd sgd(sgd_options, net.num_params());
  out << fmt::format(
      "train {} ({} parameters) on {} backend: {} train / {} test images, batch {}, "
      "{} iterations, lr {} ({}), momentum {}, weight decay {}\n",
      model.name(), model.total_params(), kernels::BackendName(backend), train.count, test.count,
      o.batch, o.iterations, o.lr, o.lr_policy, o.momentum, o.weight_decay);

  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv, std::ios::binary);
    if (!csv) {
      throw ConfigError(
          fmt::format("{}: error: cannot write file; check the folder exists and is "
                      "writable",
                      o.csv));
    }
    csv << "iteration,loss,test_accuracy,seconds\n";
  }

  // Examples in a seeded random order, reshuffled every epoch (kernels/training.h).
  kernels::BatchSource source(train, o.batch, /*rank=*/0, /*size=*/1, o.seed);
  const int64_t pixels = train.rows * train.cols;
  std::vector<float> images(static_cast<size_t>(o.batch * pixels));
  std::vector<int32_t> labels(static_cast<size_t>(o.batch));

  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start;
  double loss_sum = 0;
  int64_t loss_n = 0;
  for (int64_t it = 1; it <= o.iterations; ++it) {
    source.Next(images.data(), labels.data());
    const double loss = net.Forward(images.data(), labels.data(), /*train=*/true);
    if (!std::isfinite(loss)) {
      throw ConfigError(
          fmt::format("error: the loss diverged ({}) at iteration {}; lower --lr", loss, it));
    }
    net.Backward();
    const double lr = sgd.Step(net.params(), net.param_grads(), it - 1);
    loss_sum += loss;
    ++loss_n;

    const bool print = it % o.print_interval == 0 || it == o.iterations;
    const bool do_test = (o.test_interval > 0 && it % o.test_interval == 0) || it == o.iterations;
    if (!print && !do_test) continue;
    const Clock::time_point now = Clock::now();
    const double window_s = std::chrono::duration<double>(now - window_start).count();
    const double mean_loss = loss_sum / static_cast<double>(loss_n);
    out << fmt::format("iter {:>6}  loss {:.4f}  lr {:.5g}  {:.0f} images/s\n", it, mean_loss, lr,
                       window_s > 0 ? static_cast<double>(loss_n * o.batch) / window_s : 0.0);
    std::string accuracy;
    if (do_test) {
      const double acc = kernels::TestAccuracy(net, test);
      out << fmt::format("iter {:>6}  test accuracy {:.4f} ({} images)\n", it, acc, test.count);
      accuracy = fmt::format("{:.6f}", acc);
    }
    out.flush();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (csv.is_open()) {
      csv << fmt::format("{},{:.6f},{},{:.3f}\n", it, mean_loss, accuracy, seconds);
    }
    loss_sum = 0;
    loss_n = 0;
    window_start = Clock::now();  // test time is not counted in images/s
  }
  if (csv.is_open()) {
    csv.flush();
    if (!csv) throw ConfigError(o.csv + ": error: writing the CSV failed");
    out << "learning curve written to " << o.csv << "\n";
  }
  return 0;
}

}  // namespace poseidon::app
