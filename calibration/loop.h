// calibration/loop.h: closing the loop (a): the simulator's one-node iteration from a profile,
// against the measured one (calibration/compute_profiler.h, MeasureTrainingIterations).
//
//   double predicted = PredictOneNodeIterationMs("scenarios/models/fmnist_mlp.yaml",
//                                                "scenarios/profiles/fmnist_mlp_cpu_b64.yaml", 64);
//
// The prediction simulates a scenario of one worker with one colocated parameter-server shard
// (BSP, the profile's per-layer times and server update cost; a 10 Gbit/s star that carries
// nothing between machines) and returns its mean iteration time over 4 measured iterations after
// 1 warm-up. DWBP is off: the measured iteration is one thread running Forward, Backward, then
// the SGD step, and with DWBP the simulator runs the shard's update of layer i on the shard's own
// stream while the worker computes the backward of the layers below i (fmnist_mlp b64: ~1.9 ms of
// a ~22 ms iteration overlapped), which that single thread cannot. Throws config::ConfigError for
// a bad model or profile file.
#pragma once

#include <cstdint>
#include <string>

namespace poseidon::calibration {

double PredictOneNodeIterationMs(const std::string& model_file, const std::string& profile_file,
                                 int64_t batch);

}  // namespace poseidon::calibration
