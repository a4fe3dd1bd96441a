#include "core/collectives.h"

#include <algorithm>
#include <limits>

namespace poseidon::core {

const char* BaselineName(Baseline b) {
  switch (b) {
    case Baseline::kNone:
      return "none";
    case Baseline::kDdp:
      return "ddp";
    case Baseline::kHorovod:
      return "horovod";
  }
  return "?";
}

bool BaselineFromName(const std::string& name, Baseline* b) {
  if (name == "ddp") {
    *b = Baseline::kDdp;
  } else if (name == "horovod") {
    *b = Baseline::kHorovod;
  } else {
    return false;
  }
  return true;
}

std::string KnownBaselines() { return "ddp, horovod"; }

const char* AllreduceAlgorithmName(AllreduceAlgorithm a) {
  switch (a) {
    case AllreduceAlgorithm::kRing:
      return "ring";
    case AllreduceAlgorithm::kTree:
      return "tree";
    case AllreduceAlgorithm::kAuto:
      return "auto";
  }
  return "?";
}

bool AllreduceAlgorithmFromName(const std::string& name, AllreduceAlgorithm* a) {
  if (name == "ring") {
    *a = AllreduceAlgorithm::kRing;
  } else if (name == "tree") {
    *a = AllreduceAlgorithm::kTree;
  } else if (name == "auto") {
    *a = AllreduceAlgorithm::kAuto;
  } else {
    return false;
  }
  return true;
}

std::vector<GradTensor> GradientReadyOrder(const Model& model) {
  std::vector<GradTensor> out;
  const std::vector<int>& layers = model.param_layers();
  for (auto l = layers.rbegin(); l != layers.rend(); ++l) {
    const Layer& L = model.layers()[static_cast<size_t>(*l)];
    std::vector<GradTensor> blobs;
    int64_t off = 0;
    for (size_t b = 0; b < L.blobs.size(); ++b) {
      GradTensor t;
      t.layer = L.id;
      t.blob = static_cast<int32_t>(b);
      t.offset = off;
      t.count = L.blobs[b].count;
      off += t.count;
      blobs.push_back(t);
    }
    out.insert(out.end(), blobs.rbegin(), blobs.rend());
  }
  return out;
}

std::vector<int> AssignBuckets(const std::vector<GradTensor>& tensors,
                               const std::vector<int64_t>& limits) {
  POSEIDON_CHECK(!limits.empty()) << "no bucket size limit";
  std::vector<int> ends;
  size_t limit = 0;
  int64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    bytes += tensors[i].bytes();
    if (bytes >= limits[limit]) {
      ends.push_back(static_cast<int>(i + 1));
      bytes = 0;
      if (limit + 1 < limits.size()) ++limit;
    }
  }
  if (ends.empty() ? !tensors.empty() : ends.back() < static_cast<int>(tensors.size())) {
    ends.push_back(static_cast<int>(tensors.size()));
  }
  return ends;
}

std::vector<int> DdpBucketEnds(const std::vector<GradTensor>& tensors, const BaselineConfig& b,
                               int64_t clock) {
  if (clock == 0) return AssignBuckets(tensors, {std::numeric_limits<int64_t>::max()});
  return AssignBuckets(tensors, {b.first_bucket_bytes, b.bucket_cap_bytes});
}

std::vector<int> FuseTensors(const std::vector<GradTensor>& tensors, int from, int to,
                             int64_t threshold) {
  POSEIDON_CHECK(from >= 0 && from <= to && to <= static_cast<int>(tensors.size()))
      << "tensors [" << from << ", " << to << ") of " << tensors.size();
  std::vector<int> ends;
  int i = from;
  while (i < to) {
    int64_t bytes = tensors[static_cast<size_t>(i)].bytes();
    ++i;
    while (i < to && bytes + tensors[static_cast<size_t>(i)].bytes() <= threshold) {
      bytes += tensors[static_cast<size_t>(i)].bytes();
      ++i;
    }
    ends.push_back(i);
  }
  return ends;
}

std::vector<TensorPart> SplitCollectiveSpan(const std::vector<GradTensor>& tensors, int first,
                                            int end, RingSpan span) {
  POSEIDON_CHECK(first >= 0 && first < end && end <= static_cast<int>(tensors.size()))
      << "collective over tensors [" << first << ", " << end << ")";
  std::vector<TensorPart> parts;
  int64_t base = 0;  // the collective's float where tensor i starts
  for (int i = first; i < end; ++i) {
    const GradTensor& t = tensors[static_cast<size_t>(i)];
    const int64_t lo = std::max(span.offset, base);
    const int64_t hi = std::min(span.offset + span.count, base + t.count);
    if (hi > lo || (span.count == 0 && span.offset >= base && span.offset <= base + t.count)) {
      TensorPart p;
      p.layer = t.layer;
      p.span = {t.offset + (lo - base), std::max<int64_t>(hi - lo, 0)};
      p.at = lo - span.offset;
      parts.push_back(p);
      if (span.count == 0) break;
    }
    base += t.count;
  }
  POSEIDON_CHECK(!parts.empty()) << "floats [" << span.offset << ", " << span.offset + span.count
                                 << ") outside the collective";
  return parts;
}

int64_t TreePieceBytes(int64_t collective_bytes, int64_t chunk_bytes, int depth) {
  int64_t chunk = chunk_bytes;
  auto fewer = [&](int64_t k) { return collective_bytes / (2 * chunk) < k; };
  while (fewer(int64_t{8} * depth) && chunk > 131072) chunk /= 2;
  while (fewer(int64_t{4} * depth) && chunk > 65536) chunk /= 2;
  while (fewer(depth) && chunk > 32768) chunk /= 2;
  return 2 * chunk;
}

CollectivePlan::CollectivePlan(const Model& model, const BaselineConfig& baseline,
                               int64_t chunk_bytes, int tree_depth)
    : tensors_(GradientReadyOrder(model)),
      baseline_(baseline),
      chunk_bytes_(chunk_bytes),
      tree_depth_(tree_depth),
      value_words_(model.layers().empty() ? 1 : model.layers()[0].value_words) {
  POSEIDON_CHECK(chunk_bytes_ > 0) << "chunk_bytes " << chunk_bytes_;
  // A tree's chunk stops halving at or below 32 KiB, so it stays above 16 KiB (or chunk_bytes):
  // every tensor alone, cut into pieces of twice that, bounds a clock's pieces however the
  // tensors are grouped.
  // Under auto a collective may run either, so the smaller of the two bounds.
  const int64_t tree_smallest = 2 * std::min<int64_t>(chunk_bytes_, 16384);
  const int64_t smallest = baseline_.algorithm == AllreduceAlgorithm::kTree
                               ? tree_smallest
                           : MayRunTree(baseline_) ? std::min(tree_smallest, chunk_bytes_)
                                                   : chunk_bytes_;
  for (const GradTensor& t : tensors_) max_pieces_ += RingPieces(t.bytes(), smallest);
  if (baseline_.kind == Baseline::kDdp && !tensors_.empty()) {
    Append(DdpBucketEnds(tensors_, baseline_, 0), &ddp0_);
    Append(DdpBucketEnds(tensors_, baseline_, 1), &ddp_);
  }
}

void CollectivePlan::Append(const std::vector<int>& ends, std::vector<Collective>* out) const {
  for (int e : ends) {
    Collective c;
    c.first = out->empty() ? 0 : out->back().end;
    c.end = e;
    c.piece_base = out->empty() ? 0 : out->back().piece_base + out->back().pieces;
    POSEIDON_CHECK(c.first < c.end && c.end <= static_cast<int>(tensors_.size()))
        << "collective over tensors [" << c.first << ", " << c.end << ")";
    for (int i = c.first; i < c.end; ++i) c.bytes += tensors_[static_cast<size_t>(i)].bytes();
    c.algorithm = AlgorithmFor(c.bytes);
    c.piece_bytes = c.algorithm == AllreduceAlgorithm::kTree
                        ? TreePieceBytes(c.bytes, chunk_bytes_, tree_depth_)
                        : chunk_bytes_;
    c.pieces = RingPieces(c.bytes, c.piece_bytes);
    c.first_layer = tensors_[static_cast<size_t>(c.end - 1)].layer;
    out->push_back(c);
  }
}

bool CollectivePlan::MayRunTree(const BaselineConfig& b) {
  return b.enabled() && (b.algorithm == AllreduceAlgorithm::kTree ||
                         (b.algorithm == AllreduceAlgorithm::kAuto && b.nccl.nodes > 1));
}

AllreduceAlgorithm CollectivePlan::AlgorithmFor(int64_t bytes) const {
  if (baseline_.algorithm != AllreduceAlgorithm::kAuto) return baseline_.algorithm;
  return NcclChooseAllreduce(bytes, baseline_.nccl);
}

const Collective* CollectivePlan::Holding(const std::vector<Collective>& cs, int piece) {
  for (const Collective& c : cs) {
    if (piece >= c.piece_base && piece < c.piece_base + c.pieces) return &c;
  }
  return nullptr;
}

}  // namespace poseidon::core
