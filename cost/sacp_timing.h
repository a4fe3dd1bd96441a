// cost/sacp_timing.h: the times SACP's `auto` weighs plans with (core/sacp_time.h), taken from a
// scenario's compute model and network, and the protocol built with them. The simulator and a
// live job both build their protocol here, so that they plan alike. On machines with several
// devices the local reduction and broadcast of every layer are priced as the simulator prices
// them on an idle machine (cost/intra_machine.h).
#pragma once

#include <vector>

#include "config/job_config.h"
#include "config/scenario.h"
#include "core/job.h"
#include "core/model.h"
#include "core/sacp.h"
#include "cost/compute_model.h"

namespace poseidon::cost {

core::SacpTiming SacpTimingFor(const config::ScenarioSpec& s, const core::Model& model,
                               const ComputeModel& compute);

// The same with the compute times given per layer (seconds; sfb_rebuild_s 0 for layers without
// sufficient factors): what a worker that measured its own layers plans with (poseidon.torch).
// No local reductions (one device per worker); a shard's update at server_update_gbs.
core::SacpTiming SacpTimingMeasured(const config::ScenarioSpec& s, const core::Model& model,
                                    std::vector<double> fwd_s, std::vector<double> bwd_s,
                                    std::vector<double> sfb_rebuild_s);

// config::BuildProtocol, with `auto` weighed in time by SacpTimingFor.
core::ProtocolConfig BuildTimedProtocol(const config::ScenarioSpec& s, const core::Model& model,
                                        bool device_copies, const ComputeModel& compute);

}  // namespace poseidon::cost
