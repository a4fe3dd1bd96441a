// core/param_store.h: where the protocol touches real numbers.
//
// The state machines decide *what* moves and when; the stores hold the floats. The simulator
// injects the phantom stores below, which hold nothing (messages carry sizes only); the live
// runtime injects stores backed by the net's parameter and gradient buffers and the optimizer.
#pragma once

#include <memory>
#include <vector>

#include "core/messages.h"
#include "core/placement.h"
#include "core/ring.h"

namespace poseidon::core {

using FloatBuffer = std::shared_ptr<const std::vector<float>>;

// A worker's view of its model replica.
class WorkerStore {
 public:
  virtual ~WorkerStore() = default;
  // The gradient values of a chunk after the backward pass of its layer (null when phantom).
  virtual FloatBuffer GradientChunk(const Chunk& chunk) = 0;
  // Installs fresh parameter values of a chunk received from its shard.
  virtual void WriteParams(const Chunk& chunk, const Message& params) = 0;

  // Sufficient-factor broadcasting of an FC layer's weight (the bias goes by the server). The
  // worker applies the weight's update itself once it holds all P gradients of a clock:
  //   SfbFactors   the layer's factors of the batch just back-propagated, sent to every peer;
  //   SfbAddOwn    adds the worker's own weight gradient of `clock` to that clock's sum;
  //   SfbReceive   a peer's factors arrived (the host rebuilds and adds them in the
  //                kSfbRebuild task it is then asked to run for (layer, clock, peer));
  //   SfbApply     the optimizer step with the sum of `contributions` gradients of `clock`.
  // The defaults do nothing: phantom stores carry no numbers.
  virtual FloatBuffer SfbFactors(int layer) {
    (void)layer;
    return nullptr;
  }
  virtual void SfbAddOwn(int layer, int64_t clock) {
    (void)layer;
    (void)clock;
  }
  virtual void SfbReceive(const Message& factors) { (void)factors; }
  virtual void SfbApply(int layer, int64_t clock, int contributions) {
    (void)layer;
    (void)clock;
    (void)contributions;
  }

  // Ring all-reduce of a layer's gradient (core/ring.h: pieces, segments, float spans; the
  // layer's blobs flattened in order). The store keeps one buffer of the layer's floats per
  // clock, which ends as the sum of the P workers' gradients:
  //   RingBegin    the worker's own gradient of `clock` is ready: add it to that clock's buffer
  //                (a peer's partial sum may be there already: a fast predecessor's step);
  //   RingSegment  a copy of floats `span` of that buffer, for a message about to be sent (its
  //                own gradient, a running partial sum, or a fully reduced segment);
  //   RingReceive  a ring step arrived for floats `span`: reduce-scatter (`reduce`) adds the
  //                peer's partial sum to the buffer, all-gather copies the reduced floats over it;
  //   RingApply    every piece of `clock` is reduced and gathered: the optimizer step with the
  //                buffer divided by `workers` (the mean gradient), as SfbApply does.
  // Every replica ends with the same floats: segment s is fully reduced by one worker only, and
  // the others copy it. The defaults do nothing: phantom stores carry no numbers.
  virtual void RingBegin(int layer, int64_t clock) {
    (void)layer;
    (void)clock;
  }
  virtual FloatBuffer RingSegment(int layer, int64_t clock, RingSpan span) {
    (void)layer;
    (void)clock;
    (void)span;
    return nullptr;
  }
  virtual void RingReceive(const Message& step, RingSpan span, bool reduce) {
    (void)step;
    (void)span;
    (void)reduce;
  }
  virtual void RingApply(int layer, int64_t clock, int workers) {
    (void)layer;
    (void)clock;
    (void)workers;
  }
};

// What a shard's checkpoint records besides the floats (fault tolerance, core/job.h): for every
// chunk it owns, the version of its values (they hold every update of clocks 0..version-1) and,
// under ASP, how many clocks of each worker's pushes have been applied. Every push of a clock
// below these is applied in the checkpointed values, and applied exactly once: a push sent again
// after a restart is recognised by (worker, clock, chunk) and not applied twice.
struct ChunkProgress {
  int32_t chunk = -1;
  int64_t version = 0;
  std::vector<int64_t> applied_by_worker;  // ASP only, indexed by worker index
};
struct ShardCheckpoint {
  // Every worker's pushes of clocks below `floor` are covered (the smallest of the versions, or
  // under ASP of the per-worker counts).
  int64_t floor = 0;
  std::vector<ChunkProgress> chunks;
};

// A server shard's parameter values and optimizer state for the chunks it owns.
class ShardStore {
 public:
  virtual ~ShardStore() = default;
  // Adds one worker's gradient for a chunk to the chunk's accumulator.
  virtual void Accumulate(const Chunk& chunk, const Message& push) = 0;
  // Runs the optimizer step for a chunk with the accumulated gradient divided by `num_pushes`
  // (the number of workers, P) and clears the accumulator. BSP/SSP accumulate the P pushes of
  // one clock; ASP applies every push on its own, as one P-th of a clock's update.
  virtual void Apply(const Chunk& chunk, int64_t clock, int num_pushes) = 0;
  // The chunk's current parameter values (null when phantom).
  virtual FloatBuffer Read(const Chunk& chunk) = 0;
  // ASP: the values the update of `worker`'s push answers it with (the chunk's current values,
  // unless the store keeps something per worker).
  virtual FloatBuffer ReadFor(const Chunk& chunk, ActorId worker) {
    (void)worker;
    return Read(chunk);
  }
  // Fault tolerance. The chunk's values before its last update, for stores that keep them (a
  // BSP job with fault tolerance on; null otherwise).
  virtual FloatBuffer ReadPrevious(const Chunk& chunk) {
    (void)chunk;
    return nullptr;
  }
  // Makes the chunks' values, optimizer state and `state` durable before the shard answers the
  // clock that completed them (the live store writes a file atomically; phantoms do nothing).
  virtual void Checkpoint(const ShardCheckpoint& state) { (void)state; }
};

class PhantomWorkerStore final : public WorkerStore {
 public:
  FloatBuffer GradientChunk(const Chunk&) override { return nullptr; }
  void WriteParams(const Chunk&, const Message&) override {}
};

class PhantomShardStore final : public ShardStore {
 public:
  void Accumulate(const Chunk&, const Message&) override {}
  void Apply(const Chunk&, int64_t, int) override {}
  FloatBuffer Read(const Chunk&) override { return nullptr; }
};

}  // namespace poseidon::core
