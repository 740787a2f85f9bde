#pragma once
// The subcommands of the `chaosbed` binary. Each takes its positional arguments (argv[0] is the command's
// last word; flags are already set) and returns the process exit code below. commands.cc holds the table
// that names them, with the flags each accepts.

#include <span>
#include <string>

#include "experiments/cli/command_line.h"

namespace chaosbed::cli {

// Every command of the binary, in the order `chaosbed help` lists them.
std::span<const Command> commands();
// The binary's main: parses the command line against commands() and runs the command.
int main(int argc, char** argv);

// Exit codes shared by every subcommand.
inline constexpr int kExitPass = 0;
inline constexpr int kExitAssertionFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInvalidSpec = 3;
inline constexpr int kExitInfrastructure = 4;
inline constexpr int kExitInterrupted = 130;  // SIGINT; 143 for SIGTERM

// A spec or suite file that is not there is a usage error (exit kExitUsage), not an invalid spec: true after
// "chaosbed COMMAND: PATH: No such file or directory" on stderr (commands.cc).
bool fileMissing(const char* command, const std::string& path);

// `chaosbed validate SPEC...` (validate.cc): "ok: FILE" per valid spec, else every problem on stderr; exit 3.
int validate(int argc, char** argv);

// `chaosbed run SPEC` (run.cc).
int runExperiment(int argc, char** argv);
// Checks --metrics_addr (host:port, and loopback unless --metrics_allow_remote) and --push_gateway, for the
// commands that run experiments. False (after a message on stderr naming `command`) means exit kExitUsage.
bool checkMetricsFlags(const char* command);
// `chaosbed report DIR` (report.cc): rewrites DIR/report.html from the results directory.
int runReport(int argc, char** argv);
// `chaosbed sweep SPEC` (sweep.cc): grid x seeds + baseline, resumable; sweep.csv and crossover.svg.
int runSweep(int argc, char** argv);
// `chaosbed tune SPEC` (tune.cc): each strategy's best no-fault recipe over a small grid; tuned.yaml.
int runTune(int argc, char** argv);
// `chaosbed noise SPEC` (noise.cc): the no-fault spread (CV) of TTA per strategy over N seeds.
int runNoise(int argc, char** argv);
// `chaosbed suite SUITE --junit FILE` (suite.cc): scenarios with assertions; JUnit XML; exit 0/1/3/4.
int runSuite(int argc, char** argv);

// Node processes (node_cmd.cc), started by the launcher.
int runWorker(int argc, char** argv);
int runPs(int argc, char** argv);
int runEvaluatorNode(int argc, char** argv);
// `chaosbed agent` (agent.cc): the host agent that a controller starts on each host.
int runHostAgent(int argc, char** argv);

// `chaosbed chaos plan|bench|heal|agent` (chaos_cmd.cc).
int runChaosPlan(int argc, char** argv);
int runChaosBench(int argc, char** argv);
int runChaosHeal(int argc, char** argv);
int runChaosAgent(int argc, char** argv);

// `chaosbed train` (train.cc): single-node training to a target accuracy; prints TTA and final accuracy.
int runTrain(int argc, char** argv);

// `chaosbed bench train` (bench_train.cc): MLP training-step throughput on one thread.
int runBenchTrain(int argc, char** argv);
// `chaosbed bench p2p` (bench_p2p.cc): UCX point-to-point bandwidth and latency between two processes.
int runBenchP2p(int argc, char** argv);
// `chaosbed bench allreduce` (bench_allreduce.cc): ring all-reduce bus bandwidth, N ranks as processes.
int runBenchAllreduce(int argc, char** argv);
// `chaosbed bench ps` (bench_ps.cc): the parameter server's pushes/s with N workers and S shards, as processes.
int runBenchPs(int argc, char** argv);

}  // namespace chaosbed::cli
