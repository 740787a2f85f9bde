// `chaosbed sweep SPEC [--out DIR] [--executor local|slurm|external]`: every point of the spec's sweep grid x
// seeds plus a no-chaos baseline, each a full `chaosbed run` into DIR/points/<id>/; resumable; writes
// DIR/sweep.csv and DIR/crossover.svg (experiments/sweep/sweep.h). Where the points run:
// - local: here, one after the other;
// - slurm: as the tasks of a Slurm job array (experiments/sweep/slurm.h), each `sweep SPEC --out DIR
//   --sweep_point ID`;
// - external: someone else runs them, by index (`--sweep_point_index I`, e.g. a Kubernetes Indexed Job's
//   JOB_COMPLETION_INDEX); this lists the points that are not complete and gathers the results.
// Exit 0 when every point completed, 4 when any failed (or is missing), 3 on an invalid spec.

#include <gflags/gflags.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "experiments/cli/batch.h"
#include "experiments/cli/cli.h"
#include "experiments/sweep/slurm.h"
#include "experiments/sweep/sweep.h"

DECLARE_string(out);
DEFINE_string(executor, "local", "where sweep points run: local (one after the other, here), slurm (one job-array "
              "task per point, each on a node of its own; needs sbatch, squeue and scancel) or external (run "
              "elsewhere by --sweep_point_index, e.g. a Kubernetes Indexed Job: list what is missing, gather)");
DEFINE_string(sbatch_args, "", "extra sbatch options for --executor slurm, space-separated (e.g. "
              "\"--partition=batch --time=01:00:00\"); SBATCH_* environment variables work too");
DEFINE_string(sweep_point, "", "run only this point of the sweep (its id under DIR/points/): what each Slurm "
              "array task runs");
DEFINE_int32(sweep_point_index, -1, "run only the point at this index of the sweep's plan (0-based, in run order; "
             "`--executor external` lists them): what each task of a Kubernetes Indexed Job runs");

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
    std::fprintf(stderr, "usage: chaosbed sweep SPEC [--out DIR] [--executor local|slurm|external] "
                         "[--sweep_point ID | --sweep_point_index I] [--metrics_addr HOST:PORT] [--wait_quiet_s S]\n");
    return kExitUsage;
  }
  if (FLAGS_executor != "local" && FLAGS_executor != "slurm" && FLAGS_executor != "external") {
    std::fprintf(stderr, "chaosbed sweep: --executor=%s: must be local, slurm or external\n", FLAGS_executor.c_str());
    return kExitUsage;
  }
  const bool one_point = !FLAGS_sweep_point.empty() || FLAGS_sweep_point_index >= 0;
  if (!FLAGS_sweep_point.empty() && FLAGS_sweep_point_index >= 0) {
    std::fprintf(stderr, "chaosbed sweep: give --sweep_point or --sweep_point_index, not both\n");
    return kExitUsage;
  }
  if (one_point && FLAGS_executor != "local") {
    std::fprintf(stderr, "chaosbed sweep: --sweep_point and --sweep_point_index run one point here; they do not go "
                         "with --executor %s\n", FLAGS_executor.c_str());
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

  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "chaosbed sweep: %s: %s\n", argv[1], s.toString().c_str());
    return s.code() == StatusCode::kInvalidArgument ? kExitInvalidSpec : kExitInfrastructure;
  };
  if (one_point) {
    std::string id = FLAGS_sweep_point;
    if (FLAGS_sweep_point_index >= 0) {
      auto plan = sweep::plannedPoints(options);
      if (!plan.isOk()) return fail(plan.status());
      if (size_t(FLAGS_sweep_point_index) >= plan->size()) {
        std::fprintf(stderr, "chaosbed sweep: --sweep_point_index=%d: the sweep has %zu point(s), 0..%zu\n",
                     FLAGS_sweep_point_index, plan->size(), plan->size() - 1);
        return kExitUsage;
      }
      id = (*plan)[size_t(FLAGS_sweep_point_index)].id;
    }
    auto complete = sweep::runSweepPoint(options, id, batch->runner(stdout));
    if (batch->interrupted()) return batch->interruptedExitCode();
    if (!complete.isOk()) return fail(complete.status());
    std::printf("sweep: point %s %s\n", id.c_str(), *complete ? "complete" : "incomplete");
    return *complete ? kExitPass : kExitInfrastructure;
  }

  if (FLAGS_executor == "external") {
    auto plan = sweep::plannedPoints(options);
    if (!plan.isOk()) return fail(plan.status());
    for (size_t i = 0; i < plan->size(); ++i)
      if (!sweep::pointComplete(options.out_dir + "/points/" + (*plan)[i].id))
        std::printf("sweep: point %zu (%s, %s, seed %lld) is not complete: run it with --sweep_point_index %zu\n", i,
                    (*plan)[i].id.c_str(), (*plan)[i].group.c_str(), static_cast<long long>((*plan)[i].seed), i);
  }
  auto outcome = [&]() -> Result<sweep::SweepOutcome> {
    if (FLAGS_executor == "local") return sweep::runSweep(options, batch->runner(stdout));
    if (FLAGS_executor == "external") return sweep::gatherSweep(options, {});
    sweep::SlurmOptions slurm;
    slurm.chaosbed_binary = selfPath();
    slurm.sbatch_args = splitWords(FLAGS_sbatch_args);
    slurm.interrupted = batch->interruptFlag();
    return sweep::runSweepOnSlurm(options, slurm);
  }();
  if (batch->interrupted()) return batch->interruptedExitCode();
  if (!outcome.isOk()) return fail(outcome.status());
  if (FLAGS_executor == "external")
    std::printf("sweep: %d point(s): %d complete, %d not complete\n", outcome->points, outcome->resumed, outcome->failed);
  else
    std::printf("sweep: %d point(s): %d run now, %d already complete, %d failed\n", outcome->points, outcome->ran,
                outcome->resumed, outcome->failed);
  for (const auto& c : outcome->crossings) std::printf("crossover: %s\n", c.c_str());
  std::printf("results: %s/sweep.csv\n", options.out_dir.c_str());
  return outcome->failed ? kExitInfrastructure : kExitPass;
}

}  // namespace chaosbed::cli
