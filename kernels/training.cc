#include "kernels/training.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kernels/kernel.h"

namespace poseidon::kernels {

BatchSource::BatchSource(const IdxDataset& data, int64_t global_batch, int rank, int size,
                         uint64_t seed)
    : data_(data), global_batch_(global_batch), rng_(seed) {
  if (size <= 0 || rank < 0 || rank >= size || global_batch < size) {
    throw std::invalid_argument("BatchSource: need 0 <= rank < size <= global batch, got rank " +
                                std::to_string(rank) + ", size " + std::to_string(size) +
                                ", global batch " + std::to_string(global_batch));
  }
  if (data.count == 0) throw std::invalid_argument("BatchSource: the data set is empty");
  begin_ = static_cast<int64_t>(rank) * global_batch / size;
  end_ = static_cast<int64_t>(rank + 1) * global_batch / size;
  order_.resize(static_cast<size_t>(data.count));
  std::iota(order_.begin(), order_.end(), 0);
  std::shuffle(order_.begin(), order_.end(), rng_);
}

void BatchSource::Next(float* images, int32_t* labels) {
  const int64_t pixels = data_.rows * data_.cols;
  for (int64_t k = 0; k < global_batch_; ++k) {
    if (cursor_ == data_.count) {
      std::shuffle(order_.begin(), order_.end(), rng_);
      cursor_ = 0;
    }
    const int64_t i = order_[static_cast<size_t>(cursor_++)];
    if (k < begin_ || k >= end_) continue;
    const int64_t j = k - begin_;
    std::memcpy(images + j * pixels, data_.images.data() + i * pixels,
                static_cast<size_t>(pixels) * sizeof(float));
    labels[j] = data_.labels[static_cast<size_t>(i)];
  }
}

void BatchSource::Skip(int64_t batches) {
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t k = 0; k < global_batch_; ++k) {
      if (cursor_ == data_.count) {
        std::shuffle(order_.begin(), order_.end(), rng_);
        cursor_ = 0;
      }
      ++cursor_;
    }
  }
}

int MainLossLayer(const core::Model& model) {
  int loss_layer = -1;
  for (const core::Layer& l : model.layers()) {
    if (l.kind == core::LayerKind::kSoftmaxLoss) loss_layer = l.id;
  }
  return loss_layer;
}

double TestAccuracy(Net& net, const IdxDataset& test) {
  const int loss_layer = MainLossLayer(net.model());
  if (loss_layer < 0) {
    throw KernelError("model '" + net.model().name() + "' has no softmax_loss layer to test");
  }
  const int64_t batch = net.batch(), pixels = test.rows * test.cols;
  const int64_t classes = net.model().layers()[static_cast<size_t>(loss_layer)].out.count();
  std::vector<float> images(static_cast<size_t>(batch * pixels));
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  int64_t right = 0;
  for (int64_t start = 0; start < test.count; start += batch) {
    const int64_t valid = std::min(batch, test.count - start);
    for (int64_t k = 0; k < batch; ++k) {
      const int64_t i = (start + k) % test.count;
      std::memcpy(images.data() + k * pixels, test.images.data() + i * pixels,
                  static_cast<size_t>(pixels) * sizeof(float));
      labels[static_cast<size_t>(k)] = test.labels[static_cast<size_t>(i)];
    }
    net.Forward(images.data(), labels.data(), /*train=*/false);
    const float* p = net.activation(loss_layer);
    for (int64_t k = 0; k < valid; ++k) {
      const int64_t best =
          std::max_element(p + k * classes, p + (k + 1) * classes) - (p + k * classes);
      if (best == labels[static_cast<size_t>(k)]) ++right;
    }
  }
  return test.count > 0 ? static_cast<double>(right) / static_cast<double>(test.count) : 0;
}

}  // namespace poseidon::kernels
