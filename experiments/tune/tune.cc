#include "experiments/tune/tune.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "core/config/config.h"
#include "experiments/run/results.h"

namespace chaosbed::tune {
namespace {

namespace fs = std::filesystem;

std::string number(double v) { return config::formatDouble(v); }

// Stable across versions: an axis that is not tuned adds nothing, so an older tune directory resumes.
std::string recipeId(const spec::Recipe& r, int shards, bool shards_tuned, bool batch_tuned, int64_t seed) {
  return "lr" + number(r.learning_rate) + "-m" + number(r.momentum) +
         (shards_tuned ? "-s" + std::to_string(shards) : std::string()) +
         (batch_tuned ? "-b" + std::to_string(r.batch_per_worker) : std::string()) + "-seed" + std::to_string(seed);
}

// The sustained TTA of `label` in a finished point's summary and its resolution (how late it can be); none
// when it did not reach the target.
struct PointTta {
  double seconds = 0;
  double resolution_s = 0;
};
std::optional<PointTta> sustainedTta(const std::string& dir, const std::string& label) {
  std::ifstream in(dir + "/summary.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("strategies") || !j["strategies"].contains(label)) return std::nullopt;
  const auto& s = j["strategies"][label];
  if (!s.contains("tta_sustained_seconds") || !s["tta_sustained_seconds"].is_number()) return std::nullopt;
  const bool resolved = s.contains("tta_resolution_s") && s["tta_resolution_s"].is_number();
  return PointTta{s["tta_sustained_seconds"].get<double>(), resolved ? s["tta_resolution_s"].get<double>() : 0.0};
}

}  // namespace

GridAxes gridAxes(const spec::Recipe& base, const TuneOptions& o) {
  GridAxes g{o.learning_rates, o.momenta};
  if (g.learning_rates.empty())
    for (double f : {0.25, 0.5, 1.0, 2.0}) g.learning_rates.push_back(base.learning_rate * f);
  if (g.momenta.empty()) g.momenta = {0.0, 0.5, 0.9};
  return g;
}

std::vector<int> shardGrid(const spec::StrategySpec& strategy, const TuneOptions& options) {
  if (strategy.kind == spec::StrategyKind::kParameterServer && !options.shards.empty()) return options.shards;
  return {strategy.shards};
}

std::vector<int> batchGrid(const spec::StrategySpec& strategy, const TuneOptions& options) {
  if (!options.batches.empty()) return options.batches;
  return {strategy.recipe.batch_per_worker};
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

size_t lowestScore(const std::vector<RecipeScore>& recipes) {
  size_t best = 0;
  for (size_t i = 1; i < recipes.size(); ++i)
    if (recipes[i].score < recipes[best].score) best = i;
  return best;
}

double scoreNoise(const RecipeScore& r) {
  // The standard error of the seeds' TTAs, when every seed reached the target (a censored one has no spread).
  const size_t n = r.ttas.size();
  double se = 0;
  if (n >= 2 && std::all_of(r.ttas.begin(), r.ttas.end(), [](const auto& t) { return t.has_value(); })) {
    double mean = 0, ss = 0;
    for (const auto& t : r.ttas) mean += *t / double(n);
    for (const auto& t : r.ttas) ss += (*t - mean) * (*t - mean);
    se = std::sqrt(ss / double(n - 1) / double(n));
  }
  return std::max(se, 0.01 * r.score);
}

size_t bestRecipe(const std::vector<RecipeScore>& recipes) {
  if (recipes.empty()) return 0;
  const size_t lowest = lowestScore(recipes);
  const double within = recipes[lowest].score + scoreNoise(recipes[lowest]);
  size_t best = lowest;
  auto simpler = [&](const RecipeScore& a, const RecipeScore& b) {
    return std::make_tuple(a.shards, a.recipe.momentum, a.score) < std::make_tuple(b.shards, b.recipe.momentum, b.score);
  };
  for (size_t i = 0; i < recipes.size(); ++i)
    if (recipes[i].score <= within && simpler(recipes[i], recipes[best])) best = i;
  return best;
}

Result<TuneOutcome> runTune(const TuneOptions& options, const sweep::PointRunner& runner) {
  CHAOSBED_ASSIGN_OR_RETURN(spec::ExperimentSpec base, spec::loadExperimentSpec(options.spec_path));
  // Three seeds by default: one seed's TTA varies by 14-30% without faults, more than many recipes differ.
  const std::vector<int64_t> seeds =
      options.seeds.empty() ? std::vector<int64_t>{base.seed, base.seed + 1, base.seed + 2} : options.seeds;
  for (double lr : options.learning_rates)
    if (!(lr > 0)) return Status::invalidArgument("tune: learning rates must be > 0, got " + number(lr));
  for (double m : options.momenta)
    if (!(m >= 0 && m < 1)) return Status::invalidArgument("tune: momenta must be in [0, 1), got " + number(m));
  for (int n : options.shards)
    if (n < 1 || n > 64) return Status::invalidArgument("tune: shard counts must be in 1..64, got " + std::to_string(n));
  for (int b : options.batches)
    if (b < 1 || b > 65536)
      return Status::invalidArgument("tune: batch sizes must be in 1..65536, got " + std::to_string(b));
  if (options.grow < 0 || options.grow > 8)
    return Status::invalidArgument("tune: grow must be in 0..8, got " + std::to_string(options.grow));
  std::error_code ec;
  fs::create_directories(options.out_dir + "/points", ec);
  if (ec) return Status::ioError("cannot create " + options.out_dir + "/points: " + ec.message());

  TuneOutcome out;
  std::ostringstream csv;
  csv << "label,kind,learning_rate,momentum,seed,tta_sustained_s,tta_resolution_s,reached,shards,batch_per_worker\n";
  size_t total = 0, done = 0;
  for (const auto& st : base.strategies) {
    const GridAxes g = gridAxes(st.recipe, options);
    total += g.learning_rates.size() * g.momenta.size() * shardGrid(st, options).size() *
             batchGrid(st, options).size() * seeds.size();
  }
  for (const spec::StrategySpec& st : base.strategies) {
    StrategyTuning tuning;
    tuning.label = st.label;
    const bool shards_tuned = st.kind == spec::StrategyKind::kParameterServer && !options.shards.empty();
    const bool batch_tuned = !options.batches.empty();
    auto [lrs, moms] = gridAxes(st.recipe, options);  // grown past an edge the winner is on
    std::set<std::tuple<double, double, int, int>> scored;
    for (;;) {
      for (double lr : lrs)
        for (double m : moms)
          for (int shards : shardGrid(st, options))
          for (int batch : batchGrid(st, options)) {
            if (!scored.insert({lr, m, shards, batch}).second) continue;
            spec::Recipe recipe = st.recipe;
            recipe.learning_rate = lr;
            recipe.momentum = m;
            recipe.batch_per_worker = batch;
            RecipeScore score;
            score.recipe = recipe;
            score.shards = shards;
            for (int64_t seed : seeds) {
              ++done;
              total = std::max(total, done);
              const std::string dir =
                  options.out_dir + "/points/" + st.label + "/" + recipeId(recipe, shards, shards_tuned, batch_tuned, seed);
              if (sweep::pointComplete(dir)) {
                ++out.resumed;
              } else {
                fs::remove_all(dir, ec);
                if (options.progress)
                  std::fprintf(options.progress, "tune [%zu/%zu] %s: learning_rate %s, momentum %s%s%s, seed %lld\n",
                               done, total, st.label.c_str(), number(recipe.learning_rate).c_str(),
                               number(recipe.momentum).c_str(),
                               shards_tuned ? (", shards " + std::to_string(shards)).c_str() : "",
                               batch_tuned ? (", batch " + std::to_string(batch)).c_str() : "",
                               static_cast<long long>(seed));
                Result<bool> complete = runner(pointSpec(base, st.label, recipe, shards, seed), dir);
                if (!complete.isOk() && complete.status().code() == StatusCode::kCancelled) return complete.status();
                if (!complete.isOk() || !*complete) ++out.failed;
                else ++out.ran;
              }
              const auto tta = sweep::pointComplete(dir) ? sustainedTta(dir, st.label) : std::nullopt;
              const PointTta reached = tta.value_or(PointTta{});
              score.ttas.push_back(tta ? std::optional<double>(reached.seconds) : std::nullopt);
              csv << st.label << "," << spec::name(st.kind) << "," << number(recipe.learning_rate) << ","
                  << number(recipe.momentum) << "," << seed << "," << (tta ? number(reached.seconds) : "") << ","
                  << (tta ? number(reached.resolution_s) : "") << "," << (tta ? "true" : "false") << ","
                  << (st.kind == spec::StrategyKind::kParameterServer ? std::to_string(shards) : std::string()) << ","
                  << recipe.batch_per_worker << "\n";
            }
            score.score = sweep::ttaStats(score.ttas, base.training.time_limit_s).restricted_mean;
            tuning.recipes.push_back(std::move(score));
          }
      tuning.winner = bestRecipe(tuning.recipes);
      tuning.lowest = lowestScore(tuning.recipes);
      if (tuning.grown >= options.grow) break;
      // A winner on an edge of an axis that has more than one value: try past it.
      const spec::Recipe& w = tuning.recipes[tuning.winner].recipe;
      const auto [lr_min, lr_max] = std::minmax_element(lrs.begin(), lrs.end());
      const double m_max = *std::max_element(moms.begin(), moms.end());
      bool grew = false;
      if (lrs.size() >= 2 && w.learning_rate == *lr_max) lrs.push_back(*lr_max * 2), grew = true;
      else if (lrs.size() >= 2 && w.learning_rate == *lr_min) lrs.push_back(*lr_min / 2), grew = true;
      if (moms.size() >= 2 && w.momentum == m_max && m_max > 0 && m_max < 0.99) moms.push_back(1 - (1 - m_max) / 2), grew = true;
      if (!grew) break;
      ++tuning.grown;
      if (options.progress)
        std::fprintf(options.progress, "tune: %s's best recipe (learning_rate %s, momentum %s) is on the grid's edge: growing it\n",
                     st.label.c_str(), number(w.learning_rate).c_str(), number(w.momentum).c_str());
    }
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
    nlohmann::json winner = {{"learning_rate", w.learning_rate}, {"momentum", w.momentum},
                             {"batch_per_worker", w.batch_per_worker}, {"weight_decay", w.weight_decay},
                             {"shards", t.recipes[t.winner].shards}, {"score_s", t.recipes[t.winner].score}};
    if (t.winner != t.lowest)
      winner["tie"] = "within " + number(scoreNoise(t.recipes[t.lowest])) + " s (the noise) of the lowest score, " +
                      number(t.recipes[t.lowest].score) + " s (learning_rate " +
                      number(t.recipes[t.lowest].recipe.learning_rate) + ", momentum " +
                      number(t.recipes[t.lowest].recipe.momentum) + ", batch_per_worker " +
                      std::to_string(t.recipes[t.lowest].recipe.batch_per_worker) + ", shards " +
                      std::to_string(t.recipes[t.lowest].shards) + "): the simpler recipe wins";
    j["strategies"][t.label] = {{"recipes", recipes}, {"winner", winner}, {"grid_grown", t.grown}};
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
