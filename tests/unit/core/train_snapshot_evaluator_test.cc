// SnapshotEvaluator: records snapshots in time order, evaluates the snapshots around a crossing of the target,
// and TTA is the first qualifying snapshot's time.

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "core/data/dataset.h"
#include "core/eval/snapshot_evaluator.h"
#include "core/model/mlp.h"

namespace chaosbed::eval {
namespace {

// A 2-class problem the identity model gets right and the swapped model gets wrong.
data::Dataset twoClass() {
  data::Dataset d;
  d.dims = 2;
  d.num_classes = 2;
  for (int i = 0; i < 100; ++i) {
    d.images.insert(d.images.end(), {static_cast<float>(i % 2 == 0), static_cast<float>(i % 2 == 1)});
    d.labels.push_back(static_cast<uint8_t>(i % 2));
  }
  return d;
}

const std::vector<float> kRight = {1, 0, 0, 1, 0, 0};  // W = identity, b = 0
const std::vector<float> kWrong = {0, 1, 1, 0, 0, 0};  // W = swap

TEST(SnapshotEvaluator, TtaIsTheTimeOfTheFirstSnapshotReachingTheTarget) {
  const data::Dataset test = twoClass();
  auto ev = SnapshotEvaluator::create({2, 2}, test, {.target_accuracy = 0.9, .eval_batch = 16});
  ASSERT_TRUE(ev.isOk()) << ev.status().toString();
  SnapshotEvaluator& e = **ev;
  EXPECT_FALSE(e.targetReached());
  ASSERT_TRUE(e.submit(0.5, 10, kWrong).isOk());
  ASSERT_TRUE(e.submit(1.0, 20, kRight).isOk());
  ASSERT_TRUE(e.submit(1.5, 30, kRight).isOk());
  ASSERT_TRUE(e.drain(deadlineIn(std::chrono::seconds(30))).isOk());
  EXPECT_TRUE(e.targetReached());
  ASSERT_TRUE(e.timeToAccuracy().has_value());
  EXPECT_DOUBLE_EQ(*e.timeToAccuracy(), 1.0);
  const auto r = e.records();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_DOUBLE_EQ(r[0].accuracy, 0.0);
  EXPECT_DOUBLE_EQ(r[1].accuracy, 1.0);
  EXPECT_EQ(r[1].step, 20);
  EXPECT_LT(r[1].loss, r[0].loss);
  ASSERT_TRUE(e.latest().has_value());
  EXPECT_DOUBLE_EQ(e.latest()->time_s, 1.5);
}

TEST(SnapshotEvaluator, NoTtaWhileBelowTarget) {
  const data::Dataset test = twoClass();
  auto ev = SnapshotEvaluator::create({2, 2}, test, {.target_accuracy = 0.5, .eval_batch = 100});
  ASSERT_TRUE(ev.isOk());
  ASSERT_TRUE((*ev)->submit(1.0, 1, kWrong).isOk());
  ASSERT_TRUE((*ev)->drain(deadlineIn(std::chrono::seconds(30))).isOk());
  EXPECT_FALSE((*ev)->targetReached());
  EXPECT_FALSE((*ev)->timeToAccuracy().has_value());
  EXPECT_EQ((*ev)->records().size(), 1u);
}

TEST(SnapshotEvaluator, RejectsWrongSizeAndTimeGoingBackwards) {
  const data::Dataset test = twoClass();
  auto ev = SnapshotEvaluator::create({2, 2}, test, {});
  ASSERT_TRUE(ev.isOk());
  EXPECT_EQ((*ev)->submit(1.0, 1, std::vector<float>(5)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*ev)->submit(2.0, 1, kRight).isOk());
  const Status back = (*ev)->submit(1.0, 2, kRight);
  EXPECT_EQ(back.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(back.message().find("before the previous one"), std::string::npos) << back.message();
  EXPECT_FALSE(SnapshotEvaluator::create({3, 2}, test, {}).isOk());  // dims disagree
}

// Paced: nothing is due before 10 s of snapshot time, so drain() evaluates the newest; it crossed the
// target from below, so the snapshots held since are evaluated oldest first up to the first that reaches it.
TEST(SnapshotEvaluator, ACrossingIsDatedOnTheSnapshotsBetweenPacedEvaluations) {
  const data::Dataset test = twoClass();
  auto ev = SnapshotEvaluator::create({2, 2}, test, {.target_accuracy = 0.9, .eval_batch = 16, .pace_s = 10});
  ASSERT_TRUE(ev.isOk());
  SnapshotEvaluator& e = **ev;
  const std::vector<std::vector<float>> params = {kWrong, kWrong, kRight, kWrong, kRight};
  for (size_t i = 0; i < params.size(); ++i) ASSERT_TRUE(e.submit(0.1 * double(i + 1), 10 * int64_t(i + 1), params[i]).isOk());
  ASSERT_TRUE(e.drain(deadlineIn(std::chrono::seconds(30))).isOk());
  const auto r = e.records();
  ASSERT_EQ(r.size(), 4u);
  const std::vector<int64_t> steps = {10, 20, 30, 50};  // the one after the crossing is not evaluated
  const std::vector<double> accuracy = {0, 0, 1, 1};
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].step, steps[i]) << i;
    EXPECT_EQ(r[i].refined, i < 3) << i;
    EXPECT_DOUBLE_EQ(r[i].accuracy, accuracy[i]) << i;
  }
  ASSERT_TRUE(e.timeToAccuracy().has_value());
  EXPECT_DOUBLE_EQ(*e.timeToAccuracy(), 0.3);
}

// Held snapshots are evaluated only where the paced evaluation after them reached the target and the one
// before did not: a dip between two evaluations at the target is not searched for.
TEST(SnapshotEvaluator, HeldSnapshotsGoUnevaluatedWithoutACrossing) {
  const data::Dataset test = twoClass();
  auto ev = SnapshotEvaluator::create({2, 2}, test, {.target_accuracy = 0.9, .eval_batch = 16, .pace_s = 10});
  ASSERT_TRUE(ev.isOk());
  SnapshotEvaluator& e = **ev;
  ASSERT_TRUE(e.submit(0.5, 5, kRight).isOk());
  ASSERT_TRUE(e.drain(deadlineIn(std::chrono::seconds(30))).isOk());
  ASSERT_TRUE(e.submit(1, 10, kWrong).isOk());
  ASSERT_TRUE(e.submit(2, 20, kWrong).isOk());
  ASSERT_TRUE(e.submit(3, 30, kRight).isOk());
  ASSERT_TRUE(e.drain(deadlineIn(std::chrono::seconds(30))).isOk());
  const auto r = e.records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].step, 5);
  EXPECT_EQ(r[1].step, 30);
  EXPECT_FALSE(r[1].refined);
}

// Past held_bytes, every other held snapshot is dropped: fewer are evaluated, the newest always is.
TEST(SnapshotEvaluator, HeldSnapshotsAreThinnedToTheirBound) {
  const data::Dataset test = twoClass();
  const size_t three = 3 * kRight.size() * sizeof(float);
  auto ev = SnapshotEvaluator::create({2, 2}, test,
                                      {.target_accuracy = 0.9, .eval_batch = 16, .pace_s = 100, .held_bytes = three});
  ASSERT_TRUE(ev.isOk());
  SnapshotEvaluator& e = **ev;
  for (int i = 1; i <= 20; ++i) ASSERT_TRUE(e.submit(i, i, i < 20 ? kWrong : kRight).isOk());
  ASSERT_TRUE(e.drain(deadlineIn(std::chrono::seconds(30))).isOk());
  const auto r = e.records();
  ASSERT_GE(r.size(), 2u);
  EXPECT_LE(r.size(), 3u);
  EXPECT_EQ(r.back().step, 20);
  EXPECT_FALSE(r.back().refined);
  for (size_t i = 1; i < r.size(); ++i) EXPECT_LT(r[i - 1].time_s, r[i].time_s);
}

TEST(SnapshotEvaluator, DestructionWithAQueueDoesNotWaitForIt) {
  const data::Dataset test = twoClass();
  auto ev = SnapshotEvaluator::create({2, 2}, test, {});
  ASSERT_TRUE(ev.isOk());
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE((*ev)->submit(i, i, kRight).isOk());
  ev->reset();  // must return: finishes at most the snapshot in progress
  SUCCEED();
}

}  // namespace
}  // namespace chaosbed::eval
