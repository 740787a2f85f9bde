#include "transports/base/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace chaosbed {
namespace {

TEST(BaseRandom, SplitMix64KnownSequence) {
  // Reference values of SplitMix64 seeded with 0 (the published test vector): the generator is portable.
  Rng r(0);
  EXPECT_EQ(r.next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(r.next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(r.next(), 0x06C45D188009454FULL);
}

TEST(BaseRandom, StreamsAreIndependentOfEachOther) {
  EXPECT_EQ(streamFor(7, 1).next(), streamFor(7, 1).next());
  EXPECT_NE(streamFor(7, 1).next(), streamFor(7, 2).next());
  EXPECT_NE(streamFor(7, 1).next(), streamFor(8, 1).next());
  EXPECT_NE(streamFor(7, 1, 0).next(), streamFor(7, 1, 1).next());
}

TEST(BaseRandom, ExponentialMeanWithinFourSigma) {
  Rng r(42);
  const int n = 100000;
  const double mean = 3.0;
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += r.exponential(mean);
  // The sample mean has standard deviation mean / sqrt(n).
  EXPECT_NEAR(sum / n, mean, 4 * mean / std::sqrt(n));
}

TEST(BaseRandom, NormalMomentsWithinFourSigma) {
  Rng r(1);
  const int n = 100000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = r.normal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 4 / std::sqrt(n));
  // Var of x^2 for a standard normal is 2.
  EXPECT_NEAR(sq / n, 1.0, 4 * std::sqrt(2.0 / n));
}

TEST(BaseRandom, ParetoAndLognormalMedians) {
  Rng r(3);
  const int n = 20001;
  std::vector<double> p, l;
  for (int i = 0; i < n; ++i) {
    p.push_back(r.pareto(1.0, 2.0));
    l.push_back(r.lognormal(std::log(2.0), 0.5));
  }
  std::nth_element(p.begin(), p.begin() + n / 2, p.end());
  std::nth_element(l.begin(), l.begin() + n / 2, l.end());
  EXPECT_NEAR(p[n / 2], std::sqrt(2.0), 0.03);  // Pareto median: xm * 2^(1/alpha)
  EXPECT_NEAR(l[n / 2], 2.0, 0.03);
  EXPECT_GE(*std::min_element(p.begin(), p.end()), 1.0);
}

TEST(BaseRandom, ChooseGivesDistinctIndices) {
  Rng r(5);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<int> c = r.choose(10, 4);
    ASSERT_EQ(c.size(), 4u);
    std::set<int> s(c.begin(), c.end());
    EXPECT_EQ(s.size(), 4u);
    for (int i : c) EXPECT_TRUE(i >= 0 && i < 10);
  }
}

}  // namespace
}  // namespace chaosbed
