// sim/compare.h: the question users ask first: "on this cluster, how much faster would Poseidon
// be than what I run today?" One scenario (its cluster, model, batch, consistency) is simulated
// once per system, each system being the scenario with a few protocol keys set:
//
//   poseidon    Poseidon's choice: DWBP, SACP auto (per layer PS, SFB or ring), balanced chunks;
//               one client per machine (the three-level hybrid) on machines of several devices
//   ddp         PyTorch DDP with the scenario's protocol.ddp or DDP's defaults (25 MiB buckets,
//               1 MiB first); a process per device, as torchrun starts it
//   horovod     Horovod's tensor fusion with protocol.horovod or its defaults (128 MiB, 1 ms
//               cycle); a process per device, as horovodrun starts it
//   ps_papers   a parameter server as the papers ran it: whole tensors placed round-robin on the
//               shards, no wait-free overlap (a layer's push waits for the whole backward pass)
//   ps_overlap  a parameter server with balanced chunks and DWBP's overlap
//
//   sim::CompareResult c = sim::RunCompare("scenarios/experiments/atc17_vgg19_22k.yaml", {}, 2);
//   std::cout << sim::FormatCompare(c, sim::OutputFormat::kTable);
//
// Each row is exactly `poseidon simulate SCENARIO --set U... --set S...`, U the user's overrides
// and S the row's `overrides` (printed with it): same iteration time to the bit. A system the
// scenario cannot run (DDP and Horovod need BSP; a scenario under SSP or ASP runs only Poseidon
// and the parameter servers) keeps its row with the reason, and no figures.
//
// The figures are simulate's (sim/simulation.h): iteration time, throughput, speedup over one
// device of single-machine training, and per iteration compute (the compute stream busy), wait
// (iteration - compute: the stream idles for parameters, i.e. communication not hidden by
// compute, or slower workers) and communication (the NIC busy; it overlaps compute, so it is not
// added). Poseidon's gain over a system is Poseidon's throughput over that system's.
//
// Deterministic: the same scenario and overrides give byte-identical output whatever `threads`.
// Bad input (a scenario file that cannot be read or parsed, a malformed --set) throws
// config::ConfigError from RunCompare; what one system cannot run is its row's reason.
#pragma once

#include <string>
#include <vector>

#include "sim/simulation.h"

namespace poseidon::sim {

struct CompareSystem {
  std::string id;     // poseidon | ddp | horovod | ps_papers | ps_overlap
  std::string label;  // what the table and the plot call it
};

// The systems, in the order of the rows (Poseidon first).
const std::vector<CompareSystem>& CompareSystems();

// The --set overrides that make `s` (the scenario as the user gave it, overrides applied) run
// system `id`: the protocol keys that system fixes, the keys of another system it would trip on
// set to null, and for DDP and Horovod on machines of several devices `cluster.client=device`
// with `cluster.local_copies=interconnect` (their copies inside a machine cross its interconnect).
// Throws std::invalid_argument for an unknown id.
std::vector<std::string> CompareOverrides(const std::string& id, const config::ScenarioSpec& s);

// Why system `id` cannot run `s` ("" when it can, as far as the scenario says; a system may still
// fail when loaded or simulated, and that error becomes its reason).
std::string CompareUnsupported(const std::string& id, const config::ScenarioSpec& s);

struct CompareRow {
  CompareSystem system;
  std::vector<std::string> overrides;  // CompareOverrides: the row is `simulate --set` these
  std::string detail;                  // the system's settings, e.g. "buckets 25 MiB, first 1 MiB"
  bool ran = false;
  std::string reason;        // why not, when !ran
  ScenarioResult result;     // when ran
  double poseidon_gain = 0;  // Poseidon's throughput / this one's; 0 when either did not run
};

struct CompareResult {
  std::string scenario_file;           // as given
  std::vector<std::string> overrides;  // the user's
  std::string name;
  std::string model;
  int machines = 0;
  int devices_per_machine = 1;
  int64_t batch_per_device = 0;
  double bandwidth_gbps = 0;
  std::string consistency;              // bsp | ssp(s) | asp
  double single_node_iteration_ms = 0;  // one device, forward + backward, nothing to synchronise
  std::vector<CompareRow> rows;         // CompareSystems() order
};

// Loads `scenario_file` with `overrides` (a ConfigError names the file, line and column, or the
// --set), then simulates every system on up to `threads` threads.
CompareResult RunCompare(const std::string& scenario_file,
                         const std::vector<std::string>& overrides, int threads);

// kTable: the table with a legend and each row's --set; kCsv: one row per system; kJson: one
// object (analysis/plot_compare.py reads it).
std::string FormatCompare(const CompareResult& r, OutputFormat format);

}  // namespace poseidon::sim
