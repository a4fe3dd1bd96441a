// apps/poseidon/plan_command.h: `poseidon plan SCENARIO.yaml` -- the SACP cost model's per-layer
// choice (core/sacp.h) for a scenario's model, cluster and protocol.scheme / layer_schemes.
//
//   config::ScenarioSpec s = config::LoadScenarioFile("scenarios/demo.yaml");
//   RunPlan(s, std::cout);
//
// Prints a header line (P1, P2, placement, K, the SFB threshold 2MN/(K(M+N)) of each FC layer), one
// row per layer with parameters (name, type, shape, parameters, MB per iteration through the
// busiest NIC by ps / sfb / allreduce, the choice and why), and the totals of the chosen plan
// against all-PS. Returns the process exit status (0). Throws core::ModelError for a bad model and
// config::ConfigError for a scheme request the model does not allow (sfb on a conv layer, an
// unknown layer name).
#pragma once

#include <ostream>

#include "config/scenario.h"

namespace poseidon::app {

int RunPlan(const config::ScenarioSpec& s, std::ostream& out);

}  // namespace poseidon::app
