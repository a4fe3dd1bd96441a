#include "real_runtime/shard_role.h"

#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/yaml_reader.h"
#include "kernels/net.h"
#include "real_runtime/gradient_stores.h"

namespace poseidon::rt {

using config::ConfigError;

ShardRole::ShardRole(NodeProcess& process, LiveJob job) : p_(process), job_(std::move(job)) {
  const NodeOptions& o = p_.options();
  if (job_.replayed) {
    if (o.rejoin || o.resume) {
      throw ConfigError(fmt::format(
          "error: {} of a shard needs --compute real (replayed shards hold no values to "
          "checkpoint)",
          o.resume ? "--resume" : "--rejoin"));
    }
    store_ = std::make_unique<ReplayShardStore>();
    shard_ = std::make_unique<core::ServerShard>(o.rank, *job_.placement, p_.layout(),
                                                 job_.protocol, &p_, store_.get());
    return;
  }
  if (o.scenario.model_from_workers) {
    // The workers step their own optimizers: the shard averages their gradients.
    store_ = std::make_unique<MeanGradientShardStore>(
        job_.model, *job_.placement, p_.layout().ServerIndex(o.rank), job_.protocol.consistency,
        p_.layout().num_workers);
    shard_ = std::make_unique<core::ServerShard>(o.rank, *job_.placement, p_.layout(),
                                                 job_.protocol, &p_, store_.get());
    return;
  }
  BuildRealShard();
}

// A shard with real values: every replica and every shard start from the values a Net built
// with the job's seed has; a restarted one from its checkpoint, if there is one.
void ShardRole::BuildRealShard() {
  const NodeOptions& o = p_.options();
  const config::ScenarioSpec& s = o.scenario;
  const core::JobLayout& layout = p_.layout();
  kernels::Net initial(job_.model, kernels::Backend::kReference, /*batch=*/1, s.seed);
  auto live = std::make_unique<LiveShardStore>(initial, *job_.placement,
                                               layout.ServerIndex(o.rank),
                                               job_.protocol.consistency, job_.sgd);
  live_store_ = live.get();
  store_ = std::move(live);
  shard_ = std::make_unique<core::ServerShard>(o.rank, *job_.placement, layout, job_.protocol,
                                               &p_, store_.get());
  if (p_.fault_tolerant() && job_.protocol.consistency == core::Consistency::kBsp) {
    live_store_->KeepPrevious();
  }
  if (p_.fault().at_checkpoint()) {
    live_store_->SetCheckpointHook(
        [this](const core::ShardCheckpoint& state) { p_.fault().At("checkpoint", state.floor); });
  }
  if (o.checkpoint_dir.empty()) return;
  const std::string file =
      fmt::format("{}/shard-{}.ckpt", o.checkpoint_dir, layout.ServerIndex(o.rank));
  const std::string name = std::filesystem::path(file).filename().string();
  live_store_->SetCheckpointFile(file);
  if (o.resume && !std::filesystem::exists(file)) {
    throw ConfigError(fmt::format(
        "{}: error: no checkpoint of this shard to resume from; --resume needs the folder "
        "the stopped job checkpointed into (launch: its --log-dir, which holds checkpoints/)",
        file));
  }
  if ((o.rejoin || o.resume) && std::filesystem::exists(file)) {
    const core::ShardCheckpoint state = live_store_->LoadCheckpoint();
    shard_->Restore(state);
    spdlog::info("{}: restored from {}: every push of clocks below {} applied", p_.Who(o.rank),
                 file, state.floor);
    restore_note_ = fmt::format("restarted from {} (clocks below {})", file, state.floor);
    lost_advice_ = fmt::format(
        "This shard was restored from {}, which holds the clocks below {} only: put back the "
        "newest {} or start the job again",
        file, state.floor, name);
  } else if (o.rejoin) {
    spdlog::info("{}: no checkpoint at {} yet; starting from the initial values", p_.Who(o.rank),
                 file);
    restore_note_ = fmt::format(
        "restarted from the initial values: no checkpoint at {}; if the job was past its "
        "first checkpoint, the clocks before the pushes the workers keep cannot be replayed: "
        "put back the newest {} or start the job again",
        file, name);
    lost_advice_ = fmt::format(
        "This shard was restarted from the initial values, with no checkpoint at {}: put back "
        "the newest {} or start the job again",
        file, name);
  }
}

// A shard's update runs in its store's Apply, when the core takes the result; the task on the
// server stream orders it (and, replayed, takes the modelled time).
void ShardRole::StartCompute(const core::ComputeTask& task) {
  const core::TimeNs begin = p_.Now();
  streams_.Of(task).Post([this, task, begin] {
    const core::TimeNs start =
        job_.replayed ? job_.replayed->Run(task, begin, [this] { return p_.Now(); }) : begin;
    asio::post(p_.io(), [this, task, start] { p_.TaskDone(task, start); });
  });
}

}  // namespace poseidon::rt
