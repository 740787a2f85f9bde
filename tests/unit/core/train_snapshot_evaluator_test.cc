// SnapshotEvaluator: records every snapshot in order, TTA is the first qualifying snapshot's time.

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
