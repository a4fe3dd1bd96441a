#include "kernels/tensor.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace poseidon::kernels {
namespace {

TEST(Tensor, AlignedOwnedAndNchwIndexed) {
  Tensor t({2, 3, 4, 5});
  EXPECT_EQ(t.count(), 120);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % Tensor::kAlignment, 0u);
  for (int64_t i = 0; i < t.count(); ++i) t.data()[i] = static_cast<float>(i);
  EXPECT_EQ(t.at(1, 2, 3, 4), 119.f);
  EXPECT_EQ(t.at(0, 1, 0, 0), 20.f);
  Tensor c = t.Clone();
  t.Fill(7.f);
  EXPECT_EQ(c.at(1, 2, 3, 4), 119.f);
  EXPECT_EQ(t.at(1, 2, 3, 4), 7.f);
  Tensor moved = std::move(c);
  EXPECT_EQ(moved.at(0, 1, 0, 0), 20.f);
}

TEST(Tensor, RejectsNegativeDims) { EXPECT_THROW(Tensor({1, -1, 2, 2}), std::invalid_argument); }

}  // namespace
}  // namespace poseidon::kernels
