#pragma once
// Paired comparison of two strategies' times to accuracy, seed by seed: the ratio a / b with a confidence
// interval and a p-value for "no difference", and Holm's correction across the comparisons of one finding.
//
// A run that never reached the target is right-censored at the time limit: its TTA is only known to be
// larger. Its pair's log ratio is then a bound, never a value, and the method changes with it:
//  - no pair censored: Student's t on the log ratios. The estimate is the geometric mean of the ratios; the
//    interval is exact when TTAs are lognormal (the coverage test, tests/unit/experiments/stats_test.cc,
//    measures 95% at n = 5 with CV 25%, where the percentile bootstrap this replaces covered ~83%).
//  - some pair censored: distribution-free. The estimate is the median ratio (censored TTAs at the limit);
//    the interval for the median ratio takes order statistics of the pairs' lower and upper bounds
//    (binomial coverage, at least `level`); the p-value is the two-sided sign test over the pairs whose side
//    of 1 is known (a pair whose bounds straddle 1 counts for neither side).
// With few pairs the distribution-free interval cannot reach 95%: `level` then says what it does reach
// (93.75% at n = 5, 75% at n = 3), and a verdict should rest on the (corrected) p-value.

#include <optional>
#include <string_view>
#include <vector>

namespace chaosbed::stats {

// One seed's TTAs in seconds; nullopt: the target was not reached within the time limit.
struct TtaPair {
  std::optional<double> a, b;
};

enum class PairedMethod { kLogT, kSignMedian };
std::string_view pairedMethodName(PairedMethod m);  // "log_t", "sign_median"

struct PairedRatio {
  int pairs = 0;
  int censored_pairs = 0;   // pairs with at least one unreached target
  PairedMethod method = PairedMethod::kLogT;
  double estimate = 1;      // geometric mean (log_t) or median (sign_median) of a / b
  double low = 0, high = 0; // the interval; 0 / +inf where a bound is unknown
  double level = 0.95;      // its confidence level (below 0.95 only for the sign method with few pairs)
  double p_value = 1;       // two-sided, against a / b = 1
};

// nullopt without a usable pair (a TTA <= 0 is ignored). `time_limit_s` is where unreached runs are censored.
std::optional<PairedRatio> pairedRatio(const std::vector<TtaPair>& pairs, double time_limit_s, double level = 0.95);

// Holm's step-down adjustment of m p-values (the family of one finding's comparisons), in their order:
// controls the family-wise error rate without assuming independence.
std::vector<double> holm(const std::vector<double>& p_values);

}  // namespace chaosbed::stats
