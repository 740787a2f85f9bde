#pragma once
// `chaosbed tune`: each strategy's best training recipe without faults, so that a comparison under chaos
// starts from each strategy's own best settings rather than from one shared recipe that favours one of them.
//
// For every strategy of the spec and every (learning_rate, momentum) of the grid, every batch_per_worker of
// --tune_batch, and, for a parameter server, every shard count of --tune_shards, and every seed, one run of the spec with that strategy alone, that
// recipe and no chaos section: a server that is the bottleneck is tuned away like a learning rate. A recipe's
// score is its restricted mean TTA over the seeds (the sustained TTA, an unreached target counting as the
// time limit: a lower bound that never prefers a recipe that misses the target to one that reaches it).
// The lowest score wins, except that a simpler recipe (fewer shards, then less momentum) whose score is
// within the noise of the lowest (the lowest's standard error over its seeds, at least 1% of it) wins
// instead, and tune.json says so. A winner on the edge of the grid's learning rates (or at its highest
// momentum) grows the grid past that edge (learning rate x2 or /2, momentum halfway to 1), up to
// TuneOptions::grow times per strategy: a best recipe at the edge may not be the best.
//
// Layout of the tune directory (resumable like a sweep: a complete point is not run again):
//   points/<label>/<id>/   one run's results directory (run/results.h)
//   tune.csv               one row per run: label, kind, learning_rate, momentum, seed, tta_sustained_s,
//                          tta_resolution_s, reached, shards (a parameter server's; empty for mirrored),
//                          batch_per_worker
//   tune.json              the grid, the seeds, every recipe's score and each strategy's winner
//   tuned.yaml             the spec with each strategy's recipe set to its winner (strategies[i].training)

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "experiments/spec/spec.h"
#include "experiments/sweep/sweep.h"
#include "transports/base/status.h"

namespace chaosbed::tune {

struct TuneOptions {
  std::string spec_path;
  std::string out_dir;
  std::vector<double> learning_rates;  // empty: the spec's training.learning_rate x {0.25, 0.5, 1, 2}
  std::vector<double> momenta;         // empty: {0, 0.5, 0.9}
  std::vector<int64_t> seeds;          // empty: the spec's seed and the next two
  int grow = 2;                        // how often a strategy's grid may grow past an edge its winner is on
  std::vector<int> shards;             // parameter servers' shard counts; empty: each strategy's own
  std::vector<int> batches;            // batch_per_worker values; empty: each strategy's own
  FILE* progress = stdout;             // nullptr: silent
};

struct RecipeScore {
  spec::Recipe recipe;
  int shards = 0;                           // the parameter server's shards (the strategy's own otherwise)
  std::vector<std::optional<double>> ttas;  // per seed; none = the target was not reached
  double score = 0;                         // restricted mean TTA over the seeds
};

struct StrategyTuning {
  std::string label;
  std::vector<RecipeScore> recipes;  // in the order they were run (the grid's, then each growth's)
  size_t winner = 0;                 // index into recipes
  size_t lowest = 0;                 // the lowest score; the winner unless a simpler recipe tied with it
  int grown = 0;                     // how often the grid grew past an edge
};

struct TuneOutcome {
  std::vector<StrategyTuning> strategies;
  int ran = 0, resumed = 0, failed = 0;
};

// The grid's axes for a strategy, before any growth: the options' learning rates and momenta, or the defaults.
struct GridAxes {
  std::vector<double> learning_rates, momenta;
};
GridAxes gridAxes(const spec::Recipe& base, const TuneOptions& options);
// The shard counts tried for a strategy: --tune_shards for a parameter server, else its own.
std::vector<int> shardGrid(const spec::StrategySpec& strategy, const TuneOptions& options);
// The batch sizes tried for a strategy: --tune_batch, else its own.
std::vector<int> batchGrid(const spec::StrategySpec& strategy, const TuneOptions& options);
// The spec of one tuning run: only `label`, with `recipe` and `shards`, no chaos, no sweep, that seed.
spec::ExperimentSpec pointSpec(const spec::ExperimentSpec& base, const std::string& label, const spec::Recipe& recipe,
                               int shards, int64_t seed);
// The winner: the lowest score, or the simplest recipe (fewest shards, then least momentum, then the lowest
// score) among those within the noise of it (TuneOptions). Earlier recipes win exact ties.
size_t bestRecipe(const std::vector<RecipeScore>& recipes);
// The lowest score's index (the first of equal ones), and the noise a tie is judged by.
size_t lowestScore(const std::vector<RecipeScore>& recipes);
double scoreNoise(const RecipeScore& r);

Result<TuneOutcome> runTune(const TuneOptions& options, const sweep::PointRunner& runner);

}  // namespace chaosbed::tune
