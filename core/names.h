// core/names.h: "did you mean" suggestions for names a user got wrong (layer names, keys, kinds).
#pragma once

#include <string>
#include <vector>

namespace poseidon::core {

// The known name closest to `name` by edit distance, or "" when none is close enough to be a
// likely typo: up to a third of the letters may differ (at least one), and a known name that
// starts with `name` (bandwidth -> bandwidth_gbps) counts as one edit away.
std::string ClosestName(const std::string& name, const std::vector<std::string>& known);

}  // namespace poseidon::core
