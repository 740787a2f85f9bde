// `chaosbed sweep SPEC [--out DIR]`: every point of the spec's sweep grid x seeds plus a no-chaos baseline,
// each a full `chaosbed run` into DIR/points/<id>/; resumable; writes DIR/sweep.csv and DIR/crossover.svg
// (experiments/sweep/sweep.h). Exit 0 when every point completed, 4 when any failed, 3 on an invalid spec.

#include <gflags/gflags.h>

#include <cstdio>

#include "experiments/cli/batch.h"
#include "experiments/cli/cli.h"
#include "experiments/sweep/sweep.h"

DECLARE_string(out);

namespace chaosbed::cli {

int runSweep(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chaosbed sweep SPEC [--out DIR] [--metrics_addr HOST:PORT] [--wait_quiet_s S]\n");
    return kExitUsage;
  }
  if (!checkMetricsFlags("sweep")) return kExitUsage;
  int code = kExitPass;
  auto batch = Batch::open("sweep", argv[1], &code);
  if (!batch) return code;
  const spec::ExperimentSpec& spec = batch->spec();
  sweep::SweepOptions options;
  options.spec_path = argv[1];
  options.out_dir = FLAGS_out.empty() ? spec.output.dir + "/" + spec.metadata.name + "/sweep" : FLAGS_out;
  auto outcome = sweep::runSweep(options, batch->runner(stdout));
  if (batch->interrupted()) return batch->interruptedExitCode();
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
