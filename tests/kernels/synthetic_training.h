// tests/kernels/synthetic_training.h: a few dozen SGD iterations of a 28x28, 10-class model on the
// seeded synthetic data set (kernels/data/idx.h), for the tests that check a net learns
// (tests/kernels/net_test.cc, transformer_test.cc).
#pragma once

#include <cmath>
#include <cstdint>

#include <gtest/gtest.h>

#include "kernels/data/idx.h"
#include "kernels/net.h"
#include "kernels/sgd.h"

namespace poseidon::kernels::testing {

// The mean loss of the first and of the last 10 iterations.
struct LossEnds {
  double first = 0, last = 0;
};

// Trains `net` (batch images per iteration) with SGD (lr, momentum 0.9) for `iterations`; a loss
// that is not finite fails the test (the returned ends are then partial).
inline LossEnds TrainOnSyntheticData(Net& net, int64_t batch, int iterations, double lr) {
  const IdxDataset data = SyntheticDataset(batch * iterations, 28, 28, 10, 42);
  SgdOptions o;
  o.base_lr = lr, o.momentum = 0.9;
  Sgd sgd(o, net.num_params());
  LossEnds ends;
  for (int it = 0; it < iterations; ++it) {
    const double loss =
        net.Forward(data.images.data() + it * batch * 784, data.labels.data() + it * batch, true);
    EXPECT_TRUE(std::isfinite(loss)) << "iteration " << it;
    if (!std::isfinite(loss)) return ends;
    net.Backward();
    sgd.Step(net.params(), net.param_grads(), it);
    if (it < 10) ends.first += loss / 10;
    if (it >= iterations - 10) ends.last += loss / 10;
  }
  return ends;
}

}  // namespace poseidon::kernels::testing
