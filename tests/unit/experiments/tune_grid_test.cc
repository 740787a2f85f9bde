// The tune grid's axes: a parameter server's shard count is tuned like its learning rate (mirrored has none),
// the batch size is an axis of every strategy, the grid grows past an edge, and ties go to the simpler recipe.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <unistd.h>

#include "chaosbed/config.h"
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

// A fake run: writes a complete summary whose sustained TTA is `tta(recipe, seed)`, and counts the seeds seen.
struct FakeRuns {
  explicit FakeRuns(std::function<double(const spec::Recipe&, int64_t)> f) : tta(std::move(f)) {}
  std::function<double(const spec::Recipe&, int64_t)> tta;
  std::set<int64_t> seeds;
  int runs = 0;
  Result<bool> operator()(const spec::ExperimentSpec& spec, const std::string& dir) {
    ++runs;
    seeds.insert(spec.seed);
    std::filesystem::create_directories(dir);
    const spec::StrategySpec& st = spec.strategies.front();
    nlohmann::json j = {{"complete", true},
                        {"strategies", {{st.label, {{"tta_sustained_seconds", tta(st.recipe, spec.seed)}}}}}};
    std::ofstream(dir + "/summary.json") << j.dump();
    return true;
  }
};

nlohmann::json readJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

TuneOptions optionsIn(const std::string& name) {
  TuneOptions o;
  o.spec_path = std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml";
  o.out_dir = ::testing::TempDir() + "/tune-" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(o.out_dir);
  o.progress = nullptr;
  return o;
}

// The best learning rate is 0.4; the grid {0.05, 0.1} has its winner on the upper edge, so it grows (x2) until
// the winner is inside, or the growth limit is reached.
TEST(TuneGrid, AWinnerOnTheEdgeGrowsTheGridPastIt) {
  FakeRuns runs{[](const spec::Recipe& r, int64_t) { return 5 + std::abs(std::log2(r.learning_rate / 0.4)); }};
  TuneOptions o = optionsIn("grow");
  o.learning_rates = {0.05, 0.1};
  o.momenta = {0.9};
  o.seeds = {1};
  o.grow = 3;
  auto out = runTune(o, std::ref(runs));
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  for (const StrategyTuning& t : out->strategies) {
    SCOPED_TRACE(t.label);
    std::vector<double> lrs;
    for (const auto& r : t.recipes) lrs.push_back(r.recipe.learning_rate);
    EXPECT_EQ(lrs, (std::vector<double>{0.05, 0.1, 0.2, 0.4, 0.8})) << "0.8 shows 0.4 is inside";
    EXPECT_DOUBLE_EQ(t.recipes[t.winner].recipe.learning_rate, 0.4);
    EXPECT_EQ(t.grown, 3);
  }
  const nlohmann::json j = readJson(o.out_dir + "/tune.json");
  EXPECT_EQ(j["strategies"]["mirrored"]["grid_grown"], 3);
  // With growth limited, the edge winner stays: the limit is what stops it.
  o = optionsIn("grow-limited");
  o.learning_rates = {0.05, 0.1};
  o.momenta = {0.9};
  o.seeds = {1};
  o.grow = 1;
  out = runTune(o, std::ref(runs));
  ASSERT_TRUE(out.isOk());
  EXPECT_DOUBLE_EQ(out->strategies[0].recipes[out->strategies[0].winner].recipe.learning_rate, 0.2);
  EXPECT_EQ(out->strategies[0].recipes.size(), 3u);
}

// Momentum 0.9 scores 0.5% better than momentum 0 over three seeds that agree: within the noise (1% of the
// score at least), so the simpler recipe wins and tune.json says why. Without a seed list, three seeds run.
TEST(TuneGrid, ATieWithinTheNoiseGoesToTheSimplerRecipeAndSaysSo) {
  FakeRuns runs{[](const spec::Recipe& r, int64_t) { return r.momentum > 0 ? 10.0 : 10.05; }};
  TuneOptions o = optionsIn("tie");
  o.learning_rates = {0.1};
  o.momenta = {0.9, 0};
  o.grow = 0;
  auto out = runTune(o, std::ref(runs));
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ(runs.seeds, (std::set<int64_t>{7, 8, 9})) << "the spec's seed (tiny-synthetic: 7) and the next two";
  const StrategyTuning& t = out->strategies[0];
  EXPECT_DOUBLE_EQ(t.recipes[t.lowest].recipe.momentum, 0.9);
  EXPECT_DOUBLE_EQ(t.recipes[t.winner].recipe.momentum, 0);
  const nlohmann::json j = readJson(o.out_dir + "/tune.json");
  EXPECT_NE(j["strategies"][t.label]["winner"].value("tie", "").find("the simpler recipe wins"), std::string::npos)
      << j.dump(2);
  // A real difference (5%) is not a tie.
  FakeRuns apart{[](const spec::Recipe& r, int64_t) { return r.momentum > 0 ? 10.0 : 10.5; }};
  o = optionsIn("no-tie");
  o.learning_rates = {0.1};
  o.momenta = {0.9, 0};
  o.seeds = {1, 2, 3};
  o.grow = 0;
  out = runTune(o, std::ref(apart));
  ASSERT_TRUE(out.isOk());
  EXPECT_DOUBLE_EQ(out->strategies[0].recipes[out->strategies[0].winner].recipe.momentum, 0.9);
}

// Batch size is an axis of every strategy: the best (learning rate, batch) pair is found together (here the
// larger batch wants the larger learning rate), it reaches tuned.yaml, and tune.csv has the batch of each run.
TEST(TuneGrid, BatchIsAnAxisTunedWithTheLearningRate) {
  FakeRuns runs{[](const spec::Recipe& r, int64_t) {
    return 5 + std::abs(std::log2(r.learning_rate / (0.1 * r.batch_per_worker / 64))) +
           (r.batch_per_worker == 128 ? 0 : 1);
  }};
  TuneOptions o = optionsIn("batch");
  o.learning_rates = {0.1, 0.2};
  o.momenta = {0.9};
  o.seeds = {1};
  o.batches = {64, 128};
  o.grow = 0;
  auto out = runTune(o, std::ref(runs));
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  for (const StrategyTuning& t : out->strategies) {
    SCOPED_TRACE(t.label);
    EXPECT_EQ(t.recipes.size(), 4u) << "2 learning rates x 2 batch sizes";
    EXPECT_EQ(t.recipes[t.winner].recipe.batch_per_worker, 128);
    EXPECT_DOUBLE_EQ(t.recipes[t.winner].recipe.learning_rate, 0.2);
  }
  EXPECT_EQ(shardGrid(spec::StrategySpec{}, o).size(), 1u) << "the batch axis adds no shards";
  auto tuned = spec::loadExperimentSpec(o.out_dir + "/tuned.yaml");
  ASSERT_TRUE(tuned.isOk()) << tuned.status().toString();
  for (const auto& st : tuned->strategies) EXPECT_EQ(st.recipe.batch_per_worker, 128) << st.label;
  std::ifstream csv(o.out_dir + "/tune.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header.substr(header.rfind(',') + 1), "batch_per_worker");
  int with_128 = 0;
  for (std::string line; std::getline(csv, line);) with_128 += line.ends_with(",128");
  EXPECT_EQ(with_128, 2 * int(out->strategies.size())) << "two learning rates at batch 128 per strategy";
  EXPECT_FALSE(runTune([&] { TuneOptions bad = optionsIn("batch-bad"); bad.batches = {0}; return bad; }(),
                       std::ref(runs)).isOk());
}

}  // namespace
}  // namespace chaosbed::tune
