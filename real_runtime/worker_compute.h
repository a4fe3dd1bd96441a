// real_runtime/worker_compute.h: a live worker's real compute.
//
// What a worker process runs its core compute tasks on: its kernels::Net (layer by layer, so
// that the loop thread sends the gradients of the layers already done), the Fashion-MNIST
// batches of its share of the data stream, its own checkpoint (worker_checkpoint.h: the clock of
// its next batch and the stream's position, so that a restarted worker reads what it would have
// read), the test accuracy at the end and the final parameters. Decides nothing: the core says
// which task runs when; this only runs it. Run is called on the compute streams' threads
// (compute_streams.h), one task at a time per stream; the store's layer locks keep a layer's
// values from changing under its forward or backward pass.
#pragma once

#include <cstdint>
#include <memory>
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

namespace poseidon::rt {

struct WorkerComputeOptions {
  std::string data_dir;  // Fashion-MNIST IDX files; empty = Debian's location
  kernels::Backend backend = kernels::Backend::kCpu;
  kernels::SgdOptions sgd;
  int64_t batch = 0;     // this worker's batch
  int workers = 1;       // the job's workers (the global batch is batch x workers)
  int worker_index = 0;  // 0-based
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

  // Runs one task (a compute thread). Returns the loss when the task is the last layer's forward
  // pass (it may be NaN: a diverged loss). Throws StorageError when the worker's checkpoint
  // cannot be written, another std::exception when a kernel fails.
  std::optional<double> Run(const core::ComputeTask& task);

  bool tests() const { return test_ != nullptr; }
  // Test accuracy of the current parameters (a compute thread; throws when a kernel fails).
  double TestAccuracy();
  // The parameters, raw little-endian float32, blob after blob in model order. No layer may be
  // computing. Throws std::runtime_error naming the path when the file cannot be written.
  void SaveParams(const std::string& path) const;
  // The parameters as a checkpoint folder (kernels/checkpoint.h; no momentum: the servers keep
  // it) at the iteration of the last batch read. No layer may be computing. Throws
  // kernels::CheckpointError naming the file when it cannot be written.
  void SaveCheckpoint(const std::string& dir) const;

 private:
  void WriteCheckpoint();
  void RestoreCheckpoint(int64_t clock);

  const core::Model& model_;
  WorkerComputeOptions o_;
  std::unique_ptr<kernels::IdxDataset> train_, test_;
  std::unique_ptr<kernels::BatchSource> batches_;
  std::unique_ptr<kernels::Net> net_;
  std::unique_ptr<LiveWorkerStore> store_;
  std::vector<float> images_;
  std::vector<int32_t> labels_;
  int64_t next_batch_ = 0;  // the clock of the next batch to read
};

}  // namespace poseidon::rt
