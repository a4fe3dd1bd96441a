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
  const int D = std::max(1, o_.devices);
  // The job's data stream has one share per device: device d of this worker reads share
  // worker_index x D + d of workers x D (a one-device worker: share worker_index of workers).
  const int shares = o_.workers * D;
  try {
    // Before anything is allocated. With several CPU devices their nets share this memory: the
    // estimate at batch x D counts every device's activations (the parameters once; a lower
    // bound, as the check always is). GPUs each hold one device's.
    kernels::CheckNetFits(model_, o_.backend == kernels::Backend::kCuda ? o_.batch : o_.batch * D);
  } catch (const kernels::MemoryError& e) {
    throw ConfigError(e.what());
  }
  select_gpus_ = o_.backend == kernels::Backend::kCuda && (D > 1 || o_.first_gpu > 0);
  dev_.resize(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) {
    Device& dv = dev_[static_cast<size_t>(d)];
    dv.batches = std::make_unique<kernels::BatchSource>(
        *train_, o_.batch * shares, o_.worker_index * D + d, shares, o_.seed);
    SelectGpu(d);  // the net's buffers, handles and streams on its GPU
    dv.net = std::make_unique<kernels::Net>(model_, o_.backend, o_.batch, o_.seed);
    dv.images.resize(static_cast<size_t>(o_.batch * train_->rows * train_->cols));
    dv.labels.resize(static_cast<size_t>(o_.batch));
    if (D > 1) dv.layer_mutex = std::vector<std::mutex>(model_.layers().size());
  }
  SelectGpu(0);
  if (o_.test) test_ = std::make_unique<kernels::IdxDataset>(kernels::FashionMnistTest(dir));
  if (D == 1) {
    store_ = std::make_unique<LiveWorkerStore>(NetReplica(dev_[0].net.get()), placement, o_.sgd,
                                               rank);
    return;
  }
  std::vector<kernels::Net*> nets;
  for (Device& dv : dev_) nets.push_back(dv.net.get());
  std::vector<bool> sfb = o_.sfb_layers;
  sfb.resize(model_.layers().size(), false);
  machine_ = std::make_unique<MachineReplica>(nets, sfb);
  WorkerReplica r;
  r.model = &model_;
  r.blobs = machine_->blobs();
  r.factor_batch = o_.batch * D;
  MachineReplica* m = machine_.get();
  r.factors = [m](int layer) { return m->Factors(layer); };
  store_ = std::make_unique<LiveWorkerStore>(std::move(r), placement, o_.sgd, rank);
}

void WorkerCompute::SelectGpu(int device) const {
  if (select_gpus_) kernels::UseGpu(o_.first_gpu + device);
}

std::mutex& WorkerCompute::LayerLock(int device, int layer) {
  if (dev_.size() == 1) return store_->LayerLock(layer);
  return dev_.at(static_cast<size_t>(device)).layer_mutex.at(static_cast<size_t>(layer));
}

std::optional<double> WorkerCompute::Run(const core::ComputeTask& task) {
  const int layers = static_cast<int>(model_.layers().size());
  switch (task.kind) {
    case core::TaskKind::kForward: {
      Device& dv = dev_.at(static_cast<size_t>(task.device));
      SelectGpu(task.device);
      if (task.layer == 0) {
        // The batch of this clock (a rejoining worker starts at a later clock).
        if (o_.rejoin && dv.next_batch == 0) RestoreCheckpoint(task.clock);
        if (task.clock > dv.next_batch) dv.batches->Skip(task.clock - dv.next_batch);
        dv.next_batch = task.clock + 1;
        dv.batches->Next(dv.images.data(), dv.labels.data());
        if (o_.checkpoint_every > 0 && dv.next_batch % o_.checkpoint_every == 0) WriteCheckpoint();
        dv.net->SetInput(dv.images.data(), dv.labels.data());
      }
      std::lock_guard<std::mutex> lock(LayerLock(task.device, task.layer));
      dv.net->ForwardLayer(task.layer, /*train=*/true);
      if (task.layer + 1 == layers) return MachineLoss(task.device, task.clock, dv.net->loss());
      return std::nullopt;
    }
    case core::TaskKind::kBackward: {
      Device& dv = dev_.at(static_cast<size_t>(task.device));
      SelectGpu(task.device);
      if (task.layer + 1 == layers) dv.net->BeginBackward();
      std::lock_guard<std::mutex> lock(LayerLock(task.device, task.layer));
      dv.net->BackwardLayer(task.layer);
      if (machine_ && static_cast<size_t>(task.layer) < o_.sfb_layers.size() &&
          o_.sfb_layers[static_cast<size_t>(task.layer)]) {
        // On this device's own thread (one thread per Net, also on the GPU).
        machine_->SetFactors(task.layer, task.device, dv.net->FactorsOf(task.layer));
      }
      return std::nullopt;
    }
    case core::TaskKind::kSfbRebuild:
      store_->SfbRebuild(task.layer, task.clock, task.peer);
      return std::nullopt;
    case core::TaskKind::kLocalReduce:
      if (machine_) machine_->Reduce(task.layer);
      return std::nullopt;
    case core::TaskKind::kLocalBroadcast:
      if (machine_) Broadcast(task.layer);
      return std::nullopt;
    case core::TaskKind::kCopyToHost:
    case core::TaskKind::kCopyToDevice:
    case core::TaskKind::kServerUpdate:
      return std::nullopt;  // host-memory nets: nothing to copy; no update runs on a worker
  }
  return std::nullopt;
}

// The worker's loss of `clock`: its one device's, or once every device has computed it, the
// mean of theirs (summed in device order, whatever order they finished in).
std::optional<double> WorkerCompute::MachineLoss(int device, int64_t clock, double loss) {
  if (dev_.size() == 1) return loss;
  std::lock_guard<std::mutex> lock(loss_mutex_);
  std::vector<double>& v = device_losses_[clock];
  if (v.empty()) v.assign(dev_.size(), 0.0);
  v.at(static_cast<size_t>(device)) = loss;
  size_t& seen = device_losses_seen_[clock];
  if (++seen < dev_.size()) return std::nullopt;
  double sum = 0;
  for (double l : v) sum += l;
  device_losses_.erase(clock);
  device_losses_seen_.erase(clock);
  return sum / static_cast<double>(dev_.size());
}

// The machine's values of `layer` out to every device: under the store's layer lock (nothing
// writes the machine's copy meanwhile) and each device's (its passes do not read them meanwhile).
void WorkerCompute::Broadcast(int layer) {
  std::lock_guard<std::mutex> machine(store_->LayerLock(layer));
  for (int d = 0; d < devices(); ++d) {
    std::lock_guard<std::mutex> lock(LayerLock(d, layer));
    machine_->CopyValues(layer, d);
  }
}

double WorkerCompute::TestAccuracy() {
  SelectGpu(0);
  return kernels::TestAccuracy(*dev_[0].net, *test_);
}

void WorkerCompute::SaveParams(const std::string& path) const {
  kernels::Net& net = *dev_[0].net;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(net.params()),
          static_cast<std::streamsize>(net.num_params() * sizeof(float)));
  if (!f) throw std::runtime_error(path + ": error: cannot write the parameters; check the folder");
}

void WorkerCompute::SaveCheckpoint(const std::string& dir) const {
  kernels::Net& net = *dev_[0].net;
  kernels::Checkpoint c;
  c.model = model_.name();
  c.iteration = dev_[0].next_batch;
  c.training.written_by = "poseidon launch";
  c.training.backend = kernels::BackendName(o_.backend);
  c.training.batch = o_.batch;
  c.training.workers = static_cast<int64_t>(o_.workers) * devices();  // replicas
  c.training.seed = o_.seed;
  c.training.iterations = o_.sgd.max_iter;
  c.training.sgd = o_.sgd;
  c.params.assign(net.params(), net.params() + net.num_params());
  kernels::WriteCheckpoint(dir, model_, c);
}

// The clock of the next batch and the data stream's position (worker_checkpoint.h).
// (One device: fault tolerance is refused for workers with several.)
void WorkerCompute::WriteCheckpoint() {
  const Device& dv = dev_[0];
  WriteFileAtomically(o_.checkpoint_file,
                      EncodeWorkerCheckpoint({dv.next_batch, dv.batches->SaveState()}));
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
    dev_[0].batches->RestoreState(c->stream_state);
  } catch (const std::invalid_argument& e) {
    spdlog::warn("{}: {}: {}; reading the data stream from its start", o_.who, path, e.what());
    return;
  }
  dev_[0].next_batch = c->next_batch;
  spdlog::info("{}: data stream restored from {} at clock {}", o_.who, path, dev_[0].next_batch);
}

std::string GpuShortfall(int devices, int first_gpu, int visible, const std::string& why) {
  const int need = first_gpu + devices;
  if (visible >= need) return "";
  const std::string which =
      devices == 1 ? fmt::format("GPU {}", first_gpu)
                   : fmt::format("GPUs {}..{} (device d on GPU {}d)", first_gpu, need - 1,
                                 first_gpu > 0 ? fmt::format("{} + ", first_gpu) : "");
  return fmt::format(
      "error: --backend cuda: this worker's {} device{} need{} {}, but this process sees {} "
      "GPU{}{}; give every worker machine as many GPUs as cluster.devices_per_machine "
      "(CUDA_VISIBLE_DEVICES), or fewer devices per machine",
      devices, devices == 1 ? "" : "s", devices == 1 ? "s" : "", which, visible,
      visible == 1 ? "" : "s", why.empty() ? "" : " (" + why + ")");
}

}  // namespace poseidon::rt
