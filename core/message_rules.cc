#include "core/message_rules.h"

#include <algorithm>

#include "core/ring.h"
#include "core/tree.h"

namespace poseidon::core {
namespace {

using C = ProtocolErrorCode;

ProtocolError Err(C code, std::string what) { return ProtocolError::Of(code, std::move(what)); }

std::string S(int64_t v) { return std::to_string(v); }

// A message carries `floats` values, or, phantom (no data) in a job whose payloads are not real
// (ProtocolConfig::real_payloads: the simulator's), `phantom_bytes` bytes.
ProtocolError Sized(const Message& m, const ProtocolConfig& config, int64_t floats,
                    int64_t phantom_bytes, const std::string& what) {
  if (!m.data && config.real_payloads) {
    return Err(C::kWrongShape, what + " with no values (this job's messages carry " + S(floats) +
                                   " of them; only a simulated job's are size-only)");
  }
  if (m.data) {
    const int64_t got = static_cast<int64_t>(m.data->size());
    if (got == floats) return ProtocolError::Ok();
    return Err(C::kWrongShape, what + " with " + S(got) + " values (needs " + S(floats) + ")");
  }
  if (m.payload_bytes == phantom_bytes) return ProtocolError::Ok();
  return Err(C::kWrongShape, what + " of " + S(m.payload_bytes) + " bytes (needs " +
                                 S(phantom_bytes) + ")");
}

// Gradients (pushes, factors, ring steps) travel as protocol.gradient_wire says, everything else
// as the job holds its values.
ProtocolError WireIs(const Message& m, WireFormat want, const std::string& what) {
  if (m.wire == want) return ProtocolError::Ok();
  return Err(C::kWrongShape, what + " in " + WireFormatName(m.wire) + ", but this job sends " +
                                 (want == WireFormat::kFp32 ? "them" : "gradients") + " in " +
                                 WireFormatName(want) + " (protocol.gradient_wire)");
}

bool IsGradient(MsgType t) {
  return t == MsgType::kPushGrad || t == MsgType::kFactors || t == MsgType::kRing ||
         t == MsgType::kBucket;
}

ProtocolError ClockInRange(const Message& m, const ProtocolConfig& config) {
  if (m.clock >= 0 && m.clock <= config.iterations) return ProtocolError::Ok();
  return Err(C::kOutOfRange, "clock " + S(m.clock) + " outside the job's 0.." +
                                 S(config.iterations));
}

}  // namespace

const char* ProtocolErrorCodeName(ProtocolErrorCode c) {
  switch (c) {
    case C::kNone: return "none";
    case C::kNotForThisActor: return "not for this actor";
    case C::kWrongSender: return "wrong sender";
    case C::kOutOfRange: return "out of range";
    case C::kWrongShape: return "wrong shape";
    case C::kWrongState: return "wrong state";
    case C::kStateLost: return "state lost";
  }
  return "?";
}

ProtocolError CheckMessageShape(const JobShape& job, ActorId me, const Message& m) {
  const JobLayout& L = *job.layout;
  const FaultConfig& fault = job.config ? job.config->fault : job.fault;
  const bool ft = fault.enabled();
  if (m.from < 0 || m.from >= L.num_actors() || m.from == me) {
    return Err(C::kOutOfRange, "sender " + S(m.from) + " is not another actor of this job");
  }
  if (m.to != me) return Err(C::kNotForThisActor, "addressed to actor " + S(m.to));
  // Named only in an error (this check runs on every message).
  auto me_name = [&] { return L.ActorName(me); };
  if (!IsGradient(m.type) && m.wire != WireFormat::kFp32) {
    return WireIs(m, WireFormat::kFp32, std::string("a ") + MsgTypeName(m.type) + " message");
  }
  switch (m.type) {
    case MsgType::kRegister:
      if (me != JobLayout::coordinator()) return Err(C::kNotForThisActor, "only the coordinator takes register");
      return ProtocolError::Ok();
    case MsgType::kDone:
      if (me != JobLayout::coordinator()) return Err(C::kNotForThisActor, "only the coordinator takes done");
      if (!L.IsWorker(m.from) && !(ft && L.IsServer(m.from))) {
        return Err(C::kWrongSender, "done from an actor that does not send it");
      }
      return ProtocolError::Ok();
    case MsgType::kHeartbeat:
      if (!ft || me != JobLayout::coordinator()) {
        return Err(C::kNotForThisActor, "a heartbeat, but " + me_name() + " takes none");
      }
      return ProtocolError::Ok();
    case MsgType::kStart:
      if (me == JobLayout::coordinator()) return Err(C::kNotForThisActor, "the coordinator takes no start");
      if (m.from != JobLayout::coordinator()) {
        return Err(C::kWrongSender, "start from an actor that is not the coordinator");
      }
      return ProtocolError::Ok();
    case MsgType::kMembership:
      if (!ft || me == JobLayout::coordinator()) {
        return Err(C::kNotForThisActor, "a membership change, but " + me_name() + " takes none");
      }
      if (m.from != JobLayout::coordinator()) {
        return Err(C::kWrongSender, "a membership change not from the coordinator");
      }
      if (m.step <= 0 || m.step >= L.num_actors() ||
          (m.chunk != kMemberDead && m.chunk != kMemberJoined)) {
        return Err(C::kOutOfRange, "a membership change naming actor " + S(m.step) + " (" +
                                       S(m.chunk) + ")");
      }
      return ProtocolError::Ok();
    case MsgType::kRejoin:
      if (!ft || !L.IsServer(me)) return Err(C::kNotForThisActor, "a rejoin, but " + me_name() + " takes none");
      if (!L.IsWorker(m.from)) return Err(C::kWrongSender, "a rejoin not from a worker");
      return ProtocolError::Ok();
    case MsgType::kPushGrad: {
      if (!L.IsServer(me)) return Err(C::kNotForThisActor, "a push, but " + me_name() + " is no shard");
      if (!L.IsWorker(m.from)) return Err(C::kWrongSender, "a push not from a worker");
      const auto& chunks = job.placement->chunks();
      if (m.chunk < 0 || m.chunk >= static_cast<int32_t>(chunks.size())) {
        return Err(C::kOutOfRange, "unknown chunk " + S(m.chunk));
      }
      const Chunk& c = chunks[static_cast<size_t>(m.chunk)];
      if (c.shard != L.ServerIndex(me)) return Err(C::kOutOfRange, "a push for a chunk another shard owns");
      if (m.step != -1 && !(ft && m.step == kPushResent)) {
        return Err(C::kOutOfRange, "a push of an unknown kind " + S(m.step));
      }
      if (ProtocolError e = ClockInRange(m, *job.config)) return e;
      const WireFormat wire = job.config->gradient_wire;
      if (ProtocolError e = WireIs(m, wire, "a push for chunk " + S(m.chunk))) return e;
      return Sized(m, *job.config, c.count, WirePayloadBytes(wire, c.bytes(), c.count),
                   "a push for chunk " + S(m.chunk));
    }
    case MsgType::kParams: {
      if (!L.IsWorker(me)) return Err(C::kNotForThisActor, "parameters, but " + me_name() + " is no worker");
      if (!L.IsServer(m.from)) return Err(C::kWrongSender, "parameters not from a shard");
      const auto& chunks = job.placement->chunks();
      if (m.chunk < 0 || m.chunk >= static_cast<int32_t>(chunks.size())) {
        return Err(C::kOutOfRange, "unknown chunk " + S(m.chunk));
      }
      const Chunk& c = chunks[static_cast<size_t>(m.chunk)];
      if (L.server(c.shard) != m.from) {
        return Err(C::kWrongSender, "parameters from a shard that does not own them");
      }
      if (m.step != -1 && !(ft && (m.step == kRejoinCurrent || m.step == kRejoinPrevious))) {
        return Err(C::kOutOfRange, "parameters of an unknown kind " + S(m.step));
      }
      if (ProtocolError e = ClockInRange(m, *job.config)) return e;
      return Sized(m, *job.config, c.count, c.bytes(), "parameters of chunk " + S(m.chunk));
    }
    case MsgType::kFactors: {
      if (!L.IsWorker(me)) return Err(C::kNotForThisActor, "factors, but " + me_name() + " is no worker");
      if (!L.IsWorker(m.from)) return Err(C::kWrongSender, "factors not from another worker");
      const int layers = static_cast<int>(job.model->layers().size());
      if (m.layer < 0 || m.layer >= layers || job.config->SchemeOf(m.layer) != Scheme::kSfb) {
        return Err(C::kOutOfRange, "factors for layer " + S(m.layer) + ", which does not go by SFB");
      }
      const Layer& layer = job.model->layers()[static_cast<size_t>(m.layer)];
      if (ProtocolError e = ClockInRange(m, *job.config)) return e;
      const WireFormat wire = job.config->gradient_wire;
      if (ProtocolError e = WireIs(m, wire, "factors of layer " + layer.name)) return e;
      const int64_t floats = SfbFactorFloats(layer, job.config->batch);
      if (m.data && job.config->real_payloads) {
        // Real factors carry as many rows as the worker's batches had (a smaller last batch,
        // several micro-batches of gradient accumulation), up to SfbMaxRows.
        const int64_t got = static_cast<int64_t>(m.data->size());
        const int64_t row = SfbRowWords(layer, 1);
        const int64_t most = SfbMaxRows(layer, job.config->batch);
        if (got == 0 || got % row != 0 || got / row > most) {
          return Err(C::kWrongShape, "factors of layer " + layer.name + " with " + S(got) +
                                         " values (needs a whole number of rows of " + S(row) +
                                         ", 1 to " + S(most) + " of them)");
        }
        return ProtocolError::Ok();
      }
      return Sized(m, *job.config, floats, WirePayloadBytes(wire, floats * 4, floats),
                   "factors of layer " + layer.name);
    }
    case MsgType::kRing: {
      if (!L.IsWorker(me)) return Err(C::kNotForThisActor, "a ring step, but " + me_name() + " is no worker");
      const int P = L.num_workers;
      if (!L.IsWorker(m.from) || L.WorkerIndex(m.from) != (L.WorkerIndex(me) + P - 1) % P) {
        return Err(C::kWrongSender, "a ring step not from the previous worker of the ring");
      }
      const int layers = static_cast<int>(job.model->layers().size());
      if (m.layer < 0 || m.layer >= layers || job.config->SchemeOf(m.layer) != Scheme::kAllreduce ||
          job.config->baseline.enabled()) {
        return Err(C::kOutOfRange,
                   "ring step for layer " + S(m.layer) + ", which does not go by all-reduce");
      }
      const Layer& layer = job.model->layers()[static_cast<size_t>(m.layer)];
      const int64_t layer_bytes = layer.params * 4;
      const int64_t chunk_bytes = job.config->chunk_bytes;
      const int pieces = RingPieces(layer_bytes, chunk_bytes);
      if (m.chunk < 0 || m.chunk >= pieces || m.step < 0 || m.step >= 2 * (P - 1)) {
        return Err(C::kOutOfRange, "ring step " + S(m.step) + " of piece " + S(m.chunk) +
                                       " of layer " + layer.name + " (it has " + S(pieces) +
                                       " pieces, " + S(2 * (P - 1)) + " steps)");
      }
      if (ProtocolError e = ClockInRange(m, *job.config)) return e;
      const int seg = RingSegmentSent(L.WorkerIndex(m.from), m.step, P);
      const RingSpan span =
          RingSegmentFloats(layer_bytes, chunk_bytes, m.chunk, seg, P, layer.value_words);
      const int64_t piece_bytes =
          std::min(chunk_bytes, layer_bytes - static_cast<int64_t>(m.chunk) * chunk_bytes);
      const std::string what =
          "ring step " + S(m.step) + " of layer " + layer.name + " piece " + S(m.chunk);
      const WireFormat wire = job.config->gradient_wire;
      if (ProtocolError e = WireIs(m, wire, what)) return e;
      return Sized(m, *job.config, span.count,
                   WirePayloadBytes(wire, RingSegmentBytes(piece_bytes, seg, P), span.count), what);
    }
    case MsgType::kBucket: {
      if (!L.IsWorker(me) || !job.config->baseline.enabled() || !job.collectives) {
        return Err(C::kNotForThisActor, "a bucket step, but " + me_name() +
                                            " runs no baseline's collectives");
      }
      const int P = L.num_workers;
      const AllreduceAlgorithm algorithm = job.config->baseline.algorithm;
      const int steps = algorithm == AllreduceAlgorithm::kTree ? kTreeSteps
                        : algorithm == AllreduceAlgorithm::kRing
                            ? 2 * (P - 1)
                            : std::max(kTreeSteps, 2 * (P - 1));
      if (!L.IsWorker(m.from)) {
        return Err(C::kWrongSender, "a bucket step from " + L.ActorName(m.from) + ", not a worker");
      }
      if (ProtocolError e = ClockInRange(m, *job.config)) return e;
      const CollectivePlan& plan = *job.collectives;
      const int layers = static_cast<int>(job.model->layers().size());
      if (m.chunk < 0 || m.chunk >= plan.max_pieces() || m.step < 0 || m.step >= steps ||
          m.layer < 0 || m.layer >= layers) {
        return Err(C::kOutOfRange, "bucket step " + S(m.step) + " of piece " + S(m.chunk) +
                                       " (layer " + S(m.layer) + "; a clock has at most " +
                                       S(plan.max_pieces()) + " pieces, " + S(steps) + " steps)");
      }
      if (algorithm != AllreduceAlgorithm::kAuto) {
        // Under auto the algorithm is the collective's (CheckCollectiveStep).
        if (ProtocolError e = CheckBucketSender(job, algorithm, me, m)) return e;
      } else if (CheckBucketSender(job, AllreduceAlgorithm::kRing, me, m) &&
                 (!CollectivePlan::MayRunTree(job.config->baseline) ||
                  CheckBucketSender(job, AllreduceAlgorithm::kTree, me, m))) {
        return Err(C::kWrongSender, "a bucket step from " + L.ActorName(m.from) +
                                        ", which is neither the previous worker of the ring nor "
                                        "a neighbour of " + me_name() + " in NCCL's trees");
      }
      if (ProtocolError e = WireIs(m, job.config->gradient_wire, "a bucket step")) return e;
      if (job.config->baseline.kind != Baseline::kDdp) return ProtocolError::Ok();
      const Collective* c = CollectivePlan::Holding(plan.Ddp(m.clock), m.chunk);
      if (!c) {
        return Err(C::kOutOfRange, "bucket step for piece " + S(m.chunk) + " of clock " +
                                       S(m.clock) + ", which its buckets do not have");
      }
      return CheckCollectiveStep(job, me, *c, m);
    }
    case MsgType::kReady:
    case MsgType::kResponse: {
      const bool ready = m.type == MsgType::kReady;
      if (!L.IsWorker(me) || job.config->baseline.kind != Baseline::kHorovod ||
          !job.collectives || (ready ? L.WorkerIndex(me) != 0 : L.WorkerIndex(me) == 0)) {
        return Err(C::kNotForThisActor, std::string("a ") + MsgTypeName(m.type) + ", but " +
                                            me_name() + " takes none");
      }
      if (!L.IsWorker(m.from) || (!ready && L.WorkerIndex(m.from) != 0)) {
        return Err(C::kWrongSender, std::string("a ") + MsgTypeName(m.type) + " from " +
                                        L.ActorName(m.from));
      }
      if (ProtocolError e = ClockInRange(m, *job.config)) return e;
      const int n = static_cast<int>(job.collectives->tensors().size());
      const bool ok = ready ? m.chunk >= 0 && m.chunk <= n
                            : m.step >= 0 && m.step < m.chunk && m.chunk <= n;
      if (!ok || m.payload_bytes != 0 || m.data) {
        return Err(C::kOutOfRange, std::string("a ") + MsgTypeName(m.type) + " of tensors " +
                                       S(m.step) + ".." + S(m.chunk) + " and " +
                                       S(m.payload_bytes) + " bytes (the job has " + S(n) +
                                       " gradient tensors; negotiation carries no values)");
      }
      return ProtocolError::Ok();
    }
  }
  return Err(C::kNotForThisActor, "message type " + S(static_cast<int>(m.type)) + " is unknown");
}

ProtocolError CheckBucketSender(const JobShape& job, AllreduceAlgorithm algorithm, ActorId me,
                                const Message& m) {
  const JobLayout& L = *job.layout;
  const int P = L.num_workers;
  const int from = L.WorkerIndex(m.from);
  if (algorithm == AllreduceAlgorithm::kTree) {
    if (m.step >= kTreeSteps) {
      return Err(C::kOutOfRange, "tree step " + S(m.step) + " (a tree has " + S(kTreeSteps) +
                                     " steps: two halves, up and down)");
    }
    // Up from a child of this half's tree, down from its parent.
    const TreeLinks t = AllreduceTreeLinks(L, L.WorkerIndex(me), TreeHalf(m.step));
    const bool ok = TreePhaseDown(m.step)
                        ? from == t.parent
                        : std::find(t.children.begin(), t.children.end(), from) !=
                              t.children.end();
    if (!ok) {
      return Err(C::kWrongSender,
                 "tree step " + S(m.step) + " from " + L.ActorName(m.from) + ", which is not " +
                     (TreePhaseDown(m.step) ? "the parent" : "a child") + " of " +
                     L.ActorName(me) + " in tree " + S(TreeHalf(m.step)));
    }
    return ProtocolError::Ok();
  }
  if (m.step >= 2 * (P - 1)) {
    return Err(C::kOutOfRange, "ring step " + S(m.step) + " (the ring has " + S(2 * (P - 1)) +
                                   " steps)");
  }
  if (from != (L.WorkerIndex(me) + P - 1) % P) {
    return Err(C::kWrongSender, "a bucket step not from the previous worker of the ring");
  }
  return ProtocolError::Ok();
}

ProtocolError CheckCollectiveStep(const JobShape& job, ActorId me, const Collective& c,
                                  const Message& m) {
  const CollectivePlan& plan = *job.collectives;
  if (m.layer != c.first_layer) {
    return Err(C::kOutOfRange, "bucket step for piece " + S(m.chunk) + " naming layer " +
                                   S(m.layer) + " (its collective starts at layer " +
                                   S(c.first_layer) + ")");
  }
  if (job.config->baseline.algorithm == AllreduceAlgorithm::kAuto) {
    if (ProtocolError e = CheckBucketSender(job, c.algorithm, me, m)) return e;
  }
  const bool tree = c.algorithm == AllreduceAlgorithm::kTree;
  // A tree step carries half `step / 2` of its piece: segment TreeHalf of a two-way split.
  const int P = tree ? 2 : job.layout->num_workers;
  const int piece = m.chunk - c.piece_base;
  const int seg = tree ? TreeHalf(m.step) : RingSegmentSent(job.layout->WorkerIndex(m.from), m.step, P);
  const RingSpan span =
      RingSegmentFloats(c.bytes, c.piece_bytes, piece, seg, P, plan.value_words());
  const int64_t piece_bytes =
      std::min(c.piece_bytes, c.bytes - static_cast<int64_t>(piece) * c.piece_bytes);
  const WireFormat wire = job.config->gradient_wire;
  return Sized(m, *job.config, span.count,
               WirePayloadBytes(wire, RingSegmentBytes(piece_bytes, seg, P), span.count),
               "bucket step " + S(m.step) + " of piece " + S(m.chunk) + " of clock " +
                   S(m.clock));
}

int FirstLayerOffPs(const Model& model, const ProtocolConfig& config) {
  for (const Layer& l : model.layers()) {
    if (!l.blobs.empty() && config.SchemeOf(l.id) != Scheme::kPs) return l.id;
  }
  return -1;
}

std::string OffPsReason(const Model& model, const ProtocolConfig& config, int layer) {
  return "layer '" + model.layers()[static_cast<size_t>(layer)].name + "' goes by " +
         SchemeName(config.SchemeOf(layer)) + ", whose state lives in the workers";
}

}  // namespace poseidon::core
