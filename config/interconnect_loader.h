// config/interconnect_loader.h: how the devices of one machine are joined, for machines with
// several devices (cluster.devices_per_machine > 1; cost/intra_machine.h prices what moves).
//
// An interconnect file (scenarios/interconnects/NAME.yaml) holds datasheet figures, units in the
// key names:
//
//   schema_version: 1
//   name: dgx_a100                # should equal the file's stem
//   description: "NVIDIA DGX A100: 8 A100 on NVSwitch"
//   source: "NVIDIA DGX A100 datasheet"   # required: where the figures come from
//   kind: nvlink                  # nvlink | pcie | host (config/specs.h InterconnectKind)
//   link_gbs: 300                 # nvlink only: device-to-device, per device, each direction,
//                                 # 1e9 bytes/s (> 0)
//   link_latency_us: 2            # nvlink, pcie: one step between devices or one copy (>= 0)
//   pcie_gbs: 25                  # nvlink, pcie: device <-> host memory, per device, each
//                                 # direction (> 0; omitted: the device file's pcie_gbs)
//   host_memory_gbs: 400          # host memory bandwidth the copies, the host's sums and the NIC
//                                 # share (> 0; omitted: the scenario's server_update_gbs)
//   reduce_on: device             # device | host (config/specs.h ReduceOn)
//   cpu_vendor: amd               # intel | amd | other: the machine's CPUs, where NCCL's tuning
//                                 # reads them (core/nccl_tuning.h: a network post costs 2 us on
//                                 # AMD, 1 elsewhere); omitted: intel
//
// A scenario names a file (`cluster.interconnect: dgx_a100`) or writes the keys in a mapping
// (`cluster.interconnect: {file: dgx_a100, reduce_on: host}`: a file's figures with overrides;
// a mapping without `file` needs no name or source). Every bad input throws one ConfigError
// "FILE:LINE:COL: error: ...; what to do".
#pragma once

#include <string>

#include "config/specs.h"
#include "config/yaml_reader.h"

namespace poseidon::config {

inline constexpr int64_t kInterconnectSchemaVersion = 1;

InterconnectSpec LoadInterconnectFile(const std::string& path);
InterconnectSpec ParseInterconnectYaml(const std::string& text, const std::string& name);

// The figure keys of a file or a scenario's mapping (kind, link_gbs, link_latency_us, pcie_gbs,
// host_memory_gbs, reduce_on, cpu_vendor) into *spec, each key given replacing what *spec holds; checks that
// they fit the kind (link_gbs only for nvlink, and required there). Marks them read in r.
void ReadInterconnectFigures(MapReader& r, InterconnectSpec* spec);

}  // namespace poseidon::config
