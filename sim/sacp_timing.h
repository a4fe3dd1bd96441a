// sim/sacp_timing.h: the times SACP's `auto` weighs plans with (core/sacp_time.h), taken from a
// scenario's compute model and network, and the protocol built with them. The simulator and a
// live job both build their protocol here, so that they plan alike. On machines with several
// devices the local reduction and broadcast of every layer are priced as the simulator prices
// them on an idle machine (sim/intra_machine.h).
#pragma once

#include "config/job_config.h"
#include "config/scenario.h"
#include "core/job.h"
#include "core/model.h"
#include "core/sacp.h"
#include "sim/compute_model.h"

namespace poseidon::sim {

core::SacpTiming SacpTimingFor(const config::ScenarioSpec& s, const core::Model& model,
                               const ComputeModel& compute);

// config::BuildProtocol, with `auto` weighed in time by SacpTimingFor.
core::ProtocolConfig BuildTimedProtocol(const config::ScenarioSpec& s, const core::Model& model,
                                        bool device_copies, const ComputeModel& compute);

}  // namespace poseidon::sim
