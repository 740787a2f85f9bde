// End to end: `chaosbed tune` of the tiny synthetic scenario over a two-recipe grid: every run is made without
// chaos, each strategy's winner is the recipe with the lowest restricted mean TTA in tune.csv, tuned.yaml is
// a valid spec carrying the winners, and a second tune finds every run complete.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chaosbed/config.h"
#include "experiments/spec/spec.h"
#include "tests/testing/command.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

using testing::readFile;

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  for (std::string f; std::getline(in, f, ',');) out.push_back(f);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

TEST(TuneEndToEnd, EachStrategyGetsItsLowestScoringRecipeAndTheTuneResumes) {
  const std::string dir = testing::makeTempDir("tune");
  ASSERT_FALSE(dir.empty());
  const std::string spec = std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml";
  // 1e-6 hardly moves the model: its runs are censored at the time limit and score it.
  const std::vector<std::string> argv = {testing::chaosbedBinary(), "tune", spec, "--out=" + dir + "/out",
                                         "--tune_lr=0.000001,0.1", "--tune_momentum=0.9", "--tune_seeds=1",
                                         "--tune_grow=0",
                                         "--metrics_addr=127.0.0.1:0"};
  testing::Command first(argv);
  auto code = first.wait(deadlineIn(300s));
  ASSERT_TRUE(code.has_value()) << first.output();
  ASSERT_EQ(*code, 0) << first.output();
  EXPECT_NE(first.output().find("tune: 4 run(s) now, 0 already complete, 0 failed"), std::string::npos) << first.output();

  // Recompute every recipe's score from the per-run rows: the restricted mean (unreached = the time limit).
  const double time_limit = 15;  // tiny-synthetic's training.time_limit_s
  std::map<std::string, std::map<double, double>> score;  // label -> learning rate -> score
  std::istringstream csv(readFile(dir + "/out/tune.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "label,kind,learning_rate,momentum,seed,tta_sustained_s,tta_resolution_s,reached,shards,batch_per_worker");
  auto base = spec::loadExperimentSpec(std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml");
  ASSERT_TRUE(base.isOk()) << base.status().toString();
  int rows = 0;
  while (std::getline(csv, line)) {
    auto f = split(line);
    ASSERT_EQ(f.size(), 10u) << line;
    // Without --tune_shards the parameter server keeps its own shard; mirrored has none. Without
    // --tune_batch every run has the spec's batch.
    EXPECT_EQ(f[8], f[1] == "parameter_server" ? "1" : "") << line;
    EXPECT_EQ(f[9], std::to_string(base->training.batch_per_worker)) << line;
    if (f[7] == "true") {
      EXPECT_GT(std::stod(f[6]), 0) << "a reached TTA has its resolution: " << line;
    }
    score[f[0]][std::stod(f[2])] = f[7] == "true" ? std::stod(f[5]) : time_limit;
    ++rows;
  }
  EXPECT_EQ(rows, 4);
  auto tuned = spec::loadExperimentSpec(dir + "/out/tuned.yaml");
  ASSERT_TRUE(tuned.isOk()) << tuned.status().toString();
  EXPECT_TRUE(tuned->chaos.parsed.faults.size() == 1) << "the tuned spec keeps the chaos section";
  auto j = nlohmann::json::parse(readFile(dir + "/out/tune.json"));
  for (const char* label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    ASSERT_EQ(score[label].size(), 2u);
    double best_lr = 0, best = 1e300;
    for (const auto& [lr, s] : score[label])
      if (s < best) best = s, best_lr = lr;
    EXPECT_DOUBLE_EQ(j["strategies"][label]["winner"]["learning_rate"].get<double>(), best_lr);
    EXPECT_NEAR(j["strategies"][label]["winner"]["score_s"].get<double>(), best, 1e-6);
    const auto* s = tuned->strategy(label);
    ASSERT_NE(s, nullptr);
    EXPECT_DOUBLE_EQ(s->recipe.learning_rate, best_lr);
    // No run of the tune had chaos, and each ran its strategy alone.
    int points = 0;
    for (const auto& point : std::filesystem::directory_iterator(dir + "/out/points/" + label)) {
      auto run = nlohmann::json::parse(readFile(point.path().string() + "/summary.json"), nullptr, false);
      ASSERT_TRUE(run.is_object()) << point.path();
      EXPECT_EQ(run["strategies"].size(), 1u) << run.dump(2);
      EXPECT_EQ(run["strategies"][label]["faults_applied"], 0) << run.dump(2);
      ++points;
    }
    EXPECT_EQ(points, 2);
  }

  testing::Command second(argv);
  code = second.wait(deadlineIn(120s));
  ASSERT_TRUE(code.has_value()) << second.output();
  ASSERT_EQ(*code, 0) << second.output();
  EXPECT_NE(second.output().find("tune: 0 run(s) now, 4 already complete, 0 failed"), std::string::npos)
      << second.output();
}

}  // namespace
}  // namespace chaosbed
