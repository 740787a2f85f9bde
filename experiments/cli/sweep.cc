// `chaosbed sweep SPEC [--out DIR]`: every point of the spec's sweep grid x seeds plus a no-chaos baseline,
// each a full `chaosbed run` into DIR/points/<id>/; resumable; writes DIR/sweep.csv and DIR/crossover.svg
// (experiments/sweep/sweep.h). Exit 0 when every point completed, 4 when any failed, 3 on an invalid spec.

#include <gflags/gflags.h>
#include <signal.h>

#include <atomic>
#include <cstdio>

#include "chaos/controller.h"
#include "experiments/cli/cli.h"
#include "experiments/run/experiment.h"
#include "experiments/run/provenance.h"
#include "experiments/sweep/sweep.h"

DECLARE_string(out);
DECLARE_string(metrics_addr);
DECLARE_bool(metrics_allow_remote);
DEFINE_double(wait_quiet_s, 0, "sweep, tune, noise: before each run, wait up to this long for the 1-minute load to fall to "
              "half the cores (a run's own load lingers in the next one's for about a minute); 0: do not wait");

namespace chaosbed::cli {

int runSweep(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chaosbed sweep SPEC [--out DIR] [--metrics_addr HOST:PORT]\n");
    return kExitUsage;
  }
  if (!checkMetricsFlags("sweep")) return kExitUsage;
  config::Diagnostics diagnostics;
  auto spec = spec::readExperimentSpec(argv[1], {}, &diagnostics);
  if (!spec) {
    std::fputs(diagnostics.toString().c_str(), stderr);
    return kExitInvalidSpec;
  }
  std::atomic<bool> interrupted{false};
  auto watcher = chaos::StopSignalWatcher::start([&](int) { interrupted = true; });
  if (!watcher.isOk()) {
    std::fprintf(stderr, "chaosbed sweep: %s\n", watcher.status().toString().c_str());
    return kExitInfrastructure;
  }
  sweep::SweepOptions options;
  options.spec_path = argv[1];
  options.out_dir = FLAGS_out.empty() ? spec->output.dir + "/" + spec->metadata.name + "/sweep" : FLAGS_out;
  auto runner = [&](const spec::ExperimentSpec& point, const std::string& dir) -> Result<bool> {
    if (interrupted) return Status::cancelled("interrupted");
    if (FLAGS_wait_quiet_s > 0) (void)run::waitForQuiet(FLAGS_wait_quiet_s, stdout);
    run::ExperimentOptions ro;
    ro.out_dir = dir;
    ro.metrics_addr = FLAGS_metrics_addr;
    ro.metrics_allow_remote = FLAGS_metrics_allow_remote;
    ro.interrupted = &interrupted;
    auto outcome = run::runExperiment(point, ro);
    if (interrupted) return Status::cancelled("interrupted");
    if (!outcome.isOk()) return outcome.status();
    return outcome->complete;
  };
  auto outcome = sweep::runSweep(options, runner);
  if (interrupted) return (*watcher)->received() == SIGTERM ? 143 : kExitInterrupted;
  if (!outcome.isOk()) {
    std::fprintf(stderr, "chaosbed sweep: %s: %s\n", argv[1], outcome.status().toString().c_str());
    return outcome.status().code() == StatusCode::kInvalidArgument ? kExitInvalidSpec : kExitInfrastructure;
  }
  std::printf("sweep: %d point(s): %d run now, %d already complete, %d failed\n", outcome->points, outcome->ran,
              outcome->resumed, outcome->failed);
  for (const auto& c : outcome->crossings) std::printf("crossover: %s\n", c.c_str());
  std::printf("results: %s/sweep.csv\n", options.out_dir.c_str());
  return outcome->failed ? kExitInfrastructure : kExitPass;
}

}  // namespace chaosbed::cli
