#include "real_runtime/gradient_stores.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

#include "real_runtime/half.h"
#include "real_runtime/live_stores.h"
#include "real_runtime/value_words.h"

namespace poseidon::rt {
namespace {

std::vector<float> Copy(const core::FloatBuffer& b) { return std::vector<float>(b->begin(), b->end()); }

}  // namespace

// --- MeanGradientShardStore ---

MeanGradientShardStore::MeanGradientShardStore(const core::Model& model,
                                               const core::Placement& placement, int shard,
                                               core::Consistency consistency, int workers)
    : placement_(placement), asp_(consistency == core::Consistency::kAsp), workers_(workers) {
  for (int32_t cid : placement_.chunks_of_shard(shard)) {
    const core::Chunk& c = placement_.chunks()[static_cast<size_t>(cid)];
    ChunkState& st = state_[cid];
    st.pushes = PendingPushes(asp_);
    st.value_words = model.layers()[static_cast<size_t>(c.layer)].value_words;
    st.mean = std::make_shared<std::vector<float>>(static_cast<size_t>(c.count), 0.f);
    if (asp_) st.asp_sum.assign(static_cast<size_t>(c.count), 0.f);
  }
}

MeanGradientShardStore::ChunkState& MeanGradientShardStore::State(const core::Chunk& chunk) {
  auto it = state_.find(chunk.id);
  if (it == state_.end()) {
    throw PayloadError(fmt::format("chunk {} is not held by this shard", chunk.id));
  }
  return it->second;
}

void MeanGradientShardStore::Accumulate(const core::Chunk& chunk, const core::Message& push) {
  CheckValueCount(push, chunk.count, "gradient push");
  State(chunk).pushes.Add(push);
}

void MeanGradientShardStore::Apply(const core::Chunk& chunk, int64_t clock, int num_pushes) {
  ChunkState& st = State(chunk);
  const std::vector<core::FloatBuffer> pushes = st.pushes.Take(clock);
  if (pushes.empty()) {
    throw PayloadError(fmt::format("no pushes of clock {} for chunk {}", clock, chunk.id));
  }
  if (asp_) {
    // One push, as one P-th of a clock's update (the core's ASP): into the running sum.
    std::vector<float> g = Copy(pushes[0]);
    ScaleValues(st.value_words, g.data(), chunk.count, 1.0 / workers_);
    AddValues(st.value_words, st.asp_sum.data(), g.data(), chunk.count);
    return;
  }
  // In worker order, whatever the order of arrival: every run sums the same way. A new buffer:
  // the last one may still be on its way to the workers.
  std::vector<const float*> parts;
  for (const core::FloatBuffer& push : pushes) parts.push_back(push->data());
  auto mean = std::make_shared<std::vector<float>>(static_cast<size_t>(chunk.count));
  MeanOfParts(st.value_words, parts, chunk.count, 1.0 / num_pushes, mean->data());
  st.mean = std::move(mean);
}

core::FloatBuffer MeanGradientShardStore::Read(const core::Chunk& chunk) {
  ChunkState& st = State(chunk);
  if (asp_) return std::make_shared<const std::vector<float>>(st.asp_sum);
  return st.mean;
}

// ASP: what was applied since this worker's last answer (its own push included).
core::FloatBuffer MeanGradientShardStore::ReadFor(const core::Chunk& chunk, core::ActorId worker) {
  if (!asp_) return Read(chunk);
  ChunkState& st = State(chunk);
  std::vector<float>& seen = st.asp_seen[worker];
  if (seen.empty()) seen.assign(st.asp_sum.size(), 0.f);
  std::vector<float> delta = st.asp_sum;
  ScaleValues(st.value_words, seen.data(), chunk.count, -1.0);
  AddValues(st.value_words, delta.data(), seen.data(), chunk.count);
  seen = st.asp_sum;
  return std::make_shared<const std::vector<float>>(std::move(delta));
}

// --- ExternalWorkerStore ---

ExternalWorkerStore::ExternalWorkerStore(const core::Model& model,
                                         const core::Placement& placement, core::ActorId self,
                                         int workers, bool in_place)
    : model_(model),
      placement_(placement),
      self_(self),
      value_words_(model.layers().empty() ? 1 : model.layers()[0].value_words),
      in_place_(in_place),
      grads_(model.layers().size()),
      factors_(model.layers().size()),
      own_factors_(model.layers().size()),
      workers_(workers) {
  int64_t words = 0;
  for (const core::Layer& l : model.layers()) {
    layer_offset_.push_back(words);
    blob_offset_.emplace_back();
    for (const core::ParamBlob& b : l.blobs) {
      blob_offset_.back().push_back(words - layer_offset_.back());
      words += b.count;
    }
  }
}

const core::Layer& ExternalWorkerStore::LayerOf(int layer) const {
  if (layer < 0 || static_cast<size_t>(layer) >= model_.layers().size() ||
      model_.layers()[static_cast<size_t>(layer)].blobs.empty()) {
    throw PayloadError(fmt::format("layer {} of model '{}' has no parameters", layer,
                                   model_.name()));
  }
  return model_.layers()[static_cast<size_t>(layer)];
}

void ExternalWorkerStore::SetGradients(int layer, std::vector<const float*> blobs) {
  POSEIDON_CHECK(blobs.size() == LayerOf(layer).blobs.size()) << "layer " << layer;
  grads_[static_cast<size_t>(layer)] = std::move(blobs);
}

void ExternalWorkerStore::SetFactors(int layer, std::vector<float> rows_then_inputs,
                                     int64_t rows) {
  const core::Layer& L = LayerOf(layer);
  // More rows than min(M, N), or none (the program saw no call of the module, though its weight
  // may have a gradient: used functionally): the factors go as the identity and the gradient
  // (SfbFactors), and the program need not have made its rows.
  const bool identity = rows == 0 || rows > std::min(L.fc_in, L.fc_out);
  POSEIDON_CHECK(rows >= 0 && (identity || static_cast<int64_t>(rows_then_inputs.size()) ==
                                              core::SfbRowWords(L, rows)))
      << "layer " << L.name << ": " << rows_then_inputs.size() << " words for " << rows << " rows";
  factors_[static_cast<size_t>(layer)] = {
      std::make_shared<const std::vector<float>>(std::move(rows_then_inputs)), rows};
}

float* ExternalWorkerStore::MeanOf(int64_t clock, int layer, int blob) {
  const auto l = static_cast<size_t>(layer), b = static_cast<size_t>(blob);
  if (in_place_) return const_cast<float*>(grads_.at(l).at(b));
  // Every word is written before the clock is complete: no need to zero it first.
  std::unique_ptr<float[]>& m = mean_[clock];
  if (!m) m.reset(new float[static_cast<size_t>(model_.total_params())]);
  return m.get() + layer_offset_[l] + blob_offset_[l][b];
}

std::unique_ptr<float[]> ExternalWorkerStore::ReleaseMean(int64_t clock) {
  POSEIDON_CHECK(!in_place_) << "ReleaseMean of a store whose means are written in place";
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mean_.find(clock);
  POSEIDON_CHECK(it != mean_.end()) << "no mean gradient of clock " << clock;
  std::unique_ptr<float[]> m = std::move(it->second);
  mean_.erase(it);
  return m;
}

size_t ExternalWorkerStore::BlobOffset(int layer, int blob) const {
  const auto l = static_cast<size_t>(layer);
  return static_cast<size_t>(layer_offset_.at(l) + blob_offset_.at(l).at(static_cast<size_t>(blob)));
}

core::FloatBuffer ExternalWorkerStore::GradientChunk(const core::Chunk& c) {
  const float* g = grads_.at(static_cast<size_t>(c.layer)).at(static_cast<size_t>(c.blob));
  return std::make_shared<const std::vector<float>>(g + c.offset, g + c.offset + c.count);
}

void ExternalWorkerStore::WriteParams(const core::Chunk& c, const core::Message& params) {
  CheckValueCount(params, c.count, "mean gradient");
  std::lock_guard<std::mutex> lock(mu_);
  float* to = MeanOf(params.clock, c.layer, c.blob) + c.offset;
  std::memcpy(to, params.data->data(), static_cast<size_t>(c.count) * sizeof(float));
}

// The program's rows, or, when they are more than min(M, N), min(M, N) rows that carry the whole
// gradient exactly: the identity and the gradient (N <= M: g = I_N, x = dW; else g = dW^T,
// x = I_M), whose product g^T x is dW.
core::FloatBuffer ExternalWorkerStore::SfbFactors(int layer) {
  core::FloatBuffer f = FactorsOf(layer);
  if (gradient_wire_ != core::WireFormat::kFp32) {
    // Its own factors as its peers decode them (the stacked GEMM is then the same everywhere).
    auto sent = std::make_shared<std::vector<float>>(*f);
    RoundThroughWire(gradient_wire_, sent->data(), sent->size());
    f = std::move(sent);
  }
  return own_factors_[static_cast<size_t>(layer)] = f;
}

core::FloatBuffer ExternalWorkerStore::FactorsOf(int layer) {
  const core::Layer& L = LayerOf(layer);
  const auto& [mine, rows] = factors_[static_cast<size_t>(layer)];
  POSEIDON_CHECK(mine) << "no factors of layer " << L.name;
  const int64_t m = L.fc_in, n = L.fc_out, k = std::min(m, n), w = value_words_;
  if (rows > 0 && rows <= k) return mine;
  const float* dw = grads_[static_cast<size_t>(layer)][0];  // n x m values
  auto out = std::make_shared<std::vector<float>>(static_cast<size_t>(core::SfbRowWords(L, k)), 0.f);
  float* g = out->data();          // k x n values
  float* x = g + k * n * w;        // k x m values
  auto one = [w](float* at) {
    if (w == 2) {
      const double v = 1.0;
      std::memcpy(at, &v, sizeof v);
    } else {
      *at = 1.f;
    }
  };
  if (n <= m) {
    for (int64_t r = 0; r < n; ++r) one(g + (r * n + r) * w);  // g = I_N
    std::memcpy(x, dw, static_cast<size_t>(n * m * w) * sizeof(float));  // x = dW
  } else {
    for (int64_t r = 0; r < m; ++r) {  // g = dW^T: row r of g is column r of dW
      for (int64_t c = 0; c < n; ++c) {
        std::memcpy(g + (r * n + c) * w, dw + (c * m + r) * w, static_cast<size_t>(w) * sizeof(float));
      }
      one(x + (r * m + r) * w);  // x = I_M
    }
  }
  return out;
}

void ExternalWorkerStore::SfbAddOwn(int layer, int64_t clock) {
  std::lock_guard<std::mutex> lock(mu_);
  sfb_[{layer, clock}].factors[self_] = own_factors_[static_cast<size_t>(layer)];
}

void ExternalWorkerStore::SfbReceive(const core::Message& m) {
  const core::Layer& L = LayerOf(m.layer);
  const int64_t row = core::SfbRowWords(L, 1);
  const int64_t got = m.data ? static_cast<int64_t>(m.data->size()) : 0;
  if (!core::HasSufficientFactors(L) || got == 0 || got % row != 0) {
    throw PayloadError(fmt::format("sufficient factors of layer '{}' from actor {} carry {} "
                                   "values, not whole rows of {}",
                                   L.name, m.from, got, row));
  }
  std::lock_guard<std::mutex> lock(mu_);
  sfb_[{m.layer, m.clock}].factors[m.from] = m.data;
}

std::vector<float> ExternalWorkerStore::StackedRebuild(
    int layer, const std::map<core::ActorId, core::FloatBuffer>& f) {
  const core::Layer& L = LayerOf(layer);
  const int64_t m = L.fc_in, n = L.fc_out, w = value_words_, row = core::SfbRowWords(L, 1);
  int64_t k = 0;
  for (const auto& [from, buf] : f) k += static_cast<int64_t>(buf->size()) / row;
  // Each worker's rows: its G (rows x N) then its X (rows x M); stacked: all G, then all X.
  std::vector<float> g(static_cast<size_t>(k * n * w)), x(static_cast<size_t>(k * m * w));
  float* gp = g.data();
  float* xp = x.data();
  for (const auto& [from, buf] : f) {
    const int64_t rows = static_cast<int64_t>(buf->size()) / row;
    std::memcpy(gp, buf->data(), static_cast<size_t>(rows * n * w) * sizeof(float));
    std::memcpy(xp, buf->data() + rows * n * w, static_cast<size_t>(rows * m * w) * sizeof(float));
    gp += rows * n * w;
    xp += rows * m * w;
  }
  std::vector<float> sum(static_cast<size_t>(n * m * w));
  RebuildFromFactors(value_words_, g.data(), x.data(), k, m, n, sum.data());
  return sum;
}

void ExternalWorkerStore::SfbRebuild(int layer, int64_t clock, int peer) {
  std::map<core::ActorId, core::FloatBuffer> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sfb_.find({layer, clock});
    if (it == sfb_.end() || !it->second.factors.count(peer)) return;  // refused on arrival
    if (it->second.summed || static_cast<int>(it->second.factors.size()) < workers_) return;
    all = it->second.factors;
  }
  std::vector<float> sum = StackedRebuild(layer, all);
  std::lock_guard<std::mutex> lock(mu_);
  SfbClock& c = sfb_[{layer, clock}];
  c.sum = std::move(sum);
  c.summed = true;
}

void ExternalWorkerStore::SfbApply(int layer, int64_t clock, int contributions) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = sfb_.find({layer, clock});
  POSEIDON_CHECK(it != sfb_.end() &&
                 static_cast<int>(it->second.factors.size()) == contributions)
      << "SFB of layer " << layer << " clock " << clock << " without every worker's factors";
  if (!it->second.summed) {  // this worker's own factors came last
    const auto all = it->second.factors;
    lock.unlock();
    std::vector<float> sum = StackedRebuild(layer, all);
    lock.lock();
    it = sfb_.find({layer, clock});
    it->second.sum = std::move(sum);
  }
  MeanOfParts(value_words_, {it->second.sum.data()}, LayerOf(layer).blobs[0].count,
              1.0 / contributions, MeanOf(clock, layer, 0));
  sfb_.erase(it);
}

std::vector<float>& ExternalWorkerStore::RingSum(int layer, int64_t clock, core::RingSpan span) {
  const core::Layer& L = LayerOf(layer);
  std::vector<float>& sum = ring_sums_[{layer, clock}];
  if (sum.empty()) sum.assign(static_cast<size_t>(L.params), 0.f);
  if (span.offset < 0 || span.count < 0 ||
      span.offset + span.count > static_cast<int64_t>(sum.size())) {
    throw PayloadError(fmt::format("ring all-reduce words [{}, {}) of layer '{}', which has {}",
                                   span.offset, span.offset + span.count, L.name, sum.size()));
  }
  return sum;
}

void ExternalWorkerStore::RingBegin(int layer, int64_t clock) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<float>& sum = RingSum(layer, clock, {});
  const core::Layer& L = LayerOf(layer);
  float* out = sum.data();
  for (size_t b = 0; b < L.blobs.size(); ++b) {
    AddValues(value_words_, out, grads_[static_cast<size_t>(layer)][b], L.blobs[b].count);
    out += L.blobs[b].count;
  }
}

core::FloatBuffer ExternalWorkerStore::RingSegment(int layer, int64_t clock, core::RingSpan span) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<float>& sum = RingSum(layer, clock, span);
  // 16-bit wire: kept as the next worker decodes it (LiveWorkerStore::RingSegment says why).
  RoundThroughWire(gradient_wire_, sum.data() + span.offset, static_cast<size_t>(span.count));
  const auto begin = sum.begin() + span.offset;
  return std::make_shared<const std::vector<float>>(begin, begin + span.count);
}

void ExternalWorkerStore::RingReceive(const core::Message& step, core::RingSpan span, bool reduce) {
  CheckValueCount(step, span.count, "ring step");
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<float>& sum = RingSum(step.layer, step.clock, span);
  float* at = sum.data() + span.offset;
  if (reduce) {
    AddValues(value_words_, at, step.data->data(), span.count);
  } else {
    std::memcpy(at, step.data->data(), static_cast<size_t>(span.count) * sizeof(float));
  }
}

void ExternalWorkerStore::RingApply(int layer, int64_t clock, int workers) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ring_sums_.find({layer, clock});
  POSEIDON_CHECK(it != ring_sums_.end()) << "no ring sum of layer " << layer << " clock " << clock;
  const std::vector<float> sum = std::move(it->second);
  ring_sums_.erase(it);
  const core::Layer& L = LayerOf(layer);
  const float* from = sum.data();
  for (size_t b = 0; b < L.blobs.size(); ++b) {
    MeanOfParts(value_words_, {from}, L.blobs[b].count, 1.0 / workers,
                MeanOf(clock, layer, static_cast<int>(b)));
    from += L.blobs[b].count;
  }
}

}  // namespace poseidon::rt
