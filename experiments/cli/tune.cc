// `chaosbed tune SPEC [--out DIR] [--tune_lr LIST] [--tune_momentum LIST] [--tune_seeds LIST]`: each strategy's
// best no-fault recipe over a small grid (experiments/tune/tune.h); resumable; writes DIR/tune.csv,
// DIR/tune.json and DIR/tuned.yaml. Exit 0 when every run completed, 4 when any failed, 3 on a bad spec or grid.

#include <gflags/gflags.h>
#include <charconv>
#include <cstdio>
#include <sstream>

#include "core/config/config.h"
#include "experiments/cli/batch.h"
#include "experiments/cli/cli.h"
#include "experiments/tune/tune.h"

DECLARE_string(out);
DEFINE_string(tune_lr, "", "learning rates to try, comma-separated (default: the spec's x 0.25, 0.5, 1, 2)");
DEFINE_string(tune_momentum, "", "momenta to try, comma-separated (default: 0,0.5,0.9)");
DEFINE_string(tune_seeds, "", "seeds per recipe, comma-separated (default: the spec's seed and the next two)");
DEFINE_int32(tune_grow, 2, "how often a strategy's grid may grow past an edge its best recipe is on (learning rate x2 "
             "or /2, momentum halfway to 1); 0: never");
DEFINE_string(tune_shards, "", "parameter-server shard counts to try, comma-separated (default: each strategy's own)");
DEFINE_string(tune_batch, "", "batch_per_worker values to try, comma-separated (default: each strategy's own)");

namespace chaosbed::cli {
namespace {

// "0.01,0.05" -> {0.01, 0.05}; nullopt (after a message naming the flag) for anything else.
template <class T>
std::optional<std::vector<T>> parseList(const char* flag, const std::string& text) {
  std::vector<T> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    T v{};
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size()) {
      std::fprintf(stderr, "chaosbed tune: --%s: '%s' is not a number\n", flag, item.c_str());
      return std::nullopt;
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

int runTune(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chaosbed tune SPEC [--out DIR] [--tune_lr LIST] [--tune_momentum LIST] [--tune_seeds LIST] [--tune_shards LIST] [--tune_batch LIST]\n");
    return kExitUsage;
  }
  if (!checkMetricsFlags("tune")) return kExitUsage;
  auto lrs = parseList<double>("tune_lr", FLAGS_tune_lr);
  auto moms = parseList<double>("tune_momentum", FLAGS_tune_momentum);
  auto seeds = parseList<int64_t>("tune_seeds", FLAGS_tune_seeds);
  auto shards = parseList<int>("tune_shards", FLAGS_tune_shards);
  auto batches = parseList<int>("tune_batch", FLAGS_tune_batch);
  if (!lrs || !moms || !seeds || !shards || !batches) return kExitUsage;
  int code = kExitPass;
  auto batch = Batch::open("tune", argv[1], &code);
  if (!batch) return code;
  tune::TuneOptions options;
  options.spec_path = argv[1];
  options.out_dir = FLAGS_out.empty() ? batch->spec().output.dir + "/" + batch->spec().metadata.name + "/tune" : FLAGS_out;
  options.learning_rates = *lrs;
  options.momenta = *moms;
  options.seeds = *seeds;
  options.shards = *shards;
  options.batches = *batches;
  options.grow = FLAGS_tune_grow;
  auto outcome = tune::runTune(options, batch->runner(nullptr));
  if (batch->interrupted()) return batch->interruptedExitCode();
  if (!outcome.isOk()) {
    std::fprintf(stderr, "chaosbed tune: %s: %s\n", argv[1], outcome.status().message().c_str());
    return outcome.status().code() == StatusCode::kInvalidArgument ? kExitInvalidSpec : kExitInfrastructure;
  }
  std::printf("tune: %d run(s) now, %d already complete, %d failed\n", outcome->ran, outcome->resumed, outcome->failed);
  std::printf("%-22s %14s %9s %6s %7s %16s\n", "strategy", "learning_rate", "momentum", "batch", "shards",
              "score (TTA s)");
  for (const auto& t : outcome->strategies) {
    const auto& w = t.recipes[t.winner];
    std::printf("%-22s %14s %9s %6d %7s %16s\n", t.label.c_str(), config::formatDouble(w.recipe.learning_rate).c_str(),
                config::formatDouble(w.recipe.momentum).c_str(), w.recipe.batch_per_worker,
                w.shards > 0 ? std::to_string(w.shards).c_str() : "-", config::formatDouble(w.score).c_str());
  }
  std::printf("results: %s/tune.json; the tuned spec: %s/tuned.yaml\n", options.out_dir.c_str(), options.out_dir.c_str());
  return outcome->failed ? kExitInfrastructure : kExitPass;
}

}  // namespace chaosbed::cli
