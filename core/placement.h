// core/placement.h: cutting parameter blobs into chunks and placing them on server shards.
//
// Every blob (a layer's weights, its bias, ...) is cut into chunks of at most chunk_bytes; the
// last chunk of a blob may be smaller. Chunks are placed greedily, in model order, on the shard
// holding the fewest bytes so far (ties: the lowest shard index). Unlike the paper's round-robin
// this keeps shards within one chunk of each other in bytes even when blob sizes differ wildly
// (AlexNet's fc6 weights are 151 MB, its conv1 bias 384 bytes). Deterministic: every actor
// computes the same placement from the same model and config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/placement_policy.h"
#include "core/sacp.h"

namespace poseidon::core {

struct Chunk {
  int32_t id = 0;
  int32_t layer = 0;   // layer id in the model
  int32_t blob = 0;    // index into the layer's blobs
  int64_t offset = 0;  // first value within the blob
  int64_t count = 0;   // number of fp32 values
  int32_t shard = 0;   // owning shard index (0..num_servers-1)
  int64_t bytes() const { return count * 4; }
};

class Placement {
 public:
  // `scheme_of_layer` (indexed by layer id; empty = all PS) says which blobs go through the
  // parameter server: every blob of a kPs layer, the bias (blobs after the first) of a kSfb
  // layer, nothing of a kAllreduce layer.
  static Placement Build(const Model& model, int num_shards, int64_t chunk_bytes,
                         const std::vector<Scheme>& scheme_of_layer = {},
                         PlacementPolicy policy = PlacementPolicy::kBalancedChunks);

  const std::vector<Chunk>& chunks() const { return chunks_; }
  // Chunk ids of a layer (empty for layers without parameters).
  const std::vector<int32_t>& chunks_of_layer(int layer) const { return by_layer_[layer]; }
  int64_t layer_bytes(int layer) const { return layer_bytes_[layer]; }
  // Chunk ids owned by a shard, and their total bytes.
  const std::vector<int32_t>& chunks_of_shard(int shard) const { return by_shard_[shard]; }
  int64_t shard_bytes(int shard) const { return shard_bytes_[shard]; }
  int num_shards() const { return static_cast<int>(by_shard_.size()); }
  int64_t total_bytes() const;

 private:
  std::vector<Chunk> chunks_;
  std::vector<std::vector<int32_t>> by_layer_;
  std::vector<int64_t> layer_bytes_;
  std::vector<std::vector<int32_t>> by_shard_;
  std::vector<int64_t> shard_bytes_;
};

}  // namespace poseidon::core
