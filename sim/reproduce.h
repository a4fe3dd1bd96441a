// sim/reproduce.h: published multi-machine measurements against the simulator (issue 36, part 3).
// Reads measurement files (scenarios/measurements/*.yaml, schema in its README.md), simulates every
// row on its setup's scenario, and reports the error per row and per set and system:
//
//   sim::ReproduceResult r = sim::RunReproduce({"scenarios/measurements/tf_docs_k80_distributed.yaml"},
//                                              {}, 2);
//   std::cout << sim::FormatReproduce(r, sim::OutputFormat::kTable);
//
// Only the one-GPU time is calibrated. A series is the rows of one file with the same (setup,
// model, precision, batch_per_gpu, variant); its `calibration` row (1 GPU) fixes the compute
// scale (cluster.compute_scale) at which the simulated 1-GPU throughput equals the published one
// (to 1e-6 relative, found by a fixed-point iteration: throughput is close to 1 / scale); every
// other row of the series is simulated with that scale and nothing else fitted. A series whose
// figures are speedups (no 1-GPU throughput) keeps scale 1, and a row's predicted speedup is its
// simulated throughput over the calibration row's.
//
// A row runs as `poseidon simulate SETUP_SCENARIO --set K=V...` with: cluster.machines,
// cluster.devices_per_machine, model, batch_per_worker (= batch_per_gpu: a process per GPU),
// cluster.precision (when the device can run the row's precision under the framework compute
// model; an fp32 row whose device cannot keeps the scenario's compute model, a mixed-precision one
// is skipped), cluster.servers (rows that state it, parameter-server systems), the system's keys
// (SystemOverrides), the keys of the setup's `settings` that match the row (how the benchmark's
// code configured the system: bucket sizes, the gradients' wire format; each cited in the file)
// and cluster.compute_scale; then the caller's overrides, which win.
//
// Rows that cannot run are kept with the reason (setup without a scenario, model not in the
// library, a scenario that refuses the row's keys, a failed simulation); none is dropped silently.
// Deterministic: the same files and overrides give byte-identical output whatever `threads`.
// Bad input (unreadable or malformed file, unknown setup or system, a row without exactly one
// figure) throws config::ConfigError with FILE:LINE:COLUMN.
#pragma once

#include <string>
#include <vector>

#include "config/cluster_measurement_loader.h"
#include "sim/simulation.h"

namespace poseidon::sim {

using config::MeasurementRow;

// TensorFlow 1.x's gRPC runtime: CPU per payload byte on the process that receives a tensor
// (NetworkSpec::process_ns_per_byte), 1 / 0.9 GB/s: tensorflow/tensorflow#6116 (reproduce.cc).
inline constexpr double kTensorFlowGrpcNsPerByte = 1.111;
// Open MPI 4.1.4's MPI_Allreduce of 64 MiB of host memory, two ranks, per byte a rank receives
// (NetworkSpec::process_ns_per_byte): over TCP, and over shared memory (the copies and sums
// alone, what RDMA leaves to the CPU). scripts/mpi-cpu-check, medians of 5 runs, 2026-12-05 on
// the 2-core "AMD EPYC" VM (kernel 6.18.44): 1.047 and 0.818. A figure of this machine, not of
// the measured clusters' CPUs (docs/reproduce.md).
inline constexpr double kOpenMpiTcpNsPerByte = 1.047;
inline constexpr double kOpenMpiShmNsPerByte = 0.818;

// The --set keys of a system id of the measurement files (on top of the setup's scenario):
// ddp_nccl: DDP; horovod_nccl, horovod_mpi: Horovod; both with a machine's copies over its
// interconnect (cluster.local_copies) on machines of 2+ devices, as `poseidon compare` runs
// them; horovod_mpi's received bytes cost its processes Open MPI's CPU per byte on the host
// (kOpenMpiTcpNsPerByte, or kOpenMpiShmNsPerByte when the row's transport is rdma); tf_ps,
// tf_ps_vars_cpu: TensorFlow's parameter servers (whole variables per server: scheme ps, placement
// by_size, no baseline; every received tensor costs its process kTensorFlowGrpcNsPerByte,
// TensorFlow's gRPC runtime); caffe_ps: the papers' parameter server (`poseidon compare`'s
// ps_papers); single_gpu, single_machine, poseidon_*: the scenario as it is. Empty `known` = false
// for an unknown id.
std::vector<std::string> SystemOverrides(const std::string& system, int devices_per_machine,
                                         const std::string& transport, bool* known);

struct ReproduceRow {
  MeasurementRow m;
  bool ran = false;
  std::string reason;                  // why not, when !ran
  double compute_scale = 1;            // the series' calibrated scale
  double predicted = 0;                // samples/s, or speedup for a speedup row
  double error_pct = 0;                // 100 (predicted - published) / published
  std::vector<std::string> overrides;  // the row's --set keys (the caller's last)
};

struct ReproduceSummary {
  std::string group;  // "fit", "heldout", "fit, multi-machine", "system ddp_nccl", ...
  int points = 0;
  double median_abs_pct = 0;
  double max_abs_pct = 0;
  int optimistic = 0;  // predicted > published
};

struct ReproduceResult {
  std::vector<std::string> files;
  std::vector<std::string> overrides;
  std::vector<ReproduceRow> rows;  // the files' order
  std::vector<ReproduceSummary> summary;
};

ReproduceResult RunReproduce(const std::vector<std::string>& files,
                             const std::vector<std::string>& overrides, int threads);

// The summary of `rows` that ran and are not calibration rows: per set, per set on more than one
// machine, per setup with rows on more than one machine (those rows, fit and held-out together:
// where the misses are), per system.
std::vector<ReproduceSummary> SummarizeReproduce(const std::vector<ReproduceRow>& rows);

// kTable: rows, skipped rows with their reasons, the summary; kCsv: one line per row.
std::string FormatReproduce(const ReproduceResult& r, OutputFormat format);

}  // namespace poseidon::sim
