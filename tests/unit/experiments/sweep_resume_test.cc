// Sweeps with a fake point runner: the plan (grid x seeds + baselines, stable ids), resume (complete points
// are not rerun), sweep.csv statistics with censored TTAs, the crossover plot (censored ratios as bounds
// that decide crossings only on their decisive side, the log x axis), and --seeds auto.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "chaosbed/config.h"
#include "experiments/sweep/sweep.h"

namespace chaosbed::sweep {
namespace {

namespace fs = std::filesystem;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tiny-synthetic (time limit 15 s) with a sweep over the pause duration (a chaos parameter) and two seeds.
std::string writeSweepSpec(const std::string& dir, const std::string& durations = "[1, 2, 4]",
                           const std::string& seeds = "[1, 2]") {
  std::string text = readFile(std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml");
  text += "\nsweep:\n  grid:\n    chaos.faults[0].duration_s: " + durations + "\n  seeds: " + seeds + "\n";
  const std::string path = dir + "/sweep.yaml";
  std::ofstream(path) << text;
  return path;
}

// A fake experiment: mirrored's TTA grows with the pause, parameter_server's does not, so the ratio crosses 1
// between 1 s and 2 s. Seed 2 at 4 s leaves parameter_server short of the target (censored).
class FakeRunner {
 public:
  Result<bool> operator()(const spec::ExperimentSpec& spec, const std::string& dir) {
    ++calls;
    seen.push_back(fs::path(dir).filename().string());
    first_strategy[spec.seed].insert(spec.strategies.front().label);
    const YAML::Node& chaos = spec.chaos.yaml;
    const double pause = chaos && chaos["faults"] ? chaos["faults"][0]["duration_s"].as<double>() : 0;
    const bool censored = spec.seed == 2 && pause == 4;
    const double jitter = spec.seed == 1 ? -1 : 1;
    nlohmann::json strategies = {
        {"mirrored", {{"kind", "mirrored"}, {"tta_sustained_seconds", 20 + 10 * pause + jitter}, {"final_accuracy", 0.9}}},
        {"parameter_server",
         {{"kind", "parameter_server"},
          {"tta_sustained_seconds", censored ? nlohmann::json(nullptr) : nlohmann::json(35 + jitter)},
          {"final_accuracy", 0.9}}}};
    fs::create_directories(dir);
    nlohmann::json summary = {{"experiment", spec.metadata.name}, {"seed", spec.seed}, {"complete", true},
                              {"strategies", strategies}};
    // Two fault processes, one failure every 200 s each: 100 s between failures together.
    if (pause > 0) summary["fault_rates"] = {{{"fault", "a"}, {"mtbf_s", 200.0}}, {{"fault", "b"}, {"mtbf_s", 200.0}}};
    std::ofstream(dir + "/summary.json") << summary.dump(2);
    return true;
  }
  int calls = 0;
  std::vector<std::string> seen;
  std::map<int64_t, std::set<std::string>> first_strategy;  // seed -> the strategies its points ran first
};

TEST(Sweep, PlanHasGridTimesSeedsPlusOneBaselinePerSeedWithStableIds) {
  const std::string dir = ::testing::TempDir() + "/sweep-plan-" + std::to_string(::getpid());
  fs::create_directories(dir);
  auto spec = spec::loadExperimentSpec(writeSweepSpec(dir));
  ASSERT_TRUE(spec.isOk()) << spec.status().toString();
  auto plan = planSweep(*spec);
  ASSERT_EQ(plan.size(), 2u + 3u * 2u);
  EXPECT_TRUE(plan[0].baseline);
  EXPECT_TRUE(plan[1].baseline);
  EXPECT_TRUE(plan[0].overrides.empty());
  EXPECT_FALSE(plan[2].baseline);
  std::set<std::string> ids;
  for (const auto& p : plan) ids.insert(p.id);
  EXPECT_EQ(ids.size(), plan.size()) << "ids must be unique";
  // Stable: planning again gives the same ids.
  auto again = planSweep(*spec);
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(plan[i].id, again[i].id);
  EXPECT_EQ(plan[2].id, pointId({{"chaos.faults[0].duration_s", "1"}}, 1, false));
  EXPECT_NE(plan[2].id.find("duration_s-1_seed-1_"), std::string::npos) << plan[2].id;
  const auto a = plan[0].assignments();
  EXPECT_NE(std::find(a.begin(), a.end(), "chaos=null"), a.end());
  fs::remove_all(dir);
}

TEST(Sweep, ResumeSkipsCompletePointsAndRerunsIncompleteOnes) {
  const std::string dir = ::testing::TempDir() + "/sweep-resume-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  SweepOptions options;
  options.spec_path = writeSweepSpec(dir);
  options.out_dir = dir + "/out";
  options.progress = nullptr;
  FakeRunner first;
  auto r1 = runSweep(options, std::ref(first));
  ASSERT_TRUE(r1.isOk()) << r1.status().toString();
  EXPECT_EQ(first.calls, 8);
  EXPECT_EQ(r1->ran, 8);
  EXPECT_EQ(r1->resumed, 0);

  // Mark one point incomplete (an interrupted run) and delete another's summary: only those two rerun.
  const std::string incomplete = dir + "/out/points/" + first.seen[3];
  auto j = nlohmann::json::parse(readFile(incomplete + "/summary.json"));
  j["complete"] = false;
  std::ofstream(incomplete + "/summary.json") << j.dump();
  fs::remove(dir + "/out/points/" + first.seen[5] + "/summary.json");
  FakeRunner second;
  auto r2 = runSweep(options, std::ref(second));
  ASSERT_TRUE(r2.isOk()) << r2.status().toString();
  EXPECT_EQ(second.calls, 2);
  EXPECT_EQ(r2->resumed, 6);
  EXPECT_EQ(second.seen, (std::vector<std::string>{first.seen[3], first.seen[5]}));

  FakeRunner third;
  auto r3 = runSweep(options, std::ref(third));
  ASSERT_TRUE(r3.isOk());
  EXPECT_EQ(third.calls, 0);
  fs::remove_all(dir);
}

TEST(Sweep, CsvHasMeanCiAndCensoredFractionAndThePlotMarksTheCrossing) {
  const std::string dir = ::testing::TempDir() + "/sweep-csv-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  SweepOptions options;
  options.spec_path = writeSweepSpec(dir);
  options.out_dir = dir + "/out";
  options.progress = nullptr;
  FakeRunner runner;
  auto r = runSweep(options, std::ref(runner));
  ASSERT_TRUE(r.isOk()) << r.status().toString();

  const std::string csv = readFile(dir + "/out/sweep.csv");
  std::istringstream in(csv);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("row,group,point,baseline,seed,chaos.faults[0].duration_s,strategy,", 0), 0u) << header;
  int point_rows = 0;
  std::map<std::string, std::string> summary_rows;  // "group/strategy" -> line
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("point,", 0) == 0) ++point_rows;
    if (line.rfind("summary,", 0) == 0) {
      std::vector<std::string> cols;
      std::stringstream ls(line);
      for (std::string c; std::getline(ls, c, ',');) cols.push_back(c);
      summary_rows[cols[1] + "/" + cols[6]] = line;
    }
  }
  EXPECT_EQ(point_rows, 8 * 2);
  EXPECT_EQ(summary_rows.size(), 4u * 2u);  // baseline + 3 grid points, 2 strategies each
  // mirrored at 2 s: TTAs 39 and 41: mean 40, geometric mean sqrt(39 * 41) = 39.987, CI on the logs
  // exp(ln 39.987 -/+ 12.706 * ln(41 / 39) / 2) = [29.103, 54.942].
  EXPECT_NE(summary_rows["chaos.faults[0].duration_s=2/mirrored"].find(",2,2,0.000,40.000,39.987,29.103,54.942"),
            std::string::npos) << summary_rows["chaos.faults[0].duration_s=2/mirrored"];
  // parameter_server at 4 s: one of two runs censored; the mean is the reached run's.
  EXPECT_NE(summary_rows["chaos.faults[0].duration_s=4/parameter_server"].find(",2,1,0.500,34.000,34.000,34.000"),
            std::string::npos) << summary_rows["chaos.faults[0].duration_s=4/parameter_server"];
  // Paired by seed at 1 s: 34/29 and 36/31, geometric mean 1.167; no pair censored; the censoring rule stated.
  EXPECT_NE(summary_rows["chaos.faults[0].duration_s=1/mirrored"].find(",2,0,1.167,"), std::string::npos)
      << summary_rows["chaos.faults[0].duration_s=1/mirrored"];
  EXPECT_NE(summary_rows["chaos.faults[0].duration_s=4/mirrored"].find(",2,1,"), std::string::npos)
      << "the censored pair at 4 s is counted: " << summary_rows["chaos.faults[0].duration_s=4/mirrored"];
  EXPECT_NE(csv.find(",restricted_mean_at_time_limit,"), std::string::npos);
  // MTBF 100 s over the baseline's TTA: mirrored 20 s (19 and 21), parameter_server 35 s (34 and 36).
  EXPECT_NE(summary_rows["chaos.faults[0].duration_s=2/mirrored"].find(",restricted_mean_at_time_limit,100.000,5.000"),
            std::string::npos) << summary_rows["chaos.faults[0].duration_s=2/mirrored"];
  EXPECT_NE(summary_rows["chaos.faults[0].duration_s=2/parameter_server"].find(",100.000,2.857"), std::string::npos)
      << summary_rows["chaos.faults[0].duration_s=2/parameter_server"];
  // Interleaved: seed 1's points ran mirrored first, seed 2's the parameter server first.
  EXPECT_EQ(runner.first_strategy[1], std::set<std::string>{"mirrored"});
  EXPECT_EQ(runner.first_strategy[2], std::set<std::string>{"parameter_server"});

  const std::string svg = readFile(dir + "/out/crossover.svg");
  EXPECT_NE(svg.find("<polyline class=\"ratio\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"crossing\""), std::string::npos);
  ASSERT_EQ(r->crossings.size(), 1u);
  EXPECT_NE(r->crossings[0].find("parameter server overtakes"), std::string::npos) << r->crossings[0];
  EXPECT_NE(r->crossings[0].find("=1 and 2"), std::string::npos) << r->crossings[0];
  EXPECT_EQ(r->crossings[0].find("from a bound"), std::string::npos) << r->crossings[0];
  // The durations span 4x: a linear axis.
  EXPECT_EQ(svg.find("(log scale)"), std::string::npos);
  fs::remove_all(dir);
}

// Mirrored misses the target in some runs from a pause of 0.5 s on, and in every run from 2 s; the parameter
// server reaches it until 8 s, where neither does. Time limit 15 s.
class CensoringRunner {
 public:
  Result<bool> operator()(const spec::ExperimentSpec& spec, const std::string& dir) {
    const YAML::Node& chaos = spec.chaos.yaml;
    const double pause = chaos && chaos["faults"] ? chaos["faults"][0]["duration_s"].as<double>() : 0;
    const bool m_reached = pause < 0.5 || (pause < 2 && spec.seed == 1);
    const nlohmann::json none(nullptr);
    nlohmann::json strategies = {
        {"mirrored", {{"kind", "mirrored"}, {"tta_sustained_seconds", m_reached ? nlohmann::json(5.0) : none}}},
        {"parameter_server",
         {{"kind", "parameter_server"}, {"tta_sustained_seconds", pause < 8 ? nlohmann::json(spec.seed == 1 ? 7.0 : 9.0) : none}}}};
    fs::create_directories(dir);
    std::ofstream(dir + "/summary.json") << nlohmann::json{{"complete", true}, {"strategies", strategies}}.dump();
    return true;
  }
};

TEST(Sweep, CensoredRatiosAreBoundsThatPlaceTheCrossingOnALogAxis) {
  const std::string dir = ::testing::TempDir() + "/sweep-censored-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  SweepOptions options;
  options.spec_path = writeSweepSpec(dir, "[0.1, 0.5, 2, 8]");
  options.out_dir = dir + "/out";
  options.progress = nullptr;
  auto r = runSweep(options, CensoringRunner());
  ASSERT_TRUE(r.isOk()) << r.status().toString();

  const std::string csv = readFile(dir + "/out/sweep.csv");
  EXPECT_NE(csv.find(",tta_restricted_mean,ratio_ps_over_mirrored,ratio_kind,"), std::string::npos) << csv;
  std::map<std::string, std::string> summary_rows;  // "duration/strategy" -> line
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("summary,", 0) != 0) continue;
    std::vector<std::string> cols;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cols.push_back(c);
    summary_rows[cols[5] + "/" + cols[6]] = line;
  }
  // 0.1: both reached in every run: 8 / 5.
  EXPECT_NE(summary_rows["0.1/mirrored"].find(",5.000,1.600,exact"), std::string::npos) << summary_rows["0.1/mirrored"];
  // 0.5: mirrored reached in one run of two: restricted mean (5 + 15) / 2 = 10, ratio <= 8 / 10.
  EXPECT_NE(summary_rows["0.5/mirrored"].find(",2,1,0.500,5.000,5.000,5.000,5.000,10.000,0.800,at_most"), std::string::npos)
      << summary_rows["0.5/mirrored"];
  // 2: mirrored never: ratio <= 8 / 15.
  EXPECT_NE(summary_rows["2/parameter_server"].find(",8.000,0.533,at_most"), std::string::npos)
      << summary_rows["2/parameter_server"];
  // 8: neither reached the target: no ratio.
  EXPECT_NE(summary_rows["8/parameter_server"].find(",2,0,1.000,,,,,15.000,,"), std::string::npos)
      << summary_rows["8/parameter_server"];

  ASSERT_EQ(r->crossings.size(), 1u);
  EXPECT_NE(r->crossings[0].find("parameter server overtakes"), std::string::npos) << r->crossings[0];
  EXPECT_NE(r->crossings[0].find("=0.1 and 0.5"), std::string::npos) << r->crossings[0];
  EXPECT_NE(r->crossings[0].find("from a bound"), std::string::npos) << r->crossings[0];

  const std::string svg = readFile(dir + "/out/crossover.svg");
  EXPECT_NE(svg.find("(log scale)"), std::string::npos);
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = svg.find(what); at != std::string::npos; at = svg.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<circle class=\"exact\""), 2u);     // 0.1 and the legend
  EXPECT_EQ(count("<path class=\"at-most\""), 3u);     // 0.5, 2 and the legend
  EXPECT_EQ(count("<path class=\"at-least\""), 0u);
  EXPECT_NE(svg.find("mirrored did not reach the target: ratio &lt;= shown"), std::string::npos);
  EXPECT_EQ(svg.find("parameter_server did not"), std::string::npos) << "no such point, no legend entry";
  // The no-chaos baseline (pause 0: 8 / 5) is drawn as a reference.
  EXPECT_NE(svg.find("no chaos (baseline): 1.60"), std::string::npos);
  fs::remove_all(dir);
}

// Per-seed ratios PS / mirrored (mirrored always 10 s): without faults 1, 1.01, 0.99 by seed (precise,
// not different from 1); at a 1 s pause twice that (decided); at 2 s 0.7 and 1.4 by turns (neither, ever).
class AutoSeedsRunner {
 public:
  Result<bool> operator()(const spec::ExperimentSpec& spec, const std::string& dir) {
    ++calls;
    first_strategy[spec.seed].insert(spec.strategies.front().label);
    const YAML::Node& chaos = spec.chaos.yaml;
    const double pause = chaos && chaos["faults"] ? chaos["faults"][0]["duration_s"].as<double>() : 0;
    const double wobble = 1 + 0.01 * double(spec.seed % 3 == 2 ? 1 : spec.seed % 3 == 0 ? -1 : 0);
    const double ratio = pause == 0 ? wobble : pause == 1 ? 2 * wobble : spec.seed % 2 ? 0.7 : 1.4;
    nlohmann::json strategies = {
        {"mirrored", {{"kind", "mirrored"}, {"tta_sustained_seconds", 10.0}}},
        {"parameter_server", {{"kind", "parameter_server"}, {"tta_sustained_seconds", 10.0 * ratio}}}};
    fs::create_directories(dir);
    std::ofstream(dir + "/summary.json") << nlohmann::json{{"complete", true}, {"strategies", strategies}}.dump();
    return true;
  }
  int calls = 0;
  std::map<int64_t, std::set<std::string>> first_strategy;
};

TEST(Sweep, AutoSeedsAddSeedsOnlyWhereTheRatioIsNeitherPreciseNorDecided) {
  const std::string dir = ::testing::TempDir() + "/sweep-auto-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  SweepOptions options;
  options.spec_path = writeSweepSpec(dir, "[1, 2]", "[1, 2, 3]");
  options.out_dir = dir + "/out";
  options.progress = nullptr;
  options.auto_seeds = AutoSeeds{0.1, 6};
  AutoSeedsRunner runner;
  auto r = runSweep(options, std::ref(runner));
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  // 3 seeds x (baseline + 2 pauses), then seeds 4, 5 and 6 for the 2 s pause alone.
  EXPECT_EQ(runner.calls, 9 + 3);
  EXPECT_EQ(r->points, 12);
  EXPECT_EQ(r->seed_stops.at("baseline"), SeedStop::kPrecise);
  EXPECT_EQ(r->seed_stops.at("chaos.faults[0].duration_s=1"), SeedStop::kDecided);
  EXPECT_EQ(r->seed_stops.at("chaos.faults[0].duration_s=2"), SeedStop::kMaxSeeds);
  // The added seeds go on interleaving: seed 4 is the fourth, so it runs the strategies in reverse.
  EXPECT_EQ(runner.first_strategy[4], std::set<std::string>{"parameter_server"});
  EXPECT_EQ(runner.first_strategy[5], std::set<std::string>{"mirrored"});

  const std::string csv = readFile(dir + "/out/sweep.csv");
  std::istringstream in(csv);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header.substr(header.size() - std::string(",seeds_stop").size()), ",seeds_stop") << header;
  std::map<std::string, std::string> stop_of;  // group -> seeds_stop of its summary rows
  std::map<std::string, int> runs_of;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cols;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cols.push_back(c);
    if (line.ends_with(",")) cols.push_back("");
    if (cols[0] == "point") ++runs_of[cols[1]];
    if (cols[0] == "summary") stop_of[cols[1]] = cols.back();
  }
  EXPECT_EQ(stop_of["baseline"], "precise");
  EXPECT_EQ(stop_of["chaos.faults[0].duration_s=1"], "decided");
  EXPECT_EQ(stop_of["chaos.faults[0].duration_s=2"], "max_seeds");
  EXPECT_EQ(runs_of["chaos.faults[0].duration_s=2"], 6 * 2);  // 6 seeds, 2 strategies
  EXPECT_EQ(runs_of["chaos.faults[0].duration_s=1"], 3 * 2);

  // Resumed, the same decisions find every point complete.
  AutoSeedsRunner again;
  auto r2 = runSweep(options, std::ref(again));
  ASSERT_TRUE(r2.isOk()) << r2.status().toString();
  EXPECT_EQ(again.calls, 0);
  EXPECT_EQ(r2->resumed, 12);
  fs::remove_all(dir);
}

TEST(Sweep, AutoSeedsDecideOnlyBelowTheLevelSplitOverEveryLook) {
  stats::PairedRatio wide;
  wide.estimate = 2;
  wide.low = 1.2;
  wide.high = 3.3;
  const AutoSeeds rule{0.1, 10};
  // p_holm 0.01: decided when a point can take 4 looks (0.05 / 4 = 0.0125), not when it can take 8.
  EXPECT_EQ(seedStop({{wide, 0.01}}, 3, 4, rule), SeedStop::kDecided);
  EXPECT_EQ(seedStop({{wide, 0.01}}, 3, 8, rule), SeedStop::kOpen);
  EXPECT_EQ(seedStop({{wide, 0.01}}, 10, 8, rule), SeedStop::kMaxSeeds);
  // Within +-10% of the estimate: precise, whatever the p-value.
  stats::PairedRatio narrow = wide;
  narrow.low = 1.85;
  narrow.high = 2.15;
  EXPECT_EQ(seedStop({{narrow, 0.9}}, 3, 8, rule), SeedStop::kPrecise);
  EXPECT_EQ(seedStop({{narrow, 0.9}, {wide, 0.9}}, 3, 8, rule), SeedStop::kOpen) << "every comparison must settle";
  // A censored bound (no upper end) is never precise.
  narrow.high = std::numeric_limits<double>::infinity();
  EXPECT_EQ(seedStop({{narrow, 0.9}}, 3, 8, rule), SeedStop::kOpen);
  EXPECT_EQ(seedStop({}, 3, 8, rule), SeedStop::kOpen) << "a point without a comparison has nothing settled";
}

TEST(Sweep, RatioKindsAndTheirSides) {
  const TtaStats exact_fast = ttaStats({4.0, 6.0}, 15), exact_slow = ttaStats({10.0, 14.0}, 15);
  const TtaStats half = ttaStats({5.0, std::nullopt}, 15), never = ttaStats({std::nullopt, std::nullopt}, 15);
  EXPECT_DOUBLE_EQ(half.restricted_mean, 10);
  EXPECT_DOUBLE_EQ(never.restricted_mean, 15);

  auto r = ttaRatio(exact_fast, exact_slow);  // both reached: 5 / 12
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, RatioKind::kExact);
  EXPECT_DOUBLE_EQ(r->value, 5.0 / 12);
  EXPECT_EQ(r->side(), -1);

  r = ttaRatio(exact_slow, half);  // mirrored censored: 12 / 10 is an upper bound above 1: undecided
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, RatioKind::kAtMost);
  EXPECT_DOUBLE_EQ(r->value, 1.2);
  EXPECT_EQ(r->side(), 0);
  EXPECT_EQ(ttaRatio(exact_fast, never)->side(), -1);  // <= 5 / 15

  r = ttaRatio(never, exact_fast);  // parameter server censored: >= 15 / 5
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, RatioKind::kAtLeast);
  EXPECT_DOUBLE_EQ(r->value, 3);
  EXPECT_EQ(r->side(), 1);
  EXPECT_EQ(ttaRatio(half, exact_slow)->side(), 0);  // >= 10 / 12 says nothing about the side of 1

  r = ttaRatio(half, never);  // both censored: no direction
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, RatioKind::kUnknown);
  EXPECT_EQ(r->side(), 0);
  EXPECT_FALSE(ttaRatio(never, never));
  EXPECT_FALSE(ttaRatio(TtaStats{}, exact_fast));
  EXPECT_STREQ(ratioKindName(RatioKind::kAtMost), "at_most");
}

TEST(Sweep, LogAxisForPositiveValuesSpanningMoreThanTenfold) {
  EXPECT_TRUE(logAxis({"0.05", "0.15", "0.5", "1.5", "4.5"}));
  EXPECT_TRUE(logAxis({"1", "11"}));
  EXPECT_FALSE(logAxis({"1", "10"}));
  EXPECT_FALSE(logAxis({"1", "2", "4"}));
  EXPECT_FALSE(logAxis({"0", "1", "100"}));
  EXPECT_FALSE(logAxis({"-1", "100"}));
  EXPECT_FALSE(logAxis({"0.1", "fast"}));
  EXPECT_FALSE(logAxis({}));
}

TEST(Sweep, TQuantileMatchesTheTable) {
  EXPECT_DOUBLE_EQ(tQuantile95(1), 12.706);
  EXPECT_DOUBLE_EQ(tQuantile95(10), 2.228);
  EXPECT_NEAR(tQuantile95(60), 2.000, 0.002);
  EXPECT_NEAR(tQuantile95(1000), 1.962, 0.002);
  TtaStats s = ttaStats({10.0, std::nullopt, 14.0}, 50);
  EXPECT_EQ(s.runs, 3);
  EXPECT_EQ(s.reached, 2);
  EXPECT_DOUBLE_EQ(s.mean, 12);
  EXPECT_NEAR(s.censoredFraction(), 1.0 / 3, 1e-12);
  // The interval is on log TTA, around the geometric mean: sd of {ln 10, ln 14} is ln(1.4) / sqrt(2).
  EXPECT_NEAR(s.geomean, std::sqrt(140.0), 1e-9);
  EXPECT_NEAR(std::log(s.ci_high / s.geomean), 12.706 * std::log(1.4) / 2, 1e-9);
  EXPECT_NEAR(std::log(s.geomean / s.ci_low), 12.706 * std::log(1.4) / 2, 1e-9);
  EXPECT_GT(s.ci_low, 0);  // the t interval on the TTAs themselves reached -13.4 here
  EXPECT_NEAR(s.restricted_mean, (10.0 + 50 + 14) / 3, 1e-12);
}

}  // namespace
}  // namespace chaosbed::sweep
