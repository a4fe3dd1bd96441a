// real_runtime/live_stores.h: the stores the live runtime injects into the core's actors, backed
// by real floats (core/param_store.h explains the interface; the simulator injects phantoms).
//
// LiveWorkerStore wraps a worker's copy of the parameters (WorkerReplica): a one-device worker's
// kernels::Net itself, or a machine's host copy when the worker has several devices
// (machine_replica.h). Push data are copies of the gradient slices the backward pass (or the
// machine's reduction) just wrote, fresh parameters are written into the copy, for
// sufficient-factor layers it keeps the per-clock sums of rebuilt gradients and runs the optimizer
// step itself, and for ring all-reduce layers it keeps the per-clock sum the ring builds and runs
// the step on it.
// LiveShardStore holds the values, momentum and per-clock gradient sums of the chunks one shard
// owns and runs the same optimizer (kernels/sgd.h) on them, so a chunk updated by a shard and a
// weight updated by SFB or by the ring follow the same arithmetic (StepWithMean).
//
// Threads: the event loop calls the core (and so the store); the worker's compute thread runs
// the layers. The two meet on the net's parameter values, so every write of values and every
// layer computation hold that layer's mutex (LayerLock). Everything else is loop-thread only,
// except the SFB gradients, which the compute thread's rebuild tasks add to under sfb_mutex_.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/job.h"
#include "core/model.h"
#include "core/param_store.h"
#include "real_runtime/atomic_file.h"
#include "core/placement.h"
#include "kernels/net.h"
#include "kernels/sgd.h"

namespace poseidon::rt {

// A message whose numbers do not fit the model (wrong count, unknown layer): the peer sent
// something this job cannot contain. The host closes that peer's connection.
class PayloadError : public std::runtime_error {
 public:
  explicit PayloadError(const std::string& msg) : std::runtime_error(msg) {}
};

// Throws PayloadError unless `m` carries exactly `want` values ("WHAT from actor A for layer L
// chunk C clock K carries N values; the job's model needs W").
void CheckValueCount(const core::Message& m, int64_t want, const char* what);

// A shard's pushes of one chunk before their update: BSP/SSP by clock and worker (taken in
// worker order, so that the sum does not depend on arrival order and a run is reproducible bit
// for bit), ASP in arrival order, one per update.
class PendingPushes {
 public:
  explicit PendingPushes(bool asp = false) : asp_(asp) {}
  void Add(const core::Message& push);
  // The pushes the update of `clock` applies, removed: the clock's in worker order (BSP/SSP) or
  // the oldest (ASP); none when there are none.
  std::vector<core::FloatBuffer> Take(int64_t clock);

 private:
  bool asp_;
  std::map<int64_t, std::map<core::ActorId, core::FloatBuffer>> by_clock_;
  std::vector<core::FloatBuffer> asp_queue_;
};

// What a LiveWorkerStore syncs: one copy of the parameters and their gradients in host memory,
// blob by blob, and where the sufficient factors it sends come from.
struct WorkerReplica {
  const core::Model* model = nullptr;
  std::vector<kernels::BlobRef> blobs;  // every parameter blob: values and gradients
  // The rows K of the factors a peer sends (ProtocolConfig::batch: a machine's are its devices').
  int64_t factor_batch = 0;
  // The factors of `layer` of the batch just back-propagated: K x N output-gradient rows, then
  // K x M input rows (kernels::FcFactors), as a new buffer.
  std::function<core::FloatBuffer(int layer)> factors;
};
// A one-device worker: its net is its copy (factors read from the net, K = its batch).
WorkerReplica NetReplica(kernels::Net* net);

class LiveWorkerStore final : public core::WorkerStore {
 public:
  // `self` is the worker's actor id (its own SFB contribution is filed under it).
  LiveWorkerStore(WorkerReplica replica, const core::Placement& placement,
                  const kernels::SgdOptions& sgd, core::ActorId self);

  core::FloatBuffer GradientChunk(const core::Chunk& chunk) override;
  void WriteParams(const core::Chunk& chunk, const core::Message& params) override;
  core::FloatBuffer SfbFactors(int layer) override;
  void SfbAddOwn(int layer, int64_t clock) override;
  void SfbReceive(const core::Message& factors) override;
  void SfbApply(int layer, int64_t clock, int contributions) override;
  void RingBegin(int layer, int64_t clock) override;
  core::FloatBuffer RingSegment(int layer, int64_t clock, core::RingSpan span) override;
  void RingReceive(const core::Message& step, core::RingSpan span, bool reduce) override;
  void RingApply(int layer, int64_t clock, int workers) override;

  // Compute thread: rebuilds peer's weight gradient of (layer, clock) from the factors it sent
  // (one GEMM) and adds it to that clock's sum.
  void SfbRebuild(int layer, int64_t clock, int peer);

  // protocol.gradient_wire (before the job starts). In a 16-bit format this worker keeps of what
  // it sends what its peers decode (half.h RoundThroughWire), so that every replica adds the
  // same numbers: the ring segments it sends, and its own SFB contribution, rebuilt from its
  // factors as sent (one GEMM on the caller's thread) instead of its exact weight gradient.
  void SetGradientWire(core::WireFormat w) { gradient_wire_ = w; }

  // Held by the compute thread while it runs a layer and by every write of its values.
  std::mutex& LayerLock(int layer) { return layer_mutex_.at(static_cast<size_t>(layer)); }

 private:
  const kernels::BlobRef& Blob(int layer, int index) const;
  void AddPart(int layer, int64_t clock, core::ActorId from, std::vector<float> dw);
  // The ring buffer of (layer, clock), zeros on first use; `span` must lie inside it.
  std::vector<float>& RingSum(int layer, int64_t clock, core::RingSpan span);

  const WorkerReplica replica_;
  const core::Model& model_;
  const core::Placement& placement_;
  const kernels::SgdOptions sgd_;
  const core::ActorId self_;
  std::vector<std::vector<kernels::BlobRef>> blobs_;  // [layer][index]
  std::vector<std::mutex> layer_mutex_;
  std::mutex sfb_mutex_;
  // The P weight gradients of (layer, clock) by worker, summed in worker order at SfbApply so
  // that every replica computes bit-identical updates whatever the arrival order.
  std::map<std::pair<int, int64_t>, std::map<core::ActorId, std::vector<float>>> sfb_parts_;
  std::map<std::tuple<int, int64_t, int>, core::FloatBuffer> sfb_factors_;       // (layer, clock, peer)
  std::map<int, std::vector<float>> sfb_history_;                                 // momentum, per layer
  core::WireFormat gradient_wire_ = core::WireFormat::kFp32;
  std::map<int, core::FloatBuffer> own_factors_;  // 16-bit wire: the factors last sent, per layer
  // Ring all-reduce: the layer's flattened gradient sum of each clock in progress (at most two:
  // a fast predecessor's steps of the next clock arrive before this worker's own gradient), and
  // the momentum of ring layers, blobs flattened in order.
  std::map<std::pair<int, int64_t>, std::vector<float>> ring_sums_;
  std::map<int, std::vector<float>> ring_history_;
};

// zlib's CRC-32 of n bytes (checkpoint files).
uint32_t Crc32(const void* data, size_t n);

class LiveShardStore final : public core::ShardStore {
 public:
  // Initial values: the chunks' slices of `initial` (a Net built with the job's seed, the same
  // values every worker starts from).
  LiveShardStore(const kernels::Net& initial, const core::Placement& placement, int shard,
                 core::Consistency consistency, const kernels::SgdOptions& sgd);

  void Accumulate(const core::Chunk& chunk, const core::Message& push) override;
  void Apply(const core::Chunk& chunk, int64_t clock, int num_pushes) override;
  core::FloatBuffer Read(const core::Chunk& chunk) override;

  // Fault tolerance. Keep each chunk's values before its last update (ReadPrevious), for
  // rejoining BSP workers.
  void KeepPrevious() { keep_previous_ = true; }
  core::FloatBuffer ReadPrevious(const core::Chunk& chunk) override;
  // Checkpoints go to this file (written to PATH.tmp, fsynced, renamed over PATH, the folder
  // fsynced): values, momentum and `state`, with a CRC-32. Empty: Checkpoint does nothing.
  void SetCheckpointFile(std::string path) { checkpoint_file_ = std::move(path); }
  void Checkpoint(const core::ShardCheckpoint& state) override;
  // Loads the checkpoint file into the chunks and returns its state. Throws
  // config::ConfigError naming the file, the byte offset and what is wrong (missing, truncated,
  // corrupt, written by another job layout).
  core::ShardCheckpoint LoadCheckpoint();
  int64_t checkpoints_written() const { return checkpoints_written_; }
  // Tests' fault injection: called after the temporary file is written, before the rename.
  void SetCheckpointHook(std::function<void(const core::ShardCheckpoint&)> hook) {
    checkpoint_hook_ = std::move(hook);
  }

  // The chunk's current values (tests).
  const std::vector<float>& values(int chunk) const { return state_.at(chunk).values; }

 private:
  struct ChunkState {
    std::vector<float> values, history, previous;
    PendingPushes pushes;
  };
  ChunkState& State(const core::Chunk& chunk);

  const core::Placement& placement_;
  const int shard_;
  const bool asp_;
  const kernels::SgdOptions sgd_;
  std::map<int, ChunkState> state_;  // owned chunks by id
  bool keep_previous_ = false;
  std::string checkpoint_file_;
  int64_t checkpoints_written_ = 0;
  std::function<void(const core::ShardCheckpoint&)> checkpoint_hook_;
};

// Replayed compute (a node emulating a device by sleeping profiled times): no numbers are
// computed, but every message carries as many bytes as a real one, so the network is really
// loaded. Buffers of zeros, shared per size.
class ReplayWorkerStore final : public core::WorkerStore {
 public:
  // `batch`: the rows of the worker's sufficient factors (ProtocolConfig::batch: per-device batch
  // x devices on a machine with several).
  ReplayWorkerStore(const core::Model& model, int64_t batch) : model_(model), batch_(batch) {}
  core::FloatBuffer GradientChunk(const core::Chunk& chunk) override { return Zeros(chunk.count); }
  void WriteParams(const core::Chunk&, const core::Message&) override {}
  core::FloatBuffer SfbFactors(int layer) override;
  core::FloatBuffer RingSegment(int, int64_t, core::RingSpan span) override {
    return Zeros(span.count);
  }

 private:
  core::FloatBuffer Zeros(int64_t n);
  const core::Model& model_;
  const int64_t batch_;
  std::map<int64_t, core::FloatBuffer> zeros_;
};

class ReplayShardStore final : public core::ShardStore {
 public:
  void Accumulate(const core::Chunk&, const core::Message&) override {}
  void Apply(const core::Chunk&, int64_t, int) override {}
  core::FloatBuffer Read(const core::Chunk& chunk) override;
  core::FloatBuffer ReadPrevious(const core::Chunk& chunk) override { return Read(chunk); }

 private:
  std::map<int64_t, core::FloatBuffer> zeros_;
};

}  // namespace poseidon::rt
