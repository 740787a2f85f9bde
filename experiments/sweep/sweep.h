#pragma once
// `chaosbed sweep`: runs an experiment spec over its sweep grid (spec.h: SweepSpec, sweepPoints) times its
// seeds, plus an automatic no-chaos baseline, and summarises time-to-accuracy with confidence intervals.
//
// Layout of the sweep directory:
//   points/<id>/     one runExperiment results directory per point (run/results.h)
//   sweep.csv        one "point" row per (point, strategy), with the run's provenance (commit, dirty tree,
//                    load at its start, quiet) and the strategy's place in the run order; then one "summary"
//                    row per (grid point or baseline, strategy): runs, reached, censored_fraction, mean TTA
//                    and its 95% CI (plus the restricted mean and the point's TTA ratio and its kind, see
//                    below), and the ratio paired by seed (stats::pairedRatio: its estimate, interval,
//                    confidence level, method and p-value, and the p-value after Holm's correction over every
//                    paired comparison of the sweep): on a mirrored strategy's row TTA(parameter_server) /
//                    TTA(that strategy), on the parameter server's row the same against the first mirrored
//                    strategy; with --seeds auto, seeds_stop says why the point has the seeds it has
//
// Strategies' runs are interleaved: a point at an odd position in the seed list runs its strategies in the
// reverse order, so that neither always runs first on a warm or a cold machine.
//   crossover.svg    TTA(parameter_server) / TTA(mirrored) against the first swept variable, with the no-chaos
//                    baseline's ratio as a reference line when there is one baseline
//
// Point ids are stable (a function of the overrides and the seed only), so a rerun of the same spec finds
// the points it already finished: a point whose points/<id>/summary.json says "complete": true is not run
// again; any other point directory is cleared and run afresh. Baseline points remove the chaos section and keep the grid's non-chaos overrides (so a grid over
// cluster.workers gets a baseline per worker count; a grid over chaos parameters gets one per seed).
//
// Unreached targets (censored TTA): a run that stops before the target has no TTA; its TTA is at least the
// time limit. Mean and CI are over the runs that reached it, with the censored fraction beside them; the
// restricted mean counts every unreached run as the time limit, so it is a lower bound on the strategy's
// mean TTA. The crossover ratio TTA(parameter_server) / TTA(mirrored) uses the plain means when no run of
// either strategy was censored; otherwise the restricted mean of a censored strategy, which turns the ratio
// into a bound (mirrored censored: ratio <= shown; parameter server censored: ratio >= shown). Crossover
// detection trusts a bound only on its decisive side (a "<=" bound below 1 is below 1, one above 1 says
// nothing). When both strategies have censored runs the direction is unknown (hollow marker, not used for
// crossings); when neither reached the target at all there is no ratio.

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/spec/spec.h"
#include "experiments/stats/paired.h"
#include "transports/base/status.h"

namespace chaosbed::sweep {

struct PlannedPoint {
  std::string id;                                              // directory name under points/
  std::string group;                                           // the grid point ("baseline ..." for baselines)
  std::vector<std::pair<std::string, std::string>> overrides;  // grid overrides (path, YAML value)
  int64_t seed = 0;
  bool baseline = false;
  // The overrides to apply to the spec file, as "path=value" (core/config/override.h): sweep=null, the grid
  // values, the seed, and chaos=null for a baseline.
  std::vector<std::string> assignments() const;
};

// Stable directory name: a readable slug of the overrides and seed plus a hash of them.
std::string pointId(const std::vector<std::pair<std::string, std::string>>& overrides, int64_t seed, bool baseline);
// Every point of the sweep, baselines included, in run order (baselines first). A spec without a sweep
// section has one grid point (no overrides) with the spec's seed.
std::vector<PlannedPoint> planSweep(const spec::ExperimentSpec& spec);

// Runs one point into `dir`; returns whether the run was complete.
using PointRunner = std::function<Result<bool>(const spec::ExperimentSpec& spec, const std::string& dir)>;

// Two-sided 95% Student-t quantile for `df` degrees of freedom (df >= 1).
double tQuantile95(int df);

struct TtaStats {
  int runs = 0;
  int reached = 0;
  double mean = 0;     // over runs that reached the target; meaningless when reached == 0
  double geomean = 0;  // exp(mean of log TTA) over the same runs
  // The geometric mean's 95% interval, exp(mean log -/+ t * sd log / sqrt(n)): TTAs are positive and skewed, and
  // an interval on their logs never goes below 0 (mean -/+ t sd/sqrt(n) did at n = 2). Equal to geomean when
  // reached == 1.
  double ci_low = 0;
  double ci_high = 0;
  double restricted_mean = 0;  // over all runs, an unreached run counting as the time limit
  double censoredFraction() const { return runs ? double(runs - reached) / runs : 0; }
};
// `time_limit_s`: the value an unreached run (nullopt) counts as in restricted_mean.
TtaStats ttaStats(const std::vector<std::optional<double>>& ttas, double time_limit_s);

// TTA(parameter_server) / TTA(mirrored) at one grid point, with censoring as described above.
enum class RatioKind : uint8_t {
  kExact,    // every run of both strategies reached the target
  kAtMost,   // mirrored has unreached runs: the true ratio is <= value
  kAtLeast,  // the parameter server has unreached runs: the true ratio is >= value
  kUnknown,  // both have unreached runs: value is the ratio of restricted means, direction unknown
};
const char* ratioKindName(RatioKind kind);  // exact, at_most, at_least, unknown
struct TtaRatio {
  double value = 0;
  RatioKind kind = RatioKind::kExact;
  // -1 decisively below 1, +1 decisively above, 0 undecided (a bound on its weak side, unknown, exactly 1).
  int side() const;
};
// nullopt when a strategy has no runs or neither reached the target in any run.
std::optional<TtaRatio> ttaRatio(const TtaStats& ps, const TtaStats& mirrored);

// The x axis of the crossover plot is logarithmic when every swept value is a positive number and they span
// more than a factor of 10.
bool logAxis(const std::vector<std::string>& xvalues);

// `--seeds auto`: seeds are added to a grid point until each of its paired ratios (the parameter server
// against each mirrored strategy) is precise or decided, or the point has max_seeds runs per strategy. The
// spec's seeds are the first look; each look adds the next seed (one more than the largest so far) to every
// point still open, its baseline being a point of its own. Precise: the interval lies within
// [r / (1 + precision), r x (1 + precision)] of the estimate r. Decided: the Holm-corrected p-value is below
// 0.05 / the most looks a point can take (Bonferroni over the looks: stopping as soon as a point is decided
// then keeps the family-wise error at 0.05, which testing at 0.05 at every look would not).
struct AutoSeeds {
  double precision = 0.1;
  int max_seeds = 10;
};

// Why a point of a --seeds auto sweep has the seeds it has.
enum class SeedStop : uint8_t {
  kOpen,      // needs more seeds
  kPrecise,   // every comparison precise or decided, not all decided
  kDecided,   // every comparison decided
  kMaxSeeds,  // max_seeds reached first
};
const char* seedStopName(SeedStop stop);  // open, precise, decided, max_seeds
// One point's comparisons, each with its Holm-corrected p-value; `seeds`: the point's runs per strategy;
// `max_looks`: the most looks any point can take (max_seeds - the spec's seeds + 1).
struct Comparison {
  stats::PairedRatio ratio;
  double p_holm = 1;
};
SeedStop seedStop(const std::vector<Comparison>& comparisons, int seeds, int max_looks, const AutoSeeds& rule);

struct SweepOptions {
  std::string spec_path;
  std::string out_dir;
  FILE* progress = stdout;  // nullptr: silent
  std::optional<AutoSeeds> auto_seeds;  // runSweep only (a local executor): others run the spec's seeds
};

struct SweepOutcome {
  int points = 0;
  int ran = 0;       // points run now
  int resumed = 0;   // points skipped because they were complete
  int failed = 0;    // points whose run returned an error or was incomplete
  std::vector<std::string> crossings;  // "parameter_server overtakes mirrored between x=a and x=b (...)"
  std::map<std::string, SeedStop> seed_stops;  // with auto_seeds: each point (group) and why it stopped
};

// Plans, runs (or resumes) every point with `runner`, then writes sweep.csv and crossover.svg. Invalid
// overrides are InvalidArgument (naming the point); a failed point does not stop the sweep.
Result<SweepOutcome> runSweep(const SweepOptions& options, const PointRunner& runner);

// The pieces of runSweep for executors that run points elsewhere (a Slurm job array, experiments/sweep/
// slurm.h; a Kubernetes Indexed Job): every point in run order, each validated (a point's index here is its
// array or job index); the points not complete yet; one point run afresh into its directory by `runner`
// (unless it is complete already: then it is not run again);
// and sweep.csv and crossover.svg written from the points' directories, where `ran` names the points handed
// to the executor by this call (run now), a complete point not among them counts as already complete, and
// every point not complete counts as failed.
Result<std::vector<PlannedPoint>> plannedPoints(const SweepOptions& options);
Result<std::vector<PlannedPoint>> pendingPoints(const SweepOptions& options);
Result<bool> runSweepPoint(const SweepOptions& options, const std::string& point_id, const PointRunner& runner);
Result<SweepOutcome> gatherSweep(const SweepOptions& options, const std::vector<std::string>& ran);

// True when dir/summary.json exists and says "complete": true.
bool pointComplete(const std::string& dir);

}  // namespace chaosbed::sweep
