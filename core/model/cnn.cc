#include "core/model/cnn.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/data/random.h"
#include "core/model/conv_columns.h"

namespace chaosbed::model {

namespace {

constexpr size_t kChunk = 64;  // samples per forward/backward pass (see cnn.h)
// Column-matrix floats per convolution GEMM (96 KB: with the GEMM's packed copies it stays in L2). Measured on
// this machine's 1 MB L2 (LeNet step, samples/s): 4-24k floats 6.2-7.3k, 96k 5.7-6.5k, the whole chunk 4.3-4.5k.
constexpr size_t kBlockFloats = 24 * 1024;


int i(size_t v) { return static_cast<int>(v); }

void drawUniform(float* p, size_t count, float bound, data::Rng& rng) {
  for (size_t k = 0; k < count; ++k) p[k] = (2.0f * data::uniformFloat(rng) - 1.0f) * bound;
}

// The sum of p[0..n), in 16 running sums: one running sum is a chain of dependent scalar adds (the compiler
// may not reorder a float sum), which made the bias gradients half of a convolution's backward pass.
float sumOf(const float* p, size_t n) {
  float lanes[16] = {};
  size_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (size_t l = 0; l < 16; ++l) lanes[l] += p[j + l];
  float sum = 0;
  for (; j < n; ++j) sum += p[j];
  for (float lane : lanes) sum += lane;
  return sum;
}

// dy = 0 where the ReLU's output y was 0 (its derivative), in place.
void reluMask(const float* y, float* dy, size_t count) {
  for (size_t k = 0; k < count; ++k) dy[k] = y[k] > 0.0f ? dy[k] : 0.0f;
}

}  // namespace

// One stage of the net. Its input and output are `in` and `out` per sample; feature maps are channel-major
// over the chunk (C x N x H x W), flat features sample-major (N x F). forward keeps what backward needs.
class Cnn::Layer {
 public:
  Layer(Shape in, Shape out) : in(in), out(out), y(kChunk * out.size()) {}
  virtual ~Layer() = default;
  virtual size_t numParameters() const { return 0; }
  virtual void initialize(float* /*params*/, data::Rng& /*rng*/) const {}
  // y = f(x) for n samples.
  virtual void forward(const float* params, const float* x, size_t n) = 0;
  // Given dy = d(loss)/dy (which it may overwrite), writes dx when it is not null, and writes (or with
  // `accumulate` adds) the parameter gradients at grads.
  virtual void backward(const float* params, float* grads, const float* x, float* dy, float* dx, size_t n,
                        bool accumulate) = 0;
  // GEMM flops of one forward + backward over n samples; `first`: no input gradient.
  virtual double flops(size_t /*n*/, bool /*first*/) const { return 0; }

  const Shape in, out;
  size_t offset = 0;     // of this layer's parameters in the model's buffer
  std::vector<float> y;  // the output of the last forward
};

namespace {

using Layer = Cnn::Layer;

// A "same" convolution (stride 1, zero padding k/2), optionally followed by a ReLU. The chunk's images go
// through the GEMMs a few at a time, so that their columns (im2col) stay in the L2 cache: one matrix of the
// whole chunk's columns (10 MB for LeNet's second convolution) made every GEMM wait on memory to pack it.
class Conv final : public Layer {
 public:
  Conv(Shape in, size_t out_channels, size_t k, bool relu)
      : Layer(in, {out_channels, in.h, in.w}), k_(k), relu_(relu),
        block_images_(std::clamp<size_t>(kBlockFloats / (in.c * k * k * in.h * in.w), 1, kChunk)),
        col_(block_images_ * in.h * in.w * in.c * k * k) {}

  size_t patch() const { return in.c * k_ * k_; }
  size_t numParameters() const override { return out.c * patch() + out.c; }
  void initialize(float* params, data::Rng& rng) const override {
    drawUniform(params, numParameters(), 1.0f / std::sqrt(float(patch())), rng);
  }

  void forward(const float* params, const float* x, size_t n) override {
    const size_t hw = in.h * in.w;
    const size_t cols = n * hw;
    for (size_t first = 0; first < n; first += block_images_) {
      const ImageBlock block{n, first, std::min(block_images_, n - first)};
      im2col(x, in, block, k_, col_.data());
      // y[:, block] (Cout x B*H*W) = W (Cout x C*k*k) * col (C*k*k x B*H*W)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i(out.c), i(block.count * hw), i(patch()), 1.0f,
                  params, i(patch()), col_.data(), i(block.count * hw), 0.0f, y.data() + first * hw, i(cols));
    }
    const float* bias = params + out.c * patch();
    for (size_t o = 0; o < out.c; ++o) {
      float* row = y.data() + o * cols;
      const float b = bias[o];
      if (relu_) {
        for (size_t j = 0; j < cols; ++j) row[j] = std::max(row[j] + b, 0.0f);
      } else {
        for (size_t j = 0; j < cols; ++j) row[j] += b;
      }
    }
  }

  void backward(const float* params, float* grads, const float* x, float* dy, float* dx, size_t n,
                bool accumulate) override {
    const size_t hw = in.h * in.w;
    const size_t cols = n * hw;
    if (relu_) reluMask(y.data(), dy, out.c * cols);
    float* db = grads + out.c * patch();
    for (size_t o = 0; o < out.c; ++o) {
      const float sum = sumOf(dy + o * cols, cols);
      db[o] = accumulate ? db[o] + sum : sum;
    }
    for (size_t first = 0; first < n; first += block_images_) {
      const ImageBlock block{n, first, std::min(block_images_, n - first)};
      const size_t block_cols = block.count * hw;
      const float* dy_block = dy + first * hw;
      im2col(x, in, block, k_, col_.data());  // again: cheaper than keeping the chunk's columns
      // dW (Cout x C*k*k) += dy[:, block] * col^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i(out.c), i(patch()), i(block_cols), 1.0f, dy_block,
                  i(cols), col_.data(), i(block_cols), accumulate || first > 0 ? 1.0f : 0.0f, grads, i(patch()));
      if (dx == nullptr) continue;
      // dcol (C*k*k x B*H*W) = W^T * dy[:, block], folded back onto the block's input images by col2im.
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i(patch()), i(block_cols), i(out.c), 1.0f, params,
                  i(patch()), dy_block, i(cols), 0.0f, col_.data(), i(block_cols));
      col2im(col_.data(), in, block, k_, dx);
    }
  }

  double flops(size_t n, bool first) const override {
    const double mnk = 2.0 * double(out.c) * double(patch()) * double(n * in.h * in.w);
    return (first ? 2 : 3) * mnk;
  }

 private:
  const size_t k_;
  const bool relu_;
  const size_t block_images_;  // images per GEMM
  std::vector<float> col_;     // im2col of one block of images
};

// 2 x 2 max-pooling, stride 2; ties go to the first element in row-major order. Backward finds the winner
// again (the first element equal to the maximum) instead of storing its index: forward is then selects
// alone, which the compiler vectorizes.
class MaxPool final : public Layer {
 public:
  explicit MaxPool(Shape in) : Layer(in, {in.c, in.h / 2, in.w / 2}) {}

  void forward(const float* /*params*/, const float* x, size_t n) override {
    const size_t planes = in.c * n;
    for (size_t p = 0; p < planes; ++p) {
      const float* src = x + p * in.h * in.w;
      float* dst = y.data() + p * out.h * out.w;
      for (size_t oh = 0; oh < out.h; ++oh) {
        const float* r0 = src + 2 * oh * in.w;
        const float* r1 = r0 + in.w;
        float* row = dst + oh * out.w;
        for (size_t ow = 0; ow < out.w; ++ow) {
          // Replaced only by a strictly larger value: the first of equal maxima wins.
          float best = r0[2 * ow];
          best = r0[2 * ow + 1] > best ? r0[2 * ow + 1] : best;
          best = r1[2 * ow] > best ? r1[2 * ow] : best;
          best = r1[2 * ow + 1] > best ? r1[2 * ow + 1] : best;
          row[ow] = best;
        }
      }
    }
  }

  void backward(const float*, float*, const float* x, float* dy, float* dx, size_t n, bool) override {
    if (dx == nullptr) return;
    const size_t planes = in.c * n;
    // Every element of a window is written (the gradient or 0) with selects, not branches: which one won is
    // data-dependent, and a branch on it mispredicts. An odd last row or column belongs to no window.
    if (in.h % 2 != 0 || in.w % 2 != 0) std::fill_n(dx, planes * in.h * in.w, 0.0f);
    for (size_t p = 0; p < planes; ++p) {
      const float* src = x + p * in.h * in.w;
      float* dst = dx + p * in.h * in.w;
      const float* pooled = y.data() + p * out.h * out.w;
      const float* grad = dy + p * out.h * out.w;
      for (size_t oh = 0; oh < out.h; ++oh) {
        const float* r0 = src + 2 * oh * in.w;
        const float* r1 = r0 + in.w;
        float* d0 = dst + 2 * oh * in.w;
        float* d1 = d0 + in.w;
        for (size_t ow = 0; ow < out.w; ++ow) {
          const float best = pooled[oh * out.w + ow], g = grad[oh * out.w + ow];
          // The first element equal to the maximum wins; none is only when the first element is a NaN.
          const bool e1 = r0[2 * ow + 1] == best, e2 = r1[2 * ow] == best, e3 = r1[2 * ow + 1] == best;
          // Bitwise, not short-circuit, operators: no branch.
          const bool w0 = (r0[2 * ow] == best) | !(e1 | e2 | e3);
          const bool w1 = !w0 & e1, w2 = !w0 & !e1 & e2, w3 = !w0 & !e1 & !e2;
          d0[2 * ow] = w0 ? g : 0.0f;
          d0[2 * ow + 1] = w1 ? g : 0.0f;
          d1[2 * ow] = w2 ? g : 0.0f;
          d1[2 * ow + 1] = w3 ? g : 0.0f;
        }
      }
    }
  }
};

// y = ReLU(x + b(a(x))), a = conv3x3 + ReLU, b = conv3x3, both keeping the channel count.
class Residual final : public Layer {
 public:
  explicit Residual(Shape in) : Layer(in, in), a_(in, in.c, 3, true), b_(in, in.c, 3, false), dt_(kChunk * in.size()) {}

  size_t numParameters() const override { return a_.numParameters() + b_.numParameters(); }
  void initialize(float* params, data::Rng& rng) const override {
    a_.initialize(params, rng);
    b_.initialize(params + a_.numParameters(), rng);
  }

  void forward(const float* params, const float* x, size_t n) override {
    a_.forward(params, x, n);
    b_.forward(params + a_.numParameters(), a_.y.data(), n);
    const size_t count = n * in.size();
    for (size_t k = 0; k < count; ++k) y[k] = std::max(x[k] + b_.y[k], 0.0f);
  }

  void backward(const float* params, float* grads, const float* x, float* dy, float* dx, size_t n,
                bool accumulate) override {
    const size_t count = n * in.size();
    reluMask(y.data(), dy, count);  // now d(loss)/d(x + b)
    b_.backward(params + a_.numParameters(), grads + a_.numParameters(), a_.y.data(), dy, dt_.data(), n, accumulate);
    a_.backward(params, grads, x, dt_.data(), dx, n, accumulate);
    if (dx != nullptr)
      for (size_t k = 0; k < count; ++k) dx[k] += dy[k];  // the identity path
  }

  double flops(size_t n, bool first) const override { return a_.flops(n, first) + b_.flops(n, false); }

 private:
  Conv a_, b_;
  std::vector<float> dt_;
};

// Channel-major maps (C x N x H x W) to sample-major features (N x C*H*W), PyTorch's flatten order.
class Flatten final : public Layer {
 public:
  explicit Flatten(Shape in) : Layer(in, {in.size(), 1, 1}) {}

  void forward(const float*, const float* x, size_t n) override {
    const size_t hw = in.h * in.w;
    for (size_t c = 0; c < in.c; ++c)
      for (size_t img = 0; img < n; ++img)
        std::memcpy(y.data() + img * out.c + c * hw, x + (c * n + img) * hw, hw * sizeof(float));
  }

  void backward(const float*, float*, const float*, float* dy, float* dx, size_t n, bool) override {
    if (dx == nullptr) return;
    const size_t hw = in.h * in.w;
    for (size_t c = 0; c < in.c; ++c)
      for (size_t img = 0; img < n; ++img)
        std::memcpy(dx + (c * n + img) * hw, dy + img * out.c + c * hw, hw * sizeof(float));
  }
};

// A fully connected layer on sample-major features, optionally followed by a ReLU.
class Linear final : public Layer {
 public:
  Linear(size_t in_features, size_t out_features, bool relu)
      : Layer({in_features, 1, 1}, {out_features, 1, 1}), relu_(relu) {}

  size_t numParameters() const override { return out.c * in.c + out.c; }
  void initialize(float* params, data::Rng& rng) const override {
    drawUniform(params, numParameters(), 1.0f / std::sqrt(float(in.c)), rng);
  }

  void forward(const float* params, const float* x, size_t n) override {
    // y (n x out) = x (n x in) * W^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i(n), i(out.c), i(in.c), 1.0f, x, i(in.c), params, i(in.c),
                0.0f, y.data(), i(out.c));
    const float* bias = params + out.c * in.c;
    for (size_t r = 0; r < n; ++r) {
      float* row = y.data() + r * out.c;
      for (size_t j = 0; j < out.c; ++j) row[j] = relu_ ? std::max(row[j] + bias[j], 0.0f) : row[j] + bias[j];
    }
  }

  void backward(const float* params, float* grads, const float* x, float* dy, float* dx, size_t n,
                bool accumulate) override {
    if (relu_) reluMask(y.data(), dy, n * out.c);
    // dW (out x in) = dy^T * x
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i(out.c), i(in.c), i(n), 1.0f, dy, i(out.c), x, i(in.c),
                accumulate ? 1.0f : 0.0f, grads, i(in.c));
    float* db = grads + out.c * in.c;
    if (!accumulate) std::fill_n(db, out.c, 0.0f);
    for (size_t r = 0; r < n; ++r)
      for (size_t j = 0; j < out.c; ++j) db[j] += dy[r * out.c + j];
    if (dx == nullptr) return;
    // dx (n x in) = dy * W
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i(n), i(in.c), i(out.c), 1.0f, dy, i(out.c), params,
                i(in.c), 0.0f, dx, i(in.c));
  }

  double flops(size_t n, bool first) const override {
    return (first ? 2 : 3) * 2.0 * double(n) * double(in.c) * double(out.c);
  }

 private:
  const bool relu_;
};

}  // namespace

Result<Cnn> Cnn::create(Arch arch, size_t input_dims, size_t classes, size_t max_batch) {
  size_t side = 0;
  while ((side + 1) * (side + 1) <= input_dims) ++side;
  if (side * side != input_dims || side % 4 != 0 || side < 8) {
    return Status::invalidArgument("cnn: takes square one-channel images with a side that is a multiple of 4 and "
                                   "at least 8 (784 = 28 x 28 for Fashion-MNIST); " +
                                   std::to_string(input_dims) + " input dims are not");
  }
  if (classes < 2 || classes > 256)
    return Status::invalidArgument("cnn: " + std::to_string(classes) + " classes; must be 2..256 (labels are bytes)");
  if (max_batch == 0) return Status::invalidArgument("cnn: max_batch must be positive");

  std::vector<std::unique_ptr<Layer>> layers;
  auto add = [&layers](std::unique_ptr<Layer> layer) {
    layers.push_back(std::move(layer));
    return layers.back()->out;
  };
  Shape s{1, side, side};
  if (arch == Arch::kLeNet) {
    s = add(std::make_unique<Conv>(s, 8, 5, true));
    s = add(std::make_unique<MaxPool>(s));
    s = add(std::make_unique<Conv>(s, 16, 5, true));
    s = add(std::make_unique<MaxPool>(s));
    s = add(std::make_unique<Flatten>(s));
    s = add(std::make_unique<Linear>(s.c, 128, true));
    s = add(std::make_unique<Linear>(s.c, classes, false));
  } else {
    s = add(std::make_unique<Conv>(s, 16, 3, true));
    s = add(std::make_unique<MaxPool>(s));
    s = add(std::make_unique<Residual>(s));
    s = add(std::make_unique<MaxPool>(s));
    s = add(std::make_unique<Residual>(s));
    s = add(std::make_unique<Flatten>(s));
    s = add(std::make_unique<Linear>(s.c, classes, false));
  }
  size_t count = 0;
  for (auto& layer : layers) {
    layer->offset = count;
    count += layer->numParameters();
  }
  return Cnn(std::move(layers), input_dims, classes, max_batch, count);
}

Cnn::Cnn(std::vector<std::unique_ptr<Layer>> layers, size_t input_dims, size_t classes, size_t max_batch,
         size_t num_parameters)
    : Model(input_dims, classes, max_batch, num_parameters), layers_(std::move(layers)) {
  size_t widest = 0;
  for (const auto& layer : layers_) widest = std::max({widest, layer->in.size(), layer->out.size()});
  dy_.resize(kChunk * widest);
  dx_.resize(kChunk * widest);
  initialize(0);
}

Cnn::Cnn(Cnn&&) noexcept = default;
Cnn& Cnn::operator=(Cnn&&) noexcept = default;
Cnn::~Cnn() = default;

size_t Cnn::chunkSize() const { return std::min(kChunk, maxBatch()); }

void Cnn::initialize(uint64_t seed) {
  data::Rng rng(data::mixSeed(seed, 0xc22));
  for (const auto& layer : layers_) layer->initialize(params_.data() + layer->offset, rng);
  std::fill(grads_.begin(), grads_.end(), 0.0f);
}

const float* Cnn::logits(const float* inputs, size_t n) {
  const float* x = inputs;
  for (auto& layer : layers_) {
    layer->forward(params_.data() + layer->offset, x, n);
    x = layer->y.data();
  }
  return x;
}

void Cnn::backward(const float* inputs, const float* d_logits, size_t n, bool accumulate) {
  std::copy_n(d_logits, n * numClasses(), dy_.data());
  for (size_t l = layers_.size(); l-- > 0;) {
    Layer& layer = *layers_[l];
    const float* x = l == 0 ? inputs : layers_[l - 1]->y.data();
    layer.backward(params_.data() + layer.offset, grads_.data() + layer.offset, x, dy_.data(),
                   l == 0 ? nullptr : dx_.data(), n, accumulate);
    dy_.swap(dx_);
  }
}

std::vector<size_t> Cnn::layerOffsets() const {
  std::vector<size_t> offsets;
  for (const auto& layer : layers_)
    if (layer->numParameters() > 0) offsets.push_back(layer->offset);
  return offsets;
}

double Cnn::flopsPerStep(size_t batch) const {
  double flops = 0;
  for (size_t l = 0; l < layers_.size(); ++l) flops += layers_[l]->flops(batch, l == 0);
  return flops;
}

}  // namespace chaosbed::model
