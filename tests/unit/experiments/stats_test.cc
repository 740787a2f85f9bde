// The paired TTA comparison (experiments/stats/paired.h): the coverage simulation that chose its methods,
// and the behaviour at the edges (identical ratios, censoring, one pair, Holm).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "experiments/stats/paired.h"
#include "transports/base/random.h"

namespace chaosbed::stats {
namespace {

// Lognormal TTAs with coefficient of variation 25%: sigma of the logs.
const double kSigma = std::sqrt(std::log(1 + 0.25 * 0.25));

// n pairs of a seed-shared factor times each strategy's own lognormal noise; the true ratio is `ratio`.
std::vector<TtaPair> drawPairs(Rng& rng, int n, double ratio, double time_limit) {
  std::vector<TtaPair> pairs;
  for (int i = 0; i < n; ++i) {
    const double seed_factor = rng.lognormal(0, 0.2);
    const double a = 10 * ratio * seed_factor * rng.lognormal(0, kSigma);
    const double b = 10 * seed_factor * rng.lognormal(0, kSigma);
    pairs.push_back({a < time_limit ? std::optional(a) : std::nullopt, b < time_limit ? std::optional(b) : std::nullopt});
  }
  return pairs;
}

// The 95% percentile bootstrap of the geometric mean that the sweep used before.
std::pair<double, double> percentileBootstrap(Rng& rng, const std::vector<TtaPair>& pairs) {
  std::vector<double> logs, means;
  for (const auto& p : pairs) logs.push_back(std::log(*p.a / *p.b));
  for (int r = 0; r < 2000; ++r) {
    double s = 0;
    for (size_t i = 0; i < logs.size(); ++i) s += logs[rng.below(logs.size())];
    means.push_back(s / double(logs.size()));
  }
  std::sort(means.begin(), means.end());
  return {std::exp(means[50]), std::exp(means[1949])};
}

TEST(PairedRatio, LogTCoversTheTrueRatioAtFivePairsWhereThePercentileBootstrapDoesNot) {
  Rng rng(20261206);
  const double truth = 1.3;
  int t_covered = 0, bootstrap_covered = 0;
  const int trials = 4000;
  for (int trial = 0; trial < trials; ++trial) {
    const auto pairs = drawPairs(rng, 5, truth, 1e9);
    const auto r = pairedRatio(pairs, 1e9);
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->method, PairedMethod::kLogT);
    t_covered += r->low <= truth && truth <= r->high;
    if (trial < 1000) {
      const auto [lo, hi] = percentileBootstrap(rng, pairs);
      bootstrap_covered += lo <= truth && truth <= hi;
    }
  }
  const double t_coverage = double(t_covered) / trials, bootstrap_coverage = bootstrap_covered / 1000.0;
  RecordProperty("log_t_coverage", std::to_string(t_coverage));
  RecordProperty("percentile_bootstrap_coverage", std::to_string(bootstrap_coverage));
  EXPECT_GE(t_coverage, 0.93) << "paired t on log ratios, n = 5";
  EXPECT_LE(t_coverage, 0.97) << "an interval much wider than it claims is no better";
  EXPECT_LT(bootstrap_coverage, 0.90) << "the percentile bootstrap at n = 5 (why it was replaced)";
}

TEST(PairedRatio, CensoredPairsKeepTheCoverageAtFivePairs) {
  Rng rng(7);
  const double truth = 1.3;
  int covered = 0, with_censoring = 0;
  const int trials = 4000;
  for (int trial = 0; trial < trials; ++trial) {
    // A limit that about one run in five of the slower strategy does not beat.
    const auto pairs = drawPairs(rng, 5, truth, 15);
    const auto r = pairedRatio(pairs, 15);
    ASSERT_TRUE(r.has_value());
    if (r->censored_pairs > 0) {
      ++with_censoring;
      EXPECT_EQ(r->method, PairedMethod::kSignMedian);
    }
    covered += r->low <= truth && truth <= r->high;
  }
  RecordProperty("coverage", std::to_string(double(covered) / trials));
  RecordProperty("trials_with_censoring", with_censoring);
  EXPECT_GT(with_censoring, trials / 2) << "the case under test must be common";
  EXPECT_GE(double(covered) / trials, 0.93);
}

TEST(PairedRatio, IdenticalRatiosGiveAPointAndADecisivePValue) {
  const auto r = pairedRatio({{10.0, 5.0}, {20.0, 10.0}, {30.0, 15.0}}, 100);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->pairs, 3);
  EXPECT_DOUBLE_EQ(r->estimate, 2.0);
  EXPECT_DOUBLE_EQ(r->low, 2.0);
  EXPECT_DOUBLE_EQ(r->high, 2.0);
  EXPECT_EQ(r->p_value, 0.0);
}

TEST(PairedRatio, SpreadRatiosGiveAnIntervalAroundTheGeometricMean) {
  const auto r = pairedRatio({{2.0, 1.0}, {8.0, 1.0}, {4.0, 1.0}, {4.0, 1.0}}, 100);
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR(r->estimate, 4.0, 1e-12);  // exp(mean(log 2, log 8, log 4, log 4))
  EXPECT_LT(r->low, 4.0);
  EXPECT_GT(r->high, 4.0);
  EXPECT_GT(r->low, 1.0) << "every ratio is >= 2";
  EXPECT_LT(r->p_value, 0.05);
}

TEST(PairedRatio, AnUnreachedTargetBoundsItsPairInsteadOfActingAsAValue) {
  // a never reached the target (censored at 15): a / b >= 3, whatever a was.
  const auto r = pairedRatio({{std::nullopt, 5.0}}, 15);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->censored_pairs, 1);
  EXPECT_EQ(r->method, PairedMethod::kSignMedian);
  EXPECT_DOUBLE_EQ(r->low, 3.0);
  EXPECT_TRUE(std::isinf(r->high));
  EXPECT_LT(r->level, 0.95) << "one pair cannot give 95%";
  // Five pairs all on one side, one of them censored: the sign test's 2 / 32.
  const auto five = pairedRatio({{std::nullopt, 5.0}, {20.0, 10.0}, {12.0, 10.0}, {9.0, 3.0}, {14.0, 7.0}}, 15);
  ASSERT_TRUE(five.has_value());
  EXPECT_DOUBLE_EQ(five->p_value, 2.0 / 32);
  EXPECT_DOUBLE_EQ(five->level, 1 - 2.0 / 32);
  EXPECT_NEAR(five->low, 1.2, 1e-12);  // the smallest lower bound: 12 / 10
  EXPECT_TRUE(std::isinf(five->high)) << "the largest upper bound is the censored pair's";
  // Both unreached: the pair says nothing about the side.
  const auto both = pairedRatio({{std::nullopt, std::nullopt}, {20.0, 10.0}}, 15);
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->low, 0.0);
  EXPECT_TRUE(std::isinf(both->high));
}

TEST(PairedRatio, NothingUsableGivesNothing) {
  EXPECT_FALSE(pairedRatio({}, 15).has_value());
  EXPECT_FALSE(pairedRatio({{0.0, 1.0}, {-1.0, 2.0}}, 15).has_value());
}

TEST(PairedRatio, OnePairHasNoInterval) {
  const auto r = pairedRatio({{4.0, 2.0}}, 100);
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->estimate, 2.0);
  EXPECT_EQ(r->low, 0.0);
  EXPECT_TRUE(std::isinf(r->high));
  EXPECT_EQ(r->p_value, 1.0);
}

TEST(Holm, AdjustsStepDownAndKeepsTheOrder) {
  // Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06 (monotone).
  const auto adjusted = holm({0.01, 0.04, 0.03, 0.005});
  ASSERT_EQ(adjusted.size(), 4u);
  EXPECT_DOUBLE_EQ(adjusted[0], 0.03);
  EXPECT_DOUBLE_EQ(adjusted[1], 0.06);
  EXPECT_DOUBLE_EQ(adjusted[2], 0.06);
  EXPECT_DOUBLE_EQ(adjusted[3], 0.02);
  EXPECT_DOUBLE_EQ(holm({0.6, 0.7})[1], 1.0) << "capped at 1";
  EXPECT_TRUE(holm({}).empty());
}

}  // namespace
}  // namespace chaosbed::stats
