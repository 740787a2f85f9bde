#include "core/data/random.h"

#include <cmath>
#include <numbers>
#include <utility>

#include "transports/base/random.h"

namespace chaosbed::data {
namespace {

uint64_t splitMix(uint64_t x) { return mix64(x + 0x9e3779b97f4a7c15ULL); }

}  // namespace

uint64_t mixSeed(uint64_t a, uint64_t b, uint64_t c) { return splitMix(splitMix(splitMix(a) ^ b) ^ c); }

float uniformFloat(Rng& rng) { return static_cast<float>(rng() >> 40) * 0x1.0p-24f; }

uint64_t uniformBelow(Rng& rng, uint64_t bound) {
  // Reject the top partial copy of [0, bound) so that every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % bound;
}

float standardNormal(Rng& rng) {
  // 1 - u lies in (0, 1], so the logarithm is finite.
  const double u1 = 1.0 - uniformFloat(rng);
  const double u2 = uniformFloat(rng);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

void shuffle(std::span<uint32_t> values, Rng& rng) {
  for (size_t i = values.size(); i > 1; --i) std::swap(values[i - 1], values[uniformBelow(rng, i)]);
}

}  // namespace chaosbed::data
