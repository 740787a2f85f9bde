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
#include <map>
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
DEFINE_string(seeds, "", "auto: add seeds to each grid point (and baseline) until its paired ratios are precise "
              "(--precision) or decided (Holm-corrected, Bonferroni over the looks), or it has --max_seeds; the "
              "spec's seeds are the first look; sweep.csv's seeds_stop says which (local executor only)");
DEFINE_double(precision, 0.1, "with --seeds auto: a ratio r is precise once its interval lies within "
              "[r / (1 + p), r x (1 + p)]");
DEFINE_int32(max_seeds, 10, "with --seeds auto: the most seeds a grid point gets");
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
                         "[--sweep_point ID | --sweep_point_index I] [--seeds auto [--precision P] [--max_seeds N]] "
                         "[--metrics_addr HOST:PORT] [--wait_quiet_s S]\n");
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
  if (!FLAGS_seeds.empty() && FLAGS_seeds != "auto") {
    std::fprintf(stderr, "chaosbed sweep: --seeds=%s: the only value is auto (the spec's sweep.seeds or "
                         "sweep.repeats name fixed seeds)\n", FLAGS_seeds.c_str());
    return kExitUsage;
  }
  const bool auto_seeds = FLAGS_seeds == "auto";
  if (auto_seeds && (FLAGS_executor != "local" || one_point)) {
    std::fprintf(stderr, "chaosbed sweep: --seeds auto chooses seeds from results as they come: it runs the "
                         "whole sweep here (--executor local, no --sweep_point)\n");
    return kExitUsage;
  }
  if (auto_seeds && (!(FLAGS_precision > 0) || FLAGS_max_seeds < 2)) {
    std::fprintf(stderr, "chaosbed sweep: --precision must be > 0 (got %g) and --max_seeds >= 2 (got %d)\n",
                 FLAGS_precision, FLAGS_max_seeds);
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
  if (auto_seeds) options.auto_seeds = sweep::AutoSeeds{FLAGS_precision, FLAGS_max_seeds};

  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "chaosbed sweep: %s: %s\n", argv[1], s.message().c_str());
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
  if (auto_seeds) {
    std::map<std::string, int> by_stop;
    for (const auto& [group, stop] : outcome->seed_stops) ++by_stop[sweep::seedStopName(stop)];
    std::printf("seeds auto:");
    for (const auto& [stop, n] : by_stop) std::printf(" %d %s", n, stop.c_str());
    std::printf(" (of %zu point(s); sweep.csv's seeds_stop per point)\n", outcome->seed_stops.size());
  }
  std::printf("results: %s/sweep.csv\n", options.out_dir.c_str());
  return outcome->failed ? kExitInfrastructure : kExitPass;
}

}  // namespace chaosbed::cli
