#pragma once
// `chaosbed noise`: the run-to-run spread of TTA without faults, per strategy: how large a difference a
// comparison must show before it means anything. N runs of the spec with its chaos section removed, seeds
// spec.seed, spec.seed + 1, ... (the spread a sweep over seeds meets: data order, initialisation, the
// machine), strategies interleaved (odd runs reverse their order). Resumable like a sweep.
//
// Layout: runs/<i>-seed-<s>/ (one results directory each), noise.csv (one row per run and strategy) and
// noise.json (per strategy: runs, reached, mean, sd and CV of tta_seconds and of tta_sustained_seconds, over
// the runs that reached the target, with the censored fraction beside them).

#include <cstdio>
#include <string>
#include <vector>

#include "experiments/sweep/sweep.h"
#include "transports/base/status.h"

namespace chaosbed::sweep {

struct NoiseOptions {
  std::string spec_path;
  std::string out_dir;
  int runs = 5;
  FILE* progress = stdout;
};

struct Spread {
  int runs = 0, reached = 0;
  double mean = 0, sd = 0;
  double cv() const { return mean > 0 ? sd / mean : 0; }
};
// Sample mean and standard deviation of the reached values (sd 0 with fewer than two).
Spread spreadOf(const std::vector<std::optional<double>>& values);

struct NoiseRow {
  std::string label;
  Spread tta, tta_sustained;
  double worst_resolution_fraction = 0;  // the largest share of its TTA that a run's TTA resolution was
};

struct NoiseOutcome {
  std::vector<NoiseRow> strategies;
  int ran = 0, resumed = 0, failed = 0;
};

Result<NoiseOutcome> runNoise(const NoiseOptions& options, const PointRunner& runner);

}  // namespace chaosbed::sweep
