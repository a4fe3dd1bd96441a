// config/cluster_measurement_loader.h: published multi-machine training throughputs
// (scenarios/measurements/*.yaml; schema and split rule in its README.md): sources, setups (each
// naming the simulator scenario that describes it) and rows, each row one figure (samples_per_s
// of the whole job, or a speedup over one machine) with its set (calibration, fit, heldout).
// `poseidon reproduce` (sim/reproduce.h) simulates them. Every bad value is one ConfigError
// "FILE:LINE:COL: error: ...; what to do".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model.h"

namespace poseidon::config {

// One row of a measurement file, as read (what the file says).
struct MeasurementRow {
  std::string file;  // the measurement file, as given
  int line = 0;
  std::string set;   // calibration | fit | heldout
  std::string source, setup, system, model, precision, variant, transport;
  int machines = 1;
  int gpus_per_machine = 1;
  int gpus = 1;
  int64_t batch_per_gpu = 0;
  int servers = 0;          // 0: not stated
  bool is_speedup = false;  // the figure is a speedup over one machine (else samples/s)
  double published = 0;
  std::string scenario;     // the setup's scenario, resolved against the file; "" when none
  std::string no_scenario;  // the setup's `scenario:` text when it names no file
  // The setup's `settings` that match this row (its model, precision and system), their keys in
  // the file's order: how the benchmark's own code configured the system (bucket sizes, the
  // gradients' wire format), each entry with the source it was read from.
  std::vector<std::string> setting_keys;
  core::SourceLoc system_loc;  // where `system:` is, for errors about it
};

// Reads one measurement file. Throws ConfigError (FILE:LINE:COLUMN) for bad input.
std::vector<MeasurementRow> LoadClusterMeasurementFile(const std::string& path);

// The systems a row may name in any setup: the one-GPU (or one-machine) baseline of a series.
bool IsCalibrationSystem(const std::string& system);

}  // namespace poseidon::config
