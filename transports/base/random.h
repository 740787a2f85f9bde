#pragma once
// Portable, seeded randomness: chaos schedules, bootstrap resampling, anything that must give the same draws
// from the same seed on every platform and standard library (a chaos plan is byte-identical across them).
// Training data order and initialisation keep their own engine (core/data/random.h, std::mt19937_64) so that
// a seed trains the model it always trained; they mix seeds with mix64 from here.
//
// Generator: SplitMix64 (Steele, Lea, Flood 2014): state += 0x9E3779B97F4A7C15, then the murmur3-style
// finaliser. Streams: streamFor(seed, a, b) mixes seed, a and b through the same finaliser, so fault i's
// stream depends only on (seed, i): adding a fault never reshuffles the others.
// Samplers are inverse-CDF transforms of uniform(): std:: distributions are implementation-defined and
// differ between libstdc++ and libc++. They use only log/exp/sqrt, which glibc rounds correctly enough that
// the printed plan (microsecond resolution) is identical across x86-64 and arm64.

#include <cstdint>
#include <vector>

namespace chaosbed {

class Rng {
 public:
  explicit Rng(uint64_t state) : state_(state) {}

  uint64_t next();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Uniform integer in [0, n) (n > 0), by rejection so that there is no modulo bias.
  uint64_t below(uint64_t n);
  // Exponential with the given mean (mean > 0): -mean * log(1 - u).
  double exponential(double mean);
  // Standard normal by inverse CDF (Acklam's rational approximation, relative error < 1.2e-9).
  double normal();
  // Lognormal: exp(mu + sigma * normal()).
  double lognormal(double mu, double sigma);
  // Pareto type I with scale x_m > 0 and shape alpha > 0: x_m / (1 - u)^(1/alpha).
  double pareto(double scale, double shape);
  // k distinct indices out of [0, n), in the order drawn (partial Fisher-Yates).
  std::vector<int> choose(int n, int k);

 private:
  uint64_t state_;
};

// The SplitMix64 finaliser: a bijective 64-bit mix.
uint64_t mix64(uint64_t x);
// An independent stream for (seed, a, b), e.g. (seed, fault index, 0).
Rng streamFor(uint64_t seed, uint64_t a, uint64_t b = 0);

}  // namespace chaosbed
