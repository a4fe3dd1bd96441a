#include "real_runtime/machine_replica.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/types.h"

namespace poseidon::rt {

MachineReplica::MachineReplica(const std::vector<kernels::Net*>& devices,
                               const std::vector<bool>& sfb_layers)
    : devices_(devices) {
  POSEIDON_CHECK(devices_.size() >= 2) << devices_.size() << " devices";
  kernels::Net& first = *devices_[0];
  const core::Model& model = first.model();
  values_.assign(first.params(), first.params() + first.num_params());
  grads_.assign(static_cast<size_t>(first.num_params()), 0.f);
  layer_blobs_.resize(model.layers().size());
  const float* const base = first.params();
  for (int i = 0; i < first.num_blobs(); ++i) {
    kernels::BlobRef b = first.blob(i);
    const ptrdiff_t off = b.value - base;
    b.value = values_.data() + off;
    b.grad = grads_.data() + off;
    blobs_.push_back(b);
    layer_blobs_.at(static_cast<size_t>(b.layer)).push_back(i);
  }
  for (const kernels::Net* d : devices_) {
    POSEIDON_CHECK(d->num_params() == first.num_params() && d->batch() == first.batch())
        << "the devices of a machine run the same model at the same batch";
  }
  factors_.resize(model.layers().size());
  const int64_t D = static_cast<int64_t>(devices_.size());
  for (size_t l = 0; l < sfb_layers.size() && l < model.layers().size(); ++l) {
    if (!sfb_layers[l]) continue;
    const core::Layer& L = model.layers()[l];
    FactorRows& f = factors_[l];
    f.k = core::SfbFactorRows(L, first.batch());
    f.m = L.fc_in;
    f.n = L.fc_out;
    f.top.assign(static_cast<size_t>(D * f.k * f.n), 0.f);
    f.bottom.assign(static_cast<size_t>(D * f.k * f.m), 0.f);
  }
}

void MachineReplica::Reduce(int layer) {
  const float inv = 1.f / static_cast<float>(devices_.size());
  for (int i : layer_blobs_.at(static_cast<size_t>(layer))) {
    const kernels::BlobRef& mine = blobs_[static_cast<size_t>(i)];
    std::vector<const float*> in;
    for (const kernels::Net* d : devices_) in.push_back(d->blob(i).grad);
    for (int64_t j = 0; j < mine.count; ++j) {
      float s = in[0][j];
      for (size_t d = 1; d < in.size(); ++d) s += in[d][j];
      mine.grad[j] = s * inv;
    }
  }
}

void MachineReplica::CopyValues(int layer, int device) {
  kernels::Net& net = *devices_.at(static_cast<size_t>(device));
  for (int i : layer_blobs_.at(static_cast<size_t>(layer))) {
    const kernels::BlobRef& mine = blobs_[static_cast<size_t>(i)];
    std::memcpy(net.blob(i).value, mine.value, static_cast<size_t>(mine.count) * sizeof(float));
  }
}

void MachineReplica::SetFactors(int layer, int device, const kernels::FcFactors& f) {
  FactorRows& r = factors_.at(static_cast<size_t>(layer));
  POSEIDON_CHECK(!r.top.empty()) << "layer " << layer << " keeps no sufficient factors";
  POSEIDON_CHECK(f.k == r.k && f.m == r.m && f.n == r.n)
      << "layer " << layer << ": factors " << f.k << "x(" << f.m << "+" << f.n << "), expected "
      << r.k << "x(" << r.m << "+" << r.n << ")";
  const float inv = 1.f / static_cast<float>(devices_.size());
  float* top = r.top.data() + device * r.k * r.n;
  for (int64_t j = 0; j < r.k * r.n; ++j) top[j] = f.top_grad[j] * inv;
  std::memcpy(r.bottom.data() + device * r.k * r.m, f.bottom,
              static_cast<size_t>(r.k * r.m) * sizeof(float));
}

core::FloatBuffer MachineReplica::Factors(int layer) const {
  const FactorRows& r = factors_.at(static_cast<size_t>(layer));
  POSEIDON_CHECK(!r.top.empty()) << "layer " << layer << " keeps no sufficient factors";
  auto out = std::make_shared<std::vector<float>>();
  out->reserve(r.top.size() + r.bottom.size());
  out->insert(out->end(), r.top.begin(), r.top.end());
  out->insert(out->end(), r.bottom.begin(), r.bottom.end());
  return out;
}

}  // namespace poseidon::rt
