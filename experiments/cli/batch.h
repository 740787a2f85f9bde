#pragma once
// The plumbing shared by the commands that run a spec many times (sweep, tune, noise): the spec read with
// its diagnostics, Ctrl-C and SIGTERM, and a runner that makes one experiment into a directory.

#include <atomic>
#include <memory>
#include <string>

#include "chaos/controller.h"
#include "experiments/spec/spec.h"
#include "experiments/sweep/sweep.h"

namespace chaosbed::cli {

class Batch {
 public:
  // Reads `spec_path` and installs the signal watcher. nullptr after printing why on stderr; *exit_code is
  // then kExitInvalidSpec (the spec) or kExitInfrastructure (the watcher).
  static std::unique_ptr<Batch> open(const char* command, const std::string& spec_path, int* exit_code);

  const spec::ExperimentSpec& spec() const { return spec_; }
  // One experiment into `dir` (with the --metrics_* and --wait_quiet_s flags); Cancelled once interrupted.
  // `progress`: the run's live progress and table go there (nullptr: silent).
  sweep::PointRunner runner(FILE* progress);
  bool interrupted() const { return interrupted_.load(); }
  const std::atomic<bool>* interruptFlag() const { return &interrupted_; }
  int interruptedExitCode() const;  // 143 after SIGTERM, else 130

 private:
  Batch() = default;
  spec::ExperimentSpec spec_;
  std::atomic<bool> interrupted_{false};
  std::unique_ptr<chaos::StopSignalWatcher> watcher_;
};

}  // namespace chaosbed::cli
