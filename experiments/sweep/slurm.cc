#include "experiments/sweep/slurm.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/isolation/command.h"
#include "experiments/run/results.h"

namespace chaosbed::sweep {
namespace {

namespace fs = std::filesystem;

constexpr double kToolTimeoutS = 60;

// The script quotes paths in single quotes and Slurm expands '%' in --output: both must stay literal.
Status checkScriptPath(const std::string& what, const std::string& path) {
  for (char c : path)
    if (c == '\'' || c == '\n' || c == '%')
      return Status::invalidArgument(what + " '" + path + "' contains a quote, newline or '%', which a Slurm " +
                                     "script cannot carry literally: use another directory");
  return Status::ok();
}

// Whether Slurm still lists the job (pending, running or completing). Slurm forgets finished jobs, and then
// squeue says "Invalid job id": that is done too.
Result<bool> jobQueued(const std::string& job) {
  std::string out;
  Status s = runCommand({"squeue", "-h", "-j", job, "-o", "%i"}, kToolTimeoutS, {"Invalid job id"}, &out);
  if (!s.isOk()) return s;
  return out.find_first_not_of(" \n") != std::string::npos;
}

std::string readJobId(const std::string& path) {
  std::ifstream in(path);
  std::string id;
  in >> id;
  // Only a job id we wrote: digits (a federation may add ";cluster", which we cut when writing).
  return !id.empty() && id.size() <= 20 && id.find_first_not_of("0123456789") == std::string::npos ? id : "";
}

// Waits until Slurm no longer lists `job`, reporting points as they complete. An interrupt cancels it.
Status waitForJob(const std::string& job, const SweepOptions& options, const SlurmOptions& slurm,
                  const std::vector<PlannedPoint>& points) {
  std::vector<bool> reported(points.size(), false);
  int query_failures = 0;
  for (;;) {
    if (slurm.interrupted && slurm.interrupted->load()) {
      Status s = runCommand({"scancel", job}, kToolTimeoutS);
      if (options.progress) std::fprintf(options.progress, "sweep: interrupted: Slurm job %s %s\n", job.c_str(),
                                         s.isOk() ? "cancelled" : ("not cancelled: " + s.toString()).c_str());
      return Status::cancelled("interrupted");
    }
    for (size_t i = 0; i < points.size(); ++i) {
      if (reported[i] || !pointComplete(options.out_dir + "/points/" + points[i].id)) continue;
      reported[i] = true;
      if (options.progress) {
        std::fprintf(options.progress, "sweep: point %s complete\n", points[i].id.c_str());
        std::fflush(options.progress);
      }
    }
    auto queued = jobQueued(job);
    if (queued.isOk() && !*queued) return Status::ok();
    // slurmctld may be briefly unreachable (a restart, a fail-over): a minute of failed queries ends the wait.
    if (!queued.isOk() && ++query_failures * slurm.poll_s > 60)
      return queued.status().withContext("Slurm job " + job + " is still recorded in " + options.out_dir +
                                         "/slurm/job-id; rerun the sweep to wait for it again");
    if (queued.isOk()) query_failures = 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(slurm.poll_s));
  }
}

}  // namespace

std::string arrayScript(const std::string& binary, const std::string& spec_path, const std::string& out_dir,
                        size_t points) {
  std::string s;
  s += "#!/bin/sh\n";
  s += "# Written by `chaosbed sweep --executor slurm`: one sweep point per array task, each on a node of its own.\n";
  s += "#SBATCH --job-name=chaosbed-sweep\n";
  s += "#SBATCH --array=0-" + std::to_string(points - 1) + "\n";
  s += "#SBATCH --nodes=1\n";
  s += "#SBATCH --ntasks=1\n";
  s += "#SBATCH --exclusive\n";
  s += "#SBATCH --output=" + out_dir + "/slurm/task-%a.log\n";
  s += "point=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" '" + out_dir + "/slurm/points.txt')\n";
  s += "exec '" + binary + "' sweep '" + spec_path + "' --out '" + out_dir + "' --sweep_point \"$point\"\n";
  return s;
}

Result<SweepOutcome> runSweepOnSlurm(const SweepOptions& given, const SlurmOptions& slurm) {
  SweepOptions options = given;
  std::error_code ec;
  options.out_dir = fs::absolute(given.out_dir, ec).lexically_normal().string();
  options.spec_path = fs::absolute(given.spec_path, ec).lexically_normal().string();
  CHAOSBED_RETURN_IF_ERROR(checkScriptPath("the output directory", options.out_dir));
  CHAOSBED_RETURN_IF_ERROR(checkScriptPath("the spec path", options.spec_path));
  CHAOSBED_RETURN_IF_ERROR(checkScriptPath("the chaosbed binary", slurm.chaosbed_binary));
  const std::string dir = options.out_dir + "/slurm";
  fs::create_directories(dir, ec);
  if (ec) return Status::ioError("cannot create " + dir + ": " + ec.message());
  const std::string job_file = dir + "/job-id";

  // A job of an earlier run of this sweep that is still queued or running owns its points: wait for it.
  if (const std::string earlier = readJobId(job_file); !earlier.empty()) {
    CHAOSBED_ASSIGN_OR_RETURN(bool queued, jobQueued(earlier));
    if (queued) {
      if (options.progress) std::fprintf(options.progress, "sweep: Slurm job %s of an earlier run of this sweep is still queued or running; waiting for it\n", earlier.c_str());
      CHAOSBED_ASSIGN_OR_RETURN(std::vector<PlannedPoint> theirs, pendingPoints(options));
      CHAOSBED_RETURN_IF_ERROR(waitForJob(earlier, options, slurm, theirs));
    }
    fs::remove(job_file, ec);
  }

  CHAOSBED_ASSIGN_OR_RETURN(std::vector<PlannedPoint> pending, pendingPoints(options));
  if (pending.empty()) {
    if (options.progress) std::fprintf(options.progress, "sweep: every point is complete; nothing to submit\n");
    return gatherSweep(options, {});
  }
  std::string ids;
  for (const PlannedPoint& p : pending) ids += p.id + "\n";
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(dir + "/points.txt", ids));
  const std::string script = dir + "/sweep.sbatch";
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(
      script, arrayScript(slurm.chaosbed_binary, options.spec_path, options.out_dir, pending.size())));
  for (size_t i = 0; i < pending.size(); ++i) fs::remove(dir + "/task-" + std::to_string(i) + ".log", ec);

  std::vector<std::string> argv{"sbatch", "--parsable"};
  argv.insert(argv.end(), slurm.sbatch_args.begin(), slurm.sbatch_args.end());
  argv.push_back(script);
  std::string out;
  if (Status s = runCommand(argv, kToolTimeoutS, {}, &out); !s.isOk())
    return s.withContext("submitting the sweep's job array (is Slurm installed here, and SLURM_CONF right?)");
  const std::string job = out.substr(0, out.find_first_of(";\n"));
  if (job.empty() || job.find_first_not_of("0123456789") != std::string::npos)
    return Status::ioError("sbatch printed '" + out + "', not a job id");
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(job_file, job + "\n"));
  if (options.progress) {
    std::fprintf(options.progress, "sweep: %zu point(s) submitted as Slurm job array %s (script %s, logs %s/task-<i>.log)\n",
                 pending.size(), job.c_str(), script.c_str(), dir.c_str());
    std::fflush(options.progress);
  }
  CHAOSBED_RETURN_IF_ERROR(waitForJob(job, options, slurm, pending));
  fs::remove(job_file, ec);
  for (size_t i = 0; i < pending.size(); ++i)
    if (!pointComplete(options.out_dir + "/points/" + pending[i].id) && options.progress)
      std::fprintf(options.progress, "sweep: point %s did not complete; see %s/task-%zu.log\n", pending[i].id.c_str(),
                   dir.c_str(), i);
  std::vector<std::string> ran;
  for (const PlannedPoint& p : pending) ran.push_back(p.id);
  return gatherSweep(options, ran);
}

}  // namespace chaosbed::sweep
