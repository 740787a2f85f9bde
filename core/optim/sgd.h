#pragma once
// Sgd: stochastic gradient descent with momentum and weight decay on a flat float buffer, PyTorch's
// torch.optim.SGD semantics (dampening 0, not Nesterov):
//   g = scale * grad + weight_decay * p;   v = momentum * v + g;   p -= lr * v
// (with momentum 0, v is just g). The velocity buffer has the layout of the parameters it was made for,
// which may be the whole model or one contiguous slice of it (a parameter-server shard updates only its
// slice). Not thread-safe: one owner applies updates.

#include <cstddef>
#include <span>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed::optim {

struct SgdOptions {
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

// InvalidArgument naming the field unless lr > 0, 0 <= momentum < 1 and weight_decay >= 0 (all finite).
Status validate(const SgdOptions& options);

class Sgd {
 public:
  // An optimizer for `size` parameters, velocity zero.
  static Result<Sgd> create(const SgdOptions& options, size_t size);

  // One update of params from grads, each of size(). grad_scale multiplies the gradient first (e.g. 1/n for
  // a summed all-reduce). InvalidArgument if a size differs; then nothing is changed.
  Status apply(std::span<float> params, std::span<const float> grads, float grad_scale = 1.0f);

  size_t size() const { return velocity_.size(); }
  const SgdOptions& options() const { return options_; }
  // For learning-rate schedules; InvalidArgument unless lr > 0 and finite.
  Status setLearningRate(float lr);
  // The momentum buffer, for checkpoints (read it, or write a restored one into it).
  std::span<float> velocity() { return velocity_; }
  std::span<const float> velocity() const { return velocity_; }

 private:
  Sgd(const SgdOptions& options, size_t size) : options_(options), velocity_(size, 0.0f) {}

  SgdOptions options_;
  std::vector<float> velocity_;
};

}  // namespace chaosbed::optim
