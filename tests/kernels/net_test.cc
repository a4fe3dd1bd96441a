// Tests of kernels/net.cc and kernels/sgd.cc: a small branching net's gradients by finite
// differences, sufficient-factor rebuild, SGD and its learning-rate policies by hand, the Fashion-
// MNIST MLP learning a separable synthetic dataset, and bad models.
#include "kernels/net.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/model_loader.h"
#include "core/model.h"
#include "kernels/data/idx.h"
#include "kernels/sgd.h"
#include "tests/kernels/synthetic_training.h"

namespace poseidon::kernels {
namespace {

const char kBranchy[] = R"(schema_version: 1
name: branchy
input: {channels: 2, height: 6, width: 6}
num_classes: 4
layers:
  - {name: conv1, type: conv, num_output: 4, kernel: 3, pad: 1}
  - {name: bn1, type: batchnorm}
  - {name: left, type: conv, num_output: 4, kernel: 3, pad: 1, bottom: [bn1]}
  - {name: sum, type: add, bottom: [left, bn1]}
  - {name: right, type: conv, num_output: 2, kernel: 1, bottom: [bn1]}
  - {name: cat, type: concat, bottom: [sum, right]}
  - {name: pool, type: pool, method: avg, kernel: 2, stride: 2}
  - {name: fc, type: fc, num_output: 4}
  - {name: loss, type: softmax_loss}
)";

core::Model LoadText(const char* text) {
  return core::Model::Build(config::LoadModelText(text, "test.yaml"));
}

// The composed backward (fan-out sums, add, concat, batchnorm) against finite differences of the
// net's loss. No relu: its kink would make finite differences flaky here (relu has its own
// test). Tolerance: per parameter 2e-2 relative + 2e-3 absolute (fp32 forward, eps 1e-3).
TEST(Net, GradientsMatchFiniteDifferencesThroughBranches) {
  core::Model m = LoadText(kBranchy);
  const int64_t batch = 3;
  Net net(m, Backend::kReference, batch, 5);
  std::vector<float> x(static_cast<size_t>(batch * 2 * 6 * 6));
  uint64_t s = 99;
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<double>(s >> 40) * 0x1p-24 * 2 - 1);
  }
  std::vector<int32_t> labels = {0, 3, 1};
  net.Forward(x.data(), labels.data(), true);
  net.Backward();
  std::vector<float> analytic(net.param_grads(), net.param_grads() + net.num_params());
  const double eps = 1e-3;
  int checked = 0;
  for (int b = 0; b < net.num_blobs(); ++b) {
    BlobRef r = net.blob(b);
    // A few values of every blob keep the test fast.
    for (int64_t i = 0; i < r.count; i += std::max<int64_t>(1, r.count / 7)) {
      const float keep = r.value[i];
      r.value[i] = static_cast<float>(keep + eps);
      const double plus = net.Forward(x.data(), labels.data(), true);
      r.value[i] = static_cast<float>(keep - eps);
      const double minus = net.Forward(x.data(), labels.data(), true);
      r.value[i] = keep;
      const double numeric = (plus - minus) / (2 * eps);
      const double a = analytic[static_cast<size_t>(r.grad - net.param_grads() + i)];
      EXPECT_NEAR(a, numeric, 2e-2 * std::max(std::fabs(a), std::fabs(numeric)) + 2e-3)
          << r.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(Net, BlobsAreContiguousSlicesInForwardOrder) {
  core::Model m = LoadText(kBranchy);
  Net net(m, Backend::kReference, 2, 1);
  int64_t offset = 0;
  ASSERT_EQ(net.num_blobs(), 10);  // conv1 w b, bn1 scale shift, left w b, right w b, fc w b
  for (int i = 0; i < net.num_blobs(); ++i) {
    BlobRef r = net.blob(i);
    EXPECT_EQ(r.value, net.params() + offset) << r.name;
    EXPECT_EQ(r.grad, net.param_grads() + offset) << r.name;
    offset += r.count;
  }
  EXPECT_EQ(offset, m.total_params());
  EXPECT_EQ(net.blob(0).name, "conv1.weight");
  EXPECT_EQ(net.blob(2).name, "bn1.scale");
  EXPECT_EQ(net.blob(2).value[0], 1.f);
  EXPECT_EQ(net.blob(1).value[0], 0.f);
}

TEST(Net, SufficientFactorsRebuildTheFcGradient) {
  core::Model m = LoadText(kBranchy);
  const int64_t batch = 4;
  Net net(m, Backend::kReference, batch, 3);
  std::vector<float> x(static_cast<size_t>(batch * 72));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  std::vector<int32_t> labels = {1, 2, 3, 0};
  net.Forward(x.data(), labels.data(), true);
  net.Backward();
  const int fc = m.FindLayer("fc")->id;
  FcFactors f = net.FactorsOf(fc);
  EXPECT_EQ(f.k, batch);
  EXPECT_EQ(f.n, 4);
  EXPECT_EQ(f.m, 6 * 3 * 3);
  std::vector<float> dw(static_cast<size_t>(f.n * f.m));
  RebuildFcGradient(f.top_grad, f.bottom, f.k, f.m, f.n, dw.data());
  const BlobRef* weight = nullptr;
  std::vector<BlobRef> refs;
  for (int i = 0; i < net.num_blobs(); ++i) refs.push_back(net.blob(i));
  for (const BlobRef& r : refs) {
    if (r.name == "fc.weight") weight = &r;
  }
  ASSERT_NE(weight, nullptr);
  double norm = 0;
  for (size_t i = 0; i < dw.size(); ++i) {
    EXPECT_NEAR(dw[i], weight->grad[i], 1e-6 + 1e-5 * std::fabs(weight->grad[i])) << i;
    norm += std::fabs(dw[i]);
  }
  EXPECT_GT(norm, 0);
  EXPECT_THROW(net.FactorsOf(0), KernelError);  // conv1
}

TEST(Sgd, UpdateMatchesCaffe) {
  // v = 0.9 v - 0.1 (g + 0.01 w); w += v.
  std::vector<float> w = {1.f, -2.f}, g = {0.5f, 0.25f}, v = {0.f, 1.f};
  SgdUpdate(0.1, 0.9, 0.01, w.data(), g.data(), v.data(), 2);
  EXPECT_NEAR(v[0], -0.1 * (0.5 + 0.01), 1e-7);
  EXPECT_NEAR(v[1], 0.9 - 0.1 * (0.25 - 0.02), 1e-7);
  EXPECT_NEAR(w[0], 1 - 0.051, 1e-6);
  EXPECT_NEAR(w[1], -2 + 0.877, 1e-6);

  SgdOptions o;
  o.base_lr = 0.5, o.momentum = 0.5;
  Sgd sgd(o, 1);
  float x = 1.f, grad = 1.f;
  sgd.Step(&x, &grad, 0);  // v = -0.5, x = 0.5
  sgd.Step(&x, &grad, 1);  // v = -0.25 - 0.5 = -0.75, x = -0.25
  EXPECT_FLOAT_EQ(x, -0.25f);
}

TEST(Sgd, LearningRatePolicies) {
  SgdOptions o;
  o.base_lr = 0.1;
  EXPECT_DOUBLE_EQ(LearningRate(o, 12345), 0.1);
  o.policy = LrPolicy::kStep, o.gamma = 0.5, o.stepsize = 10;
  EXPECT_DOUBLE_EQ(LearningRate(o, 9), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(o, 10), 0.05);
  EXPECT_DOUBLE_EQ(LearningRate(o, 25), 0.025);
  o.policy = LrPolicy::kPoly, o.power = 2, o.max_iter = 100;
  EXPECT_DOUBLE_EQ(LearningRate(o, 0), 0.1);
  EXPECT_NEAR(LearningRate(o, 50), 0.1 * 0.25, 1e-15);
  EXPECT_NEAR(LearningRate(o, 90), 0.1 * 0.01, 1e-15);
  EXPECT_DOUBLE_EQ(LearningRate(o, 100), 0);
  LrPolicy p = LrPolicy::kFixed;
  EXPECT_TRUE(LrPolicyFromName("poly", &p));
  EXPECT_EQ(p, LrPolicy::kPoly);
  EXPECT_FALSE(LrPolicyFromName("cosine", &p));
  o.policy = LrPolicy::kStep, o.stepsize = 0;
  EXPECT_THROW(Sgd(o, 1), std::invalid_argument);
}

// The shipped MLP learns a separable synthetic dataset: the mean loss of the last 10 iterations
// is less than half that of the first 10.
TEST(Net, FmnistMlpLearnsSyntheticData) {
  core::Model m = core::Model::Build(
      config::LoadModelFile(POSEIDON_SOURCE_DIR "/scenarios/models/fmnist_mlp.yaml"));
  Net net(m, Backend::kReference, /*batch=*/8, 1);
  const testing::LossEnds e = testing::TrainOnSyntheticData(net, 8, /*iterations=*/120, 0.01);
  EXPECT_LT(e.last, 0.5 * e.first) << "first " << e.first << " last " << e.last;
  EXPECT_GT(net.Accuracy(), 0.5);
}

TEST(Net, ModelWhoseShapesDoNotFitNamesTheLayer) {
  const char text[] = R"(schema_version: 1
name: bad
input: {channels: 1, height: 4, width: 4}
num_classes: 2
layers:
  - {name: big_conv, type: conv, num_output: 2, kernel: 7}
  - {name: loss, type: softmax_loss}
)";
  try {
    Net net(LoadText(text), Backend::kReference, 2, 1);
    FAIL() << "expected ModelError";
  } catch (const core::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("big_conv"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.yaml"), std::string::npos) << e.what();
  }
}

// Without a CUDA build or device the cuda backend is refused with the reason and what to do;
// with one the net is built (tests/kernels/gpu_test.cc checks it against the reference).
TEST(Net, CudaBackendWithoutADeviceIsRefusedWithAMessage) {
  core::Model m = LoadText(kBranchy);
  try {
    Net net(m, Backend::kCuda, 2, 1);
    EXPECT_EQ(net.backend(), Backend::kCuda);
  } catch (const KernelError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda backend"), std::string::npos) << what;
    EXPECT_TRUE(what.find("--backend cpu") != std::string::npos ||
                what.find("POSEIDON_WITH_CUDA") != std::string::npos)
        << what;
  }
  EXPECT_THROW(Net(m, Backend::kReference, 0, 1), KernelError);
}

}  // namespace
}  // namespace poseidon::kernels
