// core/worker.h: the worker state machine (bulk-synchronous parameter server, DWBP optional).
//
// Per iteration (clock c):
//   forward layer 0 .. n-1, then backward layer n-1 .. 0, one compute task at a time;
//   when layer l's backward ends (DWBP) -- or after the whole backward pass (no DWBP) -- its
//   gradient chunks are pushed to their owning shards (after a device->host copy when
//   device_copies is set);
//   when every chunk of layer l has come back fresh for clock c (and been copied to the
//   device), layer l is synced; when the backward pass is over and every layer is synced,
//   the iteration ends and clock c+1 begins. After the last iteration the worker tells the
//   coordinator it is done.
#pragma once

#include <string>
#include <vector>

#include "core/host.h"
#include "core/job.h"
#include "core/model.h"
#include "core/param_store.h"
#include "core/placement.h"

namespace poseidon::core {

class Worker final : public Actor {
 public:
  Worker(ActorId id, const Model& model, const Placement& placement, const JobLayout& layout,
         const ProtocolConfig& config, Host* host, WorkerStore* store);

  void OnStart(TimeNs now) override;
  void OnMessage(TimeNs now, const Message& msg) override;
  void OnComputeDone(TimeNs now, const ComputeTask& task) override;
  bool finished() const override { return finished_; }
  std::string WaitingFor() const override;

  int64_t clock() const { return clock_; }

 private:
  void BeginIteration(TimeNs now);
  void StartSync(TimeNs now, int layer);
  void PushLayer(TimeNs now, int layer);
  void LayerSynced(TimeNs now, int layer);
  void MaybeEndIteration(TimeNs now);

  const ActorId id_;
  const Model& model_;
  const Placement& placement_;
  const JobLayout& layout_;
  const ProtocolConfig config_;
  Host* const host_;
  WorkerStore* const store_;

  bool started_ = false;
  bool finished_ = false;
  int64_t clock_ = 0;
  bool backward_done_ = false;
  int layers_unsynced_ = 0;                // parameter layers not yet fresh for clock_
  std::vector<int> chunks_missing_;        // per layer: chunks not yet received for clock_
  std::vector<int> deferred_syncs_;        // layers whose sync waits for the end of backward
};

}  // namespace poseidon::core
