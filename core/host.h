// core/host.h: the narrow interface between the protocol core and whatever hosts it.
//
//   events in (each carries `now`)                      actions out (through Host)
//   OnStart, OnMessage(msg), OnComputeDone(task),  -->  Send(msg), StartCompute(task),
//   OnTimer(id)                                         SetTimer(at, id), Trace(event)
//
// The simulator (sim/) and the live runtime (real_runtime/) each implement Host; the actors
// (Worker, ServerShard, Coordinator) never know which one they run on. An actor only acts from
// inside one of its On* calls, and every action takes effect at that call's `now`.
//
// Compute streams: StartCompute enqueues a task on one of the actor's streams (StreamSlot: the
// task's device and StreamOf its kind); each stream runs its tasks one at a time in the order
// they were started, like a CUDA stream, and the host calls OnComputeDone when a task finishes.
// Tasks on different streams overlap. A worker of a machine with D devices (ProtocolConfig::
// devices_per_machine) has a compute and a copy stream per device; its machine-level streams
// (the local reduction and broadcast, and a shard's server stream) are device 0's.
#pragma once

#include <cstdint>

#include "core/messages.h"
#include "core/protocol_error.h"
#include "core/types.h"

namespace poseidon::core {

enum class TaskKind : uint8_t {
  kForward,       // forward pass of one layer over the worker's batch
  kBackward,      // backward pass of one layer
  kCopyToHost,    // device -> host copy of a layer's gradients (GPU workers)
  kCopyToDevice,  // host -> device copy of a layer's fresh parameters
  kServerUpdate,  // a shard's optimizer step on one chunk
  kSfbRebuild,    // rebuild one peer's FC weight gradient from its sufficient factors (a GEMM)
  // Machines with several devices (ProtocolConfig::devices_per_machine > 1) only:
  kLocalReduce,     // the mean of the devices' gradients of one layer, into the machine's copy
                    // (host memory; on the devices or the host, as the machine is configured)
  kLocalBroadcast,  // the machine's fresh parameters of one layer, out to every device
};
const char* TaskKindName(TaskKind k);

enum class Stream : uint8_t { kCompute = 0, kCopy = 1, kServer = 2, kReduce = 3, kBroadcast = 4 };
inline constexpr int kNumStreams = 5;
Stream StreamOf(TaskKind k);

struct ComputeTask {
  TaskKind kind = TaskKind::kForward;
  int32_t layer = -1;  // layer id (forward, backward, copies), -1 when none
  int32_t chunk = -1;  // chunk id (server update), -1 when none
  int64_t bytes = 0;   // bytes moved or updated (copies, updates)
  int64_t clock = 0;   // iteration the task belongs to
  ActorId peer = -1;   // the worker a shard update answers (ASP), or whose factors are rebuilt
  int32_t device = 0;  // the machine's device that runs it (forward, backward, copies); 0 else
};

// A host's index of the stream that runs `task`: device * kNumStreams + StreamOf(kind), in
// [0, StreamSlots(devices)).
int StreamSlot(const ComputeTask& task);
inline constexpr int StreamSlots(int devices) { return devices * kNumStreams; }

// What a trace event records. Hosts add their own kinds (message flows, link load) to the same
// stream of events so that a simulated and a live run produce the same event names.
enum class TraceKind : uint8_t {
  kIterationBegin,  // worker starts iteration `clock` (instant)
  kIterationEnd,    // worker has fresh parameters for every layer after `clock` (instant)
  kTask,            // a compute task ran [ts, ts+dur) (host-emitted)
  kMessage,         // a message was in flight [ts, ts+dur) (host-emitted)
  kLayerSynced,     // worker: every chunk of `layer` is fresh after `clock` (instant)
  kClockApplied,    // shard: chunk `chunk` updated for `clock` (instant)
  kJobDone,         // coordinator: every worker finished (instant)
  // The host's CPU for `actor`'s process so far, `cpu_ns`, at `ts` (host-emitted, a counter):
  // live, the process's own CPU clock (user + system, all its threads); simulated, the CPU the
  // emulated host's model has booked for it (sim/cluster.h, SimJobConfig::record_host_cpu).
  kProcessCpu,
};

struct TraceEvent {
  TraceKind kind = TraceKind::kIterationBegin;
  TimeNs ts = 0;
  TimeNs dur = 0;
  ActorId actor = 0;
  int32_t layer = -1;
  int32_t chunk = -1;
  int64_t clock = 0;
  int64_t bytes = 0;
  TaskKind task = TaskKind::kForward;           // for kTask
  MsgType msg = MsgType::kRegister;             // for kMessage
  ActorId peer = -1;                            // for kMessage: the receiver
  int32_t device = 0;                           // for kTask: ComputeTask::device
  int64_t cpu_ns = 0;                           // for kProcessCpu
};

class Host {
 public:
  virtual ~Host() = default;
  virtual void Send(Message msg) = 0;
  virtual void StartCompute(const ComputeTask& task) = 0;
  virtual void SetTimer(TimeNs at, uint64_t timer_id) = 0;
  virtual void Trace(const TraceEvent& event) = 0;
};

class Actor {
 public:
  virtual ~Actor() = default;
  virtual void OnStart(TimeNs now) = 0;
  // Ok, or a typed error for a message that does not fit the job's shape (message_rules.h) or
  // the actor's state, in which case the actor changed nothing: the host closes that peer's
  // connection and reports it. Never aborts on what a peer sent.
  virtual ProtocolError OnMessage(TimeNs now, const Message& msg) = 0;
  virtual void OnComputeDone(TimeNs now, const ComputeTask& task) = 0;
  virtual void OnTimer(TimeNs /*now*/, uint64_t /*timer_id*/) {}
  // The last byte of a message this actor sent has left its machine (hosts call it for every
  // message; actors that bound their bytes in flight use it).
  virtual void OnSent(TimeNs /*now*/, const Message& /*msg*/) {}
  // True when the actor has nothing more to do (workers: all iterations done).
  virtual bool finished() const = 0;
  // One line on what the actor waits for, for deadlock reports.
  virtual std::string WaitingFor() const = 0;
};

}  // namespace poseidon::core
