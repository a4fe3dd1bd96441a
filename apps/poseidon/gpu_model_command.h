// apps/poseidon/gpu_model_command.h: `poseidon gpu-model check|fit|show` (flags -> calibration/
// gpu_fit.h and cost/gpu_kernel_model.h; no logic of their own).
//
//   poseidon gpu-model check                       # the cudnn model against the published rows
//   poseidon gpu-model check --compute-model roofline --csv
//   poseidon gpu-model fit -o fitted.yaml          # fit the constants to the `set: fit` rows
//   poseidon gpu-model show resnet50 --device v100 --batch 64   # per-layer algorithm and times
//   poseidon gpu-model compare profile.yaml --device h200      # a measured profile, per layer
//
// FILE defaults to DATA_DIR/devices/measurements/cnn_benchmarks.yaml. main.cc calls
// AddGpuModelCommands before parsing and RunGpuModelCommands after; the latter returns -1 when
// none of these subcommands was given. Bad flags or files throw config::ConfigError.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace poseidon::app {

struct GpuModelCommands;

std::shared_ptr<GpuModelCommands> AddGpuModelCommands(CLI::App& app, const std::string* data_dir);
int RunGpuModelCommands(const GpuModelCommands& c);

}  // namespace poseidon::app
