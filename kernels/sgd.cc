// kernels/sgd.cc: Caffe's SGD update and learning-rate policies.
#include "kernels/sgd.h"

#include <cmath>
#include <stdexcept>

namespace poseidon::kernels {

const char* LrPolicyName(LrPolicy p) {
  switch (p) {
    case LrPolicy::kFixed:
      return "fixed";
    case LrPolicy::kStep:
      return "step";
    case LrPolicy::kPoly:
      return "poly";
  }
  return "unknown";
}

bool LrPolicyFromName(const std::string& name, LrPolicy* p) {
  for (LrPolicy c : {LrPolicy::kFixed, LrPolicy::kStep, LrPolicy::kPoly}) {
    if (name == LrPolicyName(c)) {
      *p = c;
      return true;
    }
  }
  return false;
}

std::string KnownLrPolicies() { return "fixed, step, poly"; }

double LearningRate(const SgdOptions& o, int64_t iter) {
  switch (o.policy) {
    case LrPolicy::kFixed:
      return o.base_lr;
    case LrPolicy::kStep:
      return o.base_lr * std::pow(o.gamma, static_cast<double>(iter / o.stepsize));
    case LrPolicy::kPoly:
      if (iter >= o.max_iter) return 0;
      return o.base_lr *
             std::pow(1.0 - static_cast<double>(iter) / static_cast<double>(o.max_iter), o.power);
  }
  return o.base_lr;
}

void SgdUpdate(double lr, double momentum, double weight_decay, float* w, const float* grad,
               float* history, int64_t n) {
  const float m = static_cast<float>(momentum), r = static_cast<float>(lr),
              d = static_cast<float>(weight_decay);
  for (int64_t i = 0; i < n; ++i) {
    history[i] = m * history[i] - r * (grad[i] + d * w[i]);
    w[i] += history[i];
  }
}

Sgd::Sgd(const SgdOptions& options, int64_t num_params)
    : options_(options), history_(static_cast<size_t>(num_params), 0.f) {
  if (!(options.base_lr >= 0)) throw std::invalid_argument("learning rate must not be negative");
  if (!(options.momentum >= 0 && options.momentum < 1)) {
    throw std::invalid_argument("momentum must be in [0, 1)");
  }
  if (!(options.weight_decay >= 0))
    throw std::invalid_argument("weight decay must not be negative");
  if (options.policy == LrPolicy::kStep && options.stepsize <= 0) {
    throw std::invalid_argument("lr policy 'step' needs a positive stepsize");
  }
  if (options.policy == LrPolicy::kPoly && options.max_iter <= 0) {
    throw std::invalid_argument("lr policy 'poly' needs a positive max_iter");
  }
}

double Sgd::Step(float* w, const float* grad, int64_t iter) {
  const double lr = LearningRate(options_, iter);
  SgdUpdate(lr, options_.momentum, options_.weight_decay, w, grad, history_.data(),
            static_cast<int64_t>(history_.size()));
  return lr;
}

}  // namespace poseidon::kernels
