#pragma once
// `chaosbed tune`: each strategy's best training recipe without faults, so that a comparison under chaos
// starts from each strategy's own best settings rather than from one shared recipe that favours one of them.
//
// For every strategy of the spec and every (learning_rate, momentum) of the grid, and, for a parameter server,
// every shard count of --tune_shards, and every seed, one run of the spec with that strategy alone, that
// recipe and no chaos section: a server that is the bottleneck is tuned away like a learning rate. A recipe's score is its restricted
// mean TTA over the seeds (the sustained TTA, an unreached target counting as the time limit: a lower bound
// that never prefers a recipe that misses the target to one that reaches it); the lowest score wins, ties
// going to the grid's earlier recipe.
//
// Layout of the tune directory (resumable like a sweep: a complete point is not run again):
//   points/<label>/<id>/   one run's results directory (run/results.h)
//   tune.csv               one row per run: label, kind, learning_rate, momentum, seed, tta_sustained_s, reached,
//                          shards (a parameter server's; empty for mirrored)
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
  std::vector<int64_t> seeds;          // empty: the spec's seed
  std::vector<int> shards;             // parameter servers' shard counts; empty: each strategy's own
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
  std::vector<RecipeScore> recipes;  // in grid order
  size_t winner = 0;                 // index into recipes
};

struct TuneOutcome {
  std::vector<StrategyTuning> strategies;
  int ran = 0, resumed = 0, failed = 0;
};

// The grid's recipes for a strategy: its own recipe with every (learning_rate, momentum) of the options.
std::vector<spec::Recipe> recipeGrid(const spec::Recipe& base, const TuneOptions& options);
// The shard counts tried for a strategy: --tune_shards for a parameter server, else its own.
std::vector<int> shardGrid(const spec::StrategySpec& strategy, const TuneOptions& options);
// The spec of one tuning run: only `label`, with `recipe` and `shards`, no chaos, no sweep, that seed.
spec::ExperimentSpec pointSpec(const spec::ExperimentSpec& base, const std::string& label, const spec::Recipe& recipe,
                               int shards, int64_t seed);
// The index of the lowest score (the first of equal ones).
size_t bestRecipe(const std::vector<RecipeScore>& recipes);

Result<TuneOutcome> runTune(const TuneOptions& options, const sweep::PointRunner& runner);

}  // namespace chaosbed::tune
