#include "core/placement.h"

#include <algorithm>

#include "core/types.h"

namespace poseidon::core {

Placement Placement::Build(const Model& model, int num_shards, int64_t chunk_bytes,
                           const std::vector<Scheme>& scheme_of_layer) {
  POSEIDON_CHECK(num_shards >= 1) << num_shards;
  POSEIDON_CHECK(chunk_bytes >= 4) << chunk_bytes;
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
      for (int64_t off = 0; off < count; off += chunk_count) {
        Chunk c;
        c.id = static_cast<int32_t>(p.chunks_.size());
        c.layer = layer.id;
        c.blob = static_cast<int32_t>(b);
        c.offset = off;
        c.count = std::min(chunk_count, count - off);
        c.shard = static_cast<int32_t>(
            std::min_element(p.shard_bytes_.begin(), p.shard_bytes_.end()) - p.shard_bytes_.begin());
        p.shard_bytes_[c.shard] += c.bytes();
        p.by_shard_[c.shard].push_back(c.id);
        p.by_layer_[layer.id].push_back(c.id);
        p.layer_bytes_[layer.id] += c.bytes();
        p.chunks_.push_back(c);
      }
    }
  }
  return p;
}

int64_t Placement::total_bytes() const {
  int64_t t = 0;
  for (int64_t b : shard_bytes_) t += b;
  return t;
}

}  // namespace poseidon::core
