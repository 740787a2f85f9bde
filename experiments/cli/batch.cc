#include "experiments/cli/batch.h"

#include <gflags/gflags.h>
#include <signal.h>

#include <cstdio>

#include "experiments/cli/cli.h"
#include "experiments/run/experiment.h"
#include "experiments/run/provenance.h"

DECLARE_string(metrics_addr);
DECLARE_bool(metrics_allow_remote);
DECLARE_string(push_gateway);
DEFINE_double(wait_quiet_s, 0, "before each run, wait up to this long for the CPUs to be quiet (under 10% busy "
              "over a second, from /proc/stat); 0: do not wait");

namespace chaosbed::cli {

std::unique_ptr<Batch> Batch::open(const char* command, const std::string& spec_path, int* exit_code) {
  if (fileMissing(command, spec_path)) {
    *exit_code = kExitUsage;
    return nullptr;
  }
  config::Diagnostics diagnostics;
  auto spec = spec::readExperimentSpec(spec_path, {}, &diagnostics);
  if (!spec) {
    std::fputs(diagnostics.toString().c_str(), stderr);
    *exit_code = kExitInvalidSpec;
    return nullptr;
  }
  std::unique_ptr<Batch> b(new Batch);
  b->spec_ = std::move(*spec);
  Batch* self = b.get();
  auto watcher = chaos::StopSignalWatcher::start([self](int) { self->interrupted_ = true; });
  if (!watcher.isOk()) {
    std::fprintf(stderr, "chaosbed %s: %s\n", command, watcher.status().message().c_str());
    *exit_code = kExitInfrastructure;
    return nullptr;
  }
  b->watcher_ = std::move(*watcher);
  return b;
}

sweep::PointRunner Batch::runner(FILE* progress) {
  return [this, progress](const spec::ExperimentSpec& point, const std::string& dir) -> Result<bool> {
    if (interrupted_) return Status::cancelled("interrupted");
    // A machine still busy after the wait runs the point anyway: its provenance says it was not quiet.
    if (FLAGS_wait_quiet_s > 0) (void)run::waitForQuiet(FLAGS_wait_quiet_s, stdout);
    run::ExperimentOptions ro;
    ro.out_dir = dir;
    ro.metrics_addr = FLAGS_metrics_addr;
    ro.metrics_allow_remote = FLAGS_metrics_allow_remote;
    ro.push_gateway = FLAGS_push_gateway;
    ro.interrupted = &interrupted_;
    ro.progress = progress;
    auto outcome = run::runExperiment(point, ro);
    if (interrupted_) return Status::cancelled("interrupted");
    if (!outcome.isOk()) return outcome.status();
    return outcome->complete;
  };
}

int Batch::interruptedExitCode() const { return watcher_ && watcher_->received() == SIGTERM ? 143 : kExitInterrupted; }

}  // namespace chaosbed::cli
