// `chaosbed validate`: output and exit codes for experiment specs and suite files, run in-process through
// the subcommand's entry point.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "experiments/cli/cli.h"

namespace chaosbed::cli {
namespace {

namespace fs = std::filesystem;

const fs::path kExperiments = fs::path(CHAOSBED_SOURCE_DIR) / "experiments";
const fs::path kScenarios = kExperiments / "scenarios";

struct Outcome {
  int code;
  std::string out, err;
};

Outcome runValidate(std::vector<std::string> args) {
  args.insert(args.begin(), "validate");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int code = validate(static_cast<int>(argv.size()), argv.data());
  std::fflush(stderr);
  std::string out = ::testing::internal::GetCapturedStdout();
  return Outcome{code, out, ::testing::internal::GetCapturedStderr()};
}

class ValidateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chaosbed-validate-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

TEST_F(ValidateCli, ValidSpecsPrintOk) {
  const std::string a = (kScenarios / "default.yaml").string(), b = (kScenarios / "spot-preemption.yaml").string();
  Outcome o = runValidate({a, b});
  EXPECT_EQ(o.code, kExitPass);
  EXPECT_EQ(o.out, "ok: " + a + "\nok: " + b + "\n");
  EXPECT_EQ(o.err, "");
}

TEST_F(ValidateCli, InvalidSpecListsEveryErrorAndExits3) {
  const std::string bad = write("bad.yaml",
                                "apiVersion: chaosbed/v1alpha1\nkind: Experiment\nmetadata: {name: x}\n"
                                "cluster: {wokers: 4}\nstrategies: [{name: mirrored, shards: 2}]\n");
  const std::string good = (kScenarios / "baseline.yaml").string();
  Outcome o = runValidate({bad, good});
  EXPECT_EQ(o.code, kExitInvalidSpec);
  EXPECT_EQ(o.out, "ok: " + good + "\n");
  EXPECT_EQ(o.err, bad + ":4:11: cluster.wokers: unknown field (did you mean 'workers'?)\n" + bad +
                       ":4:10: cluster.workers: missing required field\n" + bad +
                       ":5:31: strategies[0].shards: applies only to parameter_server strategies\n");
}

// A file that is not there is a usage error (2), not an invalid spec (3); the other files are still checked.
TEST_F(ValidateCli, MissingFileExits2WithAClearMessage) {
  const std::string missing = (dir_ / "absent.yaml").string();
  const std::string good = (kScenarios / "default.yaml").string();
  Outcome o = runValidate({missing, good});
  EXPECT_EQ(o.code, kExitUsage);
  EXPECT_EQ(o.err, "chaosbed validate: " + missing + ": No such file or directory\n");
  EXPECT_EQ(o.out, "ok: " + good + "\n");
}

TEST_F(ValidateCli, SuiteFilesAreValidatedAsSuites) {
  const std::string nightly = (kExperiments / "suites" / "nightly.yaml").string();
  const std::string spec = (kScenarios / "default.yaml").string();
  Outcome o = runValidate({nightly, spec});
  EXPECT_EQ(o.code, kExitPass) << o.err;
  EXPECT_EQ(o.out, "ok: " + nightly + "\nok: " + spec + "\n");
  EXPECT_EQ(o.err, "");
}

TEST_F(ValidateCli, InvalidSuiteListsItsOwnErrorsAndThoseOfItsScenarioSpecsAndExits3) {
  const std::string baseline = (kScenarios / "baseline.yaml").string();
  const std::string bad_spec = write("bad.yaml",
                                     "apiVersion: chaosbed/v1alpha1\nkind: Experiment\nmetadata: {name: x}\n"
                                     "cluster: {wokers: 4}\nstrategies: [{name: mirrored}]\n");
  const std::string suite = write("suite.yaml", "apiVersion: chaosbed/v1alpha1\nkind: Suite\nmetadata: {name: bad}\n"
                                                "scenarios:\n"
                                                "  - spec: " + baseline + "\n"
                                                "    asert: [reached_target]\n"
                                                "  - spec: " + baseline + "\n"
                                                "    name: second\n"
                                                "    assert:\n"
                                                "      - tta_seconds < fast\n"
                                                "  - spec: bad.yaml\n"
                                                "    assert: [reached_target]\n");
  Outcome o = runValidate({suite});
  EXPECT_EQ(o.code, kExitInvalidSpec);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, suite + ":6:5: scenarios[0].asert: unknown field (did you mean 'assert'?)\n" + suite +
                       ":5:5: scenarios[0].assert: missing required field\n" + suite +
                       ":10:23: scenarios[1].assert[0]: expected a number after '<' in 'tta_seconds < fast'\n" + suite +
                       ":11:5: scenarios[2].spec: scenario 'bad.yaml' is not a valid experiment spec (2 problem(s) "
                       "below)\n" + bad_spec + ":4:11: cluster.wokers: unknown field (did you mean 'workers'?)\n" +
                       bad_spec + ":4:10: cluster.workers: missing required field\n");
}

TEST_F(ValidateCli, NoArgumentsIsAUsageError) {
  Outcome o = runValidate({});
  EXPECT_EQ(o.code, kExitUsage);
  EXPECT_NE(o.err.find("usage: chaosbed validate SPEC.yaml..."), std::string::npos);
}

}  // namespace
}  // namespace chaosbed::cli
