// `chaosbed suite SUITE [--junit FILE] [--out DIR]`: runs the suite's scenarios, evaluates their assertions
// and writes JUnit XML (experiments/suite/suite.h). Exit 0 all passed, 1 an assertion failed, 3 invalid suite,
// 4 infrastructure (a scenario could not run, or the XML could not be written), 130/143 interrupted.

#include <gflags/gflags.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "chaos/controller.h"
#include "experiments/cli/cli.h"
#include "experiments/run/experiment.h"
#include "experiments/run/results.h"
#include "experiments/suite/suite.h"

DEFINE_string(junit, "", "write JUnit XML to this file");
DECLARE_string(out);
DECLARE_string(metrics_addr);
DECLARE_bool(metrics_allow_remote);
DECLARE_string(push_gateway);

namespace chaosbed::cli {

int runSuite(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chaosbed suite SUITE [--junit FILE] [--out DIR]\n");
    return kExitUsage;
  }
  if (!checkMetricsFlags("suite")) return kExitUsage;
  if (fileMissing("suite", argv[1])) return kExitUsage;
  config::Diagnostics diagnostics;
  auto suite = suite::readSuite(argv[1], &diagnostics);
  if (!suite) {
    std::fputs(diagnostics.toString().c_str(), stderr);
    return kExitInvalidSpec;
  }
  std::atomic<bool> interrupted{false};
  auto watcher = chaos::StopSignalWatcher::start([&](int) { interrupted = true; });
  if (!watcher.isOk()) {
    std::fprintf(stderr, "chaosbed suite: %s\n", watcher.status().message().c_str());
    return kExitInfrastructure;
  }
  std::string out_dir = FLAGS_out;
  if (out_dir.empty()) {
    std::string run_id;
    auto dir = run::makeResultsDir("results/suites", suite->name, &run_id);
    if (!dir.isOk()) {
      std::fprintf(stderr, "chaosbed suite: %s\n", dir.status().message().c_str());
      return kExitInfrastructure;
    }
    out_dir = *dir;
  }
  auto runner = [&](const suite::Scenario& sc, const std::string& dir) -> Result<nlohmann::json> {
    if (interrupted) return Status::cancelled("interrupted");
    run::ExperimentOptions ro;
    ro.out_dir = dir;
    ro.metrics_addr = FLAGS_metrics_addr;
    ro.metrics_allow_remote = FLAGS_metrics_allow_remote;
    ro.push_gateway = FLAGS_push_gateway;
    ro.interrupted = &interrupted;
    auto outcome = run::runExperiment(sc.spec, ro);
    if (!outcome.isOk()) return outcome.status();
    if (!outcome->complete) return Status::cancelled("the run did not complete (interrupted)");
    std::ifstream in(dir + "/summary.json");
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (!j.is_object()) return Status::dataLoss(dir + "/summary.json is missing or not JSON");
    return j;
  };
  suite::SuiteOutcome outcome = suite::runSuite(*suite, out_dir, runner, stdout);
  if (!FLAGS_junit.empty()) {
    if (Status s = writeFileAtomically(FLAGS_junit, suite::junitXml(suite->name, outcome.results)); !s.isOk()) {
      std::fprintf(stderr, "chaosbed suite: %s\n", s.message().c_str());
      return kExitInfrastructure;
    }
  }
  std::printf("suite %s: %d case(s), %d failed, %d error(s); results in %s%s%s\n", suite->name.c_str(), outcome.cases,
              outcome.failures, outcome.errors, out_dir.c_str(), FLAGS_junit.empty() ? "" : "; JUnit: ",
              FLAGS_junit.c_str());
  if (interrupted) return (*watcher)->received() == SIGTERM ? 143 : kExitInterrupted;
  if (outcome.errors) return kExitInfrastructure;
  return outcome.failures ? kExitAssertionFailed : kExitPass;
}

}  // namespace chaosbed::cli
