// kernels/training.h: the pieces of a training loop that the one-process trainer
// (`poseidon train`) and the live workers (real_runtime/) share, so that a P-worker BSP run sees
// exactly the examples of a one-worker run with the same global batch and seed.
//
//   BatchSource src(train, /*global_batch=*/64, /*rank=*/1, /*size=*/4, /*seed=*/1);
//   src.Next(images, labels);        // worker 1's 16 examples of global batch 0, then 1, ...
//   double acc = TestAccuracy(net, test);
//   TestResult r = TestLossAndAccuracy(net, test);   // r.loss, r.accuracy
//
// Example order: a permutation of the training set drawn by std::mt19937_64(seed) with
// std::shuffle, drawn again from the same generator each time it is used up (an epoch). Global
// batch b holds the next `global_batch` examples of that stream; worker `rank` of `size` takes
// positions [rank * global_batch / size, (rank + 1) * global_batch / size) of it.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/data/idx.h"
#include "kernels/net.h"

namespace poseidon::kernels {

class BatchSource {
 public:
  // Throws std::invalid_argument unless 0 <= rank < size <= global_batch and data is non-empty.
  BatchSource(const IdxDataset& data, int64_t global_batch, int rank, int size, uint64_t seed);
  // This worker's share of a global batch (global_batch / size, +1 for the first remainders).
  int64_t local_batch() const { return end_ - begin_; }
  // Fills local_batch() examples of the next global batch: images (local_batch x rows x cols)
  // and labels. Consumes the whole global batch from the example stream.
  void Next(float* images, int32_t* labels);
  // Consumes `batches` global batches without copying them: the stream's position after them is
  // exactly that after as many Next calls (same shuffles), so a restarted worker that skips to
  // its clock reads what it would have read.
  void Skip(int64_t batches);
  // The stream's position (example order, cursor, generator) as bytes, and back: what a worker
  // checkpoints so that a restart continues the same stream without replaying it from the start.
  // Restore throws std::invalid_argument when the bytes do not come from a BatchSource over a
  // data set of the same size.
  std::string SaveState() const;
  void RestoreState(const std::string& bytes);

 private:
  const IdxDataset& data_;
  int64_t global_batch_, begin_, end_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
  int64_t cursor_ = 0;
};

// The id of the model's last softmax_loss layer in forward order (the main head), -1 if none.
int MainLossLayer(const core::Model& model);

// Top-1 accuracy of `net` on the whole of `test`, in batches of the net's batch size (the last
// batch is padded by wrapping around; only its real examples count). Runs forward passes in test
// mode, so it overwrites the net's activations. Throws KernelError without a softmax_loss layer.
double TestAccuracy(Net& net, const IdxDataset& test);

// The same pass with the test loss too: the mean over test's examples of the main head's
// cross-entropy -log(max(p[label], FLT_MIN)), as the softmax_loss kernels compute it.
struct TestResult {
  double accuracy = 0;
  double loss = 0;
};
TestResult TestLossAndAccuracy(Net& net, const IdxDataset& test);

}  // namespace poseidon::kernels
