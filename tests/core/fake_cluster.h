// tests/core/fake_cluster.h: an in-memory host for unit tests of the protocol core.
//
// Every action goes into one FIFO; messages are delivered and compute tasks finish in the
// order they were issued, one logical nanosecond apart. No network, no durations: it checks
// protocol logic only. A seeded variant shuffles which pending action runs next, to explore
// other legal schedules (messages on one (from, to) pair and tasks on one stream stay ordered).
#pragma once

#include <gtest/gtest.h>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "core/coordinator.h"
#include "core/host.h"
#include "core/job.h"
#include "core/param_store.h"
#include "core/placement.h"
#include "core/server.h"
#include "core/worker.h"

namespace poseidon::testing {

class FakeCluster {
 public:
  struct Action {
    bool is_message = false;
    core::Message msg;
    core::ActorId actor = 0;  // for tasks
    core::ComputeTask task;
    bool is_timer = false;  // with deliver_timers: an actor's timer (fires when picked)
    uint64_t timer_id = 0;
  };

  // `worker_stores`: one store per worker (tests of the data path); empty = phantom stores.
  FakeCluster(const core::Model& model, core::JobLayout layout, core::ProtocolConfig config,
              uint64_t seed = 0, std::vector<core::WorkerStore*> worker_stores = {})
      : layout_(std::move(layout)), config_(config), rng_(seed), shuffle_(seed != 0) {
    placement_ = core::Placement::Build(model, layout_.num_servers, config_.chunk_bytes,
                                        config_.scheme_of_layer, config_.placement_policy);
    for (core::ActorId a = 0; a < layout_.num_actors(); ++a) {
      hosts_.push_back(std::make_unique<Host>(this, a));
    }
    actors_.push_back(std::make_unique<core::Coordinator>(layout_, hosts_[0].get()));
    for (int w = 0; w < layout_.num_workers; ++w) {
      core::ActorId a = layout_.worker(w);
      core::WorkerStore* store =
          worker_stores.empty() ? &worker_store_ : worker_stores.at(static_cast<size_t>(w));
      actors_.push_back(std::make_unique<core::Worker>(a, model, placement_, layout_, config_,
                                                       hosts_[a].get(), store));
    }
    for (int s = 0; s < layout_.num_servers; ++s) {
      core::ActorId a = layout_.server(s);
      actors_.push_back(std::make_unique<core::ServerShard>(a, placement_, layout_, config_,
                                                            hosts_[a].get(), &shard_store_));
    }
  }

  // Runs until nothing is pending. Returns the number of actions processed.
  int Run() {
    for (auto& a : actors_) a->OnStart(now_);
    int steps = 0;
    while (!pending_.empty()) {
      size_t pick = 0;
      if (shuffle_) pick = PickShuffled();
      Action act = pending_[pick];
      pending_.erase(pending_.begin() + static_cast<long>(pick));
      ++now_;
      ++steps;
      if (act.is_timer) {
        actors_[act.actor]->OnTimer(now_, act.timer_id);
      } else if (act.is_message) {
        actors_[act.msg.from]->OnSent(now_, act.msg);
        if (on_deliver) on_deliver(now_, act.msg);
        if (core::ProtocolError e = actors_[act.msg.to]->OnMessage(now_, act.msg)) {
          if (on_refused) {
            on_refused(act.msg, e);
          } else {
            ADD_FAILURE() << "actor " << act.msg.to << " refused " << core::Describe(act.msg)
                          << ": " << e.what;
          }
        }
      } else {
        if (on_task_done) on_task_done(now_, act.actor, act.task);
        actors_[act.actor]->OnComputeDone(now_, act.task);
      }
    }
    return steps;
  }

  const core::ServerShard& shard(int s) const {
    return static_cast<const core::ServerShard&>(*actors_[static_cast<size_t>(layout_.server(s))]);
  }
  const core::Worker& worker(int w) const {
    return static_cast<const core::Worker&>(*actors_[static_cast<size_t>(layout_.worker(w))]);
  }
  core::Worker& mutable_worker(int w) {
    return static_cast<core::Worker&>(*actors_[static_cast<size_t>(layout_.worker(w))]);
  }
  core::TimeNs now() const { return now_; }

  bool AllFinished() const {
    for (const auto& a : actors_) {
      if (!a->finished()) return false;
    }
    return true;
  }

  const core::Placement& placement() const { return placement_; }
  const core::JobLayout& layout() const { return layout_; }
  std::vector<core::TraceEvent> trace;
  std::vector<Action> issued;  // every action in the order it was issued
  std::function<void(core::TimeNs, const core::Message&)> on_deliver;
  std::function<void(core::TimeNs, core::ActorId, const core::ComputeTask&)> on_task_done;
  std::function<void(const core::TraceEvent&)> on_trace;
  // A message its receiver refused (a host would close that connection); unset, a refusal fails
  // the test.
  std::function<void(const core::Message&, const core::ProtocolError&)> on_refused;
  // Timers (Host::SetTimer) are ignored unless set: then each is an action like the others, in
  // FIFO order (its time is not honoured: logical time only).
  bool deliver_timers = false;

 private:
  class Host final : public core::Host {
   public:
    Host(FakeCluster* c, core::ActorId id) : c_(c), id_(id) {}
    void Send(core::Message msg) override {
      Action a;
      a.is_message = true;
      a.msg = std::move(msg);
      c_->issued.push_back(a);
      c_->pending_.push_back(std::move(a));
    }
    void StartCompute(const core::ComputeTask& task) override {
      Action a;
      a.actor = id_;
      a.task = task;
      c_->issued.push_back(a);
      c_->pending_.push_back(a);
    }
    void SetTimer(core::TimeNs, uint64_t id) override {
      if (!c_->deliver_timers) return;
      Action a;
      a.actor = id_;
      a.is_timer = true;
      a.timer_id = id;
      c_->pending_.push_back(a);
    }
    void Trace(const core::TraceEvent& e) override {
      c_->trace.push_back(e);
      if (c_->on_trace) c_->on_trace(e);
    }

   private:
    FakeCluster* c_;
    core::ActorId id_;
  };

  // A random pending action that is first among those of its channel (message pair or stream).
  size_t PickShuffled() {
    std::vector<size_t> eligible;
    for (size_t i = 0; i < pending_.size(); ++i) {
      bool first = true;
      for (size_t j = 0; j < i && first; ++j) first = !SameChannel(pending_[i], pending_[j]);
      if (first) eligible.push_back(i);
    }
    std::uniform_int_distribution<size_t> d(0, eligible.size() - 1);
    return eligible[d(rng_)];
  }
  static bool SameChannel(const Action& a, const Action& b) {
    if (a.is_timer || b.is_timer) return false;
    if (a.is_message != b.is_message) return false;
    if (a.is_message) return a.msg.from == b.msg.from && a.msg.to == b.msg.to;
    return a.actor == b.actor && core::StreamSlot(a.task) == core::StreamSlot(b.task);
  }

  core::JobLayout layout_;
  core::ProtocolConfig config_;
  core::Placement placement_;
  core::PhantomWorkerStore worker_store_;
  core::PhantomShardStore shard_store_;
  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<std::unique_ptr<core::Actor>> actors_;
  std::deque<Action> pending_;
  core::TimeNs now_ = 0;
  std::mt19937_64 rng_;
  bool shuffle_;
};

}  // namespace poseidon::testing
