// The tune grid's shard axis: a parameter server's shard count is tuned like its learning rate, mirrored has
// none, and a point's spec carries the shards it was run with.

#include <gtest/gtest.h>

#include "experiments/tune/tune.h"

namespace chaosbed::tune {
namespace {

TEST(TuneGrid, ShardsAreAnAxisOfTheParameterServerOnly) {
  spec::ExperimentSpec base;
  spec::StrategySpec mirrored, ps;
  mirrored.kind = spec::StrategyKind::kMirrored;
  mirrored.label = "mirrored";
  mirrored.shards = 1;
  ps.kind = spec::StrategyKind::kParameterServer;
  ps.label = "parameter_server";
  ps.shards = 1;
  base.strategies = {mirrored, ps};
  TuneOptions options;
  EXPECT_EQ(shardGrid(ps, options), std::vector<int>{1}) << "without --tune_shards: the strategy's own";
  options.shards = {1, 2, 4};
  EXPECT_EQ(shardGrid(ps, options), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(shardGrid(mirrored, options), std::vector<int>{1});
  const spec::ExperimentSpec point = pointSpec(base, "parameter_server", ps.recipe, 4, 7);
  ASSERT_EQ(point.strategies.size(), 1u);
  EXPECT_EQ(point.strategies.front().shards, 4);
  EXPECT_EQ(point.seed, 7);
}

}  // namespace
}  // namespace chaosbed::tune
