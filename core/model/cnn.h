#pragma once
// Cnn: convolutional nets for square one-channel images (Fashion-MNIST's 28 x 28), on OpenBLAS.
//
//   kLeNet     conv5x5(1->8)+ReLU, maxpool 2, conv5x5(8->16)+ReLU, maxpool 2, linear(16*(s/4)^2 -> 128)+ReLU,
//              linear(128 -> classes): LeNet-5's shape with ReLU and max-pooling (105k parameters for 28 x 28).
//   kResidual  conv3x3(1->16)+ReLU, maxpool 2, residual block(16), maxpool 2, residual block(16),
//              linear(16*(s/4)^2 -> classes); a block is y = ReLU(x + conv3x3(ReLU(conv3x3(x)))) (17k parameters).
//
// Every convolution is "same" (stride 1, zero padding k/2) and runs as GEMMs over blocks of images: feature
// maps are kept channel-major over the chunk (C x N x H x W), im2col lays a block of images out as a
// (C*k*k) x (B*H*W) matrix small enough to stay in L2, and the weights (Cout x C*k*k) multiply it; backward
// builds the block's columns again and runs two more GEMMs (the weights' gradient, and the columns' gradient
// folded back by col2im). A one-channel image batch is already in that layout, so the input is never
// transposed. Batches are processed in chunks of at most 64 samples, which bounds the workspace whatever the
// batch (about 7 MB for kLeNet, by its buffer sizes); the gradient is the same.
//
// Parameter layout (see core/model/model.h for the contract): layer by layer, each layer's weights (row-major
// Cout x Cin x k x k, as PyTorch's nn.Conv2d; out x in for linear layers) and then its biases.

#include <cstddef>
#include <memory>
#include <vector>

#include "core/model/model.h"

namespace chaosbed::model {

class Cnn final : public Model {
 public:
  enum class Arch { kLeNet, kResidual };

  // InvalidArgument unless input_dims is side * side with side a multiple of 4 and at least 8, classes is in
  // 2..256 and max_batch is positive. Parameters start initialised from seed 0.
  static Result<Cnn> create(Arch arch, size_t input_dims, size_t classes, size_t max_batch);
  Cnn(Cnn&&) noexcept;
  Cnn& operator=(Cnn&&) noexcept;
  ~Cnn() override;

  // PyTorch's default for nn.Conv2d and nn.Linear: weights and biases uniform in +-1/sqrt(fan_in).
  void initialize(uint64_t seed) override;
  double flopsPerStep(size_t batch) const override;
  // Where each layer's parameters begin in parameters(), for the layers that have any, in order.
  std::vector<size_t> layerOffsets() const;

  class Layer;  // one stage of the net; defined in cnn.cc

 private:
  Cnn(std::vector<std::unique_ptr<Layer>> layers, size_t input_dims, size_t classes, size_t max_batch,
      size_t num_parameters);
  const float* logits(const float* inputs, size_t n) override;
  void backward(const float* inputs, const float* d_logits, size_t n, bool accumulate) override;
  size_t chunkSize() const override;

  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<float> dy_, dx_;  // back-propagated errors, ping-ponged between layers
};

}  // namespace chaosbed::model
