// `chaosbed sweep SPEC [--out DIR] [--executor local|slurm]`: every point of the spec's sweep grid x seeds
// plus a no-chaos baseline, each a full `chaosbed run` into DIR/points/<id>/; resumable; writes DIR/sweep.csv
// and DIR/crossover.svg (experiments/sweep/sweep.h). With --executor slurm the points run as the tasks of a
// Slurm job array (experiments/sweep/slurm.h), each task being `sweep SPEC --out DIR --sweep_point ID`.
// Exit 0 when every point completed, 4 when any failed, 3 on an invalid spec.

#include <gflags/gflags.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "experiments/cli/batch.h"
#include "experiments/cli/cli.h"
#include "experiments/sweep/slurm.h"
#include "experiments/sweep/sweep.h"

DECLARE_string(out);
DEFINE_string(executor, "local", "where sweep points run: local (one after the other, here) or slurm (one job-array "
              "task per point, each on a node of its own; needs sbatch, squeue and scancel)");
DEFINE_string(sbatch_args, "", "extra sbatch options for --executor slurm, space-separated (e.g. "
              "\"--partition=batch --time=01:00:00\"); SBATCH_* environment variables work too");
DEFINE_string(sweep_point, "", "run only this point of the sweep (its id under DIR/points/): what each Slurm "
              "array task runs");

namespace chaosbed::cli {
namespace {

// This binary's own path, which the array tasks run: the same file on a shared filesystem.
std::string selfPath() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::vector<std::string> splitWords(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

int runSweep(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chaosbed sweep SPEC [--out DIR] [--executor local|slurm] [--metrics_addr HOST:PORT] "
                         "[--wait_quiet_s S]\n");
    return kExitUsage;
  }
  if (FLAGS_executor != "local" && FLAGS_executor != "slurm") {
    std::fprintf(stderr, "chaosbed sweep: --executor=%s: must be local or slurm\n", FLAGS_executor.c_str());
    return kExitUsage;
  }
  if (FLAGS_executor == "slurm" && !FLAGS_sweep_point.empty()) {
    std::fprintf(stderr, "chaosbed sweep: --sweep_point runs one point here; it does not go with --executor slurm\n");
    return kExitUsage;
  }
  if (!checkMetricsFlags("sweep")) return kExitUsage;
  int code = kExitPass;
  auto batch = Batch::open("sweep", argv[1], &code);
  if (!batch) return code;
  const spec::ExperimentSpec& spec = batch->spec();
  sweep::SweepOptions options;
  options.spec_path = argv[1];
  options.out_dir = FLAGS_out.empty() ? spec.output.dir + "/" + spec.metadata.name + "/sweep" : FLAGS_out;

  if (!FLAGS_sweep_point.empty()) {
    auto complete = sweep::runSweepPoint(options, FLAGS_sweep_point, batch->runner(stdout));
    if (batch->interrupted()) return batch->interruptedExitCode();
    if (!complete.isOk()) {
      std::fprintf(stderr, "chaosbed sweep: %s: %s\n", argv[1], complete.status().toString().c_str());
      return complete.status().code() == StatusCode::kInvalidArgument ? kExitInvalidSpec : kExitInfrastructure;
    }
    std::printf("sweep: point %s %s\n", FLAGS_sweep_point.c_str(), *complete ? "complete" : "incomplete");
    return *complete ? kExitPass : kExitInfrastructure;
  }

  auto outcome = [&]() -> Result<sweep::SweepOutcome> {
    if (FLAGS_executor == "local") return sweep::runSweep(options, batch->runner(stdout));
    sweep::SlurmOptions slurm;
    slurm.chaosbed_binary = selfPath();
    slurm.sbatch_args = splitWords(FLAGS_sbatch_args);
    slurm.interrupted = batch->interruptFlag();
    return sweep::runSweepOnSlurm(options, slurm);
  }();
  if (batch->interrupted()) return batch->interruptedExitCode();
  if (!outcome.isOk()) {
    std::fprintf(stderr, "chaosbed sweep: %s: %s\n", argv[1], outcome.status().toString().c_str());
    return outcome.status().code() == StatusCode::kInvalidArgument ? kExitInvalidSpec : kExitInfrastructure;
  }
  std::printf("sweep: %d point(s): %d run now, %d already complete, %d failed\n", outcome->points, outcome->ran,
              outcome->resumed, outcome->failed);
  for (const auto& c : outcome->crossings) std::printf("crossover: %s\n", c.c_str());
  std::printf("results: %s/sweep.csv\n", options.out_dir.c_str());
  return outcome->failed ? kExitInfrastructure : kExitPass;
}

}  // namespace chaosbed::cli
