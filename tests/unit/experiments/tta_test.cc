// TtaTracker: the sustained streak counts paced evaluations; refined ones date the crossing it began with.

#include <gtest/gtest.h>

#include "experiments/run/tta.h"

namespace chaosbed::run {
namespace {

constexpr double kTarget = 0.85;

TEST(TtaTracker, PacedOnlyTheStreakStartsAtItsFirstEvaluation) {
  TtaTracker t(kTarget, 3);
  EXPECT_FALSE(t.add({1, 100}, 0.80, false));
  EXPECT_FALSE(t.add({2, 200}, 0.86, false));
  EXPECT_FALSE(t.add({3, 300}, 0.84, false));  // breaks the streak
  EXPECT_FALSE(t.add({4, 400}, 0.86, false));
  EXPECT_FALSE(t.add({5, 500}, 0.87, false));
  EXPECT_TRUE(t.add({6, 600}, 0.88, false));
  EXPECT_FALSE(t.add({7, 700}, 0.88, false));  // completes once
  ASSERT_TRUE(t.first() && t.sustained() && t.resolution());
  EXPECT_DOUBLE_EQ(t.first()->time_s, 2);
  EXPECT_DOUBLE_EQ(t.sustained()->time_s, 4);
  EXPECT_EQ(t.sustained()->steps, 400);
  EXPECT_DOUBLE_EQ(t.resolution()->seconds, 1);  // the evaluation before it was at 3 s
  EXPECT_EQ(t.resolution()->steps, 100);
}

TEST(TtaTracker, RefinedEvaluationsDateTheCrossingBetweenTwoPacedOnes) {
  TtaTracker t(kTarget, 2);
  EXPECT_FALSE(t.add({1.0, 1000}, 0.80, false));
  EXPECT_FALSE(t.add({1.1, 1100}, 0.85 - 1e-9, true));
  EXPECT_FALSE(t.add({1.2, 1200}, 0.85, true));  // at the target counts
  EXPECT_FALSE(t.add({1.3, 1300}, 0.84, true));  // a dip after it does not move it
  EXPECT_FALSE(t.add({2.0, 2000}, 0.87, false));
  EXPECT_TRUE(t.add({3.0, 3000}, 0.88, false));
  EXPECT_DOUBLE_EQ(t.first()->time_s, 1.2);
  EXPECT_DOUBLE_EQ(t.sustained()->time_s, 1.2);
  EXPECT_EQ(t.sustained()->steps, 1200);
  EXPECT_NEAR(t.resolution()->seconds, 0.1, 1e-12);
  EXPECT_EQ(t.resolution()->steps, 100);
}

// A crossing whose streak a paced evaluation broke is not the sustained one; the first crossing stays.
TEST(TtaTracker, APacedEvaluationBelowTheTargetStartsAgain) {
  TtaTracker t(kTarget, 2);
  EXPECT_FALSE(t.add({0.5, 50}, 0.86, true));
  EXPECT_FALSE(t.add({1, 100}, 0.86, false));
  EXPECT_FALSE(t.add({2, 200}, 0.84, false));
  EXPECT_FALSE(t.add({2.5, 250}, 0.86, true));
  EXPECT_FALSE(t.add({3, 300}, 0.86, false));
  EXPECT_TRUE(t.add({4, 400}, 0.86, false));
  EXPECT_DOUBLE_EQ(t.first()->time_s, 0.5);
  EXPECT_DOUBLE_EQ(t.sustained()->time_s, 2.5);
  EXPECT_DOUBLE_EQ(t.resolution()->seconds, 0.5);
}

TEST(TtaTracker, RefinedEvaluationsNeverCountTowardTheStreak) {
  TtaTracker t(kTarget, 2);
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(t.add({0.1 * i, 10 * i}, 0.9, true));
  EXPECT_FALSE(t.add({1, 100}, 0.9, false));  // one paced evaluation of two
  EXPECT_FALSE(t.sustained().has_value());
  EXPECT_TRUE(t.add({2, 200}, 0.9, false));
  EXPECT_DOUBLE_EQ(t.sustained()->time_s, 0.1);  // the refined run began at the first snapshot
  EXPECT_DOUBLE_EQ(t.resolution()->seconds, 0.1);  // after the start of training
  EXPECT_EQ(t.resolution()->steps, 10);
}

// A rollback between the two snapshots: the one before is no ancestor, so the resolution has no steps.
TEST(TtaTracker, ARollbackLeavesTheResolutionWithoutSteps) {
  TtaTracker t(kTarget, 1);
  EXPECT_FALSE(t.add({1, 2000}, 0.84, false));
  EXPECT_TRUE(t.add({2, 1600}, 0.86, false));
  EXPECT_DOUBLE_EQ(t.resolution()->seconds, 1);
  EXPECT_FALSE(t.resolution()->steps.has_value());
  EXPECT_EQ(t.sustained()->steps, 1600);
}

TEST(TtaTracker, NothingWhileBelowTheTarget) {
  TtaTracker t(kTarget, 1);
  EXPECT_FALSE(t.add({1, 1}, 0.5, false));
  EXPECT_FALSE(t.add({2, 2}, 0.9, true));  // a refined record alone completes nothing
  EXPECT_FALSE(t.sustained().has_value());
  EXPECT_FALSE(t.resolution().has_value());
  ASSERT_TRUE(t.first().has_value());
  EXPECT_DOUBLE_EQ(t.first()->time_s, 2);
}

}  // namespace
}  // namespace chaosbed::run
