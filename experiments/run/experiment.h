#pragma once
// One experiment run: every strategy of a spec, one after the other, under the same drawn chaos schedule,
// with one Prometheus endpoint and one results directory (results.h). `chaosbed run` is a thin CLI over
// it; sweeps and suites call it once per point.

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "experiments/run/strategy_run.h"
#include "experiments/spec/spec.h"

namespace chaosbed::run {

struct ExperimentOptions {
  std::string out_dir;        // empty: <output.dir>/<experiment>/<UTC time>-<id> with a `latest` link
  std::string metrics_addr;   // empty: the spec's metrics.listen; "off": no endpoint
  // Let the endpoint bind beyond loopback (so does the spec's metrics.allow_remote); a warning says so.
  bool metrics_allow_remote = false;
  // Wait for scrapes at each strategy's start and at the end (so does the spec's metrics.await_scrape).
  bool metrics_await_scrape = false;
  std::string push_gateway;   // empty: the spec's metrics.push_gateway (if any); checked by the caller
  // The run's secret, provisioned by the caller (a Kubernetes Secret mounted in the controller's and the
  // agents' pods): a 0600 file of this user, read as it is and left in place. Empty: a fresh secret per run,
  // in the results directory, removed at the end.
  std::string secret_file;
  const std::atomic<bool>* interrupted = nullptr;
  FILE* progress = stdout;    // live progress and the final table; nullptr: silent
  bool tty = false;           // rewrite one progress line in place
};

struct ExperimentOutcome {
  std::string dir;
  std::vector<StrategyResult> results;
  bool complete = false;      // every strategy ran to its end (not interrupted, no infrastructure error)
  bool interrupted = false;
};

// OK when `dir` does not exist or is an empty directory; InvalidArgument saying why otherwise.
Status checkFreshOutDir(const std::string& dir);

// InvalidArgument when the chaos schedule cannot be drawn or breaks the blast-radius guard (a spec error);
// Unavailable/IoError/... for infrastructure failures. Results measured before a failure are on disk.
Result<ExperimentOutcome> runExperiment(const spec::ExperimentSpec& spec, const ExperimentOptions& options);

}  // namespace chaosbed::run
