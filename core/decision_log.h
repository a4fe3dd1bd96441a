// core/decision_log.h: the protocol decisions of a run, in a form two hosts can compare.
//
// A host that is asked to records, for every actor, what the actor decided through the Host
// interface: each message it sent, each compute task it started, each clock it began and each
// layer version it reached. Decisions are grouped by a key whose sequence the protocol fixes
// whatever the timing (the sends to one destination of one chunk, the forward/backward passes of
// a worker in order, a layer's versions, ...); interleavings between keys are timing and are not
// compared. The simulator and the live runtime record through this one class, so "the same
// protocol code" is checked by comparing two Text()s (tests/real_runtime/decisions_test.cc).
//
//   DecisionLog log;
//   log.Send(actor, msg);  log.Compute(actor, task);  log.Trace(event);
//   std::string text = log.Text();   // "ACTOR\tKEY\tV1 V2 ...\n", lines sorted
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/collectives.h"
#include "core/host.h"
#include "core/messages.h"

namespace poseidon::core {

class DecisionLog {
 public:
  void Send(ActorId actor, const Message& m);
  void Compute(ActorId actor, const ComputeTask& t);
  void Trace(const TraceEvent& e);  // iteration begins and layer versions; other kinds ignored
  // The job's baseline (core/collectives.h). When its collectives may run NCCL's tree
  // (core/tree.h) the two halves of a piece go up and down independent trees, so a bucket step's
  // key names its half (two peers may be neighbours in both trees; the order of their halves is
  // timing). Under auto a ring's steps are keyed by step / 2 too: a finer key of a sequence whose
  // order is decided splits it into sequences whose orders are decided.
  void FollowBaseline(const BaselineConfig& b) { tree_halves_ = CollectivePlan::MayRunTree(b); }

  // One line per (actor, key), sorted: actor id, tab, key, tab, the values in order.
  std::string Text() const;

 private:
  void Add(ActorId actor, std::string key, std::string value);
  std::map<ActorId, std::map<std::string, std::vector<std::string>>> entries_;
  bool tree_halves_ = false;
};

}  // namespace poseidon::core
