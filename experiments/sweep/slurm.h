#pragma once
// `chaosbed sweep --executor slurm`: each sweep point that is not complete runs as one task of a Slurm job
// array, on a whole node of its own (--exclusive, so that points do not share a machine's CPU), through the
// same point runner as a local sweep (`chaosbed sweep SPEC --out DIR --sweep_point ID` in the task). The
// submitting process waits for the array, then gathers sweep.csv and crossover.svg as a local sweep does.
//
// Files under DIR/slurm/: sweep.sbatch (the array script, kept for inspection and resubmission by hand),
// points.txt (task i runs line i+1), task-<i>.log (each task's output), job-id (while the job is queued or
// running). Resumable: a rerun submits only the points that are not complete; a rerun while the previous
// job is still queued or running waits for that job first instead of submitting the same points twice. An
// interrupt (SIGINT/SIGTERM) cancels the job (scancel): points it did not finish stay incomplete for the
// next run.
//
// The binary, the spec and DIR must be at the same paths on the compute nodes (a shared filesystem, as
// Slurm jobs usually have). sbatch options (partition, account, time) come from the user's environment
// (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT, ...) or `sbatch_args`.

#include <atomic>
#include <string>
#include <vector>

#include "experiments/sweep/sweep.h"

namespace chaosbed::sweep {

struct SlurmOptions {
  std::string chaosbed_binary;           // absolute path, the same on every node
  std::vector<std::string> sbatch_args;  // passed to sbatch before the script
  const std::atomic<bool>* interrupted = nullptr;  // set on SIGINT/SIGTERM: cancel the job, return Cancelled
  double poll_s = 2;                     // how often squeue is asked whether the job is done
};

Result<SweepOutcome> runSweepOnSlurm(const SweepOptions& options, const SlurmOptions& slurm);

// The array script for `points` (exposed for tests).
std::string arrayScript(const std::string& binary, const std::string& spec_path, const std::string& out_dir,
                        size_t points);

}  // namespace chaosbed::sweep
