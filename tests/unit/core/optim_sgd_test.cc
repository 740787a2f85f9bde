// Sgd: PyTorch's update rule, slices, and validation.

#include <gtest/gtest.h>

#include <vector>

#include "core/optim/sgd.h"

namespace chaosbed::optim {
namespace {

TEST(Sgd, MatchesTorchSgdWithMomentumAndWeightDecay) {
  auto sgd = Sgd::create({.lr = 0.1f, .momentum = 0.5f, .weight_decay = 0.01f}, 2);
  ASSERT_TRUE(sgd.isOk());
  std::vector<float> p = {1.0f, -2.0f};
  const std::vector<float> g = {0.5f, 0.25f};
  // Reference by hand: v = 0.5 v + g + 0.01 p; p -= 0.1 v
  double rp[2] = {1.0, -2.0}, rv[2] = {0, 0};
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(sgd->apply(p, g).isOk());
    for (int i = 0; i < 2; ++i) {
      rv[i] = 0.5 * rv[i] + g[i] + 0.01 * rp[i];
      rp[i] -= 0.1 * rv[i];
    }
  }
  EXPECT_NEAR(p[0], rp[0], 1e-6);
  EXPECT_NEAR(p[1], rp[1], 1e-6);
  EXPECT_NEAR(sgd->velocity()[1], rv[1], 1e-6);
}

TEST(Sgd, PlainSgdAndGradScale) {
  auto sgd = Sgd::create({.lr = 0.5f, .momentum = 0.0f, .weight_decay = 0.0f}, 3);
  ASSERT_TRUE(sgd.isOk());
  std::vector<float> p = {1, 1, 1};
  ASSERT_TRUE(sgd->apply(p, std::vector<float>{4, 8, -4}, 0.25f).isOk());
  EXPECT_EQ(p, (std::vector<float>{0.5f, 0.0f, 1.5f}));
}

TEST(Sgd, UpdatesOnlyTheSliceItWasMadeFor) {
  std::vector<float> params(10, 1.0f), grads(10, 1.0f);
  auto shard = Sgd::create({.lr = 0.1f, .momentum = 0.9f}, 4);
  ASSERT_TRUE(shard.isOk());
  ASSERT_TRUE(shard->apply(std::span(params).subspan(3, 4), std::span<const float>(grads).subspan(3, 4)).isOk());
  for (size_t i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(params[i], (i >= 3 && i < 7) ? 0.9f : 1.0f) << i;
}

TEST(Sgd, RejectsSizeMismatchAndBadOptions) {
  auto sgd = Sgd::create({}, 4);
  ASSERT_TRUE(sgd.isOk());
  std::vector<float> p(4, 1.0f), g(3, 1.0f);
  EXPECT_EQ(sgd->apply(p, g).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p, std::vector<float>(4, 1.0f));
  EXPECT_FALSE(Sgd::create({.lr = 0.0f}, 1).isOk());
  EXPECT_FALSE(Sgd::create({.lr = 0.1f, .momentum = 1.0f}, 1).isOk());
  EXPECT_FALSE(Sgd::create({.lr = 0.1f, .momentum = 0.9f, .weight_decay = -1.0f}, 1).isOk());
  EXPECT_FALSE(sgd->setLearningRate(-1.0f).isOk());
  EXPECT_TRUE(sgd->setLearningRate(0.2f).isOk());
  EXPECT_FLOAT_EQ(sgd->options().lr, 0.2f);
}

}  // namespace
}  // namespace chaosbed::optim
