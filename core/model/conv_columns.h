#pragma once
// The column form of a "same" convolution (stride 1, zero padding k/2) that turns it into one GEMM, and
// its adjoint. Feature maps are channel-major over a chunk of n images: plane ci of image img starts at
// x + (ci * n + img) * h * w.

#include <cstddef>

namespace chaosbed::model {

struct Shape {
  size_t c = 0, h = 0, w = 0;
  size_t size() const { return c * h * w; }
};

// Images [first, first + count) of a chunk of n.
struct ImageBlock {
  size_t n, first, count;
};

// col[(ci*k + ki)*k + kj][(b*h + oh)*w + ow] = x[ci][first + b][oh + ki - k/2][ow + kj - k/2], zero outside
// the image; col holds c*k*k rows of count*h*w floats.
void im2col(const float* x, Shape s, ImageBlock block, size_t k, float* col);

// The adjoint of im2col: the block's images in x become the sum of every column entry copied from them
// (the rest of x is left alone). Overwrites the entries of `col` that read outside the image with zeros.
void col2im(float* col, Shape s, ImageBlock block, size_t k, float* x);

}  // namespace chaosbed::model
