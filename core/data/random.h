#pragma once
// Portable deterministic randomness for data order and initialisation. std::mt19937_64 is fully specified
// by the standard, but std::uniform_*_distribution and std::shuffle are not (libstdc++ and libc++ give
// different streams), so the helpers below derive every value from the raw 64-bit engine output: the same
// seed gives the same numbers with every compiler and standard library.

#include <cstdint>
#include <random>
#include <span>

namespace chaosbed::data {

using Rng = std::mt19937_64;

// Mixes several values into one well-spread seed (SplitMix64 finaliser applied per value), so that
// (seed, epoch) and (seed, epoch + 1) give unrelated streams.
uint64_t mixSeed(uint64_t a, uint64_t b = 0, uint64_t c = 0);

// Uniform in [0, 1) with 24 random bits (every value exactly representable as a float).
float uniformFloat(Rng& rng);
// Uniform integer in [0, bound), bound > 0, without modulo bias (rejection sampling).
uint64_t uniformBelow(Rng& rng, uint64_t bound);
// Standard normal (Box-Muller on two uniformFloat draws).
float standardNormal(Rng& rng);
// Fisher-Yates shuffle driven by uniformBelow.
void shuffle(std::span<uint32_t> values, Rng& rng);

}  // namespace chaosbed::data
