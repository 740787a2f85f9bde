#include "core/model/conv_columns.h"

#include <algorithm>
#include <cstring>

namespace chaosbed::model {

namespace {

// One tap (ki, kj) of a "same" convolution moves an image by (di, dj) = (ki - k/2, kj - k/2): output row oh
// reads input row oh + di, column ow reads ow + dj. The output rows whose input row is inside the image form
// one band, contiguous in both images; one shifted copy (or add) of the whole band does the work of a call
// per row, and leaves |dj| columns of each band row wrapped in from the neighbouring row, which the caller
// zeroes. Per-row copies cost a library call for every 28 floats (a quarter of the LeNet step).
struct Tap {
  ptrdiff_t di, dj;
  size_t row_lo, row_hi;  // the band: output rows [row_lo, row_hi)
  Tap(Shape s, size_t k, size_t ki, size_t kj)
      : di(ptrdiff_t(ki) - ptrdiff_t(k / 2)), dj(ptrdiff_t(kj) - ptrdiff_t(k / 2)),
        row_lo(size_t(std::clamp<ptrdiff_t>(-di, 0, ptrdiff_t(s.h)))),
        row_hi(size_t(std::clamp<ptrdiff_t>(ptrdiff_t(s.h) - di, 0, ptrdiff_t(s.h)))) {}
  // Zero when no output pixel of this tap reads inside the image (a map smaller than the kernel).
  size_t bandFloats(Shape s) const {
    return row_hi > row_lo && size_t(dj < 0 ? -dj : dj) < s.w ? (row_hi - row_lo) * s.w : 0;
  }
  // The wrapped columns of each band row: the last dj (dj > 0) or the first -dj (dj < 0).
  void zeroWrapped(float* band, Shape s) const {
    const size_t cols = size_t(dj < 0 ? -dj : dj), first = dj > 0 ? s.w - cols : 0;
    for (size_t c = 0; c < cols; ++c)  // strided stores: a loop the compiler does not turn into calls
      for (size_t r = 0; r < row_hi - row_lo; ++r) band[r * s.w + first + c] = 0.0f;
  }
};

}  // namespace

void im2col(const float* x, Shape s, ImageBlock block, size_t k, float* col) {
  const size_t hw = s.h * s.w;
  for (size_t ci = 0; ci < s.c; ++ci) {
    const float* src_c = x + (ci * block.n + block.first) * hw;
    for (size_t ki = 0; ki < k; ++ki) {
      for (size_t kj = 0; kj < k; ++kj) {
        const Tap tap(s, k, ki, kj);
        const size_t len = tap.bandFloats(s);
        float* row = col + ((ci * k + ki) * k + kj) * block.count * hw;
        for (size_t b = 0; b < block.count; ++b) {
          float* dst = row + b * hw;
          std::fill_n(dst, tap.row_lo * s.w, 0.0f);
          std::fill(dst + tap.row_lo * s.w + len, dst + hw, 0.0f);
          if (len == 0) continue;
          float* band = dst + tap.row_lo * s.w;
          // band[i] = image[(row_lo + di) * w + dj + i], for the i whose source is inside the image's plane.
          const float* from = src_c + b * hw + ptrdiff_t(tap.row_lo * s.w) + tap.di * ptrdiff_t(s.w) + tap.dj;
          const size_t shift = size_t(tap.dj < 0 ? -tap.dj : tap.dj);
          if (tap.dj >= 0) {
            std::memcpy(band, from, (len - shift) * sizeof(float));
          } else {
            std::memcpy(band + shift, from + shift, (len - shift) * sizeof(float));
          }
          tap.zeroWrapped(band, s);
        }
      }
    }
  }
}

void col2im(float* col, Shape s, ImageBlock block, size_t k, float* x) {
  const size_t hw = s.h * s.w;
  for (size_t ci = 0; ci < s.c; ++ci) std::fill_n(x + (ci * block.n + block.first) * hw, block.count * hw, 0.0f);
  for (size_t ci = 0; ci < s.c; ++ci) {
    float* dst_c = x + (ci * block.n + block.first) * hw;
    for (size_t ki = 0; ki < k; ++ki) {
      for (size_t kj = 0; kj < k; ++kj) {
        const Tap tap(s, k, ki, kj);
        const size_t len = tap.bandFloats(s);
        if (len == 0) continue;
        const size_t shift = size_t(tap.dj < 0 ? -tap.dj : tap.dj);
        float* row = col + ((ci * k + ki) * k + kj) * block.count * hw;
        for (size_t b = 0; b < block.count; ++b) {
          float* band = row + b * hw + tap.row_lo * s.w;
          tap.zeroWrapped(band, s);  // so that the band adds nothing where it wrapped
          float* to = dst_c + b * hw + ptrdiff_t(tap.row_lo * s.w) + tap.di * ptrdiff_t(s.w) + tap.dj;
          const size_t lo = tap.dj >= 0 ? 0 : shift;
          for (size_t j = lo; j < lo + len - shift; ++j) to[j] += band[j];
        }
      }
    }
  }
}

}  // namespace chaosbed::model
