// `chaosbed run SPEC [--out DIR]`: every strategy of the spec, one after the other, under the same drawn
// chaos schedule; live progress, a comparison table, and the results directory (experiments/run/results.h).

#include <gflags/gflags.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "chaos/controller.h"
#include "experiments/cli/cli.h"
#include "experiments/run/experiment.h"

DEFINE_string(out, "", "run: results directory (default: <output.dir>/<experiment>/<UTC time>-<id>)");
DEFINE_string(metrics_addr, "", "run: host:port of the Prometheus endpoint (default: the spec's metrics.listen; "
                                "port 0 picks a free port; 'off' disables it)");

namespace chaosbed::cli {

int runExperiment(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chaosbed run SPEC [--out DIR] [--metrics_addr HOST:PORT]\n");
    return kExitUsage;
  }
  config::Diagnostics diagnostics;
  auto spec = spec::readExperimentSpec(argv[1], {}, &diagnostics);
  if (!spec) {
    for (const auto& d : diagnostics.all()) std::fprintf(stderr, "%s\n", d.toString().c_str());
    return kExitInvalidSpec;
  }
  std::atomic<bool> interrupted{false};
  auto watcher = chaos::StopSignalWatcher::start([&](int) { interrupted = true; });
  if (!watcher.isOk()) {
    std::fprintf(stderr, "chaosbed run: %s\n", watcher.status().toString().c_str());
    return kExitInfrastructure;
  }
  run::ExperimentOptions options;
  options.out_dir = FLAGS_out;
  options.metrics_addr = FLAGS_metrics_addr;
  options.interrupted = &interrupted;
  options.tty = isatty(STDOUT_FILENO);
  auto outcome = run::runExperiment(*spec, options);
  if (interrupted) return (*watcher)->received() == SIGTERM ? 143 : kExitInterrupted;
  if (!outcome.isOk()) {
    std::fprintf(stderr, "chaosbed run: %s: %s\n", argv[1], outcome.status().toString().c_str());
    return outcome.status().code() == StatusCode::kInvalidArgument ? kExitInvalidSpec : kExitInfrastructure;
  }
  return kExitPass;
}

}  // namespace chaosbed::cli
