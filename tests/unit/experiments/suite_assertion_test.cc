// Suite files: assertion parsing, validation errors with file:line:col, and evaluation against a
// summary.json the test writes.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "chaosbed/config.h"
#include "experiments/suite/suite.h"

namespace chaosbed::suite {
namespace {

namespace fs = std::filesystem;

std::string tempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("chaosbed-suite-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string tinySpec() { return std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml"; }

nlohmann::json strategyEntry(std::optional<double> tta, double idle_fraction, int recoveries, int64_t samples_lost) {
  return {{"kind", "mirrored"},
          {"tta_seconds", tta ? nlohmann::json(*tta) : nlohmann::json(nullptr)},
          {"reached_target", tta.has_value()},
          {"final_accuracy", 0.81},
          {"samples_lost", samples_lost},
          {"checkpoint_failures", 0},
          {"idle_seconds", {{"peer", 1.0}, {"server", 2.0}, {"recovery", 0.5}}},
          {"idle_fraction", idle_fraction},
          {"recoveries", recoveries},
          {"stop_reason", tta ? "target" : "time_limit"}};
}

nlohmann::json summary() {
  return {{"experiment", "t"},
          {"complete", true},
          {"strategies",
           {{"mirrored", strategyEntry(40.0, 0.4, 1, 0)}, {"parameter_server", strategyEntry(50.0, 0.1, 0, 128)}}}};
}

Assertion parse(const std::string& text) {
  std::string error;
  size_t offset = 0;
  auto a = parseAssertion(text, &error, &offset);
  EXPECT_TRUE(a.has_value()) << text << ": " << error;
  return a.value_or(Assertion{});
}

TEST(SuiteAssertion, ParsesEveryForm) {
  Assertion a = parse("tta_seconds < 60");
  EXPECT_EQ(a.kind, Assertion::Kind::kCompare);
  EXPECT_EQ(a.lhs.metric, "tta_seconds");
  EXPECT_TRUE(a.lhs.label.empty());
  EXPECT_EQ(a.op, Op::kLt);
  EXPECT_EQ(a.value, 60);

  a = parse("idle_fraction[parameter_server]<=0.3");
  EXPECT_EQ(a.lhs.label, "parameter_server");
  EXPECT_EQ(a.op, Op::kLe);
  EXPECT_DOUBLE_EQ(a.value, 0.3);

  a = parse("reached_target");
  EXPECT_EQ(a.kind, Assertion::Kind::kPredicate);
  a = parse("no_checkpoint_lost[mirrored]");
  EXPECT_EQ(a.kind, Assertion::Kind::kPredicate);
  EXPECT_EQ(a.lhs.label, "mirrored");

  a = parse("tta_seconds[parameter_server] / tta_seconds[mirrored] < 1.5");
  EXPECT_EQ(a.kind, Assertion::Kind::kRatio);
  EXPECT_EQ(a.rhs.label, "mirrored");
  EXPECT_DOUBLE_EQ(a.value, 1.5);

  a = parse("recoveries >= 1");
  EXPECT_EQ(a.op, Op::kGe);
}

TEST(SuiteAssertion, RejectsBadAssertionsWithTheOffsetOfTheProblem) {
  struct Case {
    std::string text;
    std::string message;
    size_t offset;
  };
  const Case cases[] = {
      {"tta_second < 60", "unknown metric 'tta_second' (did you mean 'tta_seconds'?)", 0},
      {"speed < 60", "unknown metric 'speed'", 0},
      {"tta_seconds", "expected a comparison", 11},
      {"tta_seconds = 60", "expected one of < <= > >= == !=", 12},
      {"tta_seconds < fast", "expected a number after '<'", 14},
      {"reached_target > 1", "is a yes/no predicate", 15},
      {"tta_seconds[mirrored < 3", "expected ']'", 20},
      {"tta_seconds / tta_seconds[mirrored] < 1", "a ratio compares two strategies", 0},
      {"recoveries >= 1 extra", "unexpected 'extra' after the number", 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    std::string error;
    size_t offset = 99;
    EXPECT_FALSE(parseAssertion(c.text, &error, &offset).has_value());
    EXPECT_NE(error.find(c.message), std::string::npos) << error;
    EXPECT_EQ(offset, c.offset);
  }
}

TEST(SuiteAssertion, EvaluatesAgainstASummary) {
  const std::vector<std::string> labels = {"mirrored", "parameter_server"};
  auto cases = evaluate(parse("tta_seconds < 45"), summary(), labels);
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_TRUE(cases[0].passed);
  EXPECT_EQ(cases[0].name, "tta_seconds < 45 [mirrored]");
  EXPECT_FALSE(cases[1].passed);
  EXPECT_EQ(cases[1].message, "measured 50, expected tta_seconds < 45");

  cases = evaluate(parse("idle_fraction[parameter_server] < 0.3"), summary(), labels);
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_TRUE(cases[0].passed);

  cases = evaluate(parse("recoveries >= 1"), summary(), labels);
  EXPECT_TRUE(cases[0].passed);
  EXPECT_FALSE(cases[1].passed);

  cases = evaluate(parse("no_checkpoint_lost"), summary(), labels);
  EXPECT_TRUE(cases[0].passed);
  EXPECT_FALSE(cases[1].passed);
  EXPECT_NE(cases[1].message.find("samples_lost 128"), std::string::npos) << cases[1].message;

  cases = evaluate(parse("idle_seconds > 3"), summary(), labels);  // peer + server + recovery = 3.5
  EXPECT_TRUE(cases[0].passed);
  cases = evaluate(parse("idle_server_seconds == 2"), summary(), labels);
  EXPECT_TRUE(cases[0].passed);

  cases = evaluate(parse("tta_seconds[parameter_server] / tta_seconds[mirrored] < 1.5"), summary(), labels);
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_TRUE(cases[0].passed);
  EXPECT_EQ(cases[0].message, "measured 50 / 40 = 1.25, expected < 1.5");
  cases = evaluate(parse("tta_seconds[parameter_server] / tta_seconds[mirrored] < 1.2"), summary(), labels);
  EXPECT_FALSE(cases[0].passed);
}

TEST(SuiteAssertion, UnreachedTargetFailsComparisonsAndMissingStrategyIsAnError) {
  nlohmann::json s = summary();
  s["strategies"]["mirrored"] = strategyEntry(std::nullopt, 0.2, 0, 0);
  const std::vector<std::string> labels = {"mirrored", "parameter_server", "elastic"};
  auto cases = evaluate(parse("tta_seconds < 100"), s, labels);
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_FALSE(cases[0].passed);
  EXPECT_FALSE(cases[0].error);
  EXPECT_EQ(cases[0].message, "measured: target not reached, expected tta_seconds < 100");
  EXPECT_TRUE(cases[1].passed);
  EXPECT_TRUE(cases[2].error);
  cases = evaluate(parse("reached_target[mirrored]"), s, labels);
  EXPECT_FALSE(cases[0].passed);
  cases = evaluate(parse("tta_seconds[parameter_server] / tta_seconds[mirrored] < 2"), s, labels);
  EXPECT_FALSE(cases[0].passed);
  EXPECT_NE(cases[0].message.find("target not reached"), std::string::npos) << cases[0].message;
}

TEST(SuiteFile, ValidSuiteResolvesSpecsRelativeToTheSuiteFile) {
  const std::string dir = tempDir("valid");
  fs::create_directories(dir + "/suites");
  fs::copy_file(tinySpec(), dir + "/tiny.yaml");
  writeFile(dir + "/suites/s.yaml",
            "apiVersion: chaosbed/v1alpha1\nkind: Suite\nmetadata: {name: s}\nscenarios:\n"
            "  - spec: ../tiny.yaml\n    overrides: [training.time_limit_s=9]\n    assert:\n"
            "      - reached_target\n      - \"tta_seconds[parameter_server] / tta_seconds[mirrored] < 3\"\n");
  config::Diagnostics d;
  auto suite = readSuite(dir + "/suites/s.yaml", &d);
  ASSERT_TRUE(suite.has_value()) << d.toString();
  ASSERT_EQ(suite->scenarios.size(), 1u);
  EXPECT_EQ(suite->scenarios[0].name, "tiny-synthetic");
  EXPECT_EQ(suite->scenarios[0].spec.training.time_limit_s, 9);
  EXPECT_EQ(suite->scenarios[0].assertions.size(), 2u);
  fs::remove_all(dir);
}

TEST(SuiteFile, ReportsEveryProblemWithFileLineAndColumn) {
  const std::string dir = tempDir("invalid");
  const std::string file = dir + "/bad.yaml";
  writeFile(file,
            "apiVersion: chaosbed/v1alpha1\n"              // 1
            "kind: Suite\n"                                // 2
            "metadata: {name: bad}\n"                      // 3
            "scenarios:\n"                                 // 4
            "  - spec: " + tinySpec() + "\n"               // 5
            "    asert: []\n"                              // 6
            "  - spec: " + tinySpec() + "\n"               // 7
            "    name: two\n"                              // 8
            "    assert:\n"                                // 9
            "      - tta_secnds < 60\n"                    // 10
            "      - \"idle_fraction[mirored] < 0.3\"\n"   // 11
            "      - recoveries >= many\n"                 // 12
            "  - spec: missing.yaml\n"                     // 13
            "    assert: [reached_target]\n");             // 14
  config::Diagnostics d;
  EXPECT_FALSE(readSuite(file, &d).has_value());
  const std::string all = d.toString();
  auto expectLine = [&](const std::string& needle) {
    EXPECT_NE(all.find(needle), std::string::npos) << "missing: " << needle << "\nin:\n" << all;
  };
  expectLine(file + ":6:5: scenarios[0].asert: unknown field (did you mean 'assert'?)");
  expectLine(file + ":10:9: scenarios[1].assert[0]: unknown metric 'tta_secnds' (did you mean 'tta_seconds'?)");
  expectLine(file + ":11:24: scenarios[1].assert[1]: strategy 'mirored' is not in");
  expectLine(file + ":12:23: scenarios[1].assert[2]: expected a number after '>='");
  expectLine(file + ":13:");
  expectLine("scenarios[2].spec: scenario 'missing.yaml' is not a valid experiment spec");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chaosbed::suite
