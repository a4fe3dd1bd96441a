// tests/core/fault_cluster.h: an in-memory host with timers, crashes and restarts, for unit tests
// of the protocol core's fault tolerance (core/job.h FaultConfig).
//
// Like FakeCluster (tests/core/fake_cluster.h), every message and compute task goes into one
// queue and runs one logical nanosecond after the previous action, in the order issued (or, with
// a seed, in a random order that keeps each message channel (from, to) and each compute stream
// in order). On top of that:
//   - timers: SetTimer(at, id) fires OnTimer once the fake clock reaches `at`; when only timers
//     are left, the clock jumps to the earliest one;
//   - Kill(actor): a SIGKILL. Its pending tasks and timers and the messages on their way to it
//     are dropped, and nothing is delivered to it afterwards (a message sent to a dead actor is
//     lost even if the actor is restarted before it would arrive). Messages it sent before are
//     on the wire and still arrive, unless drop_outgoing;
//   - Stop(actor) / Resume(actor): a SIGSTOP / SIGCONT. While stopped nothing of it runs: its
//     tasks and timers, the messages to it and the messages from it wait;
//   - Restart(actor): a new process of the same role. A worker is built fresh with a fresh store,
//     Rejoin() is called, then OnStart. A shard is built fresh; its store (the "disk", which
//     survives) goes back to the values of its last checkpoint, the shard is given Restore() with
//     that checkpoint's state (when there was one), then OnStart;
//   - When(predicate, fn): runs fn once, after the first action for which the predicate holds
//     (the action has been handled: a kill there happens right after it).
// The stores record what happened: RecordingShardStore models a chunk's value as the history of
// updates in its lineage (which clock, whose pushes), so that tests can check exactly-once
// application across restarts; RecordingWorkerStore remembers the version of the values a
// worker holds for each chunk (shards send their update count as the chunk's single float).
#pragma once

#include <gtest/gtest.h>
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/coordinator.h"
#include "core/host.h"
#include "core/job.h"
#include "core/param_store.h"
#include "core/placement.h"
#include "core/server.h"
#include "core/worker.h"

namespace poseidon::testing {

// A chunk's value in the recording store: its update count and the history of the updates it
// holds (for every update, the clock and the worker indices of the pushes it averaged).
struct ChunkValue {
  int64_t updates = 0;
  std::vector<std::pair<int64_t, std::vector<int>>> history;
};

class RecordingShardStore final : public core::ShardStore {
 public:
  struct ApplyRecord {
    int incarnation = 0;
    int32_t chunk = -1;
    int64_t clock = 0;
    int num_pushes = 0;
    std::vector<int> pushers;  // worker indices of the pushes accumulated for it
  };
  struct CheckpointRecord {
    int incarnation = 0;
    core::ShardCheckpoint state;
    std::map<int32_t, ChunkValue> values, previous;
  };

  RecordingShardStore(const core::JobLayout* layout, bool asp) : layout_(layout), asp_(asp) {}

  void Accumulate(const core::Chunk& chunk, const core::Message& push) override {
    accumulators_[chunk.id].push_back({push.clock, layout_->WorkerIndex(push.from)});
    ++accumulated;
  }
  void Apply(const core::Chunk& chunk, int64_t clock, int num_pushes) override {
    ApplyRecord r;
    r.incarnation = incarnation_;
    r.chunk = chunk.id;
    r.clock = clock;
    r.num_pushes = num_pushes;
    std::deque<std::pair<int64_t, int>>& acc = accumulators_[chunk.id];
    // ASP: the oldest push of that clock (tasks run in the order their pushes were accumulated);
    // BSP/SSP: every push of the clock.
    for (auto it = acc.begin(); it != acc.end();) {
      if (it->first == clock) {
        r.pushers.push_back(it->second);
        it = acc.erase(it);
        if (asp_) break;
      } else {
        ++it;
      }
    }
    std::sort(r.pushers.begin(), r.pushers.end());
    previous_[chunk.id] = values_[chunk.id];
    ChunkValue& v = values_[chunk.id];
    ++v.updates;
    v.history.emplace_back(clock, r.pushers);
    applies.push_back(std::move(r));
  }
  core::FloatBuffer Read(const core::Chunk& chunk) override {
    // The chunk's shape, every value the update count (what a worker's store reads back).
    return std::make_shared<const std::vector<float>>(
        static_cast<size_t>(chunk.count), static_cast<float>(values_[chunk.id].updates));
  }
  core::FloatBuffer ReadPrevious(const core::Chunk& chunk) override {
    ++previous_reads;
    return std::make_shared<const std::vector<float>>(
        static_cast<size_t>(chunk.count), static_cast<float>(previous_[chunk.id].updates));
  }
  void Checkpoint(const core::ShardCheckpoint& state) override {
    checkpoints.push_back({incarnation_, state, values_, previous_});
  }

  // The process died and a new one starts on the same disk: the values go back to the last
  // checkpoint (or to the initial ones), what was accumulated is lost. Returns the state to
  // give ServerShard::Restore. `lose_newest`: that many of the newest checkpoints are gone (a
  // deleted file, an older one put back).
  std::optional<core::ShardCheckpoint> Reopen(size_t lose_newest = 0) {
    ++incarnation_;
    accumulators_.clear();
    checkpoints.resize(checkpoints.size() - std::min(lose_newest, checkpoints.size()));
    if (checkpoints.empty()) {
      values_.clear();
      previous_.clear();
      return std::nullopt;
    }
    values_ = checkpoints.back().values;
    previous_ = checkpoints.back().previous;
    return checkpoints.back().state;
  }

  const ChunkValue& value(int32_t chunk) { return values_[chunk]; }
  int incarnation() const { return incarnation_; }

  std::vector<ApplyRecord> applies;
  std::vector<CheckpointRecord> checkpoints;
  int64_t accumulated = 0;
  int64_t previous_reads = 0;

 private:
  const core::JobLayout* layout_;
  bool asp_;
  int incarnation_ = 0;
  std::map<int32_t, std::deque<std::pair<int64_t, int>>> accumulators_;  // (clock, worker)
  std::map<int32_t, ChunkValue> values_, previous_;
};

class RecordingWorkerStore final : public core::WorkerStore {
 public:
  struct Write {
    int32_t chunk = -1;
    int64_t clock = 0;
    int32_t step = -1;
    int64_t version = 0;  // update count of the values written
  };
  core::FloatBuffer GradientChunk(const core::Chunk&) override { return nullptr; }
  void WriteParams(const core::Chunk& chunk, const core::Message& params) override {
    const int64_t v =
        params.data && !params.data->empty() ? static_cast<int64_t>((*params.data)[0]) : -1;
    held_[chunk.id] = v;
    writes.push_back({chunk.id, params.clock, params.step, v});
  }
  // Update count of the values held for a chunk (0: the initial values).
  int64_t held(int32_t chunk) const {
    auto it = held_.find(chunk);
    return it == held_.end() ? 0 : it->second;
  }
  std::vector<Write> writes;

 private:
  std::map<int32_t, int64_t> held_;
};

class FaultCluster {
 public:
  enum class Kind : uint8_t { kMessage, kTask, kTimer };
  struct Action {
    Kind kind = Kind::kMessage;
    core::Message msg;        // kMessage
    core::ActorId actor = 0;  // kTask, kTimer: the owner
    core::ComputeTask task;   // kTask
    core::TimeNs at = 0;      // kTimer
    uint64_t timer_id = 0;    // kTimer
    int to_incarnation = 0;   // kMessage: the receiver's incarnation when it was sent
    int from_incarnation = 0;
  };
  // What just ran (When's predicates see it after it was handled).
  struct Event {
    int64_t step = 0;
    core::TimeNs now = 0;
    const Action* action = nullptr;
    bool dropped = false;  // a message to a dead actor, lost
    bool is_message(core::MsgType t) const {
      return action->kind == Kind::kMessage && action->msg.type == t;
    }
    bool is_task(core::TaskKind k) const {
      return action->kind == Kind::kTask && action->task.kind == k;
    }
  };
  enum class State : uint8_t { kAlive, kStopped, kDead };
  struct RunResult {
    int64_t steps = 0;
    bool step_limit = false;  // stopped by max_steps with actions still runnable
    size_t held = 0;          // actions left waiting on stopped actors
  };

  FaultCluster(const core::Model& model, core::JobLayout layout, core::ProtocolConfig config,
               uint64_t seed = 0)
      : model_(model),
        layout_(std::move(layout)),
        config_(config),
        rng_(seed),
        shuffle_(seed != 0) {
    placement_ = core::Placement::Build(model_, layout_.num_servers, config_.chunk_bytes,
                                        config_.scheme_of_layer, config_.placement_policy);
    const size_t n = static_cast<size_t>(layout_.num_actors());
    state_.assign(n, State::kAlive);
    incarnation_.assign(n, 0);
    worker_stores_.resize(n);
    shard_stores_.resize(n);
    for (core::ActorId a = 0; a < layout_.num_actors(); ++a) {
      hosts_.push_back(std::make_unique<Host>(this, a));
    }
    actors_.push_back(std::make_unique<core::Coordinator>(layout_, hosts_[0].get(), config_.fault));
    for (int w = 0; w < layout_.num_workers; ++w) actors_.push_back(MakeWorker(layout_.worker(w)));
    for (int s = 0; s < layout_.num_servers; ++s) {
      const core::ActorId a = layout_.server(s);
      shard_stores_[static_cast<size_t>(a)] = std::make_unique<RecordingShardStore>(
          &layout_, config_.consistency == core::Consistency::kAsp);
      actors_.push_back(MakeShard(a));
    }
  }
  FaultCluster(const FaultCluster&) = delete;
  FaultCluster& operator=(const FaultCluster&) = delete;

  // Starts every actor (the first time) and runs until nothing runnable is left or max_steps
  // actions ran.
  RunResult Run(int64_t max_steps = 3'000'000) {
    if (!started_) {
      started_ = true;
      for (auto& a : actors_) a->OnStart(now_);
    }
    RunResult r;
    const int64_t first = steps_;
    while (true) {
      if (steps_ - first >= max_steps) {
        r.step_limit = true;
        break;
      }
      if (!Step()) break;
    }
    r.steps = steps_ - first;
    for (const Action& a : pending_) r.held += Runnable(a) ? 0 : 1;
    for (const Action& a : timers_) r.held += Runnable(a) ? 0 : 1;
    return r;
  }

  // --- faults -----------------------------------------------------------------------------
  void Kill(core::ActorId a, bool drop_outgoing = false) {
    POSEIDON_CHECK(a != core::JobLayout::coordinator()) << "the coordinator does not fail here";
    state_[static_cast<size_t>(a)] = State::kDead;
    ++kills;
    auto gone = [&](const Action& x) {
      if (x.kind == Kind::kMessage) {
        return x.msg.to == a || (drop_outgoing && x.msg.from == a);
      }
      return x.actor == a;
    };
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (gone(*it)) {
        if (it->kind == Kind::kMessage) ++dropped_messages;
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    timers_.erase(std::remove_if(timers_.begin(), timers_.end(), gone), timers_.end());
  }
  void Stop(core::ActorId a) {
    POSEIDON_CHECK(state_[static_cast<size_t>(a)] == State::kAlive);
    state_[static_cast<size_t>(a)] = State::kStopped;
  }
  void Resume(core::ActorId a) {
    POSEIDON_CHECK(state_[static_cast<size_t>(a)] == State::kStopped);
    state_[static_cast<size_t>(a)] = State::kAlive;
  }
  void Restart(core::ActorId a, size_t lose_newest_checkpoints = 0) {
    if (state_[static_cast<size_t>(a)] != State::kDead) Kill(a);
    const size_t i = static_cast<size_t>(a);
    ++incarnation_[i];
    graveyard_.emplace_back(a, std::move(actors_[i]));
    if (layout_.IsWorker(a)) {
      graveyard_worker_stores_.push_back(std::move(worker_stores_[i]));
      actors_[i] = MakeWorker(a);
      static_cast<core::Worker&>(*actors_[i]).Rejoin();
    } else {
      POSEIDON_CHECK(layout_.IsServer(a));
      std::optional<core::ShardCheckpoint> state = shard_stores_[i]->Reopen(lose_newest_checkpoints);
      actors_[i] = MakeShard(a);
      if (state) static_cast<core::ServerShard&>(*actors_[i]).Restore(*state);
      restored_from.push_back({a, state});
    }
    state_[i] = State::kAlive;
    ++restarts;
    actors_[i]->OnStart(now_);
  }
  // Runs fn once, after the first handled action for which pred holds.
  void When(std::function<bool(const Event&)> pred, std::function<void()> fn) {
    triggers_.push_back({std::move(pred), std::move(fn), false});
  }
  void AtStep(int64_t step, std::function<void()> fn) {
    When([step](const Event& e) { return e.step >= step; }, std::move(fn));
  }

  // --- inspection -------------------------------------------------------------------------
  core::Coordinator& coordinator() { return static_cast<core::Coordinator&>(*actors_[0]); }
  core::Worker& worker(int w) {
    return static_cast<core::Worker&>(*actors_[static_cast<size_t>(layout_.worker(w))]);
  }
  core::ServerShard& shard(int s) {
    return static_cast<core::ServerShard&>(*actors_[static_cast<size_t>(layout_.server(s))]);
  }
  RecordingShardStore& shard_store(int s) {
    return *shard_stores_[static_cast<size_t>(layout_.server(s))];
  }
  RecordingWorkerStore& worker_store(int w) {
    return *worker_stores_[static_cast<size_t>(layout_.worker(w))];
  }
  // Every incarnation's actor object of an actor id, oldest first (the current one last).
  std::vector<const core::Actor*> incarnations(core::ActorId a) const {
    std::vector<const core::Actor*> v;
    for (const auto& [id, actor] : graveyard_) {
      if (id == a) v.push_back(actor.get());
    }
    v.push_back(actors_[static_cast<size_t>(a)].get());
    return v;
  }
  int incarnation(core::ActorId a) const { return incarnation_[static_cast<size_t>(a)]; }
  State state(core::ActorId a) const { return state_[static_cast<size_t>(a)]; }
  bool finished(core::ActorId a) const { return actors_[static_cast<size_t>(a)]->finished(); }
  // Every actor that is alive has finished.
  bool AllLiveFinished() const {
    for (size_t i = 0; i < actors_.size(); ++i) {
      if (state_[i] == State::kAlive && !actors_[i]->finished()) return false;
    }
    return true;
  }
  std::string WaitingFor() const {
    std::string s;
    for (size_t i = 0; i < actors_.size(); ++i) {
      s += actors_[i]->WaitingFor();
      if (state_[i] != State::kAlive) s += state_[i] == State::kDead ? " [dead]" : " [stopped]";
      s += "\n";
    }
    return s;
  }
  core::TimeNs now() const { return now_; }
  int64_t steps() const { return steps_; }
  const core::Placement& placement() const { return placement_; }
  const core::JobLayout& layout() const { return layout_; }
  const core::ProtocolConfig& config() const { return config_; }

  std::vector<core::TraceEvent> trace;
  std::function<void(core::TimeNs, const core::Message&)> on_deliver;  // before the receiver
  std::function<void(core::TimeNs, core::ActorId, const core::ComputeTask&)> on_task_done;
  std::function<void(core::ActorId, const core::ComputeTask&)> on_start_compute;  // when issued
  std::function<void(core::ActorId, const core::Message&)> on_send;               // when issued
  std::function<void(const Event&)> after_step;  // after every action
  int64_t dropped_messages = 0;                  // lost because their receiver died
  int64_t delivered_messages = 0;
  int64_t timers_fired = 0;
  int kills = 0, restarts = 0;
  std::vector<std::pair<core::ActorId, std::optional<core::ShardCheckpoint>>> restored_from;
  // Actors that refused a message with kStateLost (the job then ended), and why.
  std::vector<std::pair<core::ActorId, std::string>> state_lost;

 private:
  class Host final : public core::Host {
   public:
    Host(FaultCluster* c, core::ActorId id) : c_(c), id_(id) {}
    void Send(core::Message msg) override {
      POSEIDON_CHECK(msg.from == id_) << core::Describe(msg);
      POSEIDON_CHECK(msg.to >= 0 && msg.to < c_->layout_.num_actors()) << core::Describe(msg);
      if (c_->on_send) c_->on_send(id_, msg);
      Action a;
      a.kind = Kind::kMessage;
      a.to_incarnation = c_->incarnation_[static_cast<size_t>(msg.to)];
      a.from_incarnation = c_->incarnation_[static_cast<size_t>(id_)];
      a.msg = std::move(msg);
      c_->pending_.push_back(std::move(a));
    }
    void StartCompute(const core::ComputeTask& task) override {
      if (c_->on_start_compute) c_->on_start_compute(id_, task);
      Action a;
      a.kind = Kind::kTask;
      a.actor = id_;
      a.task = task;
      c_->pending_.push_back(std::move(a));
    }
    void SetTimer(core::TimeNs at, uint64_t timer_id) override {
      Action a;
      a.kind = Kind::kTimer;
      a.actor = id_;
      a.at = at;
      a.timer_id = timer_id;
      c_->timers_.push_back(std::move(a));
    }
    void Trace(const core::TraceEvent& e) override { c_->trace.push_back(e); }

   private:
    FaultCluster* c_;
    core::ActorId id_;
  };
  struct Trigger {
    std::function<bool(const Event&)> pred;
    std::function<void()> fn;
    bool fired = false;
  };

  std::unique_ptr<core::Actor> MakeWorker(core::ActorId a) {
    const size_t i = static_cast<size_t>(a);
    worker_stores_[i] = std::make_unique<RecordingWorkerStore>();
    return std::make_unique<core::Worker>(a, model_, placement_, layout_, config_, hosts_[i].get(),
                                          worker_stores_[i].get());
  }
  std::unique_ptr<core::Actor> MakeShard(core::ActorId a) {
    const size_t i = static_cast<size_t>(a);
    return std::make_unique<core::ServerShard>(a, placement_, layout_, config_, hosts_[i].get(),
                                               shard_stores_[i].get());
  }
  bool Runnable(const Action& a) const {
    if (a.kind == Kind::kMessage) {
      return state_[static_cast<size_t>(a.msg.from)] != State::kStopped &&
             state_[static_cast<size_t>(a.msg.to)] != State::kStopped;
    }
    return state_[static_cast<size_t>(a.actor)] == State::kAlive;
  }

  // Runs the next action; false when nothing runnable is left (or an actor lost its state).
  bool Step() {
    if (ended_) return false;
    // The earliest runnable timer (ties: the one set first).
    int timer = -1;
    for (size_t i = 0; i < timers_.size(); ++i) {
      if (!Runnable(timers_[i])) continue;
      if (timer < 0 || timers_[i].at < timers_[static_cast<size_t>(timer)].at) {
        timer = static_cast<int>(i);
      }
    }
    const bool timer_due = timer >= 0 && timers_[static_cast<size_t>(timer)].at <= now_ + 1;
    int pick = -1;
    if (!timer_due) pick = Pick();
    if (pick < 0 && timer < 0) return false;
    Action act;
    if (pick >= 0) {
      act = std::move(pending_[static_cast<size_t>(pick)]);
      pending_.erase(pending_.begin() + pick);
      ++now_;
    } else {
      act = std::move(timers_[static_cast<size_t>(timer)]);
      timers_.erase(timers_.begin() + timer);
      now_ = std::max(now_ + 1, act.at);
    }
    ++steps_;
    Event ev;
    ev.step = steps_;
    ev.now = now_;
    ev.action = &act;
    switch (act.kind) {
      case Kind::kMessage: {
        const size_t to = static_cast<size_t>(act.msg.to);
        if (state_[to] == State::kDead || incarnation_[to] != act.to_incarnation) {
          ++dropped_messages;
          ev.dropped = true;
          break;
        }
        const size_t from = static_cast<size_t>(act.msg.from);
        if (state_[from] == State::kAlive && incarnation_[from] == act.from_incarnation) {
          actors_[from]->OnSent(now_, act.msg);
        }
        ++delivered_messages;
        if (on_deliver) on_deliver(now_, act.msg);
        if (core::ProtocolError e = actors_[to]->OnMessage(now_, act.msg)) {
          if (e.code == core::ProtocolErrorCode::kStateLost) {
            // The host ends the job (the live runtime: exit code 7): nothing runs after it.
            state_lost.push_back({act.msg.to, e.what});
            ended_ = true;
            break;
          }
          ADD_FAILURE() << "actor " << to << " refused " << core::Describe(act.msg) << ": "
                        << e.what;
        }
        break;
      }
      case Kind::kTask:
        if (on_task_done) on_task_done(now_, act.actor, act.task);
        actors_[static_cast<size_t>(act.actor)]->OnComputeDone(now_, act.task);
        break;
      case Kind::kTimer:
        ++timers_fired;
        actors_[static_cast<size_t>(act.actor)]->OnTimer(now_, act.timer_id);
        break;
    }
    if (after_step) after_step(ev);
    for (size_t i = 0; i < triggers_.size(); ++i) {
      if (triggers_[i].fired || !triggers_[i].pred(ev)) continue;
      triggers_[i].fired = true;
      std::function<void()> fn = triggers_[i].fn;  // fn may add triggers
      fn();
    }
    return true;
  }

  // The next message or task: the first runnable one, or (seeded) a random runnable one that is
  // first in its channel. -1 when none.
  int Pick() {
    if (!shuffle_) {
      for (size_t i = 0; i < pending_.size(); ++i) {
        if (Runnable(pending_[i])) return static_cast<int>(i);
      }
      return -1;
    }
    std::set<std::tuple<int, int, int>> seen;
    std::vector<int> eligible;
    for (size_t i = 0; i < pending_.size(); ++i) {
      const Action& a = pending_[i];
      const std::tuple<int, int, int> channel =
          a.kind == Kind::kMessage
              ? std::make_tuple(0, static_cast<int>(a.msg.from), static_cast<int>(a.msg.to))
              : std::make_tuple(1, static_cast<int>(a.actor),
                                static_cast<int>(core::StreamOf(a.task.kind)));
      if (!seen.insert(channel).second) continue;
      if (Runnable(a)) eligible.push_back(static_cast<int>(i));
    }
    if (eligible.empty()) return -1;
    std::uniform_int_distribution<size_t> d(0, eligible.size() - 1);
    return eligible[d(rng_)];
  }

  const core::Model& model_;
  core::JobLayout layout_;
  core::ProtocolConfig config_;
  core::Placement placement_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<std::unique_ptr<core::Actor>> actors_;
  std::vector<std::pair<core::ActorId, std::unique_ptr<core::Actor>>> graveyard_;
  std::vector<std::unique_ptr<RecordingWorkerStore>> worker_stores_;
  std::vector<std::unique_ptr<RecordingWorkerStore>> graveyard_worker_stores_;
  std::vector<std::unique_ptr<RecordingShardStore>> shard_stores_;
  std::vector<State> state_;
  std::vector<int> incarnation_;
  std::deque<Action> pending_;
  std::vector<Action> timers_;
  std::vector<Trigger> triggers_;
  core::TimeNs now_ = 0;
  int64_t steps_ = 0;
  bool started_ = false;
  bool ended_ = false;  // an actor lost its state (state_lost): the job is over
  std::mt19937_64 rng_;
  bool shuffle_;
};

}  // namespace poseidon::testing
