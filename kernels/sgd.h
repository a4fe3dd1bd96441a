// kernels/sgd.h: stochastic gradient descent with momentum and weight decay, as Caffe does it.
//
//   v = momentum * v - lr * (grad + weight_decay * w);   w += v
//
// Learning-rate policies (Caffe's definitions, iter counted from 0):
//   fixed  lr = base_lr
//   step   lr = base_lr * gamma ^ floor(iter / stepsize)
//   poly   lr = base_lr * (1 - iter / max_iter) ^ power      (0 from max_iter on)
//
//   SgdOptions o;  o.base_lr = 0.01;  o.momentum = 0.9;
//   Sgd sgd(o, net.num_params());
//   sgd.Step(net.params(), net.param_grads(), iter);   // after net.Backward()
//
// Thread-safety: one thread at a time per Sgd.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace poseidon::kernels {

enum class LrPolicy { kFixed, kStep, kPoly };
const char* LrPolicyName(LrPolicy p);
// "fixed" | "step" | "poly"; false when unknown.
bool LrPolicyFromName(const std::string& name, LrPolicy* p);
// "fixed, step, poly" for error messages.
std::string KnownLrPolicies();

struct SgdOptions {
  double base_lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
  LrPolicy policy = LrPolicy::kFixed;
  double gamma = 0.1;    // step
  int64_t stepsize = 1;  // step, iterations
  double power = 1.0;    // poly
  int64_t max_iter = 1;  // poly, iterations
};

// The learning rate at iteration `iter` (>= 0).
double LearningRate(const SgdOptions& o, int64_t iter);

// One update of n values in place; history is the momentum buffer v (n values).
void SgdUpdate(double lr, double momentum, double weight_decay, float* w, const float* grad,
               float* history, int64_t n);

class Sgd {
 public:
  // Throws std::invalid_argument on a negative rate, momentum outside [0, 1), a non-positive
  // stepsize (step) or max_iter (poly).
  Sgd(const SgdOptions& options, int64_t num_params);
  // Updates all num_params values of w with grad at iteration iter; returns the rate used.
  double Step(float* w, const float* grad, int64_t iter);
  const SgdOptions& options() const { return options_; }
  // The momentum buffer v (num_params values), for checkpoints: read it to save, write it to
  // resume.
  std::vector<float>& history() { return history_; }
  const std::vector<float>& history() const { return history_; }

 private:
  SgdOptions options_;
  std::vector<float> history_;
};

}  // namespace poseidon::kernels
