// core/collectives.h: the systems users run instead of Poseidon (protocol.baseline), as plans of
// fused ring all-reduces that core/worker.cc runs one after another.
//
// Both baselines all-reduce every gradient; what differs from Poseidon's per-layer ring is which
// gradient tensors (parameter blobs) travel together in one collective, when it may start, and
// that a worker runs one collective at a time (one NCCL or gloo communicator):
//
//   ddp      PyTorch DistributedDataParallel. Gradients go in buckets; a bucket's all-reduce is
//            launched once every gradient in it is ready, strictly in bucket order
//            (torch/csrc/distributed/c10d/reducer.cpp, Reducer::mark_bucket_ready: "Buckets are
//            reduced in sequence"). Iteration 0 has one bucket holding every gradient: with
//            find_unused_parameters=False (the default) DistributedDataParallel passes
//            bucket_size_limits = [sys.maxsize] (torch/nn/parallel/distributed.py,
//            _ddp_init_helper, torch 1.13 and later). After iteration 0 the buckets are rebuilt in
//            the order the gradients became ready (Reducer::rebuild_buckets) with the limits
//            [_DEFAULT_FIRST_BUCKET_BYTES = 1 MiB, bucket_cap_mb = 25 MiB], by
//            compute_bucket_assignment_by_size: tensors are added in order and a bucket closes
//            as soon as its bytes reach its limit (the tensor that crosses the limit stays in it);
//            the first bucket gets the first limit, every later one the last.
//   horovod  Horovod's tensor fusion. Every HOROVOD_CYCLE_TIME (1 ms: horovod/common/
//            operations.cc, BackgroundThreadLoop, SetCycleTimeMs(1)) each rank tells the
//            coordinator (rank 0) which tensors it has ready; the coordinator answers with the
//            tensors ready on every rank, and every rank all-reduces them in that order, fused
//            greedily: a fused all-reduce takes the next tensor while its bytes stay within
//            HOROVOD_FUSION_THRESHOLD (128 MiB: operations.cc, SetTensorFusionThresholdBytes(
//            128 * 1024 * 1024); docs/tensor-fusion.rst still says 64 MB), and a tensor larger
//            than the threshold goes alone (horovod/common/controller.cc, FuseResponses).
//
// Gradient tensors become ready in one order in both hosts: layer by layer from the last
// (backward), and within a layer its blobs last first (the order PyTorch's AccumulateGrad hooks
// fire for a Linear: bias, then weight). GradientReadyOrder lists them. A collective covers a
// contiguous range [first, end) of that order; its bytes are the tensors' bytes in that order,
// flattened, and it is cut into pieces and segments exactly as one layer of the per-layer ring
// is (core/ring.h with the collective's bytes as the layer's).
//
//   const std::vector<GradTensor> t = GradientReadyOrder(model);
//   std::vector<int> ends = AssignBuckets(t, {1 << 20, 25 << 20});   // DDP after iteration 0
//   std::vector<int> fused = FuseTensors(t, 0, 7, 128 << 20);         // Horovod, tensors 0..6
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/nccl_tuning.h"
#include "core/ring.h"
#include "core/types.h"

namespace poseidon::core {

enum class Baseline : uint8_t { kNone, kDdp, kHorovod };
// "none", "ddp", "horovod".
const char* BaselineName(Baseline b);
bool BaselineFromName(const std::string& name, Baseline* b);
// "ddp, horovod": the names a scenario may give (protocol.baseline).
std::string KnownBaselines();

// The systems' own defaults (see the header comment for where each comes from).
inline constexpr int64_t kDdpBucketCapBytes = int64_t{25} << 20;   // bucket_cap_mb=25
inline constexpr int64_t kDdpFirstBucketBytes = int64_t{1} << 20;  // _DEFAULT_FIRST_BUCKET_BYTES
inline constexpr int64_t kHorovodFusionThresholdBytes = int64_t{128} << 20;
inline constexpr TimeNs kHorovodCycleNs = 1'000'000;  // HOROVOD_CYCLE_TIME=1 (ms)

// How a collective all-reduces (AllreduceAlgorithm, core/nccl_tuning.h): "ring", "tree", "auto".
const char* AllreduceAlgorithmName(AllreduceAlgorithm a);
bool AllreduceAlgorithmFromName(const std::string& name, AllreduceAlgorithm* a);

struct BaselineConfig {
  Baseline kind = Baseline::kNone;
  // kRing or kTree for every collective, or kAuto: each as NCCL's tuning model chooses for its
  // bytes on `nccl` (NcclChooseAllreduce).
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  NcclTopology nccl;
  int64_t bucket_cap_bytes = kDdpBucketCapBytes;                  // ddp, > 0
  int64_t first_bucket_bytes = kDdpFirstBucketBytes;              // ddp, > 0
  int64_t fusion_threshold_bytes = kHorovodFusionThresholdBytes;  // horovod
  TimeNs cycle_ns = kHorovodCycleNs;                              // horovod, > 0
  bool enabled() const { return kind != Baseline::kNone; }
};

// One gradient tensor: a parameter blob, placed in its layer's flattened parameters.
struct GradTensor {
  int32_t layer = 0;
  int32_t blob = 0;
  int64_t offset = 0;  // its first 32-bit word among the layer's words (blobs in order)
  int64_t count = 0;   // 32-bit words
  int64_t bytes() const { return count * 4; }
};

// Every parameter blob of the model in the order the gradients become ready: the last layer's
// last blob first, the first layer's first blob last.
std::vector<GradTensor> GradientReadyOrder(const Model& model);

// compute_bucket_assignment_by_size over `tensors` in order: the end (exclusive index) of each
// bucket. `limits` (bytes, each > 0, at least one) apply to the buckets in turn, the last one to
// every bucket after.
std::vector<int> AssignBuckets(const std::vector<GradTensor>& tensors,
                               const std::vector<int64_t>& limits);

// DDP's bucket ends of iteration `clock`: one bucket for clock 0, the rebuilt ones after.
std::vector<int> DdpBucketEnds(const std::vector<GradTensor>& tensors, const BaselineConfig& b,
                               int64_t clock);

// Horovod's fused all-reduces of the tensors [from, to) the coordinator answered with, in order:
// the end of each. A fused all-reduce takes the next tensor while its bytes stay <= `threshold`.
std::vector<int> FuseTensors(const std::vector<GradTensor>& tensors, int from, int to,
                             int64_t threshold);

// A part of a collective's floats that lies in one tensor: floats `span` of layer `layer`'s
// flattened parameters, which are floats [at, at + span.count) of the collective's span.
struct TensorPart {
  int32_t layer = 0;
  RingSpan span;
  int64_t at = 0;
};
// Floats `span` of the collective over tensors [first, end), as parts of layers, in order. Never
// empty: an empty span gives one part of no floats (in the tensor where it starts).
std::vector<TensorPart> SplitCollectiveSpan(const std::vector<GradTensor>& tensors, int first,
                                            int end, RingSpan span);

// NCCL's pipelining of a tree all-reduce (src/enqueue.cc, the Simple protocol's chunk size for
// ncclPatternTreeUpDown): each tree (one channel each) starts from a chunk of `chunk_bytes`
// (NCCL's Simple step, 4 MiB buffer / 8 steps = 512 KiB, the default chunk_kib) and halves it
// while the collective holds fewer than 8 x depth chunks per tree and the chunk is above
// 128 KiB, then fewer than 4 x depth above 64 KiB, then fewer than depth above 32 KiB, so that
// a deep tree has enough chunks in flight. A piece is one chunk of each tree: twice that.
// `depth`: the most hops from a worker up to the root (TreeDepth).
int64_t TreePieceBytes(int64_t collective_bytes, int64_t chunk_bytes, int depth);

// One collective of a clock: a fused all-reduce over tensors [first, end) of the ready order.
struct Collective {
  int first = 0, end = 0;
  int64_t bytes = 0;        // the tensors' bytes: the ring's "layer bytes"
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;  // kRing or kTree, never kAuto
  int64_t piece_bytes = 0;  // chunk_bytes for a ring, TreePieceBytes for a tree
  int pieces = 0;           // RingPieces(bytes, piece_bytes)
  int piece_base = 0;       // the number of its first piece among its clock's pieces
  int32_t first_layer = 0;  // the earliest layer (in forward order) it holds
};

// What every worker of a job knows of its collectives before it starts: the ready order, the
// ring's piece size and, for DDP, the collectives of clock 0 and of every later clock.
class CollectivePlan {
 public:
  CollectivePlan() = default;
  // `tree_depth`: when the baseline's collectives may run the tree (MayRunTree), its depth
  // (TreeDepth).
  CollectivePlan(const Model& model, const BaselineConfig& baseline, int64_t chunk_bytes,
                 int tree_depth = 0);
  // Whether a collective of `b` may run NCCL's tree: algorithm kTree, or kAuto across machines.
  static bool MayRunTree(const BaselineConfig& b);
  // The algorithm a collective of `bytes` runs.
  AllreduceAlgorithm AlgorithmFor(int64_t bytes) const;

  const std::vector<GradTensor>& tensors() const { return tensors_; }
  const BaselineConfig& baseline() const { return baseline_; }
  int64_t chunk_bytes() const { return chunk_bytes_; }
  int value_words() const { return value_words_; }
  // Appends the collectives ending at `ends` (after those in `out`, which they continue).
  void Append(const std::vector<int>& ends, std::vector<Collective>* out) const;
  // DDP's collectives of clock `clock` (its buckets).
  const std::vector<Collective>& Ddp(int64_t clock) const { return clock == 0 ? ddp0_ : ddp_; }
  // The most pieces one clock's collectives can have, however the tensors are grouped.
  int max_pieces() const { return max_pieces_; }
  // The collective holding piece `piece` among `cs`, or nullptr.
  static const Collective* Holding(const std::vector<Collective>& cs, int piece);

 private:
  std::vector<GradTensor> tensors_;
  BaselineConfig baseline_;
  int64_t chunk_bytes_ = 1;
  int tree_depth_ = 0;
  int value_words_ = 1;
  std::vector<Collective> ddp0_, ddp_;
  int max_pieces_ = 0;
};

}  // namespace poseidon::core
