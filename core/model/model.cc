#include "core/model/model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/model/cnn.h"
#include "core/model/mlp.h"

namespace chaosbed::model {
namespace {

// Log of the sum of exp over a row, computed stably (shifted by the row's max).
float logSumExp(const float* row, size_t width) {
  const float m = *std::max_element(row, row + width);
  float sum = 0;
  for (size_t j = 0; j < width; ++j) sum += std::exp(row[j] - m);
  return m + std::log(sum);
}

}  // namespace

std::string_view kindName(Kind kind) {
  switch (kind) {
    case Kind::kMlp: return "mlp";
    case Kind::kCnn: return "cnn";
    case Kind::kResnet: return "resnet";
  }
  return "?";
}

Result<Kind> parseKind(std::string_view name) {
  for (Kind k : {Kind::kMlp, Kind::kCnn, Kind::kResnet})
    if (name == kindName(k)) return k;
  return Status::invalidArgument("model kind '" + std::string(name) + "' is not one of mlp, cnn, resnet");
}

Model::Model(size_t input_dims, size_t classes, size_t max_batch, size_t num_parameters)
    : params_(num_parameters), grads_(num_parameters), real_parameters_(num_parameters), input_dims_(input_dims),
      classes_(classes), max_batch_(max_batch) {}

void Model::padTo(size_t total) {
  if (total <= params_.size()) return;
  params_.resize(total, 0.0f);
  grads_.resize(total, 0.0f);
}

Status Model::checkBatch(std::span<const float> inputs, std::span<const uint8_t> labels) const {
  const size_t n = labels.size();
  if (n == 0 || n > max_batch_) {
    return Status::invalidArgument("model: batch of " + std::to_string(n) + " samples; must be 1.." +
                                   std::to_string(max_batch_));
  }
  if (inputs.size() != n * input_dims_) {
    return Status::invalidArgument("model: " + std::to_string(inputs.size()) + " input floats for " +
                                   std::to_string(n) + " samples of " + std::to_string(input_dims_) + " dims");
  }
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] >= classes_) {
      return Status::invalidArgument("model: label " + std::to_string(labels[i]) + " of sample " + std::to_string(i) +
                                     " is not below " + std::to_string(classes_) + " classes");
    }
  }
  return Status::ok();
}

Result<float> Model::computeGradients(std::span<const float> inputs, std::span<const uint8_t> labels) {
  CHAOSBED_RETURN_IF_ERROR(checkBatch(inputs, labels));
  const size_t n = labels.size();
  const size_t chunk = chunkSize();
  d_logits_.resize(std::min(n, chunk) * classes_);  // no-op after the first step
  // Softmax cross-entropy: d(mean loss)/d(logits) = (softmax - onehot) / n, whatever the chunking.
  const float inv_n = 1.0f / static_cast<float>(n);
  double loss = 0;
  for (size_t start = 0; start < n; start += chunk) {
    const size_t m = std::min(chunk, n - start);
    const float* x = inputs.data() + start * input_dims_;
    const float* z = logits(x, m);
    for (size_t i = 0; i < m; ++i) {
      const float* row = z + i * classes_;
      const uint8_t y = labels[start + i];
      const float lse = logSumExp(row, classes_);
      loss += lse - row[y];
      float* d = d_logits_.data() + i * classes_;
      for (size_t j = 0; j < classes_; ++j) d[j] = std::exp(row[j] - lse) * inv_n;
      d[y] -= inv_n;
    }
    backward(x, d_logits_.data(), m, /*accumulate=*/start > 0);
  }
  return static_cast<float>(loss / static_cast<double>(n));
}

Result<EvalResult> Model::evaluate(const data::Dataset& dataset) {
  if (dataset.dims != input_dims_) {
    return Status::invalidArgument("evaluate: dataset has " + std::to_string(dataset.dims) + " dims, model expects " +
                                   std::to_string(input_dims_));
  }
  if (static_cast<size_t>(dataset.num_classes) > classes_) {
    return Status::invalidArgument("evaluate: dataset has " + std::to_string(dataset.num_classes) +
                                   " classes, model outputs " + std::to_string(classes_));
  }
  if (dataset.size() == 0) return Status::invalidArgument("evaluate: empty dataset");
  const size_t chunk = chunkSize();
  double loss = 0;
  size_t correct = 0;
  for (size_t start = 0; start < dataset.size(); start += chunk) {
    const size_t n = std::min(chunk, dataset.size() - start);
    eval_input_.resize(n * dataset.dims);
    CHAOSBED_RETURN_IF_ERROR(dataset.copySamples(start, n, eval_input_.data()));
    const float* z = logits(eval_input_.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const float* row = z + i * classes_;
      const uint8_t y = dataset.labels[start + i];
      loss += logSumExp(row, classes_) - row[y];
      // Ties go to the lowest index, as with argmax in PyTorch and NumPy.
      if (static_cast<size_t>(std::max_element(row, row + classes_) - row) == y) ++correct;
    }
  }
  EvalResult r;
  r.samples = dataset.size();
  r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  r.loss = loss / static_cast<double>(r.samples);
  return r;
}

Result<std::unique_ptr<Model>> create(Kind kind, const std::vector<size_t>& layers, size_t max_batch) {
  if (kind == Kind::kMlp) {
    CHAOSBED_ASSIGN_OR_RETURN(Mlp mlp, Mlp::create(layers, max_batch));
    return std::unique_ptr<Model>(std::make_unique<Mlp>(std::move(mlp)));
  }
  if (layers.size() != 2) {
    return Status::invalidArgument(std::string(kindName(kind)) +
                                   ": takes exactly the input dims and the number of classes, got " +
                                   std::to_string(layers.size()) + " sizes");
  }
  CHAOSBED_ASSIGN_OR_RETURN(Cnn cnn, Cnn::create(kind == Kind::kCnn ? Cnn::Arch::kLeNet : Cnn::Arch::kResidual,
                                                 layers[0], layers[1], max_batch));
  return std::unique_ptr<Model>(std::make_unique<Cnn>(std::move(cnn)));
}

}  // namespace chaosbed::model
