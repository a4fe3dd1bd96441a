// real_runtime/node_build.cc: building a live process (node_host.h): the actor its rank hosts and
// the stores its compute mode needs, the transport, the rendezvous and the coordinator's
// watchdog; and the check that a scenario can run live at all.
#include "real_runtime/node_host.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/job_config.h"
#include "config/yaml_reader.h"
#include "core/message_rules.h"
#include "kernels/net.h"
#include "sim/compute_model.h"
#include "sim/sacp_timing.h"

namespace poseidon::rt {

using config::ConfigError;

NodeHost::NodeHost(const NodeOptions& o) : o_(o) {
  const config::ScenarioSpec& s = o_.scenario;
  model_ = config::BuildScenarioModel(s);
  layout_ = config::BuildLayout(s);
  if (o_.rank < 0 || o_.rank >= layout_.num_actors()) {
    throw ConfigError(fmt::format(
        "error: rank {} is out of range: scenario {} has {} processes "
        "(coordinator 0, workers 1..{}, shards {}..{})",
        o_.rank, s.file, layout_.num_actors(), layout_.num_workers, layout_.num_workers + 1,
        layout_.num_actors() - 1));
  }
  CheckLiveScenario(s);
  if (o_.compute != "real" && o_.compute != "replay") {
    throw ConfigError(fmt::format("error: --compute must be real or replay, got '{}'", o_.compute));
  }
  replay_ = o_.compute == "replay";
  // The simulator's compute model: what SACP's auto plans with (the same plan in every process
  // and in the simulator), and, replayed, what tasks take.
  const sim::ComputeModel planned = sim::BuildComputeModel(s, model_);
  bool device_copies = false;
  const int protocol_devices = config::DevicesPerWorker(s);
  if (replay_) {
    // With the straggler slowdowns the scenario gives.
    sim::ComputeModel cm = planned;
    device_copies = cm.pcie_bandwidth_Bps() > 0;
    if (layout_.IsWorker(o_.rank)) {
      for (const auto& st : s.stragglers) {
        if (st.worker == layout_.WorkerIndex(o_.rank)) cm = cm.ScaledBy(st.slowdown);
      }
    }
    std::optional<sim::IntraMachine> intra;
    if (protocol_devices > 1) {
      intra.emplace(s.interconnect, protocol_devices, 1, s.network.host_bandwidth_Bps);
    }
    replayed_.emplace(std::move(cm), model_, s.batch_per_worker * protocol_devices,
                      protocol_devices, std::move(intra));
    o_.training.test = false;
  }
  protocol_ = sim::BuildTimedProtocol(s, model_, device_copies, planned);
  ft_ = protocol_.fault.enabled();
  if (protocol_.fault.checkpoint_every > 0 && o_.checkpoint_dir.empty()) {
    throw ConfigError(
        fmt::format("error: {}: protocol.fault_tolerance.checkpoint_every needs "
                    "--checkpoint-dir DIR (poseidon launch passes one)",
                    s.file));
  }
  if (o_.rejoin && !ft_) {
    throw ConfigError(fmt::format("error: --rejoin needs protocol.fault_tolerance in {}", s.file));
  }
  if (o_.resume && (!ft_ || protocol_.fault.checkpoint_every <= 0)) {
    throw ConfigError(fmt::format(
        "error: --resume continues from the shards' checkpoints: {} needs a "
        "protocol.fault_tolerance section with checkpoint_every > 0 (the run being resumed "
        "must have had it too)",
        s.file));
  }
  if ((o_.rejoin || o_.resume) && layout_.IsWorker(o_.rank)) {
    if (const int l = core::FirstLayerOffPs(model_, protocol_); l >= 0) {
      throw ConfigError(fmt::format(
          "error: a {} worker cannot rejoin: {}; rejoining needs every layer on the "
          "parameter server (protocol.scheme: ps)",
          o_.resume ? "resumed" : "restarted", core::OffPsReason(model_, protocol_, l)));
    }
  }
  placement_ =
      core::Placement::Build(model_, s.servers, protocol_.chunk_bytes, protocol_.scheme_of_layer,
                             protocol_.placement_policy);
  is_worker_ = layout_.IsWorker(o_.rank);
  is_server_ = layout_.IsServer(o_.rank);
  if (o_.inject && o_.inject->rank == o_.rank && !o_.rejoin) {
    fault_ = FaultInjector(*o_.inject, Who(o_.rank),
                           is_server_ ? fmt::format("{}/shard-{}.ckpt", o_.checkpoint_dir,
                                                    layout_.ServerIndex(o_.rank))
                                      : std::string());
  }

  kernels::Backend backend;
  if (!kernels::BackendFromName(o_.training.backend, &backend)) {
    throw ConfigError(
        fmt::format("error: --backend: unknown backend '{}'; known: reference, cpu, "
                    "cuda",
                    o_.training.backend));
  }
  kernels::SgdOptions& sgd = o_.training.sgd;
  if (sgd.max_iter <= 1) sgd.max_iter = s.iterations;
  if (sgd.stepsize <= 1) sgd.stepsize = std::max<int64_t>(1, s.iterations / 3);
  BuildActor(backend);

  TransportCallbacks cb;
  cb.on_peer_up = [this](int peer) { OnPeerUp(peer); };
  cb.on_peer_down = [this](int peer, const std::string& reason) { OnPeerDown(peer, reason); };
  cb.on_message = [this](core::Message m) { OnMessage(std::move(m)); };
  cb.on_control = [this](int peer, uint8_t type, std::vector<uint8_t> body) {
    OnControl(peer, type, std::move(body));
  };
  cb.on_sent = [this](const core::Message& m) {
    if (actor_started_ && !failed_) {
      actor_->OnSent(Now(), m);
      AfterActorCall();
    }
    TrySend(m.to);
  };
  o_.transport.num_ranks = layout_.num_actors();
  transport_ = std::make_unique<Transport>(io_, o_.rank, o_.transport, cb);
  BuildRendezvous();
  if (o_.rank == 0) {
    ProgressWatchdog::Callbacks w;
    w.ask = [this] {
      if (failed_ || shutting_down_ || coordinator_actor_->finished()) return false;
      for (int r = 1; r < layout_.num_actors(); ++r) {
        if (transport_->is_up(r)) transport_->SendControl(r, kCtlStatusAsk, {});
      }
      return true;
    };
    w.stuck = [this](const std::map<int, std::string>& answers) { OnStuck(answers); };
    watchdog_ = std::make_unique<ProgressWatchdog>(io_, o_.progress_timeout,
                                                   layout_.num_actors() - 1, std::move(w));
  }
}

// The actor this process hosts, on the stores its compute mode needs.
void NodeHost::BuildActor(kernels::Backend backend) {
  const config::ScenarioSpec& s = o_.scenario;
  if (replay_ && is_worker_) {
    replay_worker_store_ = std::make_unique<ReplayWorkerStore>(model_, protocol_.batch);
    actor_ = std::make_unique<core::Worker>(o_.rank, model_, *placement_, layout_, protocol_, this,
                                            replay_worker_store_.get());
  } else if (replay_ && is_server_) {
    if (o_.rejoin || o_.resume) {
      throw ConfigError(fmt::format(
          "error: {} of a shard needs --compute real (replayed shards hold no values to "
          "checkpoint)",
          o_.resume ? "--resume" : "--rejoin"));
    }
    replay_shard_store_ = std::make_unique<ReplayShardStore>();
    auto shard = std::make_unique<core::ServerShard>(o_.rank, *placement_, layout_, protocol_, this,
                                                     replay_shard_store_.get());
    shard_actor_ = shard.get();
    actor_ = std::move(shard);
  } else if (is_worker_) {
    WorkerComputeOptions w;
    w.data_dir = o_.training.data_dir;
    w.backend = backend;
    w.sgd = o_.training.sgd;
    w.batch = s.batch_per_worker;
    w.workers = layout_.num_workers;
    w.worker_index = layout_.WorkerIndex(o_.rank);
    w.devices = protocol_.devices_per_machine;
    for (size_t l = 0; l < model_.layers().size(); ++l) {
      w.sfb_layers.push_back(protocol_.SchemeOf(static_cast<int>(l)) == core::Scheme::kSfb);
    }
    // client: device puts D one-device workers on a machine: worker i uses GPU i mod D.
    w.first_gpu = s.client_per_device ? w.worker_index % s.devices_per_machine : 0;
    if (backend == kernels::Backend::kCuda && (w.devices > 1 || w.first_gpu > 0)) {
      std::string why;
      const int visible = kernels::VisibleGpus(&why);
      if (std::string e = GpuShortfall(w.devices, w.first_gpu, visible, why); !e.empty()) {
        throw ConfigError(e);
      }
    }
    w.seed = s.seed;
    w.test = o_.training.test && w.worker_index == 0;
    w.checkpoint_file = fmt::format("{}/worker-{}.ckpt", o_.checkpoint_dir, w.worker_index);
    w.checkpoint_every = protocol_.fault.checkpoint_every;
    w.rejoin = o_.rejoin || o_.resume;
    w.who = Who(o_.rank);
    worker_compute_ = std::make_unique<WorkerCompute>(model_, *placement_, o_.rank, w);
    actor_ = std::make_unique<core::Worker>(o_.rank, model_, *placement_, layout_, protocol_, this,
                                            worker_compute_->store());
  } else if (is_server_) {
    BuildShard();
  } else {
    auto coordinator = std::make_unique<core::Coordinator>(layout_, this, protocol_.fault);
    coordinator_actor_ = coordinator.get();
    actor_ = std::move(coordinator);
    try {
      // A worker's images per iteration: its devices' (ProtocolConfig::batch).
      report_.emplace(layout_.num_workers, protocol_.iterations, protocol_.batch,
                      o_.training.print_interval, o_.training.csv, start_);
      if (o_.resume) report_->ResumeAtFirstLoss();
    } catch (const std::runtime_error& e) {
      throw ConfigError(e.what());
    }
  }
  if (is_worker_) {
    worker_actor_ = static_cast<core::Worker*>(actor_.get());
    if (o_.rejoin || o_.resume) worker_actor_->Rejoin();
  }
}

// A shard with real values: every replica and every shard start from the values a Net built
// with the job's seed has; a restarted one from its checkpoint, if there is one.
void NodeHost::BuildShard() {
  const config::ScenarioSpec& s = o_.scenario;
  kernels::Net initial(model_, kernels::Backend::kReference, /*batch=*/1, s.seed);
  shard_store_ = std::make_unique<LiveShardStore>(
      initial, *placement_, layout_.ServerIndex(o_.rank), protocol_.consistency, o_.training.sgd);
  auto shard = std::make_unique<core::ServerShard>(o_.rank, *placement_, layout_, protocol_, this,
                                                   shard_store_.get());
  if (ft_ && protocol_.consistency == core::Consistency::kBsp) shard_store_->KeepPrevious();
  if (fault_.at_checkpoint()) {
    shard_store_->SetCheckpointHook(
        [this](const core::ShardCheckpoint& state) { fault_.At("checkpoint", state.floor); });
  }
  if (!o_.checkpoint_dir.empty()) {
    const std::string file =
        fmt::format("{}/shard-{}.ckpt", o_.checkpoint_dir, layout_.ServerIndex(o_.rank));
    shard_store_->SetCheckpointFile(file);
    if (o_.resume && !std::filesystem::exists(file)) {
      throw ConfigError(fmt::format(
          "{}: error: no checkpoint of this shard to resume from; --resume needs the folder "
          "the stopped job checkpointed into (launch: its --log-dir, which holds checkpoints/)",
          file));
    }
    if ((o_.rejoin || o_.resume) && std::filesystem::exists(file)) {
      const core::ShardCheckpoint state = shard_store_->LoadCheckpoint();
      shard->Restore(state);
      spdlog::info("{}: restored from {}: every push of clocks below {} applied", Who(o_.rank),
                   file, state.floor);
      restore_note_ = fmt::format("restarted from {} (clocks below {})", file, state.floor);
      lost_advice_ = fmt::format(
          "This shard was restored from {}, which holds the clocks below {} only: put back the "
          "newest {} or start the job again",
          file, state.floor, std::filesystem::path(file).filename().string());
    } else if (o_.rejoin) {
      spdlog::info("{}: no checkpoint at {} yet; starting from the initial values", Who(o_.rank),
                   file);
      restore_note_ = fmt::format(
          "restarted from the initial values: no checkpoint at {}; if the job was past its "
          "first checkpoint, the clocks before the pushes the workers keep cannot be replayed: "
          "put back the newest {} or start the job again",
          file, std::filesystem::path(file).filename().string());
      lost_advice_ = fmt::format(
          "This shard was restarted from the initial values, with no checkpoint at {}: put back "
          "the newest {} or start the job again",
          file, std::filesystem::path(file).filename().string());
    }
  }
  shard_actor_ = shard.get();
  actor_ = std::move(shard);
}

void NodeHost::BuildRendezvous() {
  RendezvousOptions r;
  r.rank = o_.rank;
  r.num_actors = layout_.num_actors();
  r.coordinator_host = o_.coordinator_host;
  r.coordinator_port = o_.coordinator_port;
  r.listen_host = o_.listen_host;
  r.advertise_host = o_.advertise_host;
  r.rejoin = o_.rejoin;
  r.timeout = o_.rendezvous_timeout;
  Rendezvous::Callbacks cb;
  cb.name = [this](int rank) { return Who(rank); };
  cb.local = [this] { return Local(); };
  cb.alive = [this](int rank) { return coordinator_actor_->alive(rank); };
  cb.registered = [this](int rank) { return coordinator_actor_->registered(rank); };
  cb.started = [this] {
    return failed_ || shutting_down_ ||
           (o_.rank == 0 ? coordinator_actor_->started() : actor_started_);
  };
  cb.fail = [this](const std::string& why) { Fail(kExitPeerLost, why); };
  cb.progressed = [this] { MaybeStartActor(); };
  rendezvous_ = std::make_unique<Rendezvous>(io_, *transport_, std::move(r), std::move(cb));
}

NodeHost::~NodeHost() {
  streams_.clear();  // joins the compute threads before the net goes
}

void CheckLiveScenario(const config::ScenarioSpec& s) {
  // A machine's client with several devices cannot restart yet: a restarted machine would have
  // to restore every device's place in the data stream (the worker's checkpoint holds one), and
  // nothing has tested its rejoin live. One process per device restarts as any worker does.
  if (config::DevicesPerWorker(s) > 1 && s.fault.enabled) {
    throw ConfigError(fmt::format(
        "error: {}: protocol.fault_tolerance with {} devices per machine (client: machine) does "
        "not run live: a worker machine with several devices cannot be restarted or rejoin yet; "
        "drop protocol.fault_tolerance, or run one process per device (cluster.client: device), "
        "whose workers restart as one-device workers do",
        s.file, s.devices_per_machine));
  }
  // Every scheme runs live (ps, sfb, allreduce); what is left to check is that the model and the
  // protocol plan build, so that a bad scenario fails once here, not in every process.
  const core::Model model = config::BuildScenarioModel(s);
  (void)sim::BuildTimedProtocol(s, model, false, sim::BuildComputeModel(s, model));
}

}  // namespace poseidon::rt
