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
#include "kernels/checkpoint.h"
#include "kernels/data/idx.h"
#include "kernels/kernel.h"
#include "kernels/memory_estimate.h"
#include "kernels/net.h"
#include "kernels/sgd.h"
#include "kernels/training.h"

namespace poseidon::app {
using config::ConfigError;
namespace {

// What the checkpoint records of this run's settings.
kernels::CheckpointTraining TrainingOf(const TrainOptions& o, const kernels::SgdOptions& sgd,
                                       kernels::Backend backend) {
  kernels::CheckpointTraining t;
  t.written_by = "poseidon train";
  t.backend = kernels::BackendName(backend);
  t.batch = o.batch;
  t.workers = 1;
  t.seed = o.seed;
  t.iterations = o.iterations;
  t.sgd = sgd;
  return t;
}

// The settings of `now` that differ from those the checkpoint was trained with, for a note: the
// run continues, but no longer as the interrupted one would have.
std::string Differences(const kernels::CheckpointTraining& was,
                        const kernels::CheckpointTraining& now) {
  std::string d;
  auto add = [&](const char* flag, const std::string& a, const std::string& b) {
    if (a != b) d += fmt::format("{}{} {} (was {})", d.empty() ? "" : ", ", flag, b, a);
  };
  add("--backend", was.backend, now.backend);
  add("--batch", std::to_string(was.batch), std::to_string(now.batch));
  add("--seed", std::to_string(was.seed), std::to_string(now.seed));
  add("--iterations", std::to_string(was.iterations), std::to_string(now.iterations));
  add("--lr", fmt::format("{}", was.sgd.base_lr), fmt::format("{}", now.sgd.base_lr));
  add("--momentum", fmt::format("{}", was.sgd.momentum), fmt::format("{}", now.sgd.momentum));
  add("--weight-decay", fmt::format("{}", was.sgd.weight_decay),
      fmt::format("{}", now.sgd.weight_decay));
  add("--lr-policy", kernels::LrPolicyName(was.sgd.policy), kernels::LrPolicyName(now.sgd.policy));
  add("--gamma", fmt::format("{}", was.sgd.gamma), fmt::format("{}", now.sgd.gamma));
  add("--stepsize", std::to_string(was.sgd.stepsize), std::to_string(now.sgd.stepsize));
  add("--power", fmt::format("{}", was.sgd.power), fmt::format("{}", now.sgd.power));
  return d;
}

}  // namespace

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
  if (o.save_interval < 0) throw ConfigError("error: --save-interval must not be negative");
  if (o.save_interval > 0 && o.save_dir.empty()) {
    throw ConfigError("error: --save-interval needs --save DIR (where to write the checkpoints)");
  }
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
  if (in.rank != 3 || in.c != 1 || in.h != train.rows || in.w != train.cols) {
    throw ConfigError(fmt::format(
        "error: model '{}' expects {} input but the data in {} is 1x{}x{} images; pick a model "
        "for this data set (e.g. fmnist_mlp, fmnist_cnn, fmnist_vit)",
        model.name(), in.ToString(), o.data_dir, train.rows, train.cols));
  }
  const int64_t classes = model.layers()[static_cast<size_t>(loss_layer)].out.count();
  if (std::max(train.num_classes, test.num_classes) > classes) {
    throw ConfigError(fmt::format("error: the data has {} classes but model '{}' outputs {}",
                                  std::max(train.num_classes, test.num_classes), model.name(),
                                  classes));
  }
  if (train.count == 0) throw ConfigError("error: the training set in " + o.data_dir + " is empty");
  for (const bool resume : {false, true}) {
    if (resume ? o.resume_dir.empty() : o.save_dir.empty()) continue;
    if (const core::Layer* l = kernels::LayerWithUncheckpointedState(model, resume)) {
      throw ConfigError(fmt::format(
          "error: {}: model '{}' has layer '{}' ({}), whose {} the checkpoint does not hold; "
          "train it without {}",
          resume ? "--resume" : "--save", model.name(), l->name, core::LayerKindName(l->kind),
          l->kind == core::LayerKind::kDropout ? "random generator" : "running statistics",
          resume ? "--resume" : "--save"));
    }
  }

  try {
    kernels::CheckNetFits(model, o.batch);  // before anything is allocated
  } catch (const kernels::MemoryError& e) {
    throw ConfigError(e.what());
  }
  kernels::Net net(model, backend, o.batch, o.seed);
  kernels::Sgd sgd(sgd_options, net.num_params());
  // Examples in a seeded random order, reshuffled every epoch (kernels/training.h).
  kernels::BatchSource source(train, o.batch, /*rank=*/0, /*size=*/1, o.seed);
  double loss_sum = 0;
  int64_t loss_n = 0;
  int64_t first = 1;  // the first iteration this run computes
  const kernels::CheckpointTraining training = TrainingOf(o, sgd_options, backend);
  std::string resumed;  // the line saying so, after the first
  if (!o.resume_dir.empty()) {
    kernels::Checkpoint c;
    kernels::TrainerState state;
    const std::string state_path = o.resume_dir + "/index.json";
    try {
      c = kernels::ReadCheckpoint(o.resume_dir, model);
      if (c.training.written_by != "poseidon train" || c.momentum.empty() || c.state.empty()) {
        throw kernels::CheckpointError(fmt::format(
            "{}: error: written by '{}' without {}; --resume continues only a checkpoint "
            "'poseidon train --save' wrote (evaluate this one with 'poseidon evaluate')",
            state_path, c.training.written_by,
            c.momentum.empty() ? "momentum buffers" : "a training state"));
      }
      state = kernels::DecodeTrainerState(c.state, o.resume_dir + " (training_state.bin)");
      source.RestoreState(state.stream);
    } catch (const kernels::CheckpointError& e) {
      throw ConfigError(e.what());
    } catch (const std::invalid_argument& e) {
      throw ConfigError(fmt::format("{}: error: the data stream of the checkpoint does not fit "
                                    "the data in {}: {}",
                                    o.resume_dir, o.data_dir, e.what()));
    }
    if (c.iteration >= o.iterations) {
      throw ConfigError(fmt::format(
          "{}: error: the checkpoint is at iteration {}, --iterations {} is not past it; give "
          "the run's total, larger than {}",
          state_path, c.iteration, o.iterations, c.iteration));
    }
    std::copy(c.params.begin(), c.params.end(), net.params());
    sgd.history() = c.momentum;
    loss_sum = state.loss_sum;
    loss_n = state.loss_n;
    first = c.iteration + 1;
    const std::string differ = Differences(c.training, training);
    resumed = fmt::format("resumed from {} at iteration {}{}\n", o.resume_dir, c.iteration,
                       differ.empty() ? ""
                                      : "; note: " + differ +
                                            ", so the run no longer continues the "
                                            "interrupted one exactly");
  }
  if (!o.save_dir.empty()) {
    try {
      kernels::PrepareCheckpointDir(o.save_dir);  // fail now, not after the first interval
    } catch (const kernels::CheckpointError& e) {
      throw ConfigError(e.what());
    }
  }
  int64_t saved = -1;  // the iteration of the last checkpoint written
  auto save = [&](int64_t it) {
    if (o.save_dir.empty() || saved == it) return;
    kernels::Checkpoint c;
    c.model = model.name();
    c.iteration = it;
    c.training = training;
    c.params.assign(net.params(), net.params() + net.num_params());
    c.momentum = sgd.history();
    c.state = kernels::EncodeTrainerState({source.SaveState(), loss_sum, loss_n});
    try {
      kernels::WriteCheckpoint(o.save_dir, model, c);
    } catch (const kernels::CheckpointError& e) {
      throw ConfigError(e.what());
    }
    saved = it;
    out << fmt::format("iter {:>6}  checkpoint written to {}\n", it, o.save_dir);
  };
  out << fmt::format(
      "train {} ({} parameters) on {} backend: {} train / {} test images, batch {}, "
      "{} iterations, lr {} ({}), momentum {}, weight decay {}\n",
      model.name(), model.total_params(), kernels::BackendName(backend), train.count, test.count,
      o.batch, o.iterations, o.lr, o.lr_policy, o.momentum, o.weight_decay);
  out << resumed;

  std::ofstream csv;
  // A resumed run continues the curve of the interrupted one when it writes to the same file.
  const bool append = !o.resume_dir.empty() && std::ifstream(o.csv).good();
  if (!o.csv.empty()) {
    csv.open(o.csv, std::ios::binary | (append ? std::ios::app : std::ios::trunc));
    if (!csv) {
      throw ConfigError(
          fmt::format("{}: error: cannot write file; check the folder exists and is "
                      "writable",
                      o.csv));
    }
    if (!append) csv << "iteration,loss,test_accuracy,seconds\n";
  }

  const int64_t pixels = train.rows * train.cols;
  std::vector<float> images(static_cast<size_t>(o.batch * pixels));
  std::vector<int32_t> labels(static_cast<size_t>(o.batch));

  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start;
  for (int64_t it = first; it <= o.iterations; ++it) {
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
    const bool stop = o.stop_after > 0 && it == o.stop_after;
    const bool checkpoint = (o.save_interval > 0 && it % o.save_interval == 0) ||
                            it == o.iterations || stop;
    if (!print && !do_test) {
      if (checkpoint) save(it);
      if (stop) break;
      continue;
    }
    const Clock::time_point now = Clock::now();
    const double window_s = std::chrono::duration<double>(now - window_start).count();
    const double mean_loss = loss_sum / static_cast<double>(loss_n);
    out << fmt::format("iter {:>6}  loss {:.4f}  lr {:.5g}  {:.0f} images/s\n", it, mean_loss, lr,
                       window_s > 0 ? static_cast<double>(loss_n * o.batch) / window_s : 0.0);
    std::string accuracy;
    if (do_test) {
      const kernels::TestResult r = kernels::TestLossAndAccuracy(net, test);
      out << fmt::format("iter {:>6}  test accuracy {:.4f}  test loss {:.4f} ({} images)\n", it,
                         r.accuracy, r.loss, test.count);
      accuracy = fmt::format("{:.6f}", r.accuracy);
    }
    out.flush();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (csv.is_open()) {
      csv << fmt::format("{},{:.6f},{},{:.3f}\n", it, mean_loss, accuracy, seconds);
    }
    loss_sum = 0;
    loss_n = 0;
    window_start = Clock::now();  // test time is not counted in images/s
    if (checkpoint) save(it);
    if (stop) break;
  }
  if (csv.is_open()) {
    csv.flush();
    if (!csv) throw ConfigError(o.csv + ": error: writing the CSV failed");
    out << "learning curve written to " << o.csv << "\n";
  }
  return 0;
}

}  // namespace poseidon::app
