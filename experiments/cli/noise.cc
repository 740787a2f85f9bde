// `chaosbed noise SPEC [--runs N] [--out DIR]`: the no-fault spread of TTA per strategy (CV over N seeds,
// experiments/sweep/noise.h); resumable; DIR/noise.csv and DIR/noise.json. Exit 0 when every run completed,
// 4 when any failed, 3 on a bad spec.

#include <gflags/gflags.h>

#include <cstdio>

#include "experiments/cli/batch.h"
#include "experiments/cli/cli.h"
#include "experiments/sweep/noise.h"

DECLARE_string(out);
DEFINE_int32(runs, 5, "runs without faults (seeds spec.seed, spec.seed + 1, ...)");

namespace chaosbed::cli {

int runNoise(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chaosbed noise SPEC [--runs N] [--out DIR]\n");
    return kExitUsage;
  }
  if (!checkMetricsFlags("noise")) return kExitUsage;
  if (FLAGS_runs < 2) {
    std::fprintf(stderr, "chaosbed noise: --runs must be at least 2, got %d\n", FLAGS_runs);
    return kExitUsage;
  }
  int code = kExitPass;
  auto batch = Batch::open("noise", argv[1], &code);
  if (!batch) return code;
  sweep::NoiseOptions options;
  options.spec_path = argv[1];
  options.out_dir = FLAGS_out.empty() ? batch->spec().output.dir + "/" + batch->spec().metadata.name + "/noise" : FLAGS_out;
  options.runs = FLAGS_runs;
  auto outcome = sweep::runNoise(options, batch->runner(nullptr));
  if (batch->interrupted()) return batch->interruptedExitCode();
  if (!outcome.isOk()) {
    std::fprintf(stderr, "chaosbed noise: %s: %s\n", argv[1], outcome.status().message().c_str());
    return outcome.status().code() == StatusCode::kInvalidArgument ? kExitInvalidSpec : kExitInfrastructure;
  }
  std::printf("noise: %d run(s) now, %d already complete, %d failed\n", outcome->ran, outcome->resumed, outcome->failed);
  std::printf("%-22s %8s %12s %10s %8s %14s %16s\n", "strategy", "reached", "TTA mean(s)", "sd(s)", "CV", "sustained CV",
              "worst resolution");
  for (const auto& r : outcome->strategies)
    std::printf("%-22s %4d/%-3d %12.3f %10.3f %7.1f%% %13.1f%% %15.2f%%\n", r.label.c_str(), r.tta.reached, r.tta.runs,
                r.tta.mean, r.tta.sd, 100 * r.tta.cv(), 100 * r.tta_sustained.cv(), 100 * r.worst_resolution_fraction);
  std::printf("results: %s/noise.json\n", options.out_dir.c_str());
  return outcome->failed ? kExitInfrastructure : kExitPass;
}

}  // namespace chaosbed::cli
