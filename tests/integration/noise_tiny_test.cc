// End to end: `chaosbed noise` of the tiny synthetic scenario over three seeds: one run per seed without
// chaos, strategies interleaved, and a CV per strategy that agrees with the per-run rows; a second call
// finds every run complete.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chaosbed/config.h"
#include "tests/testing/command.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

using testing::readFile;

TEST(NoiseEndToEnd, ThreeSeedsGiveEachStrategysSpreadAndTheRunsResume) {
  const std::string dir = testing::makeTempDir("noise");
  ASSERT_FALSE(dir.empty());
  const std::vector<std::string> argv = {testing::chaosbedBinary(), "noise",
                                         std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml",
                                         "--runs=3", "--out=" + dir + "/out", "--metrics_addr=127.0.0.1:0"};
  testing::Command first(argv);
  auto code = first.wait(deadlineIn(300s));
  ASSERT_TRUE(code.has_value()) << first.output();
  ASSERT_EQ(*code, 0) << first.output();
  EXPECT_NE(first.output().find("noise: 3 run(s) now, 0 already complete, 0 failed"), std::string::npos) << first.output();

  // The CV from the per-run rows, computed here.
  std::map<std::string, std::vector<double>> tta;
  std::istringstream csv(readFile(dir + "/out/noise.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line,
            "run,seed,strategy,tta_seconds,tta_sustained_seconds,tta_steps,tta_resolution_s,tta_resolution_steps,commit,"
            "load1_at_start,quiet");
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) f.push_back(c);
    ASSERT_GE(f.size(), 4u) << line;
    if (!f[3].empty()) tta[f[2]].push_back(std::stod(f[3]));
  }
  auto j = nlohmann::json::parse(readFile(dir + "/out/noise.json"));
  for (const char* label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    const auto& v = tta[label];
    ASSERT_EQ(v.size(), 3u) << "tiny-synthetic reaches its target in every run";
    double mean = 0, ss = 0;
    for (double x : v) mean += x / 3;
    for (double x : v) ss += (x - mean) * (x - mean);
    const auto& s = j["strategies"][label]["tta_seconds"];
    EXPECT_EQ(s["reached"], 3);
    EXPECT_NEAR(s["mean_s"].get<double>(), mean, 1e-6);
    EXPECT_NEAR(s["cv"].get<double>(), std::sqrt(ss / 2) / mean, 1e-6);
    EXPECT_GT(j["strategies"][label]["worst_resolution_fraction"].get<double>(), 0);
  }
  // Each run had no chaos, and the second ran the strategies in the other order.
  for (const char* run : {"0-seed-7", "1-seed-8", "2-seed-9"}) {
    auto spec = readFile(dir + "/out/runs/" + run + "/spec.yaml");
    EXPECT_EQ(spec.find("chaos:"), std::string::npos) << run;
  }
  const auto order = readFile(dir + "/out/runs/1-seed-8/events.jsonl");
  EXPECT_LT(order.find("\"strategy\":\"parameter_server\""), order.find("\"strategy\":\"mirrored\""));

  testing::Command second(argv);
  code = second.wait(deadlineIn(120s));
  ASSERT_TRUE(code.has_value()) << second.output();
  ASSERT_EQ(*code, 0) << second.output();
  EXPECT_NE(second.output().find("noise: 0 run(s) now, 3 already complete, 0 failed"), std::string::npos)
      << second.output();
}

}  // namespace
}  // namespace chaosbed
