#pragma once
// Mlp: a multi-layer perceptron (Linear -> ReLU -> ... -> Linear) with softmax cross-entropy, on OpenBLAS.
//
// Parameter layout (see core/model/model.h for the contract of every model): layer l occupies, in order, its
// weight matrix (out x in, row-major, as in PyTorch's nn.Linear) and then its bias (out). layout() gives the
// offsets. The workspace (activations, back-propagated errors) is allocated once for max_batch samples.

#include <cstddef>
#include <string_view>
#include <vector>

#include "core/model/model.h"

namespace chaosbed::model {

// The layer sizes of the default model: 784-256-128-10.
std::vector<size_t> defaultLayers();
// Parses "784,256,128,10": at least two positive sizes. InvalidArgument naming the bad entry otherwise.
Result<std::vector<size_t>> parseLayers(std::string_view text);

class Mlp final : public Model {
 public:
  struct LayerSlice {
    size_t in = 0, out = 0;
    size_t weight_offset = 0;  // out x in floats
    size_t bias_offset = 0;    // out floats
  };

  // InvalidArgument for fewer than two layers, a zero size, more than 256 classes, or max_batch 0.
  // Parameters start initialised from seed 0 (see initialize()).
  static Result<Mlp> create(std::vector<size_t> layers, size_t max_batch);

  // PyTorch nn.Linear's default: weights and biases uniform in +-1/sqrt(in), drawn from a seeded
  // std::mt19937_64 through core/data/random.h, so the same seed gives the same parameters everywhere.
  void initialize(uint64_t seed) override;
  double flopsPerStep(size_t batch) const override;

  const std::vector<size_t>& layers() const { return layers_; }
  const std::vector<LayerSlice>& layout() const { return layout_; }

 private:
  Mlp(std::vector<size_t> layers, size_t max_batch, size_t num_parameters);
  const float* logits(const float* inputs, size_t n) override;
  void backward(const float* inputs, const float* d_logits, size_t n, bool accumulate) override;
  size_t chunkSize() const override { return maxBatch(); }

  std::vector<size_t> layers_;
  std::vector<LayerSlice> layout_;
  std::vector<std::vector<float>> activations_;  // per layer: max_batch x out (post-ReLU; logits last)
  std::vector<float> delta_, delta_prev_;        // max_batch x widest layer
};

}  // namespace chaosbed::model
