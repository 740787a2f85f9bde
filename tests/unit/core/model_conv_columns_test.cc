// im2col and col2im against their definitions, on every small shape (maps smaller than the kernel
// included), written out the slow way here.

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/model/conv_columns.h"

namespace chaosbed::model {
namespace {

struct Case {
  Shape s;
  size_t k;
  ImageBlock block;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (size_t c : {1, 3})
    for (size_t h : {1, 2, 3, 5, 7, 28})
      for (size_t w : {1, 2, 4, 7, 28})
        for (size_t k : {1, 3, 5, 7}) out.push_back({{c, h, w}, k, {5, 1, 3}});  // images 1..3 of 5
  return out;
}

std::vector<float> randomFloats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The definition: col[(ci*k + ki)*k + kj][(b*h + oh)*w + ow] = x[ci][first + b][oh + ki - k/2][ow + kj - k/2].
std::vector<float> naiveColumns(const std::vector<float>& x, const Case& t) {
  const auto [c, h, w] = t.s;
  const long half = long(t.k / 2);
  std::vector<float> col(c * t.k * t.k * t.block.count * h * w);
  for (size_t ci = 0; ci < c; ++ci)
    for (size_t ki = 0; ki < t.k; ++ki)
      for (size_t kj = 0; kj < t.k; ++kj)
        for (size_t b = 0; b < t.block.count; ++b)
          for (size_t oh = 0; oh < h; ++oh)
            for (size_t ow = 0; ow < w; ++ow) {
              const long ih = long(oh + ki) - half, iw = long(ow + kj) - half;
              const bool inside = ih >= 0 && iw >= 0 && ih < long(h) && iw < long(w);
              col[(((ci * t.k + ki) * t.k + kj) * t.block.count + b) * h * w + oh * w + ow] =
                  inside ? x[((ci * t.block.n + t.block.first + b) * h + size_t(ih)) * w + size_t(iw)] : 0.0f;
            }
  return col;
}

TEST(ConvColumns, Im2colIsItsDefinitionOnEveryShape) {
  std::mt19937 rng(7);
  for (const Case& t : cases()) {
    const std::vector<float> x = randomFloats(t.s.c * t.block.n * t.s.h * t.s.w, rng);
    std::vector<float> col(t.s.c * t.k * t.k * t.block.count * t.s.h * t.s.w, 42.0f);  // no stale value survives
    im2col(x.data(), t.s, t.block, t.k, col.data());
    EXPECT_EQ(col, naiveColumns(x, t)) << "c " << t.s.c << " h " << t.s.h << " w " << t.s.w << " k " << t.k;
  }
}

// <im2col(x), d> = <x, col2im(d)> for every x and d is what makes col2im the gradient of im2col; the
// other images of the chunk are left as they were.
TEST(ConvColumns, Col2imIsTheAdjointAndTouchesOnlyItsImages) {
  std::mt19937 rng(11);
  for (const Case& t : cases()) {
    const size_t plane = t.s.h * t.s.w;
    const std::vector<float> x = randomFloats(t.s.c * t.block.n * plane, rng);
    const std::vector<float> columns = naiveColumns(x, t);
    std::vector<float> d = randomFloats(columns.size(), rng);
    double left = 0;
    for (size_t j = 0; j < columns.size(); ++j) left += double(columns[j]) * d[j];
    std::vector<float> dx(x.size(), 42.0f);
    col2im(d.data(), t.s, t.block, t.k, dx.data());
    double right = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      const size_t image = (j / plane) % t.block.n;
      if (image >= t.block.first && image < t.block.first + t.block.count) {
        right += double(x[j]) * dx[j];
      } else {
        ASSERT_EQ(dx[j], 42.0f) << "col2im wrote into image " << image << " outside its block";
      }
    }
    EXPECT_NEAR(left, right, 1e-4 * (1 + std::abs(left))) << "c " << t.s.c << " h " << t.s.h << " w " << t.s.w
                                                         << " k " << t.k;
  }
}

}  // namespace
}  // namespace chaosbed::model
