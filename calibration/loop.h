// calibration/loop.h: closing the loop (a): the simulator's one-node iteration from a profile,
// against the measured one (calibration/compute_profiler.h, MeasureTrainingIterations).
//
//   double predicted = PredictOneNodeIterationMs("scenarios/models/fmnist_mlp.yaml",
//                                                "scenarios/profiles/fmnist_mlp_cpu_b64.yaml", 64);
//
// The prediction simulates a scenario of one worker with one colocated parameter-server shard
// (BSP, DWBP on, the profile's per-layer times and server update cost; a 10 Gbit/s star that
// carries nothing between machines) and returns its mean iteration time over 4 measured
// iterations after 1 warm-up. Throws config::ConfigError for a bad model or profile file.
#pragma once

#include <cstdint>
#include <string>

namespace poseidon::calibration {

double PredictOneNodeIterationMs(const std::string& model_file, const std::string& profile_file,
                                 int64_t batch);

}  // namespace poseidon::calibration
