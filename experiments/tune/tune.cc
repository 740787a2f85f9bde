#include "experiments/tune/tune.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/config/config.h"
#include "experiments/run/results.h"

namespace chaosbed::tune {
namespace {

namespace fs = std::filesystem;

std::string number(double v) { return config::formatDouble(v); }

std::string recipeId(const spec::Recipe& r, int shards, bool shards_tuned, int64_t seed) {
  return "lr" + number(r.learning_rate) + "-m" + number(r.momentum) +
         (shards_tuned ? "-s" + std::to_string(shards) : std::string()) + "-seed" + std::to_string(seed);
}

// The sustained TTA of `label` in a finished point's summary; none when it did not reach the target.
std::optional<double> sustainedTta(const std::string& dir, const std::string& label) {
  std::ifstream in(dir + "/summary.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("strategies") || !j["strategies"].contains(label)) return std::nullopt;
  const auto& s = j["strategies"][label];
  if (!s.contains("tta_sustained_seconds") || !s["tta_sustained_seconds"].is_number()) return std::nullopt;
  return s["tta_sustained_seconds"].get<double>();
}

}  // namespace

std::vector<spec::Recipe> recipeGrid(const spec::Recipe& base, const TuneOptions& o) {
  std::vector<double> lrs = o.learning_rates, moms = o.momenta;
  if (lrs.empty())
    for (double f : {0.25, 0.5, 1.0, 2.0}) lrs.push_back(base.learning_rate * f);
  if (moms.empty()) moms = {0.0, 0.5, 0.9};
  std::vector<spec::Recipe> grid;
  for (double lr : lrs)
    for (double m : moms) {
      spec::Recipe r = base;
      r.learning_rate = lr;
      r.momentum = m;
      grid.push_back(r);
    }
  return grid;
}

std::vector<int> shardGrid(const spec::StrategySpec& strategy, const TuneOptions& options) {
  if (strategy.kind == spec::StrategyKind::kParameterServer && !options.shards.empty()) return options.shards;
  return {strategy.shards};
}

spec::ExperimentSpec pointSpec(const spec::ExperimentSpec& base, const std::string& label, const spec::Recipe& recipe,
                               int shards, int64_t seed) {
  spec::ExperimentSpec s = base;
  s.strategies.clear();
  for (const spec::StrategySpec& st : base.strategies)
    if (st.label == label) s.strategies.push_back(st);
  s.strategies.front().recipe = recipe;
  s.strategies.front().shards = shards;
  // reset(), not assignment: assigning to a yaml-cpp node writes through to the node it shares with base.
  s.chaos.yaml.reset();
  s.chaos.parsed = {};
  s.sweep.reset();
  s.seed = seed;
  s.training.seed = seed;
  return s;
}

size_t bestRecipe(const std::vector<RecipeScore>& recipes) {
  size_t best = 0;
  for (size_t i = 1; i < recipes.size(); ++i)
    if (recipes[i].score < recipes[best].score) best = i;
  return best;
}

Result<TuneOutcome> runTune(const TuneOptions& options, const sweep::PointRunner& runner) {
  CHAOSBED_ASSIGN_OR_RETURN(spec::ExperimentSpec base, spec::loadExperimentSpec(options.spec_path));
  const std::vector<int64_t> seeds = options.seeds.empty() ? std::vector<int64_t>{base.seed} : options.seeds;
  for (double lr : options.learning_rates)
    if (!(lr > 0)) return Status::invalidArgument("tune: learning rates must be > 0, got " + number(lr));
  for (double m : options.momenta)
    if (!(m >= 0 && m < 1)) return Status::invalidArgument("tune: momenta must be in [0, 1), got " + number(m));
  for (int n : options.shards)
    if (n < 1 || n > 64) return Status::invalidArgument("tune: shard counts must be in 1..64, got " + std::to_string(n));
  std::error_code ec;
  fs::create_directories(options.out_dir + "/points", ec);
  if (ec) return Status::ioError("cannot create " + options.out_dir + "/points: " + ec.message());

  TuneOutcome out;
  std::ostringstream csv;
  csv << "label,kind,learning_rate,momentum,seed,tta_sustained_s,reached,shards\n";
  size_t total = 0, done = 0;
  for (const auto& st : base.strategies)
    total += recipeGrid(st.recipe, options).size() * shardGrid(st, options).size() * seeds.size();
  for (const spec::StrategySpec& st : base.strategies) {
    StrategyTuning tuning;
    tuning.label = st.label;
    const bool shards_tuned = st.kind == spec::StrategyKind::kParameterServer && !options.shards.empty();
    for (const spec::Recipe& recipe : recipeGrid(st.recipe, options))
      for (int shards : shardGrid(st, options)) {
        RecipeScore score;
        score.recipe = recipe;
        score.shards = shards;
        for (int64_t seed : seeds) {
          ++done;
          const std::string dir = options.out_dir + "/points/" + st.label + "/" + recipeId(recipe, shards, shards_tuned, seed);
          if (sweep::pointComplete(dir)) {
            ++out.resumed;
          } else {
            fs::remove_all(dir, ec);
            if (options.progress)
              std::fprintf(options.progress, "tune [%zu/%zu] %s: learning_rate %s, momentum %s%s, seed %lld\n", done,
                           total, st.label.c_str(), number(recipe.learning_rate).c_str(),
                           number(recipe.momentum).c_str(),
                           shards_tuned ? (", shards " + std::to_string(shards)).c_str() : "",
                           static_cast<long long>(seed));
            Result<bool> complete = runner(pointSpec(base, st.label, recipe, shards, seed), dir);
            if (!complete.isOk() && complete.status().code() == StatusCode::kCancelled) return complete.status();
            if (!complete.isOk() || !*complete) ++out.failed;
            else ++out.ran;
          }
          const auto tta = sweep::pointComplete(dir) ? sustainedTta(dir, st.label) : std::nullopt;
          score.ttas.push_back(tta);
          csv << st.label << "," << spec::name(st.kind) << "," << number(recipe.learning_rate) << ","
              << number(recipe.momentum) << "," << seed << "," << (tta ? number(*tta) : "") << ","
              << (tta ? "true" : "false") << ","
              << (st.kind == spec::StrategyKind::kParameterServer ? std::to_string(shards) : std::string()) << "\n";
        }
        score.score = sweep::ttaStats(score.ttas, base.training.time_limit_s).restricted_mean;
        tuning.recipes.push_back(std::move(score));
      }
    tuning.winner = bestRecipe(tuning.recipes);
    out.strategies.push_back(std::move(tuning));
  }

  // The results: every run, every recipe's score, and the spec with each strategy's winner.
  nlohmann::json j = {{"spec", options.spec_path}, {"seeds", seeds},
                      {"score", "restricted mean of tta_sustained_seconds over the seeds (unreached = time limit)"}};
  spec::ExperimentSpec tuned = base;
  for (size_t i = 0; i < out.strategies.size(); ++i) {
    const StrategyTuning& t = out.strategies[i];
    nlohmann::json recipes = nlohmann::json::array();
    for (const RecipeScore& r : t.recipes) {
      nlohmann::json ttas = nlohmann::json::array();
      for (const auto& v : r.ttas) ttas.push_back(v ? nlohmann::json(*v) : nlohmann::json(nullptr));
      recipes.push_back({{"learning_rate", r.recipe.learning_rate}, {"momentum", r.recipe.momentum},
                         {"batch_per_worker", r.recipe.batch_per_worker}, {"shards", r.shards},
                         {"tta_sustained_s", ttas}, {"score_s", r.score}});
    }
    const spec::Recipe& w = t.recipes[t.winner].recipe;
    j["strategies"][t.label] = {{"recipes", recipes},
                                {"winner", {{"learning_rate", w.learning_rate}, {"momentum", w.momentum},
                                            {"batch_per_worker", w.batch_per_worker}, {"weight_decay", w.weight_decay},
                                            {"shards", t.recipes[t.winner].shards},
                                            {"score_s", t.recipes[t.winner].score}}}};
    tuned.strategies[i].recipe = w;
    tuned.strategies[i].shards = t.recipes[t.winner].shards;
  }
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(options.out_dir + "/tune.csv", csv.str(), 0644));
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(options.out_dir + "/tune.json", j.dump(2) + "\n", 0644));
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(
      options.out_dir + "/tuned.yaml",
      "# " + options.spec_path + " with each strategy's best no-fault recipe (chaosbed tune; see tune.json)\n" +
          spec::emitExperimentSpec(tuned),
      0644));
  return out;
}

}  // namespace chaosbed::tune
