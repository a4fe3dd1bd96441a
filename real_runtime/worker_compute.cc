#include "real_runtime/worker_compute.h"

#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/yaml_reader.h"
#include "kernels/checkpoint.h"
#include "kernels/memory_estimate.h"
#include "real_runtime/atomic_file.h"
#include "real_runtime/worker_checkpoint.h"

namespace poseidon::rt {

using config::ConfigError;

WorkerCompute::WorkerCompute(const core::Model& model, const core::Placement& placement,
                             core::ActorId rank, const WorkerComputeOptions& o)
    : model_(model), o_(o) {
  const std::string dir = o_.data_dir.empty() ? kernels::DefaultFashionMnistDir() : o_.data_dir;
  train_ = std::make_unique<kernels::IdxDataset>(kernels::FashionMnistTrain(dir));
  const core::Shape in = model_.input_shape();
  if (in.c != 1 || in.h != train_->rows || in.w != train_->cols) {
    throw ConfigError(fmt::format(
        "error: model '{}' expects {}x{}x{} input but the data in {} is 1x{}x{}; pick a model "
        "for this data set (e.g. fmnist_mlp, fmnist_cnn)",
        model_.name(), in.c, in.h, in.w, dir, train_->rows, train_->cols));
  }
  if (kernels::MainLossLayer(model_) < 0) {
    throw ConfigError(
        fmt::format("error: model '{}' has no softmax_loss layer to train", model_.name()));
  }
  batches_ = std::make_unique<kernels::BatchSource>(*train_, o_.batch * o_.workers, o_.worker_index,
                                                    o_.workers, o_.seed);
  try {
    kernels::CheckNetFits(model_, o_.batch);  // before anything is allocated
  } catch (const kernels::MemoryError& e) {
    throw ConfigError(e.what());
  }
  net_ = std::make_unique<kernels::Net>(model_, o_.backend, o_.batch, o_.seed);
  if (o_.test) test_ = std::make_unique<kernels::IdxDataset>(kernels::FashionMnistTest(dir));
  images_.resize(static_cast<size_t>(o_.batch * train_->rows * train_->cols));
  labels_.resize(static_cast<size_t>(o_.batch));
  store_ = std::make_unique<LiveWorkerStore>(net_.get(), placement, o_.sgd, rank);
}

std::optional<double> WorkerCompute::Run(const core::ComputeTask& task) {
  const int layers = static_cast<int>(model_.layers().size());
  switch (task.kind) {
    case core::TaskKind::kForward: {
      if (task.layer == 0) {
        // The batch of this clock (a rejoining worker starts at a later clock).
        if (o_.rejoin && next_batch_ == 0) RestoreCheckpoint(task.clock);
        if (task.clock > next_batch_) batches_->Skip(task.clock - next_batch_);
        next_batch_ = task.clock + 1;
        batches_->Next(images_.data(), labels_.data());
        if (o_.checkpoint_every > 0 && next_batch_ % o_.checkpoint_every == 0) WriteCheckpoint();
        net_->SetInput(images_.data(), labels_.data());
      }
      std::lock_guard<std::mutex> lock(store_->LayerLock(task.layer));
      net_->ForwardLayer(task.layer, /*train=*/true);
      if (task.layer + 1 == layers) return net_->loss();
      return std::nullopt;
    }
    case core::TaskKind::kBackward: {
      if (task.layer + 1 == layers) net_->BeginBackward();
      std::lock_guard<std::mutex> lock(store_->LayerLock(task.layer));
      net_->BackwardLayer(task.layer);
      return std::nullopt;
    }
    case core::TaskKind::kSfbRebuild:
      store_->SfbRebuild(task.layer, task.clock, task.peer);
      return std::nullopt;
    case core::TaskKind::kCopyToHost:
    case core::TaskKind::kCopyToDevice:
    case core::TaskKind::kServerUpdate:
    case core::TaskKind::kLocalReduce:
    case core::TaskKind::kLocalBroadcast:
      return std::nullopt;  // host-memory nets: nothing to copy; no update runs on a worker
  }
  return std::nullopt;
}

double WorkerCompute::TestAccuracy() { return kernels::TestAccuracy(*net_, *test_); }

void WorkerCompute::SaveParams(const std::string& path) const {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(net_->params()),
          static_cast<std::streamsize>(net_->num_params() * sizeof(float)));
  if (!f) throw std::runtime_error(path + ": error: cannot write the parameters; check the folder");
}

void WorkerCompute::SaveCheckpoint(const std::string& dir) const {
  kernels::Checkpoint c;
  c.model = model_.name();
  c.iteration = next_batch_;
  c.training.written_by = "poseidon launch";
  c.training.backend = kernels::BackendName(o_.backend);
  c.training.batch = o_.batch;
  c.training.workers = o_.workers;
  c.training.seed = o_.seed;
  c.training.iterations = o_.sgd.max_iter;
  c.training.sgd = o_.sgd;
  c.params.assign(net_->params(), net_->params() + net_->num_params());
  kernels::WriteCheckpoint(dir, model_, c);
}

// The clock of the next batch and the data stream's position (worker_checkpoint.h).
void WorkerCompute::WriteCheckpoint() {
  WriteFileAtomically(o_.checkpoint_file,
                      EncodeWorkerCheckpoint({next_batch_, batches_->SaveState()}));
}

// A restarted worker continues its data stream from its checkpoint when that is not past the
// clock it rejoins at (it may have checkpointed a batch whose push never made it), else from the
// start; either way it then skips to the clock, so it reads what it would have read.
void WorkerCompute::RestoreCheckpoint(int64_t clock) {
  const std::string& path = o_.checkpoint_file;
  std::ifstream f(path, std::ios::binary);
  if (!f) return;
  const std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::optional<WorkerCheckpoint> c = DecodeWorkerCheckpoint(b);
  if (!c) {
    spdlog::warn(
        "{}: {}: not a valid worker checkpoint (truncated or corrupt); reading the data "
        "stream from its start instead",
        o_.who, path);
    return;
  }
  if (c->next_batch > clock) {
    spdlog::info(
        "{}: {} is at clock {}, past the rejoin clock {}; reading the data stream from "
        "its start",
        o_.who, path, c->next_batch, clock);
    return;
  }
  try {
    batches_->RestoreState(c->stream_state);
  } catch (const std::invalid_argument& e) {
    spdlog::warn("{}: {}: {}; reading the data stream from its start", o_.who, path, e.what());
    return;
  }
  next_batch_ = c->next_batch;
  spdlog::info("{}: data stream restored from {} at clock {}", o_.who, path, next_batch_);
}

}  // namespace poseidon::rt
