// core/placement_policy.h: how a job spreads its parameters over the shards (placement.h builds
// it; the protocol config and SACP's time model name it).
#pragma once

#include <cstdint>
#include <string>

namespace poseidon::core {

// How parameters are spread over the shards.
//   kBalancedChunks: every blob cut into chunk_bytes pieces, each on the least-loaded shard (ours).
//   kTensorRoundRobin: every blob whole, blob i (in model order) on shard i mod S: the baselines
//     the papers compared with (Caffe/TensorFlow-style parameter servers place whole tensors).
//   kTensorBySize: every blob whole, largest first onto the least-loaded shard (greedy LPT).
// A whole blob travels as one message, so one big tensor can make one shard the bottleneck, as
// it did in those systems.
enum class PlacementPolicy : uint8_t { kBalancedChunks, kTensorRoundRobin, kTensorBySize };
// "balanced", "round_robin", "by_size".
const char* PlacementPolicyName(PlacementPolicy p);
bool PlacementPolicyFromName(const std::string& name, PlacementPolicy* p);

}  // namespace poseidon::core
