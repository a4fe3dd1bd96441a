// kernels/training.cc: the example stream of a training run and the test-set pass.
#include "kernels/training.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
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

std::string BatchSource::SaveState() const {
  std::ostringstream rng;
  rng << rng_;
  const std::string r = rng.str();
  std::string b;
  auto put = [&](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  const int64_t n = static_cast<int64_t>(order_.size()), rn = static_cast<int64_t>(r.size());
  put(&n, sizeof n);
  put(&cursor_, sizeof cursor_);
  put(&rn, sizeof rn);
  put(r.data(), r.size());
  put(order_.data(), order_.size() * sizeof(int64_t));
  return b;
}

void BatchSource::RestoreState(const std::string& b) {
  size_t off = 0;
  auto get = [&](void* p, size_t n) {
    if (off + n > b.size()) throw std::invalid_argument("BatchSource state: truncated");
    std::memcpy(p, b.data() + off, n);
    off += n;
  };
  int64_t n = 0, cursor = 0, rn = 0;
  get(&n, sizeof n);
  get(&cursor, sizeof cursor);
  get(&rn, sizeof rn);
  if (n != data_.count || cursor < 0 || cursor > n || rn < 0 || rn > (1 << 20)) {
    throw std::invalid_argument("BatchSource state: for a data set of " + std::to_string(n) +
                                " examples, this one has " + std::to_string(data_.count));
  }
  std::string r(static_cast<size_t>(rn), '\0');
  get(r.data(), r.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  get(order.data(), order.size() * sizeof(int64_t));
  if (off != b.size()) throw std::invalid_argument("BatchSource state: trailing bytes");
  std::istringstream rng(r);
  std::mt19937_64 g;
  rng >> g;
  if (!rng) throw std::invalid_argument("BatchSource state: bad generator state");
  for (int64_t i : order) {
    if (i < 0 || i >= n) throw std::invalid_argument("BatchSource state: bad example index");
  }
  rng_ = g;
  cursor_ = cursor;
  order_ = std::move(order);
}

int MainLossLayer(const core::Model& model) {
  int loss_layer = -1;
  for (const core::Layer& l : model.layers()) {
    if (l.kind == core::LayerKind::kSoftmaxLoss) loss_layer = l.id;
  }
  return loss_layer;
}

double TestAccuracy(Net& net, const IdxDataset& test) {
  return TestLossAndAccuracy(net, test).accuracy;
}

TestResult TestLossAndAccuracy(Net& net, const IdxDataset& test) {
  const int loss_layer = MainLossLayer(net.model());
  if (loss_layer < 0) {
    throw KernelError("model '" + net.model().name() + "' has no softmax_loss layer to test");
  }
  const int64_t batch = net.batch(), pixels = test.rows * test.cols;
  const int64_t classes = net.model().layers()[static_cast<size_t>(loss_layer)].out.count();
  std::vector<float> images(static_cast<size_t>(batch * pixels));
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  int64_t right = 0;
  double loss = 0;
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
      const int32_t label = labels[static_cast<size_t>(k)];
      if (best == label) ++right;
      loss -= std::log(std::max(static_cast<double>(p[k * classes + label]),
                                static_cast<double>(FLT_MIN)));
    }
  }
  TestResult r;
  if (test.count > 0) {
    r.accuracy = static_cast<double>(right) / static_cast<double>(test.count);
    r.loss = loss / static_cast<double>(test.count);
  }
  return r;
}

}  // namespace poseidon::kernels
