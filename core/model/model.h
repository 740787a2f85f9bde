#pragma once
// Model: what the strategies, the optimizer and the evaluator need of a network, whatever its kind.
//
// The contract every kind keeps (the distributed strategies rely on it):
// - ALL parameters live in ONE contiguous float buffer, parameters(); ALL gradients in ONE buffer of the
//   same size and layout, gradients(). A caller may all-reduce the whole gradient buffer or hand contiguous
//   slices of it to parameter-server shards.
// - computeGradients(batch) overwrites gradients() with the gradient of the mean softmax cross-entropy over
//   the batch and returns that loss; an optimizer (core/optim/sgd.h) then applies a gradient buffer,
//   possibly all-reduced, to parameters().
// - The workspace is allocated when the model is created: a training step allocates nothing.
// - The same kind, sizes and seed give the same parameters on every node.
//
// Threads: a Model is not thread-safe. To evaluate off the training thread, create another model of the same
// kind and give it a copy of the parameters.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/data/dataset.h"
#include "transports/base/status.h"

namespace chaosbed::model {

// mlp: Linear -> ReLU -> ... -> Linear (core/model/mlp.h). cnn: a LeNet-5-class convolutional net; resnet: a
// small residual net (both core/model/cnn.h, for square one-channel images such as Fashion-MNIST's 28 x 28).
enum class Kind { kMlp, kCnn, kResnet };

std::string_view kindName(Kind kind);
// "mlp", "cnn" or "resnet"; InvalidArgument naming the choices otherwise.
Result<Kind> parseKind(std::string_view name);

struct EvalResult {
  double accuracy = 0;  // fraction of samples whose arg-max logit is the label
  double loss = 0;      // mean cross-entropy
  size_t samples = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }
  std::span<float> gradients() { return grads_; }
  std::span<const float> gradients() const { return grads_; }
  size_t numParameters() const { return params_.size(); }
  // The model's own parameters: the first realParameters() of the buffer; the rest is padding (padTo).
  size_t realParameters() const { return real_parameters_; }
  // Grows parameters() and gradients() to `total` floats for model emulation (core/model/emulation.h), so
  // that the transport carries an emulated model's gradient. The padding is zero and stays zero: no layer
  // reads or writes it, and an optimizer over a zero gradient leaves it be. No-op unless total is larger.
  void padTo(size_t total);
  size_t inputDims() const { return input_dims_; }
  size_t numClasses() const { return classes_; }
  size_t maxBatch() const { return max_batch_; }

  // Re-draws every parameter from `seed` (PyTorch's default initialisation for each layer kind, through
  // core/data/random.h) and zeroes the gradients.
  virtual void initialize(uint64_t seed) = 0;

  // One forward and backward pass over n = labels.size() samples (inputs: n x inputDims(), row-major).
  // InvalidArgument if n is 0 or above maxBatch(), the input size disagrees, or a label is out of range.
  Result<float> computeGradients(std::span<const float> inputs, std::span<const uint8_t> labels);

  // Mean loss and accuracy of the current parameters over a whole dataset, in chunks.
  // InvalidArgument if the dataset's dims or classes disagree with the model, or it is empty.
  Result<EvalResult> evaluate(const data::Dataset& dataset);

  // Floating-point operations of the GEMMs (and convolutions as GEMMs) that one computeGradients call over
  // `batch` samples executes: 2*M*N*K for each forward, weight-gradient and input-gradient product (the first
  // layer's input needs no gradient).
  virtual double flopsPerStep(size_t batch) const = 0;

 protected:
  Model(size_t input_dims, size_t classes, size_t max_batch, size_t num_parameters);
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;

  // Forward pass over n <= chunkSize() samples; returns their logits (n x classes, row-major), valid until
  // the next call.
  virtual const float* logits(const float* inputs, size_t n) = 0;
  // Backward pass right after logits(inputs, n): d_logits (n x classes) is d(loss)/d(logits). Writes the
  // parameter gradients into gradients(), or adds them to it when `accumulate` (a later chunk of a batch).
  virtual void backward(const float* inputs, const float* d_logits, size_t n, bool accumulate) = 0;
  // The most samples logits() takes at once; computeGradients and evaluate split larger batches.
  virtual size_t chunkSize() const = 0;

  std::vector<float> params_;
  std::vector<float> grads_;

 private:
  Status checkBatch(std::span<const float> inputs, std::span<const uint8_t> labels) const;

  size_t real_parameters_;
  size_t input_dims_;
  size_t classes_;
  size_t max_batch_;
  std::vector<float> d_logits_;    // chunkSize() x classes
  std::vector<float> eval_input_;  // evaluate(): one chunk of the dataset as floats
};

// A model of `kind` for inputs of layers.front() dims and layers.back() classes. For kMlp `layers` are all
// the layer sizes; the convolutional kinds take exactly {dims, classes}, dims a square side * side with the
// side a multiple of 4 and at least 8. InvalidArgument says which constraint failed.
Result<std::unique_ptr<Model>> create(Kind kind, const std::vector<size_t>& layers, size_t max_batch);

}  // namespace chaosbed::model
