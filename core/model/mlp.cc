#include "core/model/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/data/random.h"

namespace chaosbed::model {
namespace {

// z[i][j] = max(z[i][j] + b[j], 0): the bias add and the ReLU in one pass over the GEMM's output.
void biasRelu(float* z, const float* b, size_t n, size_t width) {
  for (size_t i = 0; i < n; ++i) {
    float* row = z + i * width;
    for (size_t j = 0; j < width; ++j) row[j] = std::max(row[j] + b[j], 0.0f);
  }
}

void biasAdd(float* z, const float* b, size_t n, size_t width) {
  for (size_t i = 0; i < n; ++i) {
    float* row = z + i * width;
    for (size_t j = 0; j < width; ++j) row[j] += b[j];
  }
}

}  // namespace

std::vector<size_t> defaultLayers() { return {784, 256, 128, 10}; }

Result<std::vector<size_t>> parseLayers(std::string_view text) {
  std::vector<size_t> layers;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string_view item = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    size_t value = 0;
    bool ok = !item.empty() && item.size() <= 9;
    for (char c : item) {
      if (c < '0' || c > '9') ok = false;
      value = value * 10 + static_cast<size_t>(c - '0');
    }
    if (!ok || value == 0) {
      return Status::invalidArgument("layers \"" + std::string(text) + "\": entry " + std::to_string(layers.size() + 1) +
                                     " (\"" + std::string(item) + "\") is not a positive integer");
    }
    layers.push_back(value);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (layers.size() < 2)
    return Status::invalidArgument("layers \"" + std::string(text) + "\": need at least an input and an output size");
  return layers;
}

Result<Mlp> Mlp::create(std::vector<size_t> layers, size_t max_batch) {
  if (layers.size() < 2) return Status::invalidArgument("Mlp: need at least an input and an output layer");
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i] == 0) return Status::invalidArgument("Mlp: layer " + std::to_string(i) + " has size 0");
  if (layers.back() > 256)
    return Status::invalidArgument("Mlp: " + std::to_string(layers.back()) + " classes; labels are bytes, at most 256");
  if (max_batch == 0) return Status::invalidArgument("Mlp: max_batch must be positive");
  size_t count = 0;
  for (size_t l = 0; l + 1 < layers.size(); ++l) count += layers[l] * layers[l + 1] + layers[l + 1];
  return Mlp(std::move(layers), max_batch, count);
}

Mlp::Mlp(std::vector<size_t> layers, size_t max_batch, size_t num_parameters)
    : Model(layers.front(), layers.back(), max_batch, num_parameters), layers_(std::move(layers)) {
  size_t offset = 0;
  size_t widest = 0;
  for (size_t l = 0; l + 1 < layers_.size(); ++l) {
    LayerSlice s;
    s.in = layers_[l];
    s.out = layers_[l + 1];
    s.weight_offset = offset;
    s.bias_offset = offset + s.in * s.out;
    offset = s.bias_offset + s.out;
    layout_.push_back(s);
    activations_.emplace_back(max_batch * s.out);
    widest = std::max(widest, s.out);
  }
  delta_.resize(max_batch * widest);
  delta_prev_.resize(max_batch * widest);
  initialize(0);
}

void Mlp::initialize(uint64_t seed) {
  data::Rng rng(data::mixSeed(seed, 0x1417));
  for (const LayerSlice& s : layout_) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(s.in));
    float* p = params_.data() + s.weight_offset;
    for (size_t i = 0; i < s.in * s.out + s.out; ++i) p[i] = (2.0f * data::uniformFloat(rng) - 1.0f) * bound;
  }
  std::fill(grads_.begin(), grads_.end(), 0.0f);
}

const float* Mlp::logits(const float* inputs, size_t n) {
  const float* a = inputs;
  for (size_t l = 0; l < layout_.size(); ++l) {
    const LayerSlice& s = layout_[l];
    float* z = activations_[l].data();
    // z (n x out) = a (n x in) * W^T (in x out)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(s.out),
                static_cast<int>(s.in), 1.0f, a, static_cast<int>(s.in), params_.data() + s.weight_offset,
                static_cast<int>(s.in), 0.0f, z, static_cast<int>(s.out));
    if (l + 1 < layout_.size()) {
      biasRelu(z, params_.data() + s.bias_offset, n, s.out);
    } else {
      biasAdd(z, params_.data() + s.bias_offset, n, s.out);
    }
    a = z;
  }
  return a;
}

void Mlp::backward(const float* inputs, const float* d_logits, size_t n, bool accumulate) {
  const float beta = accumulate ? 1.0f : 0.0f;
  std::copy_n(d_logits, n * numClasses(), delta_.data());
  for (size_t l = layout_.size(); l-- > 0;) {
    const LayerSlice& s = layout_[l];
    const float* a_in = l == 0 ? inputs : activations_[l - 1].data();
    // dW (out x in) = delta^T (out x n) * a_in (n x in)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(s.out), static_cast<int>(s.in),
                static_cast<int>(n), 1.0f, delta_.data(), static_cast<int>(s.out), a_in, static_cast<int>(s.in), beta,
                grads_.data() + s.weight_offset, static_cast<int>(s.in));
    // db = column sums of delta
    float* db = grads_.data() + s.bias_offset;
    if (!accumulate) std::fill_n(db, s.out, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      const float* d = delta_.data() + i * s.out;
      for (size_t j = 0; j < s.out; ++j) db[j] += d[j];
    }
    if (l == 0) break;
    // delta_prev (n x in) = delta (n x out) * W (out x in), then masked by the ReLU's derivative.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(s.in),
                static_cast<int>(s.out), 1.0f, delta_.data(), static_cast<int>(s.out), params_.data() + s.weight_offset,
                static_cast<int>(s.in), 0.0f, delta_prev_.data(), static_cast<int>(s.in));
    const float* a = activations_[l - 1].data();
    float* dp = delta_prev_.data();
    for (size_t k = 0; k < n * s.in; ++k) dp[k] = a[k] > 0.0f ? dp[k] : 0.0f;
    delta_.swap(delta_prev_);
  }
}

double Mlp::flopsPerStep(size_t batch) const {
  double flops = 0;
  for (size_t l = 0; l < layout_.size(); ++l) {
    const double mnk = 2.0 * static_cast<double>(batch) * static_cast<double>(layout_[l].in) *
                       static_cast<double>(layout_[l].out);
    flops += (l == 0 ? 2 : 3) * mnk;
  }
  return flops;
}

}  // namespace chaosbed::model
