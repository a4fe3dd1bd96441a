// config/job_config.h: from a loaded scenario to the core's job description, the same for every
// host (the simulator and the live runtime build their jobs through these, so that a scenario
// means one protocol configuration wherever it runs).
#pragma once

#include "config/scenario.h"
#include "core/job.h"
#include "core/model.h"

namespace poseidon::config {

// The scenario's model, without the groups it excludes (e.g. GoogLeNet's aux heads).
core::Model BuildScenarioModel(const ScenarioSpec& s);

// protocol.fault_tolerance's policy for a dead worker: evict (the default for ssp and asp, or
// on_worker_failure: evict) rather than wait for its restart.
bool EvictsDeadWorkers(const ScenarioSpec& s);

// protocol.fault_tolerance as the core's FaultConfig (all off without the section). It does not
// depend on the model, so a process knows it before the job's model is known.
core::FaultConfig BuildFault(const ScenarioSpec& s);

// protocol.gradient_wire as the core's WireFormat. Throws ConfigError (at the scenario's protocol
// section) for an unknown name, or a 16-bit form with a model of fp64 values (model: torch jobs
// know their model only when the workers bring it). BuildProtocol and `poseidon plan` read it
// through this.
core::WireFormat BuildGradientWire(const ScenarioSpec& s, const core::Model& model);

// What NCCL's tuning model (core/nccl_tuning.h) reads of the scenario's cluster, for
// allreduce_algorithm auto: the job's workers on its worker machines, a machine's NIC
// (network.bandwidth_gbps), a device's path inside the machine (the interconnect's NVLink rate,
// else its or the device's PCIe rate; for one process per machine the NIC's), and the device's
// generation; the network post overhead from the interconnect's cpu_vendor (2 us on AMD, 1 us
// on Intel and others, as NCCL's getNetOverhead; without an interconnect, Intel's).
core::NcclTopology BuildNcclTopology(const ScenarioSpec& s);

// The protocol configuration: SACP plan, consistency, gate, priorities. Throws ConfigError (at
// the scenario's protocol section) for a plan the model cannot take (sfb on a conv layer, an
// unknown layer name). `timing`: what `scheme: auto` weighs plans with (core/sacp_time.h; hosts
// pass cost::SacpTimingFor's); without it `auto` is the paper's byte rule, as `paper` always is.
// Workers are the machines' clients (ProtocolWorkers): SACP counts machines, and a worker's
// sufficient factors have the rows of all its devices (ProtocolConfig::batch).
core::ProtocolConfig BuildProtocol(const ScenarioSpec& s, const core::Model& model,
                                   bool device_copies, const core::SacpTiming* timing = nullptr);

// Who runs where: the worker machines (one worker each, or one per device with client: device),
// shards colocated (shard j on worker machine j mod machines) or on server machines of their own.
core::JobLayout BuildLayout(const ScenarioSpec& s);

}  // namespace poseidon::config
