#include "experiments/stats/paired.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/students_t.hpp>

namespace chaosbed::stats {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// P(X >= k) for X ~ Binomial(n, 1/2).
double signTail(int n, int k) {
  if (k <= 0) return 1;
  if (k > n) return 0;
  return boost::math::cdf(boost::math::complement(boost::math::binomial_distribution<double>(n, 0.5), k - 1));
}

PairedRatio logT(const std::vector<double>& logs, double level) {
  PairedRatio out;
  out.method = PairedMethod::kLogT;
  const double n = double(logs.size());
  const double mean = std::accumulate(logs.begin(), logs.end(), 0.0) / n;
  out.estimate = std::exp(mean);
  out.level = level;
  if (logs.size() < 2) {  // one pair: no spread to scale an interval by
    out.low = 0, out.high = kInf, out.p_value = 1;
    return out;
  }
  double ss = 0;
  for (double l : logs) ss += (l - mean) * (l - mean);
  const double se = std::sqrt(ss / (n - 1) / n);
  if (se == 0) {  // every pair gave the same ratio
    out.low = out.high = out.estimate;
    out.p_value = mean == 0 ? 1 : 0;
    return out;
  }
  const boost::math::students_t t(n - 1);
  const double q = boost::math::quantile(boost::math::complement(t, (1 - level) / 2));
  out.low = std::exp(mean - q * se);
  out.high = std::exp(mean + q * se);
  out.p_value = std::min(1.0, 2 * boost::math::cdf(boost::math::complement(t, std::abs(mean) / se)));
  return out;
}

// Each pair's log ratio as bounds [lo, hi]: a point when both reached the target.
PairedRatio signMedian(const std::vector<double>& lo, const std::vector<double>& hi,
                       std::vector<double> substituted, double level) {
  PairedRatio out;
  out.method = PairedMethod::kSignMedian;
  const int n = int(lo.size());
  std::sort(substituted.begin(), substituted.end());
  out.estimate = std::exp(n % 2 ? substituted[size_t(n / 2)] : (substituted[size_t(n / 2 - 1)] + substituted[size_t(n / 2)]) / 2);
  // [L_(k), U_(n-k+1)] covers the median with probability >= 1 - 2 P(X <= k-1); the largest k that reaches
  // `level`, or k = 1 and the level it reaches.
  auto coverage = [&](int k) { return 1 - 2 * (1 - signTail(n, k)); };
  int k = 1;
  while (k + 1 <= (n + 1) / 2 && coverage(k + 1) >= level) ++k;
  out.level = std::min(level, coverage(k));
  std::vector<double> lows = lo, highs = hi;
  std::sort(lows.begin(), lows.end());
  std::sort(highs.begin(), highs.end(), std::greater<>());
  out.low = std::exp(lows[size_t(k - 1)]);  // exp(-inf) = 0
  out.high = std::exp(highs[size_t(k - 1)]);
  int below = 0, above = 0;
  for (int i = 0; i < n; ++i) {
    below += hi[size_t(i)] < 0 ? 1 : 0;
    above += lo[size_t(i)] > 0 ? 1 : 0;
  }
  out.p_value = std::min(1.0, 2 * std::min(signTail(n, below), signTail(n, above)));
  return out;
}

}  // namespace

std::string_view pairedMethodName(PairedMethod m) { return m == PairedMethod::kLogT ? "log_t" : "sign_median"; }

std::optional<PairedRatio> pairedRatio(const std::vector<TtaPair>& pairs, double time_limit_s, double level) {
  std::vector<double> lo, hi, substituted;
  int censored = 0;
  for (const auto& [a, b] : pairs) {
    if ((a && !(*a > 0)) || (b && !(*b > 0)) || (!(time_limit_s > 0) && (!a || !b))) continue;
    const double ta = a.value_or(time_limit_s), tb = b.value_or(time_limit_s);
    const double d = std::log(ta / tb);
    substituted.push_back(d);
    // a unreached: a >= limit, so a / b >= limit / b; b unreached: a / b <= a / limit.
    lo.push_back(b ? d : -kInf);
    hi.push_back(a ? d : kInf);
    censored += (!a || !b) ? 1 : 0;
  }
  if (lo.empty()) return std::nullopt;
  PairedRatio out = censored == 0 ? logT(substituted, level) : signMedian(lo, hi, substituted, level);
  out.pairs = int(lo.size());
  out.censored_pairs = censored;
  return out;
}

std::vector<double> holm(const std::vector<double>& p_values) {
  const size_t m = p_values.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return p_values[x] < p_values[y]; });
  std::vector<double> adjusted(m);
  double running = 0;
  for (size_t j = 0; j < m; ++j) {
    running = std::max(running, std::min(1.0, double(m - j) * p_values[order[j]]));
    adjusted[order[j]] = running;
  }
  return adjusted;
}

}  // namespace chaosbed::stats
