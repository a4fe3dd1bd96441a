// kernels/net.cc: buffers, initialisation, forward and backward of a Net.
#include "kernels/net.h"

#include <algorithm>
#include <cmath>

namespace poseidon::kernels {

struct Net::LayerState {
  std::unique_ptr<LayerKernel> kernel;
  SpaceBuffer top, top_grad;      // in the backend's space
  SpaceBuffer scratch;            // bottom-gradient buffer for producers with several consumers
  std::vector<int> consumers;     // ids of the layers reading this one's output
  std::vector<int64_t> blob_ids;  // indices into blobs_
  // A linear layer with `tie`: the embedding table's blob (passed to the kernel as its first
  // parameter) and the kernel's gradient of it, added to the table's gradient after the
  // embedding's backward. An embedding layer: the layers tied to it.
  int64_t tied_blob = -1;
  SpaceBuffer tied_grad;
  std::vector<int> tied_from;
  // Host copies of top / top_grad, filled on demand when the space is not host memory.
  mutable std::vector<float> host_top, host_top_grad;
};

namespace {

// SplitMix64: a portable seeded generator, so that the same seed initialises the same net on
// every platform (std:: distributions are implementation-defined).
uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Weights initialised Xavier-uniform: conv and fc weights, linear and patch_embed weights and
// attention's four projection weights (every blob but the biases).
bool IsWeight(const core::Layer& l, size_t i) {
  switch (l.kind) {
    case core::LayerKind::kConv:
    case core::LayerKind::kFc:
    case core::LayerKind::kLinear:
    case core::LayerKind::kPatchEmbed:
      return i == 0 && l.tied_to < 0;
    case core::LayerKind::kAttention:
      return l.spec.bias ? i % 2 == 0 : true;
    default:
      return false;
  }
}

bool IsTable(core::LayerKind k) {
  return k == core::LayerKind::kEmbedding || k == core::LayerKind::kPosEmbedding ||
         k == core::LayerKind::kClsToken;
}

}  // namespace

Net::Net(const core::Model& model, Backend backend, int64_t batch, uint64_t seed)
    : model_(model), backend_(backend), batch_(batch) {
  if (batch <= 0) throw KernelError("batch must be positive, got " + std::to_string(batch));
  space_ = MakeBufferSpace(backend);
  const auto& ls = model_.layers();
  layers_.resize(ls.size());
  int64_t total = 0;
  for (const core::Layer& l : ls) {
    if (l.kind == core::LayerKind::kAttention && (l.spec.memory > 0 || l.spec.relative)) {
      throw KernelError("layer '" + l.name +
                        "': attention with 'memory' or 'relative' (Transformer-XL) is priced by "
                        "the simulator but has no live kernel; simulate this model, or train one "
                        "whose attention has neither key");
    }
    for (size_t i = 0; i < l.bottoms.size(); ++i) {
      // Two bottoms from one layer would share its scratch gradient buffer.
      for (size_t j = i + 1; j < l.bottoms.size(); ++j) {
        if (l.bottoms[i] == l.bottoms[j]) {
          throw KernelError("layer '" + l.name + "': the same bottom twice is not supported");
        }
      }
      layers_[static_cast<size_t>(l.bottoms[i])].consumers.push_back(l.id);
    }
    for (size_t i = 0; i < l.blobs.size(); ++i) total += l.blobs[i].count;
  }
  params_.assign(static_cast<size_t>(total), 0.f);
  grads_.assign(static_cast<size_t>(total), 0.f);
  if (!space_->is_host()) {
    space_params_ = SpaceBuffer(space_.get(), total);
    space_grads_ = SpaceBuffer(space_.get(), total);
  }
  input_ = SpaceBuffer(space_.get(), batch * model_.input_shape().count());
  if (!space_->is_host()) input_host_.assign(static_cast<size_t>(input_.size()), 0.f);
  labels_.assign(static_cast<size_t>(batch), 0);

  uint64_t init = seed ^ 0x5eed5eedull;
  int64_t offset = 0;
  for (const core::Layer& l : ls) {
    LayerState& st = layers_[static_cast<size_t>(l.id)];
    uint64_t kseed = seed + 0x100000001b3ull * static_cast<uint64_t>(l.id + 1);
    st.kernel = MakeKernel(backend, l, batch, SplitMix(kseed));
    const int64_t out = batch * l.out.count();
    st.top = SpaceBuffer(space_.get(), out);
    st.top_grad = SpaceBuffer(space_.get(), out);
    if (st.consumers.size() > 1) st.scratch = SpaceBuffer(space_.get(), out);
    for (size_t i = 0; i < l.blobs.size(); ++i) {
      const core::ParamBlob& pb = l.blobs[i];
      float* v = params_.data() + offset;
      if (IsWeight(l, i)) {
        const int64_t fan_in = pb.count / std::max<int64_t>(1, pb.dims.at(0));
        const double scale = std::sqrt(3.0 / static_cast<double>(std::max<int64_t>(1, fan_in)));
        for (int64_t j = 0; j < pb.count; ++j) {
          const double u = static_cast<double>(SplitMix(init) >> 11) * 0x1p-53;  // [0, 1)
          v[j] = static_cast<float>((2 * u - 1) * scale);
        }
      } else if ((l.kind == core::LayerKind::kBatchNorm || l.kind == core::LayerKind::kLayerNorm) &&
                 i == 0) {
        std::fill(v, v + pb.count, 1.f);
      } else if (IsTable(l.kind)) {
        // Embedding tables, position embeddings and the class token: uniform with standard
        // deviation 0.02 (ViT's and GPT-2's init scale).
        const double scale = 0.02 * std::sqrt(3.0);
        for (int64_t j = 0; j < pb.count; ++j) {
          const double u = static_cast<double>(SplitMix(init) >> 11) * 0x1p-53;  // [0, 1)
          v[j] = static_cast<float>((2 * u - 1) * scale);
        }
      }
      st.blob_ids.push_back(static_cast<int64_t>(blobs_.size()));
      blob_offset_.push_back(offset);
      blobs_.push_back({l.id, static_cast<int>(i), pb.name, pb.count, v, grads_.data() + offset});
      offset += pb.count;
    }
  }
  for (const core::Layer& l : ls) {
    if (l.tied_to < 0) continue;
    LayerState& st = layers_[static_cast<size_t>(l.id)];
    LayerState& emb = layers_[static_cast<size_t>(l.tied_to)];
    st.tied_blob = emb.blob_ids.at(0);
    st.tied_grad = SpaceBuffer(space_.get(), blobs_[static_cast<size_t>(st.tied_blob)].count);
    emb.tied_from.push_back(l.id);
  }
}

Net::~Net() = default;

float* Net::SpaceParam(int64_t bid) const {
  const BlobRef& b = blobs_[static_cast<size_t>(bid)];
  return space_->is_host() ? b.value : space_params_.data() + blob_offset_[static_cast<size_t>(bid)];
}

float* Net::SpaceGrad(int64_t bid) const {
  const BlobRef& b = blobs_[static_cast<size_t>(bid)];
  return space_->is_host() ? b.grad : space_grads_.data() + blob_offset_[static_cast<size_t>(bid)];
}

const float* Net::OnHost(const SpaceBuffer& b, std::vector<float>& mirror) const {
  if (space_->is_host()) return b.data();
  mirror.resize(static_cast<size_t>(b.size()));
  space_->Download(mirror.data(), b.data(), b.size());
  return mirror.data();
}

const float* Net::HostTop(int layer) const {
  const LayerState& st = layers_.at(static_cast<size_t>(layer));
  return OnHost(st.top, st.host_top);
}

const float* Net::HostTopGrad(int layer) const {
  const LayerState& st = layers_.at(static_cast<size_t>(layer));
  return OnHost(st.top_grad, st.host_top_grad);
}

void Net::SetInput(const float* images, const int32_t* labels) {
  if (!space_->is_host()) std::copy(images, images + input_.size(), input_host_.begin());
  space_->Upload(input_.data(), images, input_.size());
  has_labels_ = labels != nullptr;
  if (has_labels_) std::copy(labels, labels + batch_, labels_.begin());
  loss_ = 0;
}

void Net::ForwardLayer(int id, bool train) {
  const core::Layer& l = model_.layers().at(static_cast<size_t>(id));
  LayerState& st = layers_[static_cast<size_t>(l.id)];
  std::vector<const float*> bottoms;
  if (l.bottoms.empty()) bottoms.push_back(input_.data());
  for (int b : l.bottoms) bottoms.push_back(layers_[static_cast<size_t>(b)].top.data());
  std::vector<const float*> params;
  if (st.tied_blob >= 0) params.push_back(SpaceParam(st.tied_blob));  // uploaded by its layer
  for (int64_t bid : st.blob_ids) {
    const BlobRef& b = blobs_[static_cast<size_t>(bid)];
    space_->Upload(SpaceParam(bid), b.value, b.count);  // a no-op on a host space
    params.push_back(SpaceParam(bid));
  }
  if (l.kind == core::LayerKind::kSoftmaxLoss) {
    if (!has_labels_) {
      throw KernelError("layer '" + l.name + "': softmax_loss needs labels, got none");
    }
    st.kernel->SetLabels(labels_.data());
  }
  st.kernel->Forward(bottoms, st.top.data(), params, train);
  if (l.kind == core::LayerKind::kSoftmaxLoss) loss_ += st.kernel->loss();
}

double Net::Forward(const float* images, const int32_t* labels, bool train) {
  SetInput(images, labels);
  for (const core::Layer& l : model_.layers()) ForwardLayer(l.id, train);
  return loss_;
}

void Net::BeginBackward() {
  for (const core::Layer& l : model_.layers()) {
    LayerState& st = layers_[static_cast<size_t>(l.id)];
    // Single-consumer outputs are overwritten by their consumer; the rest are sums.
    if (st.consumers.size() != 1) space_->Zero(st.top_grad.data(), st.top_grad.size());
  }
}

void Net::BackwardLayer(int id) {
  const core::Layer& l = model_.layers().at(static_cast<size_t>(id));
  LayerState& st = layers_[static_cast<size_t>(l.id)];
  std::vector<const float*> bottoms;
  std::vector<float*> bottom_grads;
  if (l.bottoms.empty()) {
    bottoms.push_back(input_.data());
    bottom_grads.push_back(nullptr);  // no gradient for the data
  }
  for (int b : l.bottoms) {
    LayerState& src = layers_[static_cast<size_t>(b)];
    bottoms.push_back(src.top.data());
    bottom_grads.push_back(src.consumers.size() == 1 ? src.top_grad.data() : src.scratch.data());
  }
  std::vector<const float*> params;
  std::vector<float*> pgrads;
  if (st.tied_blob >= 0) {
    params.push_back(SpaceParam(st.tied_blob));
    pgrads.push_back(st.tied_grad.data());
  }
  for (int64_t bid : st.blob_ids) {
    params.push_back(SpaceParam(bid));
    pgrads.push_back(SpaceGrad(bid));
  }
  st.kernel->Backward(bottoms, st.top.data(), st.top_grad.data(), bottom_grads, params, pgrads);
  // The embedding runs backward after every layer tied to it (they come later in forward
  // order): its table's gradient is its own plus theirs.
  for (int t : st.tied_from) {
    const LayerState& tied = layers_[static_cast<size_t>(t)];
    space_->AddTo(SpaceGrad(st.blob_ids.at(0)), tied.tied_grad.data(), tied.tied_grad.size());
  }
  for (int64_t bid : st.blob_ids) {
    const BlobRef& b = blobs_[static_cast<size_t>(bid)];
    space_->Download(b.grad, SpaceGrad(bid), b.count);  // a no-op on a host space
  }
  for (int b : l.bottoms) {
    LayerState& src = layers_[static_cast<size_t>(b)];
    if (src.consumers.size() == 1) continue;
    space_->AddTo(src.top_grad.data(), src.scratch.data(), src.top_grad.size());
  }
}

void Net::Backward() {
  BeginBackward();
  const auto& ls = model_.layers();
  for (auto it = ls.rbegin(); it != ls.rend(); ++it) BackwardLayer(it->id);
}

double Net::Accuracy() const {
  const auto& ls = model_.layers();
  for (auto it = ls.rbegin(); it != ls.rend(); ++it) {
    if (it->kind != core::LayerKind::kSoftmaxLoss) continue;
    const int64_t c = it->out.count();
    const float* p = HostTop(it->id);
    int64_t right = 0;
    for (int64_t k = 0; k < batch_; ++k) {
      const int64_t best = std::max_element(p + k * c, p + (k + 1) * c) - (p + k * c);
      if (best == labels_[static_cast<size_t>(k)]) ++right;
    }
    return static_cast<double>(right) / static_cast<double>(batch_);
  }
  return 0;
}

FcFactors Net::FactorsOf(int layer) const {
  const auto& ls = model_.layers();
  if (layer < 0 || layer >= static_cast<int>(ls.size()) ||
      !core::HasSufficientFactors(ls[static_cast<size_t>(layer)])) {
    throw KernelError("FactorsOf: layer " + std::to_string(layer) +
                      " is not an fc layer or a linear layer with its own weight");
  }
  const core::Layer& l = ls[static_cast<size_t>(layer)];
  FcFactors f;
  f.k = core::SfbFactorRows(l, batch_);
  f.m = l.fc_in;
  f.n = l.fc_out;
  f.top_grad = HostTopGrad(layer);
  f.bottom = !l.bottoms.empty()   ? HostTop(l.bottoms[0])
             : space_->is_host() ? input_.data()
                                 : input_host_.data();
  return f;
}

const float* Net::activation(int layer) const { return HostTop(layer); }

void RebuildFcGradient(const float* delta, const float* x, int64_t k, int64_t m, int64_t n,
                       float* dw) {
  std::fill(dw, dw + n * m, 0.f);
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t o = 0; o < n; ++o) {
      const float d = delta[kk * n + o];
      float* row = dw + o * m;
      const float* xk = x + kk * m;
      for (int64_t j = 0; j < m; ++j) row[j] += d * xk[j];
    }
  }
}

}  // namespace poseidon::kernels
