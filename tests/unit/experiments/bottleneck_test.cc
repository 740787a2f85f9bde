// diagnoseBottleneck: which node a strategy's workers spent more than half their time waiting for.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "experiments/run/results.h"

namespace chaosbed::run {
namespace {

NodeStats node(double wall, std::initializer_list<std::pair<TimeCategory, double>> seconds) {
  NodeStats n;
  n.wall_seconds = wall;
  for (const auto& [c, s] : seconds) n.seconds[size_t(c)] = s;
  return n;
}

TEST(Bottleneck, TheShardTheWorkersWaitedForIsNamedWithWhatItDid) {
  std::map<std::string, NodeStats> by_node = {
      {"worker-0", node(10, {{TimeCategory::kCompute, 2}, {TimeCategory::kIdleServer, 8}})},
      {"worker-1", node(10, {{TimeCategory::kCompute, 3}, {TimeCategory::kIdleServer, 7}})},
      {"ps-0", node(10, {{TimeCategory::kIdlePeer, 9}, {TimeCategory::kCompute, 1}})},
      {"ps-1", node(10, {{TimeCategory::kCompute, 2}, {TimeCategory::kThrottled, 7}, {TimeCategory::kIdlePeer, 1}})}};
  const auto b = diagnoseBottleneck("parameter_server", by_node);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->node, "ps-1");
  EXPECT_DOUBLE_EQ(b->waiting_fraction, 0.75);
  EXPECT_NE(b->why.find("throttled by its CPU quota 70%"), std::string::npos) << b->why;

  StrategyResult r;
  r.label = "parameter_server";
  r.bottleneck = b;
  EXPECT_NE(bottleneckWarnings({r}).find("parameter_server's workers spent 75% of their time waiting for ps-1"),
            std::string::npos);
  EXPECT_EQ(r.toJson()["bottleneck"]["node"], "ps-1");
}

// A TTA known only to its evaluation interval: 1 s against 10 s is 10%, past the 2% a run keeps quiet about.
TEST(TtaResolution, ARunSaysWhenItsTtaIsKnownOnlyCoarselyAndSummaryJsonHasTheShare) {
  StrategyResult coarse, fine, unreached;
  coarse.label = "mirrored";
  coarse.tta_sustained_seconds = 10;
  coarse.tta_resolution_s = 1;
  fine.label = "parameter_server";
  fine.tta_sustained_seconds = 10;
  fine.tta_resolution_s = 0.15;
  unreached.label = "mirrored_elastic";
  unreached.tta_resolution_s = 1;
  const std::string w = resolutionWarnings({coarse, fine, unreached});
  EXPECT_NE(w.find("mirrored's TTA (10.00 s) is known only to 1.00 s, 10% of it"), std::string::npos) << w;
  EXPECT_EQ(w.find("parameter_server"), std::string::npos) << "1.5% is fine: " << w;
  EXPECT_EQ(w.find("mirrored_elastic"), std::string::npos) << "no TTA, no resolution to speak of: " << w;
  EXPECT_DOUBLE_EQ(coarse.toJson()["tta_resolution_fraction"].get<double>(), 0.1);
  EXPECT_TRUE(unreached.toJson()["tta_resolution_fraction"].is_null());
}

// Fine in seconds but coarse in steps (a fast stretch of training between the two snapshots): said too.
TEST(TtaResolution, ARunSaysWhenItsTtaIsKnownOnlyCoarselyInSteps) {
  StrategyResult r;
  r.label = "parameter_server";
  r.tta_sustained_seconds = 10;
  r.tta_resolution_s = 0.1;
  r.tta_steps = 1000;
  r.tta_resolution_steps = 50;
  const std::string w = resolutionWarnings({r});
  EXPECT_NE(w.find("parameter_server's TTA (1000 gradients) is known only to 50 of them, 5%"), std::string::npos) << w;
  EXPECT_DOUBLE_EQ(r.toJson()["tta_resolution_steps_fraction"].get<double>(), 0.05);
  r.tta_resolution_steps = 20;
  EXPECT_EQ(resolutionWarnings({r}), "");
}

TEST(Bottleneck, MirroredNamesTheWorkerTheOthersWaitedForAndHalfIsNotEnough) {
  std::map<std::string, NodeStats> slow_one = {
      {"worker-0", node(10, {{TimeCategory::kCompute, 2}, {TimeCategory::kIdlePeer, 8}})},
      {"worker-1", node(10, {{TimeCategory::kCompute, 9}, {TimeCategory::kIdlePeer, 1}})},
      {"worker-2", node(10, {{TimeCategory::kCompute, 2}, {TimeCategory::kIdlePeer, 8}})}};
  const auto b = diagnoseBottleneck("mirrored", slow_one);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->node, "worker-1");
  // Server idle does not count for mirrored, and waiting exactly half the time is no bottleneck.
  std::map<std::string, NodeStats> half = {
      {"worker-0", node(10, {{TimeCategory::kCompute, 5}, {TimeCategory::kIdlePeer, 5}})},
      {"worker-1", node(10, {{TimeCategory::kCompute, 5}, {TimeCategory::kIdleServer, 5}})}};
  EXPECT_FALSE(diagnoseBottleneck("mirrored", half).has_value());
  EXPECT_EQ(bottleneckWarnings({StrategyResult{}}), "");
  // Workers that waited for replies while the only shard waited for requests: no node is to blame.
  std::map<std::string, NodeStats> wire = {
      {"worker-0", node(10, {{TimeCategory::kCompute, 4}, {TimeCategory::kIdleServer, 6}})},
      {"ps-0", node(10, {{TimeCategory::kCompute, 1}, {TimeCategory::kIdlePeer, 9}})}};
  EXPECT_FALSE(diagnoseBottleneck("parameter_server", wire).has_value());
  EXPECT_TRUE(StrategyResult{}.toJson()["bottleneck"].is_null());
}

}  // namespace
}  // namespace chaosbed::run
