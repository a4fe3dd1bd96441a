#include "real_runtime/live_stores.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include <fmt/format.h>

#include "config/yaml_reader.h"
#include "real_runtime/half.h"

namespace poseidon::rt {
namespace {


// The optimizer step of every update in the live runtime (a shard's chunk, an SFB weight, a ring
// all-reduce layer): the sum of `contributions` gradients scaled to their mean, then SGD with
// momentum (kernels/sgd.h). One function, so that the three paths cannot drift apart.
void StepWithMean(const kernels::SgdOptions& sgd, int64_t clock, int contributions,
                  float* grad_sum, float* values, float* history, int64_t n) {
  if (contributions != 1) {
    const float scale = 1.f / static_cast<float>(contributions);
    for (int64_t i = 0; i < n; ++i) grad_sum[i] *= scale;
  }
  kernels::SgdUpdate(kernels::LearningRate(sgd, clock), sgd.momentum, sgd.weight_decay, values,
                     grad_sum, history, n);
}

}  // namespace

void CheckValueCount(const core::Message& m, int64_t want, const char* what) {
  const int64_t got = m.data ? static_cast<int64_t>(m.data->size()) : -1;
  if (got != want) {
    throw PayloadError(fmt::format("{} from actor {} for layer {} chunk {} clock {} carries {} "
                                   "values; the job's model needs {}",
                                   what, m.from, m.layer, m.chunk, m.clock, got, want));
  }
}

void PendingPushes::Add(const core::Message& push) {
  if (asp_) {
    asp_queue_.push_back(push.data);
  } else {
    by_clock_[push.clock][push.from] = push.data;
  }
}

std::vector<core::FloatBuffer> PendingPushes::Take(int64_t clock) {
  std::vector<core::FloatBuffer> out;
  if (asp_) {
    if (asp_queue_.empty()) return out;
    out.push_back(std::move(asp_queue_.front()));
    asp_queue_.erase(asp_queue_.begin());
    return out;
  }
  auto it = by_clock_.find(clock);
  if (it == by_clock_.end()) return out;
  for (auto& [from, data] : it->second) out.push_back(std::move(data));
  by_clock_.erase(it);
  return out;
}

WorkerReplica NetReplica(kernels::Net* net) {
  WorkerReplica r;
  r.model = &net->model();
  for (int i = 0; i < net->num_blobs(); ++i) r.blobs.push_back(net->blob(i));
  r.factor_batch = net->batch();
  r.factors = [net](int layer) -> core::FloatBuffer {
    const kernels::FcFactors f = net->FactorsOf(layer);
    auto out = std::make_shared<std::vector<float>>();
    out->reserve(static_cast<size_t>(f.k * (f.n + f.m)));
    out->insert(out->end(), f.top_grad, f.top_grad + f.k * f.n);
    out->insert(out->end(), f.bottom, f.bottom + f.k * f.m);
    return out;
  };
  return r;
}

LiveWorkerStore::LiveWorkerStore(WorkerReplica replica, const core::Placement& placement,
                                 const kernels::SgdOptions& sgd, core::ActorId self)
    : replica_(std::move(replica)),
      model_(*replica_.model),
      placement_(placement),
      sgd_(sgd),
      self_(self),
      blobs_(model_.layers().size()),
      layer_mutex_(model_.layers().size()) {
  for (const kernels::BlobRef& b : replica_.blobs) {
    auto& v = blobs_.at(static_cast<size_t>(b.layer));
    if (v.size() <= static_cast<size_t>(b.index)) v.resize(static_cast<size_t>(b.index) + 1);
    v[static_cast<size_t>(b.index)] = b;
  }
}

const kernels::BlobRef& LiveWorkerStore::Blob(int layer, int index) const {
  if (layer < 0 || static_cast<size_t>(layer) >= blobs_.size() || index < 0 ||
      static_cast<size_t>(index) >= blobs_[static_cast<size_t>(layer)].size()) {
    throw PayloadError(fmt::format("no parameter blob {} in layer {} of model '{}'", index, layer,
                                   model_.name()));
  }
  return blobs_[static_cast<size_t>(layer)][static_cast<size_t>(index)];
}

core::FloatBuffer LiveWorkerStore::GradientChunk(const core::Chunk& c) {
  const kernels::BlobRef& b = Blob(c.layer, c.blob);
  return std::make_shared<const std::vector<float>>(b.grad + c.offset, b.grad + c.offset + c.count);
}

void LiveWorkerStore::WriteParams(const core::Chunk& c, const core::Message& params) {
  CheckValueCount(params, c.count, "parameters");
  const kernels::BlobRef& b = Blob(c.layer, c.blob);
  std::lock_guard<std::mutex> lock(LayerLock(c.layer));
  std::memcpy(b.value + c.offset, params.data->data(), static_cast<size_t>(c.count) * sizeof(float));
}

core::FloatBuffer LiveWorkerStore::SfbFactors(int layer) {
  core::FloatBuffer f = replica_.factors(layer);
  if (gradient_wire_ == core::WireFormat::kFp32 || !f) return f;
  auto sent = std::make_shared<std::vector<float>>(*f);
  RoundThroughWire(gradient_wire_, sent->data(), sent->size());
  std::lock_guard<std::mutex> lock(sfb_mutex_);
  return own_factors_[layer] = std::move(sent);
}

void LiveWorkerStore::AddPart(int layer, int64_t clock, core::ActorId from,
                              std::vector<float> dw) {
  std::lock_guard<std::mutex> lock(sfb_mutex_);
  sfb_parts_[{layer, clock}][from] = std::move(dw);
}

void LiveWorkerStore::SfbAddOwn(int layer, int64_t clock) {
  const kernels::BlobRef& w = Blob(layer, 0);
  if (gradient_wire_ == core::WireFormat::kFp32) {
    AddPart(layer, clock, self_, std::vector<float>(w.grad, w.grad + w.count));
    return;
  }
  // What every peer rebuilds from the factors this worker sent (SfbRebuild), bit for bit.
  core::FloatBuffer f;
  {
    std::lock_guard<std::mutex> lock(sfb_mutex_);
    f = own_factors_.at(layer);
  }
  const core::Layer& L = model_.layers()[static_cast<size_t>(layer)];
  const int64_t m = L.fc_in, n = L.fc_out, k = static_cast<int64_t>(f->size()) / (m + n);
  std::vector<float> dw(static_cast<size_t>(n * m));
  kernels::RebuildFcGradient(f->data(), f->data() + k * n, k, m, n, dw.data());
  AddPart(layer, clock, self_, std::move(dw));
}

void LiveWorkerStore::SfbReceive(const core::Message& m) {
  const core::Layer* L = m.layer >= 0 && static_cast<size_t>(m.layer) < model_.layers().size()
                             ? &model_.layers()[static_cast<size_t>(m.layer)]
                             : nullptr;
  if (!L || !core::HasSufficientFactors(*L)) {
    throw PayloadError(fmt::format("sufficient factors from actor {} name layer {}, which is not "
                                   "an fc layer or a linear layer with its own weight of model "
                                   "'{}'",
                                   m.from, m.layer, model_.name()));
  }
  // A peer machine's factors carry the rows of all its devices: the job's factor batch.
  CheckValueCount(m, core::SfbFactorFloats(*L, replica_.factor_batch), "sufficient factors");
  std::lock_guard<std::mutex> lock(sfb_mutex_);
  sfb_factors_[{m.layer, m.clock, m.from}] = m.data;
}

void LiveWorkerStore::SfbRebuild(int layer, int64_t clock, int peer) {
  core::FloatBuffer f;
  {
    std::lock_guard<std::mutex> lock(sfb_mutex_);
    auto it = sfb_factors_.find({layer, clock, peer});
    if (it == sfb_factors_.end()) return;  // rejected on arrival
    f = it->second;
    sfb_factors_.erase(it);
  }
  const core::Layer& L = model_.layers()[static_cast<size_t>(layer)];
  const int64_t k = core::SfbFactorRows(L, replica_.factor_batch), m = L.fc_in, n = L.fc_out;
  std::vector<float> dw(static_cast<size_t>(n * m));
  kernels::RebuildFcGradient(f->data(), f->data() + k * n, k, m, n, dw.data());
  AddPart(layer, clock, peer, std::move(dw));
}

void LiveWorkerStore::SfbApply(int layer, int64_t clock, int contributions) {
  std::map<core::ActorId, std::vector<float>> parts;
  {
    std::lock_guard<std::mutex> lock(sfb_mutex_);
    auto it = sfb_parts_.find({layer, clock});
    if (it == sfb_parts_.end()) return;
    parts = std::move(it->second);
    sfb_parts_.erase(it);
  }
  std::vector<float> sum = std::move(parts.begin()->second);
  for (auto it = std::next(parts.begin()); it != parts.end(); ++it) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += it->second[i];
  }
  const kernels::BlobRef& w = Blob(layer, 0);
  std::vector<float>& history = sfb_history_[layer];
  if (history.empty()) history.assign(static_cast<size_t>(w.count), 0.f);
  std::lock_guard<std::mutex> lock(LayerLock(layer));
  StepWithMean(sgd_, clock, contributions, sum.data(), w.value, history.data(), w.count);
}

std::vector<float>& LiveWorkerStore::RingSum(int layer, int64_t clock, core::RingSpan span) {
  if (layer < 0 || static_cast<size_t>(layer) >= blobs_.size() ||
      blobs_[static_cast<size_t>(layer)].empty()) {
    throw PayloadError(fmt::format("ring all-reduce of layer {}, which has no parameters in "
                                   "model '{}'",
                                   layer, model_.name()));
  }
  std::vector<float>& sum = ring_sums_[{layer, clock}];
  if (sum.empty()) {
    int64_t n = 0;
    for (const kernels::BlobRef& b : blobs_[static_cast<size_t>(layer)]) n += b.count;
    sum.assign(static_cast<size_t>(n), 0.f);
  }
  if (span.offset < 0 || span.count < 0 ||
      span.offset + span.count > static_cast<int64_t>(sum.size())) {
    throw PayloadError(fmt::format("ring all-reduce floats [{}, {}) of layer {}, which has {}",
                                   span.offset, span.offset + span.count, layer, sum.size()));
  }
  return sum;
}

void LiveWorkerStore::RingBegin(int layer, int64_t clock) {
  std::vector<float>& sum = RingSum(layer, clock, {});
  // Adding to zeros is exact, so a segment whose partial sum arrived first ends as that sum plus
  // the own gradient either way.
  float* out = sum.data();
  for (const kernels::BlobRef& b : blobs_[static_cast<size_t>(layer)]) {
    for (int64_t i = 0; i < b.count; ++i) out[i] += b.grad[i];
    out += b.count;
  }
}

core::FloatBuffer LiveWorkerStore::RingSegment(int layer, int64_t clock, core::RingSpan span) {
  std::vector<float>& sum = RingSum(layer, clock, span);
  // In a 16-bit wire format the segment is kept as the next worker decodes it: harmless for a
  // partial sum (this worker's copy of it is overwritten by the all-gather), and for the segment
  // this worker reduced it makes its copy the one every other worker gathers.
  RoundThroughWire(gradient_wire_, sum.data() + span.offset, static_cast<size_t>(span.count));
  const auto begin = sum.begin() + span.offset;
  return std::make_shared<const std::vector<float>>(begin, begin + span.count);
}

void LiveWorkerStore::RingReceive(const core::Message& m, core::RingSpan span, bool reduce) {
  const int64_t got = m.data ? static_cast<int64_t>(m.data->size()) : 0;
  if (got != span.count) {
    throw PayloadError(fmt::format("ring step {} from actor {} for layer {} piece {} clock {} "
                                   "carries {} values; the job's model needs {}",
                                   m.step, m.from, m.layer, m.chunk, m.clock, got, span.count));
  }
  if (span.count == 0) return;
  float* out = RingSum(m.layer, m.clock, span).data() + span.offset;
  const float* in = m.data->data();
  if (reduce) {
    for (int64_t i = 0; i < span.count; ++i) out[i] += in[i];
  } else {
    std::memcpy(out, in, static_cast<size_t>(span.count) * sizeof(float));
  }
}

void LiveWorkerStore::RingApply(int layer, int64_t clock, int workers) {
  auto it = ring_sums_.find({layer, clock});
  if (it == ring_sums_.end()) return;
  std::vector<float> sum = std::move(it->second);
  ring_sums_.erase(it);
  std::vector<float>& history = ring_history_[layer];
  if (history.empty()) history.assign(sum.size(), 0.f);
  std::lock_guard<std::mutex> lock(LayerLock(layer));
  int64_t off = 0;
  for (const kernels::BlobRef& b : blobs_[static_cast<size_t>(layer)]) {
    StepWithMean(sgd_, clock, workers, sum.data() + off, b.value, history.data() + off, b.count);
    off += b.count;
  }
}

LiveShardStore::LiveShardStore(const kernels::Net& initial, const core::Placement& placement,
                               int shard, core::Consistency consistency,
                               const kernels::SgdOptions& sgd)
    : placement_(placement), shard_(shard), asp_(consistency == core::Consistency::kAsp), sgd_(sgd) {
  std::map<std::pair<int, int>, kernels::BlobRef> blobs;
  for (int i = 0; i < initial.num_blobs(); ++i) {
    const kernels::BlobRef b = initial.blob(i);
    blobs[{b.layer, b.index}] = b;
  }
  for (int32_t id : placement.chunks_of_shard(shard)) {
    const core::Chunk& c = placement.chunks()[static_cast<size_t>(id)];
    const kernels::BlobRef& b = blobs.at({c.layer, c.blob});
    ChunkState& s = state_[id];
    s.pushes = PendingPushes(asp_);
    s.values.assign(b.value + c.offset, b.value + c.offset + c.count);
    s.history.assign(static_cast<size_t>(c.count), 0.f);
  }
}

LiveShardStore::ChunkState& LiveShardStore::State(const core::Chunk& c) {
  auto it = state_.find(c.id);
  if (it == state_.end()) {
    throw PayloadError(fmt::format("shard {} does not own chunk {}", shard_, c.id));
  }
  return it->second;
}

void LiveShardStore::Accumulate(const core::Chunk& c, const core::Message& push) {
  CheckValueCount(push, c.count, "gradient push");
  State(c).pushes.Add(push);
}

void LiveShardStore::Apply(const core::Chunk& c, int64_t clock, int num_pushes) {
  ChunkState& s = State(c);
  const std::vector<core::FloatBuffer> parts = s.pushes.Take(clock);
  if (parts.empty()) return;
  std::vector<float> grad(parts[0]->begin(), parts[0]->end());
  for (size_t p = 1; p < parts.size(); ++p) {
    for (size_t i = 0; i < grad.size(); ++i) grad[i] += (*parts[p])[i];
  }
  if (keep_previous_) s.previous = s.values;
  StepWithMean(sgd_, clock, num_pushes, grad.data(), s.values.data(), s.history.data(), c.count);
}

core::FloatBuffer LiveShardStore::ReadPrevious(const core::Chunk& c) {
  const ChunkState& s = State(c);
  if (!keep_previous_ || s.previous.empty()) return nullptr;
  return std::make_shared<const std::vector<float>>(s.previous);
}

// The checkpoint file, little-endian:
//   "PSCK" u32 format 1 | i32 shard | i32 chunks | i32 workers | i64 floor
//   per chunk: i32 id | i64 count | i64 version | i32 n_applied | n_applied x i64 |
//              count x f32 values | count x f32 momentum | u8 has_previous | [count x f32]
//   u32 CRC-32 of everything before it
namespace {
constexpr uint32_t kCheckpointMagic = 0x4B435350;  // "PSCK"
constexpr uint32_t kCheckpointFormat = 1;

template <typename T>
void PutRaw(std::string* b, const T& v) {
  b->append(reinterpret_cast<const char*>(&v), sizeof v);
}
void PutFloats(std::string* b, const std::vector<float>& v) {
  b->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
}  // namespace

void LiveShardStore::Checkpoint(const core::ShardCheckpoint& state) {
  if (checkpoint_file_.empty()) return;
  std::string b;
  PutRaw(&b, kCheckpointMagic);
  PutRaw(&b, kCheckpointFormat);
  PutRaw(&b, static_cast<int32_t>(shard_));
  PutRaw(&b, static_cast<int32_t>(state.chunks.size()));
  const int32_t workers =
      state.chunks.empty() ? 0 : static_cast<int32_t>(state.chunks[0].applied_by_worker.size());
  PutRaw(&b, workers);
  PutRaw(&b, state.floor);
  for (const core::ChunkProgress& p : state.chunks) {
    const ChunkState& s = state_.at(p.chunk);
    PutRaw(&b, p.chunk);
    PutRaw(&b, static_cast<int64_t>(s.values.size()));
    PutRaw(&b, p.version);
    PutRaw(&b, static_cast<int32_t>(p.applied_by_worker.size()));
    for (int64_t a : p.applied_by_worker) PutRaw(&b, a);
    PutFloats(&b, s.values);
    PutFloats(&b, s.history);
    const uint8_t has_prev = s.previous.empty() ? 0 : 1;
    PutRaw(&b, has_prev);
    if (has_prev) PutFloats(&b, s.previous);
  }
  const uint32_t crc = Crc32(b.data(), b.size());
  PutRaw(&b, crc);
  WriteFileAtomically(checkpoint_file_, b, [&] {
    if (checkpoint_hook_) checkpoint_hook_(state);
  });
  ++checkpoints_written_;
}

core::ShardCheckpoint LiveShardStore::LoadCheckpoint() {
  const std::string& path = checkpoint_file_;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    throw config::ConfigError(fmt::format("{}: error: cannot read the shard's checkpoint; a "
                                          "restarted shard needs the file its first run wrote "
                                          "(--checkpoint-dir)",
                                          path));
  }
  std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t off = 0;
  auto fail = [&](const std::string& what) -> void {
    throw config::ConfigError(
        fmt::format("{}: error: byte offset {}: {}; the checkpoint is unusable (delete it to "
                    "restart the shard from the job's initial values)",
                    path, off, what));
  };
  if (b.size() < 4 + 28) fail(fmt::format("truncated: {} bytes", b.size()));
  uint32_t stored = 0;
  std::memcpy(&stored, b.data() + b.size() - 4, 4);
  const uint32_t crc = Crc32(b.data(), b.size() - 4);
  if (crc != stored) {
    off = b.size() - 4;
    fail(fmt::format("CRC-32 mismatch (stored 0x{:08x}, computed 0x{:08x}): truncated or "
                     "corrupt",
                     stored, crc));
  }
  const size_t end = b.size() - 4;
  auto get = [&](auto* v) {
    if (off + sizeof *v > end) fail("truncated");
    std::memcpy(v, b.data() + off, sizeof *v);
    off += sizeof *v;
  };
  auto get_floats = [&](std::vector<float>* v, int64_t n) {
    if (n < 0 || off + static_cast<size_t>(n) * sizeof(float) > end) fail("truncated");
    v->resize(static_cast<size_t>(n));
    std::memcpy(v->data(), b.data() + off, static_cast<size_t>(n) * sizeof(float));
    off += static_cast<size_t>(n) * sizeof(float);
  };
  uint32_t magic = 0, format = 0;
  int32_t shard = 0, chunks = 0, workers = 0;
  core::ShardCheckpoint state;
  get(&magic);
  if (magic != kCheckpointMagic) fail("not a Poseidon shard checkpoint (bad magic)");
  get(&format);
  if (format != kCheckpointFormat) fail(fmt::format("format {} (this build reads {})", format, kCheckpointFormat));
  get(&shard);
  if (shard != shard_) fail(fmt::format("written by shard {}, this is shard {}", shard, shard_));
  get(&chunks);
  if (chunks != static_cast<int32_t>(state_.size())) {
    fail(fmt::format("{} chunks, but this shard owns {} (another model or layout?)", chunks,
                     state_.size()));
  }
  get(&workers);
  get(&state.floor);
  for (int32_t i = 0; i < chunks; ++i) {
    core::ChunkProgress p;
    int64_t count = 0;
    int32_t n_applied = 0;
    get(&p.chunk);
    auto it = state_.find(p.chunk);
    if (it == state_.end()) fail(fmt::format("chunk {}, which this shard does not own", p.chunk));
    get(&count);
    if (count != static_cast<int64_t>(it->second.values.size())) {
      fail(fmt::format("chunk {} has {} values, the model gives it {}", p.chunk, count,
                       it->second.values.size()));
    }
    get(&p.version);
    get(&n_applied);
    if (n_applied != 0 && n_applied != workers) fail("inconsistent worker count");
    p.applied_by_worker.resize(static_cast<size_t>(n_applied));
    for (int64_t& a : p.applied_by_worker) get(&a);
    get_floats(&it->second.values, count);
    get_floats(&it->second.history, count);
    uint8_t has_prev = 0;
    get(&has_prev);
    if (has_prev) {
      get_floats(&it->second.previous, count);
    } else {
      it->second.previous.clear();
    }
    state.chunks.push_back(std::move(p));
  }
  if (off != end) fail("trailing bytes");
  return state;
}

uint32_t Crc32(const void* data, size_t n) {
  return static_cast<uint32_t>(crc32(0L, static_cast<const Bytef*>(data), static_cast<uInt>(n)));
}

core::FloatBuffer LiveShardStore::Read(const core::Chunk& c) {
  return std::make_shared<const std::vector<float>>(State(c).values);
}

core::FloatBuffer ReplayWorkerStore::Zeros(int64_t n) {
  core::FloatBuffer& z = zeros_[n];
  if (!z) z = std::make_shared<const std::vector<float>>(static_cast<size_t>(n), 0.f);
  return z;
}

core::FloatBuffer ReplayWorkerStore::SfbFactors(int layer) {
  const core::Layer& L = model_.layers().at(static_cast<size_t>(layer));
  return Zeros(core::SfbFactorFloats(L, batch_));
}

core::FloatBuffer ReplayShardStore::Read(const core::Chunk& chunk) {
  core::FloatBuffer& z = zeros_[chunk.count];
  if (!z) z = std::make_shared<const std::vector<float>>(static_cast<size_t>(chunk.count), 0.f);
  return z;
}

}  // namespace poseidon::rt
