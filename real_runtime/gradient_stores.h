// real_runtime/gradient_stores.h: the stores of a job whose workers step their own optimizer
// (poseidon.torch: the user's torch.optim optimizer on every worker, as with DDP), in the
// values' own type (value_words.h).
//
// What crosses the network is the gradient, as in Poseidon; what comes back is not parameters but
// the workers' mean gradient, which every worker's optimizer then applies (so Adam, or any other
// optimizer, steps exactly as one process stepping on the global batch would):
//
//   MeanGradientShardStore  a shard: BSP/SSP, the mean of the P workers' pushes of a chunk for
//                           one clock (summed in worker order, so every run is bit-identical);
//                           ASP, to each worker the sum of every push since that worker's last
//                           answer, over P (what the workers' optimizers step on: see docs/torch.md)
//   ExternalWorkerStore     a worker whose gradients live in another program's buffers (the
//                           tensors' memory, or pinned copies of GPU tensors): pushes copy them,
//                           sufficient factors are the program's rows (or, past min(M, N) rows, the
//                           identity and the gradient), and a clock's mean gradient (PS chunks,
//                           rebuilt SFB weights, ring sums) is written over the program's gradient
//                           buffers (in place: BSP, where the next clock waits for it), or gathers
//                           in one buffer per clock, which the program takes when the clock is
//                           complete (SSP and ASP, where it may come clocks later).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/job.h"
#include "core/model.h"
#include "core/param_store.h"
#include "core/placement.h"
#include "real_runtime/live_stores.h"

namespace poseidon::rt {

class MeanGradientShardStore final : public core::ShardStore {
 public:
  MeanGradientShardStore(const core::Model& model, const core::Placement& placement, int shard,
                         core::Consistency consistency, int workers);

  void Accumulate(const core::Chunk& chunk, const core::Message& push) override;
  void Apply(const core::Chunk& chunk, int64_t clock, int num_pushes) override;
  core::FloatBuffer Read(const core::Chunk& chunk) override;
  core::FloatBuffer ReadFor(const core::Chunk& chunk, core::ActorId worker) override;

 private:
  struct ChunkState {
    int value_words = 1;
    std::shared_ptr<const std::vector<float>> mean;  // BSP/SSP: the last applied clock's mean
    PendingPushes pushes;
    std::vector<float> asp_sum;                         // ASP: every push applied, over P
    std::map<core::ActorId, std::vector<float>> asp_seen;  // ASP: asp_sum at the last answer
  };
  ChunkState& State(const core::Chunk& chunk);

  const core::Placement& placement_;
  const bool asp_;
  const int workers_;
  std::map<int, ChunkState> state_;  // owned chunks by id
};

class ExternalWorkerStore final : public core::WorkerStore {
 public:
  // `in_place`: the mean of a layer overwrites its gradient buffers (the program must not need
  // them once the layer's sync started, and must keep them until the clock is complete).
  ExternalWorkerStore(const core::Model& model, const core::Placement& placement,
                      core::ActorId self, int workers, bool in_place);

  // The program's side (before it reports the layer's backward pass done; the buffers stay valid
  // until the core has consumed the clock's gradients): the layer's gradient, one buffer of words
  // per blob, and, for a layer synced by sufficient factors, its factor rows (rows x N output
  // gradients, then rows x M inputs, words) of the clock's batches; none needed past min(M, N)
  // rows or with none (0: the module's forward never ran): the factors are then the identity
  // and the gradient.
  void SetGradients(int layer, std::vector<const float*> blobs);
  void SetFactors(int layer, std::vector<float> rows_then_inputs, int64_t rows);

  // Not in place: once `clock`'s mean gradient is complete (the worker's versions say so: the
  // caller's), its buffer, handed over whole (BlobOffset locates each blob's words in it) and
  // forgotten here. Any thread.
  std::unique_ptr<float[]> ReleaseMean(int64_t clock);
  // Where (layer, blob)'s words begin in a clock's mean buffer.
  size_t BlobOffset(int layer, int blob) const;

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

  // The host's rebuild stream, for each peer's factors of (layer, clock): once every worker's
  // factors are in (this worker's own with them), the sum of their weight gradients is one GEMM
  // over all their rows stacked in worker order, G^T X. The same GEMM on every replica, so every
  // replica's sum is bit-identical; one pass over the weight instead of one per peer. (When this
  // worker's own factors come last, SfbApply makes the sum, on the loop thread.)
  void SfbRebuild(int layer, int64_t clock, int peer);

  // protocol.gradient_wire (before the job starts; fp32 values only). In a 16-bit format this
  // worker keeps of what it sends what its peers decode (half.h RoundThroughWire): its own
  // factors in the stacked GEMM, the ring segments it sends; every replica adds the same numbers.
  void SetGradientWire(core::WireFormat w) { gradient_wire_ = w; }

 private:
  const core::Layer& LayerOf(int layer) const;
  // The layer's factors as the program gave them, or the identity and the gradient (SfbFactors).
  core::FloatBuffer FactorsOf(int layer);
  // Where the mean of (clock, layer, blob) goes: the program's gradient buffer (in place), or
  // the clock's buffer (made on first use). Holds mu_.
  float* MeanOf(int64_t clock, int layer, int blob);
  std::vector<float>& RingSum(int layer, int64_t clock, core::RingSpan span);

  const core::Model& model_;
  const core::Placement& placement_;
  const core::ActorId self_;
  const int value_words_;
  const bool in_place_;
  core::WireFormat gradient_wire_ = core::WireFormat::kFp32;
  std::vector<int64_t> layer_offset_;               // words before each layer's first blob
  std::vector<std::vector<int64_t>> blob_offset_;   // [layer][blob]: words before it
  std::vector<std::vector<const float*>> grads_;    // [layer][blob]: the program's buffers
  // [layer]: the program's factors of the clock and their rows (written before the layer is
  // reported done, read by the loop thread after).
  std::vector<std::pair<core::FloatBuffer, int64_t>> factors_;

  std::mutex mu_;  // what follows: the loop thread, the rebuild stream and the program meet here
  std::map<int64_t, std::unique_ptr<float[]>> mean_;  // clock -> every blob's mean gradient
  // Each (layer, clock)'s factors by worker (this worker's own included) and, once all are in,
  // the sum of the workers' weight gradients they make.
  struct SfbClock {
    std::map<core::ActorId, core::FloatBuffer> factors;
    std::vector<float> sum;
    bool summed = false;
  };
  // The sum of (layer, clock)'s workers' gradients from the factors in `c` (any thread, without
  // mu_: the buffers are immutable).
  std::vector<float> StackedRebuild(int layer, const std::map<core::ActorId, core::FloatBuffer>& f);
  std::map<std::pair<int, int64_t>, SfbClock> sfb_;
  std::vector<core::FloatBuffer> own_factors_;  // [layer]: what SfbFactors last made (loop thread)
  int workers_ = 1;
  std::map<std::pair<int, int64_t>, std::vector<float>> ring_sums_;
};

}  // namespace poseidon::rt
