// Fault episodes from a throughput series: from the fault's start to the pace coming back.

#include "experiments/run/fault_episodes.h"

#include <gtest/gtest.h>

namespace chaosbed::run {
namespace {

// Cumulative steps sampled every 0.5 s: `rate(t)` steps/s.
template <class Rate>
std::vector<std::pair<double, int64_t>> series(double until, Rate rate) {
  std::vector<std::pair<double, int64_t>> s;
  double steps = 0;
  for (double t = 0; t <= until + 1e-9; t += 0.5) {
    s.emplace_back(t, int64_t(steps));
    steps += 0.5 * rate(t);
  }
  return s;
}

TEST(FaultEpisodes, AStallEndsWhenThePaceIsBack) {
  // 100 steps/s, nothing from 10 s to 14 s, then 100 again.
  auto s = series(30, [](double t) { return t >= 10 && t < 14 ? 0.0 : 100.0; });
  auto e = faultEpisodes({{"pause-1", "pause", "worker-1", 10, std::nullopt}}, s);
  ASSERT_EQ(e.size(), 1u);
  ASSERT_TRUE(e[0].pre_fault_rate);
  EXPECT_NEAR(*e[0].pre_fault_rate, 100, 1);
  ASSERT_TRUE(e[0].seconds());
  EXPECT_NEAR(*e[0].seconds(), 4.0, 0.5);  // to the sampling's resolution
  EXPECT_EQ(e[0].toJson()["kind"], "pause");
}

TEST(FaultEpisodes, AFaultThatDoesNotSlowTrainingLastsNothing) {
  auto s = series(20, [](double) { return 50.0; });
  auto e = faultEpisodes({{"kill-ps-replica", "kill", "ps-1", 8, std::nullopt}}, s);
  ASSERT_TRUE(e[0].seconds());
  EXPECT_NEAR(*e[0].seconds(), 0.0, 1e-9);
}

TEST(FaultEpisodes, ASlowdownBelowNinetyPercentIsNotARecovery) {
  // Down to 85% for good after 5 s: never back to 90%.
  auto s = series(20, [](double t) { return t >= 5 ? 85.0 : 100.0; });
  auto e = faultEpisodes({{"slow", "slow", "worker-0", 5, std::nullopt}}, s);
  ASSERT_TRUE(e[0].pre_fault_rate);
  EXPECT_FALSE(e[0].recovered_at);
  EXPECT_TRUE(e[0].toJson()["seconds"].is_null());
}

TEST(FaultEpisodes, NoBaselineBeforeAnEarlyFault) {
  auto s = series(10, [](double) { return 100.0; });
  auto e = faultEpisodes({{"early", "pause", "worker-0", 0.3, std::nullopt}}, s);
  EXPECT_FALSE(e[0].pre_fault_rate);
  EXPECT_FALSE(e[0].recovered_at);
}

}  // namespace
}  // namespace chaosbed::run
