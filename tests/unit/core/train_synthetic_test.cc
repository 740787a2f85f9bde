// End-to-end single-node training on the synthetic dataset: it learns, and it is deterministic.

#include <gtest/gtest.h>

#include <vector>

#include "core/data/batches.h"
#include "core/data/dataset.h"
#include "core/model/mlp.h"
#include "core/optim/sgd.h"

namespace chaosbed {
namespace {

data::DatasetSplits smallSynthetic() {
  data::SyntheticOptions o;
  o.dims = 32;
  o.train_size = 2000;
  o.test_size = 500;
  o.noise = 1.0f;  // centres ~8 apart, noise 1: separable, but not at initialisation
  auto s = data::makeSynthetic(o);
  EXPECT_TRUE(s.isOk()) << s.status().toString();
  return std::move(s).value();
}

// Trains for `steps` batches of 32 and returns the final parameters.
std::vector<float> train(const data::Dataset& train_set, uint64_t seed, int steps, model::Mlp& mlp) {
  mlp.initialize(seed);
  auto sgd = optim::Sgd::create({.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f}, mlp.numParameters());
  auto it = data::BatchIterator::create(train_set, {0, 1}, seed, 32);
  EXPECT_TRUE(sgd.isOk() && it.isOk());
  data::Batch batch;
  for (int step = 0; step < steps; ++step) {
    EXPECT_TRUE(it->next(batch).isOk());
    auto loss = mlp.computeGradients(batch.images, batch.labels);
    EXPECT_TRUE(loss.isOk()) << loss.status().toString();
    EXPECT_TRUE(sgd->apply(mlp.parameters(), mlp.gradients()).isOk());
  }
  return {mlp.parameters().begin(), mlp.parameters().end()};
}

TEST(TrainSynthetic, ReachesNinetyFivePercentWithinTwoHundredSteps) {
  const data::DatasetSplits data = smallSynthetic();
  auto mlp = model::Mlp::create({32, 64, 10}, 500);
  ASSERT_TRUE(mlp.isOk());
  mlp->initialize(1);
  auto before = mlp->evaluate(data.test);
  ASSERT_TRUE(before.isOk());
  EXPECT_LT(before->accuracy, 0.5);  // it starts near chance, so the rise below is learning
  train(data.train, 1, 200, *mlp);
  auto after = mlp->evaluate(data.test);
  ASSERT_TRUE(after.isOk());
  EXPECT_GT(after->accuracy, 0.95);
  EXPECT_LT(after->loss, before->loss);
}

TEST(TrainSynthetic, SameSeedGivesIdenticalParameters) {
  const data::DatasetSplits data = smallSynthetic();
  auto a = model::Mlp::create({32, 64, 10}, 32);
  auto b = model::Mlp::create({32, 64, 10}, 32);
  ASSERT_TRUE(a.isOk() && b.isOk());
  const std::vector<float> pa = train(data.train, 7, 100, *a);
  const std::vector<float> pb = train(data.train, 7, 100, *b);
  EXPECT_EQ(pa, pb);  // bit for bit
  const std::vector<float> pc = train(data.train, 8, 100, *b);
  EXPECT_NE(pa, pc);
}

}  // namespace
}  // namespace chaosbed
