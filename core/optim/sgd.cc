#include "core/optim/sgd.h"

#include <cmath>
#include <string>

namespace chaosbed::optim {

Status validate(const SgdOptions& o) {
  if (!std::isfinite(o.lr) || o.lr <= 0) return Status::invalidArgument("sgd: lr must be positive, got " + std::to_string(o.lr));
  if (!std::isfinite(o.momentum) || o.momentum < 0 || o.momentum >= 1)
    return Status::invalidArgument("sgd: momentum must be in [0, 1), got " + std::to_string(o.momentum));
  if (!std::isfinite(o.weight_decay) || o.weight_decay < 0)
    return Status::invalidArgument("sgd: weight_decay must be non-negative, got " + std::to_string(o.weight_decay));
  return Status::ok();
}

Result<Sgd> Sgd::create(const SgdOptions& options, size_t size) {
  CHAOSBED_RETURN_IF_ERROR(validate(options));
  return Sgd(options, size);
}

Status Sgd::setLearningRate(float lr) {
  SgdOptions o = options_;
  o.lr = lr;
  CHAOSBED_RETURN_IF_ERROR(validate(o));
  options_ = o;
  return Status::ok();
}

Status Sgd::apply(std::span<float> params, std::span<const float> grads, float grad_scale) {
  if (params.size() != velocity_.size() || grads.size() != velocity_.size()) {
    return Status::invalidArgument("sgd: optimizer holds " + std::to_string(velocity_.size()) + " values, got " +
                                   std::to_string(params.size()) + " parameters and " + std::to_string(grads.size()) +
                                   " gradients");
  }
  const float lr = options_.lr, mu = options_.momentum, wd = options_.weight_decay;
  float* __restrict p = params.data();
  const float* __restrict g = grads.data();
  float* __restrict v = velocity_.data();
  const size_t n = velocity_.size();
  // One fused pass; branch-free inner loops so the compiler vectorises them.
  if (mu == 0.0f) {
    for (size_t i = 0; i < n; ++i) p[i] -= lr * (grad_scale * g[i] + wd * p[i]);
  } else {
    for (size_t i = 0; i < n; ++i) {
      v[i] = mu * v[i] + grad_scale * g[i] + wd * p[i];
      p[i] -= lr * v[i];
    }
  }
  return Status::ok();
}

}  // namespace chaosbed::optim
