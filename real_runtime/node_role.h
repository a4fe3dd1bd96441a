// real_runtime/node_role.h: what one live process hosts, by role.
//
// A live process (NodeProcess, node_process.h) owns what every role shares: the connections, the
// rendezvous, the message backlog, timers, the trace and the decision log, the membership's effect
// on connections, and the job's end. What differs by role is a NodeRole:
//
//   CoordinatorRole  (coordinator_role.h)  the core's Coordinator, the job's progress report and
//                                          learning curve, the progress watchdog, the job's end
//   ShardRole        (shard_role.h)        a ServerShard over the shard's values (real, replayed,
//                                          or restored from a checkpoint)
//   WorkerRole       (worker_role.h)       a Worker whose compute tasks run on a WorkerRunner:
//                                          this process's kernels, replayed times, or compute a
//                                          program embedding the worker drives (poseidon.torch)
//
// The process calls its role on the loop thread only. A role acts through the process's services
// (send a control frame, fail, the clock) and through its core actor, whose core::Host is the
// process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/host.h"
#include "core/model.h"

namespace poseidon::rt {

class NodeRole {
 public:
  virtual ~NodeRole() = default;

  // The core actor the process delivers messages, timers and compute ends to.
  virtual core::Actor& actor() = 0;
  // The model the trace names layers by (the job's; a coordinator's scenario model).
  virtual const core::Model& model() const = 0;

  // The process has its port and is about to run its loop (the coordinator starts its actor here;
  // other roles start theirs once connected to everyone).
  virtual void OnProcessStart() {}
  // core::Host::StartCompute, for this role's actor.
  virtual void StartCompute(const core::ComputeTask& task) = 0;
  // A control frame the process does not handle itself (the rendezvous's, the status question and
  // shutdown are its own). False when it is not one this role takes or it is malformed: the
  // process logs and drops it.
  virtual bool OnControl(int peer, uint8_t type, const std::vector<uint8_t>& body) {
    (void)peer;
    (void)type;
    (void)body;
    return false;
  }
  // After every call into the actor (and after a compute task ended).
  virtual void AfterActorCall() {}
  // A core message the actor took (after it did).
  virtual void OnTaken(const core::Message& msg) { (void)msg; }
  // A connection came up (after the process's own bookkeeping).
  virtual void OnPeerUp(int peer) { (void)peer; }
  // Appended to the actor's WaitingFor() when the coordinator's watchdog asks.
  virtual std::string StatusNote() const { return ""; }
  // What to do about a kStateLost refusal (a restored shard's clocks are in no file).
  virtual std::string StateLostAdvice() const { return ""; }
  // The loop ended: join compute threads before anything they use goes.
  virtual void StopCompute() {}
};

}  // namespace poseidon::rt
