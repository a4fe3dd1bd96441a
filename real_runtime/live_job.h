// real_runtime/live_job.h: what a live worker or shard knows of its job, built the same way in
// every process (and as the simulator builds it), so that every process's core agrees on chunks,
// schemes and shapes without extra messages.
//
//   LiveJob job = BuildLiveJob(options);   // throws config::ConfigError
//   core::Worker w(rank, job.model, *job.placement, layout, job.protocol, host, store);
#pragma once

#include <optional>

#include "config/scenario.h"
#include "core/job.h"
#include "core/model.h"
#include "core/placement.h"
#include "kernels/sgd.h"
#include "real_runtime/compute_streams.h"
#include "real_runtime/node.h"
#include "cost/compute_model.h"

namespace poseidon::rt {

struct LiveJob {
  core::Model model;
  core::ProtocolConfig protocol;  // real_payloads set: every message carries its values
  std::optional<core::Placement> placement;
  // The optimizer's schedule (the training options; max_iter and stepsize default from the
  // scenario's iterations), for a shard's updates and a worker's SFB and ring steps.
  kernels::SgdOptions sgd;
  // --compute replay: what this process's tasks take (the scenario's compute model, with this
  // worker's straggler slowdown), as the simulator charges them.
  std::optional<ReplayedCompute> replayed;
};

// The job of process `o.rank`: the scenario's model, the protocol SACP plans for it with the
// simulator's compute model (so `auto` plans the same in every process and in the simulator), the
// placement of its chunks. Refuses options the job cannot run with: a compute mode other than
// real or replay, checkpoints without a folder, --resume without checkpoints, a worker that
// rejoins a plan with layers off the parameter server.
LiveJob BuildLiveJob(const NodeOptions& o);

}  // namespace poseidon::rt
