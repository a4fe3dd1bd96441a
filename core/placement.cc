#include "core/placement.h"

#include <algorithm>

#include "core/types.h"

namespace poseidon::core {

const char* PlacementPolicyName(PlacementPolicy p) {
  switch (p) {
    case PlacementPolicy::kBalancedChunks: return "balanced";
    case PlacementPolicy::kTensorRoundRobin: return "round_robin";
    case PlacementPolicy::kTensorBySize: return "by_size";
  }
  return "?";
}

bool PlacementPolicyFromName(const std::string& name, PlacementPolicy* p) {
  for (PlacementPolicy x : {PlacementPolicy::kBalancedChunks, PlacementPolicy::kTensorRoundRobin,
                            PlacementPolicy::kTensorBySize}) {
    if (name == PlacementPolicyName(x)) {
      *p = x;
      return true;
    }
  }
  return false;
}

Placement Placement::Build(const Model& model, int num_shards, int64_t chunk_bytes,
                           const std::vector<Scheme>& scheme_of_layer, PlacementPolicy policy) {
  POSEIDON_CHECK(num_shards >= 1) << num_shards;
  POSEIDON_CHECK(chunk_bytes >= 4) << chunk_bytes;
  const bool whole = policy != PlacementPolicy::kBalancedChunks;
  const int64_t chunk_count = chunk_bytes / 4;
  Placement p;
  const auto& layers = model.layers();
  p.by_layer_.resize(layers.size());
  p.layer_bytes_.assign(layers.size(), 0);
  p.by_shard_.resize(num_shards);
  p.shard_bytes_.assign(num_shards, 0);
  for (const Layer& layer : layers) {
    const Scheme scheme =
        scheme_of_layer.empty() ? Scheme::kPs : scheme_of_layer[static_cast<size_t>(layer.id)];
    if (scheme == Scheme::kAllreduce) continue;
    for (size_t b = scheme == Scheme::kSfb ? 1 : 0; b < layer.blobs.size(); ++b) {
      const int64_t count = layer.blobs[b].count;
      // A value of several words (fp64) is never split between two chunks.
      const int64_t w = layer.value_words;
      const int64_t step = whole ? count : std::max(w, chunk_count / w * w);
      for (int64_t off = 0; off < count; off += step) {
        Chunk c;
        c.id = static_cast<int32_t>(p.chunks_.size());
        c.layer = layer.id;
        c.blob = static_cast<int32_t>(b);
        c.offset = off;
        c.count = std::min(step, count - off);
        if (policy == PlacementPolicy::kBalancedChunks) {
          c.shard = static_cast<int32_t>(
              std::min_element(p.shard_bytes_.begin(), p.shard_bytes_.end()) -
              p.shard_bytes_.begin());
          p.shard_bytes_[c.shard] += c.bytes();
        } else if (policy == PlacementPolicy::kTensorRoundRobin) {
          c.shard = static_cast<int32_t>(c.id % num_shards);
          p.shard_bytes_[c.shard] += c.bytes();
        }
        p.by_layer_[layer.id].push_back(c.id);
        p.layer_bytes_[layer.id] += c.bytes();
        p.chunks_.push_back(c);
      }
    }
  }
  if (policy == PlacementPolicy::kTensorBySize) {
    // Largest first (ties: model order) onto the shard holding the fewest bytes (ties: lowest).
    std::vector<int32_t> order(p.chunks_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return p.chunks_[static_cast<size_t>(a)].count > p.chunks_[static_cast<size_t>(b)].count;
    });
    for (int32_t id : order) {
      Chunk& c = p.chunks_[static_cast<size_t>(id)];
      c.shard = static_cast<int32_t>(
          std::min_element(p.shard_bytes_.begin(), p.shard_bytes_.end()) - p.shard_bytes_.begin());
      p.shard_bytes_[c.shard] += c.bytes();
    }
  }
  for (const Chunk& c : p.chunks_) p.by_shard_[c.shard].push_back(c.id);  // in id order
  return p;
}

int64_t Placement::total_bytes() const {
  int64_t t = 0;
  for (int64_t b : shard_bytes_) t += b;
  return t;
}

}  // namespace poseidon::core
