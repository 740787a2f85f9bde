// chaosbed: one binary, many subcommands. Flags are gflags (--name=value or --name value) and may appear
// anywhere; the first positional argument picks the subcommand.

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdio>
#include <cstring>
#include <span>

#include "chaosbed/config.h"
#include "experiments/cli/cli.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
  bool hidden = false;  // started by the launcher, not by people
};

int printHelp(int, char**);

constexpr Command kCommands[] = {
    {"help", "show this help", printHelp},
    {"train", "train the MLP on one node to a target accuracy (--dataset, --target, --json)", chaosbed::cli::runTrain},
    {"bench", "micro-benchmarks: chaosbed bench train|p2p|allreduce [--ranks N] [--json]", chaosbed::cli::runBench},
    {"validate", "check experiment specs: chaosbed validate SPEC...", chaosbed::cli::validate},
    {"chaos", "chaos plan SPEC [--seed N] [--json]: print the drawn fault schedule; chaos bench: fidelity", chaosbed::cli::runChaos},
    {"run", "run an experiment: every strategy under the same chaos (chaosbed run SPEC [--out DIR])",
     chaosbed::cli::runExperiment},
    {"report", "regenerate a results directory's report.html: chaosbed report DIR", chaosbed::cli::runReport},
    {"tune", "find each strategy's best no-fault training recipe over a small grid (chaosbed tune SPEC [--out DIR])",
     chaosbed::cli::runTune},
    {"noise", "the no-fault spread (CV) of each strategy's TTA over N seeds (chaosbed noise SPEC [--runs N] [--out DIR])",
     chaosbed::cli::runNoise},
    {"sweep", "run a spec's sweep grid x seeds plus a no-chaos baseline (chaosbed sweep SPEC [--out DIR])", chaosbed::cli::runSweep},
    {"suite", "run a resilience suite: chaosbed suite SUITE [--junit FILE] [--out DIR]", chaosbed::cli::runSuite},
    {"worker", "run one worker node (started by the launcher)", chaosbed::cli::runWorker, true},
    {"ps", "run one parameter-server node (started by the launcher)", chaosbed::cli::runPs, true},
    {"evaluator", "run the evaluator node (started by the launcher)", chaosbed::cli::runEvaluatorNode, true},
};

int printHelp(int, char**) {
  std::printf("chaosbed %s: fault-injection testbed for distributed training\n\nusage: chaosbed COMMAND [ARGS] [--flags]\n\n",
              CHAOSBED_VERSION);
  for (const Command& c : kCommands)
    if (!c.hidden) std::printf("  %-10s %s\n", c.name, c.summary);
  std::printf("\n`chaosbed --helpon=FILE` lists the flags of one source file; `chaosbed --help` lists all.\n");
  return chaosbed::cli::kExitPass;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("chaosbed COMMAND [ARGS] [--flags]; `chaosbed help` lists the commands");
  gflags::SetVersionString(CHAOSBED_VERSION);
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  if (argc < 2) {
    printHelp(0, nullptr);
    return chaosbed::cli::kExitUsage;
  }
  for (const Command& c : kCommands)
    if (std::strcmp(argv[1], c.name) == 0) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "chaosbed: unknown command '%s'; `chaosbed help` lists the commands\n", argv[1]);
  return chaosbed::cli::kExitUsage;
}
