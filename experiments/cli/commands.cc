// The commands of `chaosbed`, with the flags each accepts: the one table that dispatch, help, the bash
// completion and the man page are generated from. A new flag goes into the `flags` of every command that reads
// it (CommandLine.EveryChaosbedFlagBelongsToACommand checks that none is forgotten).

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "chaosbed/config.h"
#include "experiments/cli/cli.h"
#include "experiments/run/provenance.h"
#include "experiments/spec/schema.h"

namespace chaosbed::cli {
namespace {

int runHelp(int, char**) { return kExitPass; }  // never called: parseCommandLine turns `help` into kHelp
int runGroup(int, char**) { return kExitUsage; }  // never called: a group without a sub-command prints its help
int runCompletion(int argc, char** argv);
int runMan(int argc, char** argv);
int runSchema(int argc, char** argv);

const Command kCommands[] = {
    {"help", "[COMMAND]", "show the commands, or one command's arguments and flags", "", runHelp, false,
     "chaosbed help run\nchaosbed help bench ps"},
    {"run", "SPEC [--out DIR] [--set PATH=VALUE]...",
     "run an experiment: every strategy of SPEC, one after the other, under the same drawn chaos",
     "out,set,secret_file,metrics_addr,metrics_allow_remote,metrics_await_scrape,push_gateway", runExperiment, false,
     "chaosbed run experiments/scenarios/default.yaml\n"
     "chaosbed run experiments/scenarios/tiny-synthetic.yaml --set cluster.workers=2 --out /tmp/tiny"},
    {"validate", "SPEC... [--set PATH=VALUE]...", "check experiment specs and suites; exit 3 with every problem",
     "set", validate, false,
     "chaosbed validate experiments/scenarios/*.yaml experiments/suites/nightly.yaml\n"
     "chaosbed validate experiments/scenarios/default.yaml --set chaos.time_scale=60"},
    {"report", "RESULTS_DIR", "regenerate a results directory's report.html", "", runReport, false, "chaosbed report /tmp/tiny"},
    {"sweep", "SPEC [--out DIR] [--executor local|slurm|external] [--seeds auto]",
     "run a spec's sweep grid x seeds plus a no-chaos baseline (resumable): here, as a Slurm job array, or by index elsewhere",
     "out,executor,sbatch_args,sweep_point,sweep_point_index,seeds,precision,max_seeds,wait_quiet_s,metrics_addr,metrics_allow_remote,push_gateway", runSweep, false,
     "chaosbed sweep experiments/scenarios/sweep-preemption.yaml --out /tmp/sweep\n"
     "chaosbed sweep experiments/scenarios/sweep-preemption.yaml --out /tmp/sweep --seeds auto --max_seeds 12\n"
     "chaosbed sweep experiments/scenarios/sweep-crossover.yaml --executor slurm --sbatch_args \"--time=02:00:00\""},
    {"tune", "SPEC [--out DIR]", "find each strategy's best no-fault training recipe over a small grid",
     "out,tune_lr,tune_momentum,tune_seeds,tune_shards,tune_batch,tune_grow,wait_quiet_s,metrics_addr,metrics_allow_remote,push_gateway", runTune, false,
     "chaosbed tune experiments/scenarios/default.yaml --out /tmp/tune\n"
     "chaosbed tune experiments/scenarios/default.yaml --tune_lr 0.02,0.05 --tune_shards 1,2 --out /tmp/tune"},
    {"noise", "SPEC [--runs N] [--out DIR]", "the no-fault spread (CV) of each strategy's TTA over N seeds",
     "out,runs,wait_quiet_s,metrics_addr,metrics_allow_remote,push_gateway", runNoise, false, "chaosbed noise experiments/scenarios/default.yaml --runs 5 --out /tmp/noise"},
    {"suite", "SUITE [--junit FILE] [--out DIR]", "run a resilience suite: scenarios with assertions, JUnit XML",
     "junit,out,metrics_addr,metrics_allow_remote,push_gateway", runSuite, false, "chaosbed suite experiments/suites/nightly.yaml --junit /tmp/nightly.xml --out /tmp/nightly"},
    {"chaos", "plan|bench|heal", "the chaos controller on its own", "", runGroup},
    {"chaos plan", "SPEC [--seed N] [--json]", "print the fault schedule that SPEC draws; runs nothing", "seed,json",
     runChaosPlan, false,
     "chaosbed chaos plan experiments/scenarios/default.yaml\n"
     "chaosbed chaos plan experiments/scenarios/sweep-preemption.yaml --seed 7 --json"},
    {"chaos bench", "[--bench_faults N] [--bench_gap_ms G] [--bench_json FILE]",
     "fault fidelity on this host: injection delay, slow accuracy, pause", "bench_faults,bench_gap_ms,bench_json",
     runChaosBench, false, "chaosbed chaos bench --bench_faults 200"},
    {"chaos heal", "", "thaw, unthrottle and remove what dead runs left on this host", "", runChaosHeal, false, "chaosbed chaos heal"},
    {"chaos agent", "--state DIR", "the healer that a chaos controller starts", "state,control_fd,agent_lease_timeout_s",
     runChaosAgent, true},
    {"train", "[--model mlp|cnn|resnet] [--dataset D] [--target T] [--json]",
     "train the model on one node to a target accuracy",
     "model,dataset,data_dir,layers,batch,lr,momentum,weight_decay,target,time_limit_s,eval_interval_s,max_steps,"
     "seed,json",
     runTrain, false,
     "chaosbed train --target 0.85\nchaosbed train --model cnn --target 0.88 --json"},
    {"bench", "train|p2p|allreduce|ps", "micro-benchmarks", "", runGroup},
    {"bench train", "[--model mlp|cnn|resnet] [--layers L] [--batch B] [--json]",
     "training step on one thread: samples/s and GFLOP/s",
     "model,layers,batch,bench_train_s,json", runBenchTrain, false,
     "chaosbed bench train\nchaosbed bench train --model resnet --batch 32 --json"},
    {"bench p2p", "[--json]", "UCX transport between two processes: bandwidth and latency per message size",
     "bench_p2p_max_bytes,bench_shm,json", runBenchP2p, false, "chaosbed bench p2p\nchaosbed bench p2p --bench_shm --json"},
    {"bench allreduce", "[--ranks N] [--json]", "ring all-reduce over UCX, N ranks as processes: time, algbw, busbw",
     "ranks,bench_allreduce_max_bytes,bench_allreduce_chunk_bytes,bench_allreduce_algorithm,bench_shm,json", runBenchAllreduce, false, "chaosbed bench allreduce --ranks 4"},
    {"bench ps", "[--workers 1,2,4,8] [--shards S] [--model M] [--json]",
     "the parameter server over UCX, N workers and S shards as processes: pushes/s beside the limit",
     "workers,shards,model,layers,batch,bench_ps_s,json", runBenchPs, false, "chaosbed bench ps --workers 1,2,4,8\nchaosbed bench ps --workers 4 --shards 2 --json"},
    {"completion", "bash", "print the bash completion script (source it, or put it in bash-completion's directory)",
     "", runCompletion, false, "source <(chaosbed completion bash)"},
    {"man", "", "print the manual page (roff): chaosbed man > chaosbed.1", "", runMan, false, "chaosbed man > chaosbed.1 && man ./chaosbed.1"},
    {"schema", "", "print the JSON Schema of an experiment spec (published as docs/spec.schema.json)", "",
     runSchema, false, "chaosbed schema > spec.schema.json"},
    {"worker", "--node_config FILE", "one worker node", "node_config,index", runWorker, true},
    {"ps", "--node_config FILE", "one parameter-server node", "node_config,index", runPs, true},
    {"evaluator", "--node_config FILE", "the evaluator node", "node_config,index", runEvaluatorNode, true},
    {"agent", "--agent_config FILE [--index I]", "the host agent of one host: owns its nodes, carries out their faults",
     "agent_config,index,join_timeout_s", runHostAgent, false,
     "chaosbed agent --agent_config agent.json --index 1"},
};

int runCompletion(int argc, char** argv) {
  if (argc != 2 || std::strcmp(argv[1], "bash") != 0) {
    std::fprintf(stderr, "usage: chaosbed completion bash\n");
    return kExitUsage;
  }
  std::fputs(bashCompletion(kCommands).c_str(), stdout);
  return kExitPass;
}

int runMan(int argc, char**) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: chaosbed man\n");
    return kExitUsage;
  }
  std::fputs(manPage(kCommands).c_str(), stdout);
  return kExitPass;
}

int runSchema(int argc, char**) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: chaosbed schema\n");
    return kExitUsage;
  }
  const spec::SpecSchema schema = spec::experimentSpecSchema();
  if (!schema.untyped_keys.empty()) {  // a parser branch that no probe reaches: the schema would be incomplete
    for (const std::string& key : schema.untyped_keys)
      std::fprintf(stderr, "chaosbed schema: no probe types %s (add one to experiments/spec/schema.cc)\n", key.c_str());
    return kExitInfrastructure;
  }
  std::printf("%s\n", schema.schema.dump(2).c_str());
  return kExitPass;
}

}  // namespace

std::span<const Command> commands() { return kCommands; }

bool fileMissing(const char* command, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return false;
  std::fprintf(stderr, "chaosbed %s: %s: %s\n", command, path.c_str(), std::strerror(errno));
  return true;
}

int main(int argc, char** argv) {
  gflags::SetVersionString(CHAOSBED_VERSION);
  gflags::SetUsageMessage("chaosbed COMMAND [ARGS] [--flags]; `chaosbed help` lists the commands");
  Result<CommandLine> line = parseCommandLine(kCommands, argc, argv);
  if (!line.isOk()) {
    std::fprintf(stderr, "%s\n", line.status().message().c_str());
    return kExitUsage;
  }
  const Command* command = line->command;
  switch (line->want) {
    case CommandLine::Want::kHelp:
      std::fputs((command ? commandHelp(kCommands, *command) : overviewHelp(kCommands)).c_str(), stdout);
      return kExitPass;
    case CommandLine::Want::kHelpFull:
      gflags::ShowUsageWithFlags(argv[0]);
      return kExitPass;
    case CommandLine::Want::kVersion: {
      // The commit the binary was built from, and whether that tree had uncommitted changes.
      const run::BuildInfo b = run::buildInfo();
      std::printf("chaosbed %s (commit %s%s)\n", CHAOSBED_VERSION, b.commit, b.dirty ? ", dirty tree" : "");
      return kExitPass;
    }
    case CommandLine::Want::kRun:
      break;
  }
  if (command == nullptr) {
    std::fputs(overviewHelp(kCommands).c_str(), stderr);
    return kExitUsage;
  }
  if (command->run == runGroup) {
    std::fprintf(stderr, "%s", commandHelp(kCommands, *command).c_str());
    if (!line->args.empty())
      std::fprintf(stderr, "%s\n", unknownCommandMessage(kCommands, std::string(command->name), line->args[0]).c_str());
    return kExitUsage;
  }
  if (Status s = applyFlags(*line); !s.isOk()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return kExitUsage;
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  // The command sees its last word and its positional arguments, as if it were a program of its own.
  const std::string_view name = command->name;
  std::string word(name.substr(name.rfind(' ') == std::string_view::npos ? 0 : name.rfind(' ') + 1));
  std::vector<std::string> words = {word};
  words.insert(words.end(), line->args.begin(), line->args.end());
  std::vector<char*> args;
  for (std::string& w : words) args.push_back(w.data());
  args.push_back(nullptr);
  return command->run(int(words.size()), args.data());
}

}  // namespace chaosbed::cli
