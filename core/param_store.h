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
