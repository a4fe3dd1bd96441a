// The shared training pieces: worker slices of a global batch equal the one-worker batch.
#include "kernels/training.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace poseidon::kernels {
namespace {

TEST(BatchSourceTest, WorkerSlicesConcatenateToTheOneWorkerBatch) {
  const IdxDataset data = SyntheticDataset(/*count=*/50, 4, 4, /*classes=*/5, /*seed=*/3);
  const int64_t global = 12, pixels = 16;
  for (int size : {2, 3, 5}) {
    BatchSource whole(data, global, 0, 1, /*seed=*/9);
    std::vector<BatchSource> parts;
    for (int r = 0; r < size; ++r) parts.emplace_back(data, global, r, size, 9);
    // Ten batches cross two epoch boundaries (50 examples, 12 per batch).
    for (int b = 0; b < 10; ++b) {
      std::vector<float> img(static_cast<size_t>(global * pixels)), part_img;
      std::vector<int32_t> lab(static_cast<size_t>(global)), part_lab;
      whole.Next(img.data(), lab.data());
      int64_t total = 0;
      for (BatchSource& p : parts) {
        std::vector<float> i(static_cast<size_t>(p.local_batch() * pixels));
        std::vector<int32_t> l(static_cast<size_t>(p.local_batch()));
        p.Next(i.data(), l.data());
        part_img.insert(part_img.end(), i.begin(), i.end());
        part_lab.insert(part_lab.end(), l.begin(), l.end());
        total += p.local_batch();
      }
      ASSERT_EQ(total, global);
      EXPECT_EQ(part_lab, lab) << "size " << size << " batch " << b;
      EXPECT_EQ(part_img, img) << "size " << size << " batch " << b;
    }
  }
}

// A restarted worker reads what it would have read: Skip(n) and a saved-then-restored state
// continue the stream exactly as n more Next calls would, across epoch boundaries.
TEST(BatchSourceTest, SkipAndRestoredStateContinueTheSameStream) {
  const IdxDataset data = SyntheticDataset(/*count=*/50, 4, 4, /*classes=*/5, /*seed=*/3);
  const int64_t global = 12;
  auto batch = [&](BatchSource& s) {
    std::vector<float> img(static_cast<size_t>(s.local_batch() * 16));
    std::vector<int32_t> lab(static_cast<size_t>(s.local_batch()));
    s.Next(img.data(), lab.data());
    return std::make_pair(img, lab);
  };
  BatchSource reference(data, global, 1, 3, 7);
  std::vector<std::pair<std::vector<float>, std::vector<int32_t>>> want;
  for (int b = 0; b < 12; ++b) want.push_back(batch(reference));
  BatchSource skipped(data, global, 1, 3, 7);
  skipped.Skip(7);
  EXPECT_EQ(batch(skipped), want[7]);
  BatchSource first(data, global, 1, 3, 7);
  for (int b = 0; b < 5; ++b) batch(first);
  const std::string state = first.SaveState();
  BatchSource restored(data, global, 1, 3, /*seed=*/99);  // another seed: the state wins
  restored.RestoreState(state);
  restored.Skip(2);
  for (int b = 7; b < 12; ++b) EXPECT_EQ(batch(restored), want[static_cast<size_t>(b)]) << b;
  const IdxDataset other = SyntheticDataset(40, 4, 4, 5, 3);
  BatchSource wrong(other, global, 1, 3, 7);
  EXPECT_THROW(wrong.RestoreState(state), std::invalid_argument);
  EXPECT_THROW(restored.RestoreState(state.substr(0, state.size() / 2)), std::invalid_argument);
}

TEST(BatchSourceTest, RejectsBadRanks) {
  const IdxDataset data = SyntheticDataset(10, 2, 2, 2, 1);
  EXPECT_THROW(BatchSource(data, 8, 2, 2, 1), std::invalid_argument);
  EXPECT_THROW(BatchSource(data, 1, 0, 2, 1), std::invalid_argument);
}

}  // namespace
}  // namespace poseidon::kernels
