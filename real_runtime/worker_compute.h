// real_runtime/worker_compute.h: a live worker's real compute.
//
// What a worker process runs its core compute tasks on: one kernels::Net per device (layer by
// layer, so that the loop thread sends the gradients of the layers already done), each device's
// Fashion-MNIST batches of its share of the data stream, its own checkpoint (worker_checkpoint.h:
// the clock of its next batch and the stream's position, so that a restarted worker reads what it
// would have read), the test accuracy at the end and the final parameters. Decides nothing: the
// core says which task runs when; this only runs it. Run is called on the compute streams'
// threads (compute_streams.h), one task at a time per stream; layer locks keep a layer's values
// from changing under its forward or backward pass.
//
// Devices (ProtocolConfig::devices_per_machine = D; Poseidon's three-level hybrid). D = 1: the
// net is the worker's copy, which the store syncs (as it always was). D > 1: device d runs the
// tasks whose ComputeTask::device is d on its own net (its own oneDNN engine and stream, or GPU
// first_gpu + d with --backend cuda), reading share index x D + d of the job's workers x D shares
// of the data stream, so that M machines of D devices read exactly the batches M D one-device
// workers read. The store syncs the machine's host copy (machine_replica.h): kLocalReduce makes
// its gradient of a layer the devices' mean, kLocalBroadcast copies its values of a layer into
// every device, and an SFB layer's factors are the devices' rows (output gradients scaled by
// 1/D). The machine's loss of an iteration is the mean of its devices' losses (in device order);
// test accuracy, --save and --save-params use device 0, which after the last broadcast holds
// what every device holds. Fault tolerance (the worker's own checkpoint, rejoining) is for
// D = 1 only: CheckLiveScenario (node.h) refuses it for D > 1.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/host.h"
#include "core/model.h"
#include "core/placement.h"
#include "kernels/data/idx.h"
#include "kernels/kernel.h"
#include "kernels/net.h"
#include "kernels/sgd.h"
#include "kernels/training.h"
#include "real_runtime/live_stores.h"
#include "real_runtime/machine_replica.h"

namespace poseidon::rt {

struct WorkerComputeOptions {
  std::string data_dir;  // Fashion-MNIST IDX files; empty = Debian's location
  kernels::Backend backend = kernels::Backend::kCpu;
  kernels::SgdOptions sgd;
  int64_t batch = 0;     // each device's batch
  int workers = 1;       // the job's workers (the global batch is batch x workers x devices)
  int worker_index = 0;  // 0-based
  int devices = 1;       // this worker's devices (ProtocolConfig::devices_per_machine)
  // D > 1: the layers synced by sufficient factors (indexed by layer id): their factors are
  // taken from every device after its backward pass.
  std::vector<bool> sfb_layers;
  // --backend cuda: device d runs on GPU first_gpu + d. Selected only when the worker has several
  // devices or first_gpu > 0 (client: device, one process per GPU); otherwise CUDA's current
  // device, as a one-device worker always used.
  int first_gpu = 0;
  uint64_t seed = 0;
  bool test = false;             // load the test set (worker 1 measures test accuracy at the end)
  std::string checkpoint_file;   // the worker's own checkpoint, written every checkpoint_every
  int64_t checkpoint_every = 0;  // clocks; 0 = never
  bool rejoin = false;           // a restarted worker: continue the stream from the checkpoint
  std::string who;               // the worker's name, for log lines
};

class WorkerCompute {
 public:
  // Loads the data, checks that the model fits it and the memory (kernels::CheckNetFits, before
  // anything is allocated), builds the net. Throws config::ConfigError naming what is wrong.
  WorkerCompute(const core::Model& model, const core::Placement& placement, core::ActorId rank,
                const WorkerComputeOptions& o);

  LiveWorkerStore* store() { return store_.get(); }
  int devices() const { return static_cast<int>(dev_.size()); }

  // Runs one task (a compute thread). Returns the worker's loss of an iteration when the task is
  // the last layer's forward pass of its last device to get there (the devices' mean; it may be
  // NaN: a diverged loss). Throws StorageError when the worker's checkpoint cannot be written,
  // another std::exception when a kernel fails.
  std::optional<double> Run(const core::ComputeTask& task);

  bool tests() const { return test_ != nullptr; }
  // Test accuracy of device 0's current parameters (device 0's compute thread; throws when a
  // kernel fails).
  double TestAccuracy();
  // Device 0's parameters, raw little-endian float32, blob after blob in model order. No layer
  // may be computing. Throws std::runtime_error naming the path when the file cannot be written.
  void SaveParams(const std::string& path) const;
  // The parameters as a checkpoint folder (kernels/checkpoint.h; no momentum: the servers keep
  // it) at the iteration of the last batch read. No layer may be computing. Throws
  // kernels::CheckpointError naming the file when it cannot be written.
  void SaveCheckpoint(const std::string& dir) const;

 private:
  // One device: its net, its share of the data stream and its input buffers (touched by its own
  // compute thread only), and, with several devices, its layer locks.
  struct Device {
    std::unique_ptr<kernels::BatchSource> batches;
    std::unique_ptr<kernels::Net> net;
    std::vector<float> images;
    std::vector<int32_t> labels;
    int64_t next_batch = 0;  // the clock of the next batch to read
    std::vector<std::mutex> layer_mutex;  // D > 1 (D = 1: the store's)
  };
  std::mutex& LayerLock(int device, int layer);
  std::optional<double> MachineLoss(int device, int64_t clock, double loss);
  void Broadcast(int layer);
  void SelectGpu(int device) const;
  void WriteCheckpoint();
  void RestoreCheckpoint(int64_t clock);

  const core::Model& model_;
  WorkerComputeOptions o_;
  bool select_gpus_ = false;
  std::unique_ptr<kernels::IdxDataset> train_, test_;
  std::vector<Device> dev_;
  std::unique_ptr<MachineReplica> machine_;  // D > 1
  std::unique_ptr<LiveWorkerStore> store_;
  std::mutex loss_mutex_;
  std::map<int64_t, std::vector<double>> device_losses_;  // D > 1: clock -> each device's loss
  std::map<int64_t, size_t> device_losses_seen_;           // D > 1: clock -> devices reported
};

// --backend cuda with `devices` devices from GPU `first_gpu` on, when the process sees `visible`
// GPUs (kernels::VisibleGpus, `why` its reason for none): "" when they are there, else the one
// error to refuse the job with.
std::string GpuShortfall(int devices, int first_gpu, int visible, const std::string& why);

}  // namespace poseidon::rt
