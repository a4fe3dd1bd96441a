// core/worker.h: the worker state machine.
//
// Per iteration (clock c): forward layers 0..n-1, then backward n-1..0, one compute task at a
// time. When layer l's backward pass ends (DWBP; without DWBP, after the whole backward pass)
// its gradient is synchronised by the layer's scheme:
//   ps         chunks pushed to their shards (after a device->host copy when device_copies),
//              fresh chunks come back (then a host->device copy);
//   sfb        the FC weight's sufficient factors go to every other worker, whose factors come
//              back and are rebuilt into gradients here (a GEMM each on the compute stream);
//              the bias goes by ps;
//   allreduce  chunked ring all-reduce among the workers (reduce-scatter, then all-gather).
// A layer's *version* v means its parameters hold every update of clocks 0..v-1. The forward
// pass of layer l at clock c may start once version(l) >= c - s (s = 0 for BSP, the staleness
// for SSP, unbounded for ASP): for every layer before layer 0 starts (Gate::kAllLayers, the
// original Poseidon) or for layer l alone (Gate::kPerLayer). After the last iteration the worker
// waits until every layer holds every update, then tells the coordinator it is done.
//
// With fault tolerance (FaultConfig) the worker also heartbeats to the coordinator; takes each
// chunk's values once per clock, in clock order (an answer it already had -- sent again after a
// restart -- is dropped, an early one waits); keeps the pushes its shards' last checkpoints do
// not cover and sends them again when a shard comes back; and, when it is itself a restarted
// process (Rejoin), starts from the shards' current values at their clock instead of clock 0.
// Rejoining needs every layer on the parameter server: SFB and ring state lives in the workers.
//
// A machine with D > 1 devices (ProtocolConfig::devices_per_machine; Poseidon's three-level
// hybrid) is one Worker: its client. Each device runs the forward and backward passes of the
// machine's clock on its own compute stream (ComputeTask::device). Once layer l's backward pass
// has ended on every device (DWBP across the devices) a kLocalReduce task makes the mean of their
// gradients, and layer l then syncs exactly as a one-device worker's does, the machine sending
// one push per chunk (or its devices' D x K factor rows, or one ring share). When a layer's
// machine-level sync reaches a new version a kLocalBroadcast task sends the values out to the
// devices, and the layer's version (what the devices' passes wait for) is the broadcast one. A
// device begins the next clock once every device has ended this clock's backward pass and every
// local reduction of it has ended (the gradient buffers are free again); SSP clocks are the
// machine's. With D = 1 none of this exists: no local task is ever started.
//
// Under a baseline (ProtocolConfig::baseline: PyTorch DDP or Horovod, core/collectives.h) every
// layer's gradient goes by fused ring all-reduces instead: when a layer's gradient is ready its
// tensors join the clock's ready order, and the worker runs the clock's collectives one at a
// time, in order, each once all its tensors are ready here (DDP: the buckets, fixed in advance;
// Horovod: what worker 0, the coordinator, answered as ready on every worker, fused by the
// threshold). Horovod's workers tell worker 0 what they have ready once per cycle (a kCycleTimer
// every cycle_ns, measured from the previous cycle's start as Horovod's background loop sleeps),
// not while they run collectives (Horovod's loop runs them between negotiations), and only when
// something new is ready (an empty negotiation changes nothing but control traffic). A layer's
// version moves when every collective holding one of its tensors is done.
#pragma once

#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/clock_counter.h"
#include "core/collectives.h"
#include "core/host.h"
#include "core/job.h"
#include "core/message_rules.h"
#include "core/model.h"
#include "core/param_store.h"
#include "core/placement.h"
#include "core/send_queue.h"
#include "core/tree.h"

namespace poseidon::core {

class Worker final : public Actor {
 public:
  Worker(ActorId id, const Model& model, const Placement& placement, const JobLayout& layout,
         const ProtocolConfig& config, Host* host, WorkerStore* store);

  void OnStart(TimeNs now) override;
  ProtocolError OnMessage(TimeNs now, const Message& msg) override;
  void OnComputeDone(TimeNs now, const ComputeTask& task) override;
  void OnSent(TimeNs now, const Message& msg) override;
  void OnTimer(TimeNs now, uint64_t timer_id) override;
  bool finished() const override { return finished_; }

  // Before OnStart: this is a restarted worker. Once started it asks every shard for its
  // chunks' current values and continues at the oldest clock they hold: the version v that
  // the slowest chunk has (under BSP, chunks one clock ahead give their previous values, so
  // the worker recomputes clock v exactly as the first time). Throws CheckError for a plan
  // with SFB or all-reduce layers.
  void Rejoin();
  // Ends the job after `clocks` iterations rather than the configuration's (a program whose own
  // loop decides when to stop, poseidon.torch: the configuration then has a bound no loop
  // reaches). clock() <= clocks <= ProtocolConfig::iterations; the worker finishes once every
  // layer holds every update of those clocks. A forward task of clock `clocks` already started
  // (the worker asked for it once the parameters were fresh) is dropped: the host never reports it.
  void EndAt(TimeNs now, int64_t clocks);
  // Pushes kept for shards that may restart (tests).
  size_t retained_pushes() const;
  std::string WaitingFor() const override;

  int64_t clock() const { return clock_; }
  // Version of a layer's parameters (see above).
  int64_t version(int layer) const { return sync_[static_cast<size_t>(layer)].version; }

 private:
  struct RingPiece {
    int64_t bytes = 0;
    int sent = 0;       // steps sent for the layer's current ring clock
    int recv = 0;       // steps received for it
    int recv_next = 0;  // steps received for the clock after (a fast predecessor)
    bool done = false;  // reduced and gathered for the current ring clock
  };
  struct LayerSync {
    Scheme scheme = Scheme::kPs;
    int devices_ended = 0;          // D > 1: devices whose backward of the machine's clock ended
    int64_t machine_version = 0;    // D > 1: version synced at the machine, not yet broadcast
    bool broadcasting = false;      // D > 1: a kLocalBroadcast of this layer is running
    bool has_ps = false, has_sfb = false, has_ring = false;
    bool has_fused = false;  // a baseline's collectives (version: ring_version)
    ClockCounter ps;       // chunk replies per clock
    bool ps_copying = false;
    ClockCounter sfb;      // gradient contributions per clock (own + rebuilt peers)
    std::map<int64_t, std::vector<bool>> sfb_from;  // clocks not yet complete: whose factors came
    std::vector<RingPiece> pieces;
    int64_t ring_version = 0;
    int64_t ring_ready = 0;  // clocks whose own gradient is ready for the ring
    int ring_pieces_done = 0;
    int64_t version = 0;
  };

  enum class Phase { kIdle, kForward, kBackward };
  // One device's passes of the machine's clock.
  struct DeviceRun {
    Phase phase = Phase::kIdle;
    bool computing = false;  // a forward or backward task is in flight
    bool ended = false;      // its backward pass of clock_ ended; waits for the other devices
    int fwd_next = 0;
  };

  void Advance(TimeNs now);
  void AdvanceDevice(TimeNs now, int device);
  void Finish(TimeNs now);
  // A heartbeat or the done message, stamped with this worker's clock.
  void TellCoordinator(MsgType type);
  void BackwardDone(TimeNs now, const ComputeTask& task);
  bool FreshEnough(int layer, int64_t clock) const;
  void StartSync(TimeNs now, int layer, int64_t clock);
  void SyncReduced(TimeNs now, int layer, int64_t clock);
  void MaybeBroadcast(TimeNs now, int layer);
  void SetVersion(TimeNs now, int layer, int64_t version);
  void PushLayer(TimeNs now, int layer, int64_t clock);
  void OnParams(TimeNs now, const Message& msg);
  void TakeParams(TimeNs now, const Message& msg);
  ProtocolError OnRejoinReply(TimeNs now, const Message& msg);
  void SendRejoin(ActorId shard);
  void Retain(const Message& push);
  void TrimRetained(int shard);
  void DrainPs(TimeNs now, int layer);
  void SfbContribution(TimeNs now, int layer, int64_t clock);
  void RingStep(TimeNs now, int layer, int piece);
  void RingReady(TimeNs now, int layer);
  void UpdateVersion(TimeNs now, int layer);
  // Baselines (ProtocolConfig::baseline).
  void FusedReady(TimeNs now, int layer, int64_t clock);
  void StartFused(TimeNs now);
  void FusedStep(TimeNs now, int piece);
  void TreeStepPiece(TimeNs now, int piece);
  void SendTreeHalf(const Collective& c, int piece, int half, bool down, int to);
  void FusedDone(TimeNs now);
  ProtocolError OnBucketStep(TimeNs now, const Message& msg, bool buffered);
  ProtocolError TakeFused(TimeNs now, int64_t clock, int from, int to);
  FloatBuffer CollectiveSegment(const Collective& c, RingSpan span);
  void MaybeArmCycle(TimeNs now);
  void Report(TimeNs now);
  ProtocolError Negotiate(TimeNs now, int rank, int64_t clock, int prefix);
  void Send(Message m, int layer);
  void TraceInstant(TraceKind kind, TimeNs now, int layer, int64_t clock);

  const ActorId id_;
  const int rank_;  // worker index
  const Model& model_;
  const Placement& placement_;
  const JobLayout& layout_;
  const ProtocolConfig config_;
  const CollectivePlan plan_;  // a baseline's collectives (empty without one)
  const JobShape shape_;  // what every incoming message is checked against
  Host* const host_;
  WorkerStore* const store_;
  SendQueue send_queue_;
  const int devices_;   // ProtocolConfig::devices_per_machine
  int64_t end_;         // the clocks it runs: ProtocolConfig::iterations, or EndAt's
  const bool copies_;   // one device whose parameters live on it: copy to and from the host

  bool started_ = false;
  bool finished_ = false;
  int64_t clock_ = 0;               // the machine's clock: the iteration its devices run
  int64_t begun_ = 0;               // clocks whose begin was traced
  std::vector<DeviceRun> dev_;      // per device
  int devices_ended_ = 0;           // D > 1: devices whose backward pass of clock_ ended
  int reduces_running_ = 0;         // D > 1: kLocalReduce tasks started and not ended
  std::vector<int> deferred_syncs_;  // layers whose sync waits for the end of backward (no DWBP)
  std::vector<LayerSync> sync_;      // per layer

  // Fault tolerance.
  std::vector<int64_t> chunk_version_;                       // per chunk: clocks taken
  std::map<int32_t, std::map<int64_t, Message>> early_;     // per chunk: answers ahead of order
  std::map<int, std::deque<Message>> retained_;              // per shard: pushes kept
  std::set<int32_t> mark_next_push_;  // chunks of a shard back from a restart: next push is marked
  bool rejoining_ = false;                                   // waiting for kRejoin answers
  bool rejoined_ = false;                                    // Rejoin() was called
  std::vector<int64_t> pushed_;                              // per chunk: clocks it pushed
  std::map<int32_t, Message> rejoin_current_, rejoin_previous_;

  // Baselines: the collectives of clock fused_clock_, the one whose gradients are being reduced
  // (under BSP a worker computes clock c+1's gradients only once clock c's are reduced).
  int64_t fused_clock_ = 0;
  std::vector<Collective> fused_;        // known so far, in order (DDP: all of them)
  size_t fused_next_ = 0;                // the first not done
  bool fused_running_ = false;           // fused_[fused_next_] has begun
  std::vector<RingPiece> fused_pieces_;  // of the running one
  int fused_pieces_done_ = 0;
  std::vector<std::vector<int>> layer_tensors_;  // per layer id: its tensors in the ready order
  std::vector<char> tensor_ready_;       // per tensor of the ready order, for fused_clock_
  int ready_prefix_ = 0;                 // tensors 0..ready_prefix_-1 are ready
  std::vector<int> layer_tensors_left_;  // per layer id: tensors not reduced yet this clock
  std::map<std::pair<int64_t, int32_t>, int> fused_recv_;  // steps received, per (clock, piece)
  std::vector<Message> fused_early_;     // horovod: steps of collectives not answered here yet
  // Tree all-reduce (BaselineConfig::algorithm kTree, core/tree.h): this worker's links in the
  // two trees, the running collective's pieces, and per (clock, piece) what arrived.
  struct TreePiece {
    bool up_sent[2] = {false, false};    // the half's partial sum went to the parent (or, at the
                                         // root, every child's arrived)
    bool down_sent[2] = {false, false};  // the half's sum went to the children
    bool done = false;
  };
  struct TreeRecv {
    int up[2] = {0, 0};                // children's partial sums of each half
    bool down[2] = {false, false};     // the parent's sum of each half
  };
  TreeLinks tree_links_[2];  // when a collective may run NCCL's tree (CollectivePlan::MayRunTree)
  std::vector<TreePiece> tree_pieces_;  // of the running collective
  std::map<std::pair<int64_t, int32_t>, TreeRecv> tree_recv_;
  // Peers whose buffered bucket step did not fit the collective it turned out to belong to
  // (Horovod, TakeFused): their next message is refused with that error.
  std::map<ActorId, ProtocolError> blamed_;
  // Horovod's negotiation.
  TimeNs cycle_start_ = 0;   // when the last cycle began
  bool cycle_armed_ = false;
  int reported_ = 0;         // the ready prefix last told to the coordinator (this clock)
  std::vector<std::pair<int64_t, int>> reports_;  // worker 0: per worker, (clock, ready prefix)
  int64_t neg_clock_ = 0;    // worker 0: the clock it answers for
  int responded_ = 0;        // worker 0: tensors of neg_clock_ answered
};

}  // namespace poseidon::core
