// fuzz/protocol_fuzz.cc: the core's worker, shard and coordinator state machines driven by a
// fake host with sequences of events chosen by the input.
//
// A job of 3 workers and 2 shards trains the core tests' small net (tests/core/test_models.h:
// conv1 by the parameter server, fc1 by sufficient factors, fc2 by ring all-reduce; byte 0 picks
// BSP/SSP/ASP, fault tolerance with checkpoints, the gate, DWBP and the priority window). Every actor is started, then each
// further 4-byte step of the input does one of:
//   0  deliver one of the messages the actors sent (any of them, in any order: reordering and
//      duplicates are fair game)
//   1  deliver a message the actors sent earlier, with one field changed to an input value
//      (type, from, to, clock, chunk, layer, step or payload bytes)
//   2  deliver a message made from the input alone
//   3  finish the oldest task of one actor's compute stream (streams run in order, as hosts do)
//   4  fire one of the timers an actor set
// The actors must refuse what does not fit with a ProtocolError and never abort (a
// POSEIDON_CHECK that fires is a finding, as is a sanitizer report or a hang: libFuzzer's
// -timeout); what they send must name real actors. Deterministic, phantom payloads.
//
// The collectives target (FuzzCollectives) drives the same harness with a baseline's job
// (core/collectives.h): every layer all-reduced under BSP by DDP's buckets or Horovod's fusion
// (bit 0 of byte 0), by ring or NCCL's tree (bit 1, core/tree.h) or NCCL's own choice per
// collective (bit 4, core/nccl_tuning.h, at 1 Gbit/s: these small collectives go by the tree, so
// ring steps pass the shape check and must be refused by the collective's), on 3 machines of one
// worker or 2 machines of two (bit 2), DWBP on or off (bit 3); forged and changed messages then
// include bucket steps, Horovod's ready reports and answers.
#include <deque>
#include <memory>
#include <vector>

#include "core/coordinator.h"
#include "core/model.h"
#include "core/server.h"
#include "core/worker.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_targets.h"
#include "tests/core/test_models.h"

namespace poseidon::fuzz {
namespace {

using core::ActorId;

class Harness;

class FakeHost final : public core::Host {
 public:
  FakeHost(Harness* h, ActorId id) : h_(h), id_(id) {}
  void Send(core::Message msg) override;
  void StartCompute(const core::ComputeTask& task) override;
  void SetTimer(core::TimeNs at, uint64_t timer_id) override;
  void Trace(const core::TraceEvent&) override {}

 private:
  Harness* h_;
  ActorId id_;
};

class Harness {
 public:
  Harness(uint8_t config_bits, bool collectives)
      : model_(core::Model::Build(testing::SmallNetSpec())), collectives_(collectives) {
    if (collectives) {
      ConfigureCollectives(config_bits);
    } else {
      ConfigurePoseidon(config_bits);
    }
    placement_ = core::Placement::Build(model_, layout_.num_servers, config_.chunk_bytes,
                                        config_.scheme_of_layer, config_.placement_policy);
    const core::ProtocolConfig& c = config_;
    for (ActorId a = 0; a < layout_.num_actors(); ++a) {
      hosts_.push_back(std::make_unique<FakeHost>(this, a));
    }
    streams_.resize(static_cast<size_t>(layout_.num_actors()) * core::kNumStreams);
    actors_.push_back(std::make_unique<core::Coordinator>(layout_, hosts_[0].get(), c.fault));
    for (int w = 0; w < layout_.num_workers; ++w) {
      const ActorId a = layout_.worker(w);
      actors_.push_back(std::make_unique<core::Worker>(a, model_, placement_, layout_, c,
                                                       hosts_[static_cast<size_t>(a)].get(),
                                                       &worker_store_));
    }
    for (int s = 0; s < layout_.num_servers; ++s) {
      const ActorId a = layout_.server(s);
      actors_.push_back(std::make_unique<core::ServerShard>(
          a, placement_, layout_, c, hosts_[static_cast<size_t>(a)].get(), &shard_store_));
    }
  }

  // Poseidon's own protocol: 3 workers and 2 shards, every consistency and option.
  void ConfigurePoseidon(uint8_t config_bits) {
    layout_ = core::JobLayout::Colocated(3, 2);
    core::ProtocolConfig& c = config_;
    c.consistency = config_bits % 3 == 0   ? core::Consistency::kBsp
                    : config_bits % 3 == 1 ? core::Consistency::kSsp
                                           : core::Consistency::kAsp;
    c.staleness = c.consistency == core::Consistency::kSsp ? 1 : 0;
    c.gate = (config_bits & 4) ? core::Gate::kPerLayer : core::Gate::kAllLayers;
    c.dwbp = (config_bits & 8) == 0;
    c.priority_window_bytes = (config_bits & 16) ? 256 : 0;
    c.iterations = 3;
    c.batch = 2;
    c.chunk_bytes = 2048;  // several chunks and ring pieces per layer
    const bool ft = (config_bits & 32) != 0;
    c.scheme_of_layer.assign(model_.layers().size(), core::Scheme::kPs);
    if (!ft) {  // fault tolerance needs every layer on the parameter server
      c.scheme_of_layer[2] = core::Scheme::kSfb;        // fc1
      c.scheme_of_layer[4] = core::Scheme::kAllreduce;  // fc2
    } else {
      c.fault.heartbeat_ns = 10;
      c.fault.failure_timeout_ns = 35;
      c.fault.checkpoint_every = 1;
      c.fault.evict_dead_workers = (config_bits & 64) != 0;
    }
    // The last bit: the papers' whole-tensor placement instead of balanced chunks.
    if (config_bits & 128) c.placement_policy = core::PlacementPolicy::kTensorRoundRobin;
  }

  // A baseline's job (the header comment says which bit picks what).
  void ConfigureCollectives(uint8_t config_bits) {
    layout_ = (config_bits & 4) ? core::JobLayout::Build(2, 2, 1, true)
                                : core::JobLayout::Colocated(3, 1);
    core::ProtocolConfig& c = config_;
    c.iterations = 3;
    c.batch = 2;
    c.chunk_bytes = 2048;
    c.dwbp = (config_bits & 8) == 0;
    c.scheme_of_layer.assign(model_.layers().size(), core::Scheme::kAllreduce);
    c.baseline.kind = (config_bits & 1) ? core::Baseline::kHorovod : core::Baseline::kDdp;
    c.baseline.algorithm =
        (config_bits & 16)  ? core::AllreduceAlgorithm::kAuto
        : (config_bits & 2) ? core::AllreduceAlgorithm::kTree
                            : core::AllreduceAlgorithm::kRing;
    c.baseline.nccl.ranks = layout_.num_workers;
    c.baseline.nccl.nodes = layout_.num_machines;
    c.baseline.nccl.net_GBps = c.baseline.nccl.intra_GBps = 0.125;
    c.baseline.first_bucket_bytes = 3000;
    c.baseline.bucket_cap_bytes = 6000;
    c.baseline.fusion_threshold_bytes = 8000;
    c.baseline.cycle_ns = 3;
  }

  void Start() {
    for (auto& a : actors_) a->OnStart(++now_);
  }

  void Step(const uint8_t* b) {
    const int op = b[0] % 5;
    switch (op) {
      case 0:
        if (!outbox_.empty()) {
          const size_t i = b[1] % outbox_.size();
          const auto [m, resent] = outbox_[i];
          outbox_.erase(outbox_.begin() + static_cast<long>(i));
          // The sender hears its message left once (hosts call OnSent for what an actor sent).
          if (!resent) actors_[static_cast<size_t>(m.from)]->OnSent(++now_, m);
          if (b[2] & 1) outbox_.emplace_back(m, true);  // delivered twice, later
          Deliver(m);
        }
        return;
      case 1:
        if (!history_.empty()) {
          core::Message m = history_[(b[1] | (b[2] << 8)) % history_.size()];
          const int8_t v = static_cast<int8_t>(b[3]);
          switch (b[2] % 8) {
            case 0: m.type = static_cast<core::MsgType>(1 + (b[3] % (collectives_ ? 13 : 10))); break;
            case 1: m.from = v % 8; break;
            case 2: m.to = v % 8; break;
            case 3: m.clock += v; break;
            case 4: m.chunk += v; break;
            case 5: m.layer += v; break;
            case 6: m.step += v; break;
            default: m.payload_bytes += v; break;
          }
          Deliver(m);
        }
        return;
      case 2: {
        core::Message m;
        m.type = static_cast<core::MsgType>(b[1] % (collectives_ ? 14 : 12));
        m.from = (b[1] >> 4) % 7;
        m.to = b[2] % 7;
        m.clock = static_cast<int8_t>(b[3]) % 5;
        m.chunk = (b[2] >> 3) % 24 - 2;
        m.layer = b[3] % 6 - 1;
        m.step = (b[3] >> 3) % 6 - 1;
        m.payload_bytes = static_cast<int64_t>(b[1]) * 4;
        Deliver(m);
        return;
      }
      case 3: {
        const size_t s = b[1] % streams_.size();
        if (streams_[s].empty()) return;
        const core::ComputeTask t = streams_[s].front();
        streams_[s].pop_front();
        const ActorId a = static_cast<ActorId>(s / core::kNumStreams);
        actors_[static_cast<size_t>(a)]->OnComputeDone(++now_, t);
        return;
      }
      default:
        if (!timers_.empty()) {
          const size_t i = b[1] % timers_.size();
          const auto [a, id] = timers_[i];
          timers_.erase(timers_.begin() + static_cast<long>(i));
          now_ += 10;
          actors_[static_cast<size_t>(a)]->OnTimer(now_, id);
        }
        return;
    }
  }

  void OnSend(ActorId from, const core::Message& m) {
    POSEIDON_FUZZ_CHECK(m.from == from);
    POSEIDON_FUZZ_CHECK(m.to >= 0 && m.to < layout_.num_actors() && m.to != from);
    if (outbox_.size() < kMaxQueued) outbox_.emplace_back(m, false);
    if (history_.size() < kMaxQueued) history_.push_back(m);
  }
  void OnCompute(ActorId a, const core::ComputeTask& t) {
    auto& q = streams_[static_cast<size_t>(a) * core::kNumStreams +
                       static_cast<size_t>(core::StreamOf(t.kind))];
    if (q.size() < kMaxQueued) q.push_back(t);
  }
  void OnTimer(ActorId a, uint64_t id) {
    if (timers_.size() < kMaxQueued) timers_.emplace_back(a, id);
  }

 private:
  static constexpr size_t kMaxQueued = 4096;

  void Deliver(const core::Message& m) {
    if (m.to < 0 || m.to >= layout_.num_actors()) return;  // no such actor: nowhere to deliver
    const core::ProtocolError e = actors_[static_cast<size_t>(m.to)]->OnMessage(++now_, m);
    POSEIDON_FUZZ_CHECK(e ? !e.what.empty() : true);
  }

  core::Model model_;
  const bool collectives_;  // FuzzCollectives: a baseline's job, message types up to kResponse
  core::JobLayout layout_;
  core::ProtocolConfig config_;
  core::Placement placement_;
  core::PhantomWorkerStore worker_store_;
  core::PhantomShardStore shard_store_;
  std::vector<std::unique_ptr<FakeHost>> hosts_;
  std::vector<std::unique_ptr<core::Actor>> actors_;
  std::vector<std::pair<core::Message, bool>> outbox_;  // (message, delivered before)
  std::vector<core::Message> history_;
  std::vector<std::deque<core::ComputeTask>> streams_;
  std::vector<std::pair<ActorId, uint64_t>> timers_;
  core::TimeNs now_ = 0;
};

void FakeHost::Send(core::Message msg) { h_->OnSend(id_, msg); }
void FakeHost::StartCompute(const core::ComputeTask& task) { h_->OnCompute(id_, task); }
void FakeHost::SetTimer(core::TimeNs, uint64_t timer_id) { h_->OnTimer(id_, timer_id); }

}  // namespace

namespace {

int Run(const uint8_t* data, size_t size, bool collectives) {
  if (size < 1) return 0;
  Harness h(data[0], collectives);
  h.Start();
  constexpr size_t kMaxSteps = 4000;
  for (size_t off = 1, steps = 0; off + 4 <= size && steps < kMaxSteps; off += 4, ++steps) {
    h.Step(data + off);
  }
  return 0;
}

}  // namespace

int FuzzProtocol(const uint8_t* data, size_t size) { return Run(data, size, false); }
int FuzzCollectives(const uint8_t* data, size_t size) { return Run(data, size, true); }

}  // namespace poseidon::fuzz
