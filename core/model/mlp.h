#pragma once
// Mlp: a multi-layer perceptron (Linear -> ReLU -> ... -> Linear) with softmax cross-entropy, on OpenBLAS.
//
// Memory layout (the contract the distributed strategies rely on)
// - ALL parameters live in ONE contiguous float buffer, parameters(); ALL gradients in ONE buffer of the
//   same size and layout, gradients(). Layer l occupies, in order, its weight matrix (out x in, row-major,
//   as in PyTorch's nn.Linear) and then its bias (out). layout() gives the offsets, so a caller may
//   all-reduce the whole gradient buffer or hand contiguous slices to parameter-server shards.
// - The workspace (activations, back-propagated errors) is allocated once for max_batch samples: a training
//   step allocates nothing.
//
// Split training API: computeGradients(batch) runs forward and backward, fills gradients() with the
// gradient of the mean loss over the batch and returns that loss; an optimizer (core/optim/sgd.h) then
// applies a gradient buffer, possibly all-reduced, to parameters().
//
// Threads: an Mlp is not thread-safe. To evaluate off the training thread, give another Mlp (same layers) a
// copy of the parameters; BLAS calls from several threads are safe with OpenBLAS.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/data/dataset.h"
#include "transports/status.h"

namespace chaosbed::model {

// The layer sizes of the default model: 784-256-128-10.
std::vector<size_t> defaultLayers();
// Parses "784,256,128,10": at least two positive sizes. InvalidArgument naming the bad entry otherwise.
Result<std::vector<size_t>> parseLayers(std::string_view text);

struct EvalResult {
  double accuracy = 0;  // fraction of samples whose arg-max logit is the label
  double loss = 0;      // mean cross-entropy
  size_t samples = 0;
};

class Mlp {
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
  void initialize(uint64_t seed);

  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }
  std::span<float> gradients() { return grads_; }
  std::span<const float> gradients() const { return grads_; }
  size_t numParameters() const { return params_.size(); }
  const std::vector<size_t>& layers() const { return layers_; }
  const std::vector<LayerSlice>& layout() const { return layout_; }
  size_t inputDims() const { return layers_.front(); }
  size_t numClasses() const { return layers_.back(); }
  size_t maxBatch() const { return max_batch_; }

  // One forward and backward pass over n = labels.size() samples (inputs: n x inputDims(), row-major).
  // Overwrites gradients() with d(mean loss)/d(parameters) and returns the mean loss.
  // InvalidArgument if n is 0 or above maxBatch(), the input size disagrees, or a label is out of range.
  Result<float> computeGradients(std::span<const float> inputs, std::span<const uint8_t> labels);

  // Mean loss and accuracy of the current parameters over a whole dataset, maxBatch() samples at a time.
  // InvalidArgument if the dataset's dims or classes disagree with the model, or it is empty.
  Result<EvalResult> evaluate(const data::Dataset& dataset);

  // Floating-point operations of the GEMMs that one computeGradients call over `batch` samples executes:
  // 2*M*N*K for each forward GEMM, each weight-gradient GEMM and each input-gradient GEMM (there is none
  // for the first layer, whose input needs no gradient).
  double gemmFlopsPerStep(size_t batch) const;

 private:
  Mlp(std::vector<size_t> layers, size_t max_batch);
  Status checkBatch(std::span<const float> inputs, std::span<const uint8_t> labels) const;
  // Forward pass; returns the logits (n x classes) in the last activation buffer.
  const float* forward(const float* inputs, size_t n);

  std::vector<size_t> layers_;
  std::vector<LayerSlice> layout_;
  size_t max_batch_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<std::vector<float>> activations_;  // per layer: max_batch x out (post-ReLU; logits last)
  std::vector<float> delta_, delta_prev_;        // max_batch x widest layer
  std::vector<float> eval_input_;                // evaluate(): one chunk of the dataset as floats
};

}  // namespace chaosbed::model
