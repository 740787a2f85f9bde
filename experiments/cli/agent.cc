// `chaosbed agent --agent_config FILE [--index I]`: the host agent of one host (chaos/agent/agent.h). The
// controller starts one per emulated host and says which (--index); on real machines srun, mpirun or a pod
// starts one per host and each joins as the next free host. The file is the run's agents.json, on a
// filesystem every host shares; an agent started before the controller waits for it to appear.

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "chaos/agent/agent.h"
#include "chaos/controller.h"
#include "experiments/cli/cli.h"

DEFINE_string(agent_config, "", "the run's agents.json, written by the controller (waited for when missing)");
DEFINE_double(join_timeout_s, 600, "how long an agent waits for --agent_config to appear");
DECLARE_int32(index);

namespace chaosbed::cli {

int runHostAgent(int, char**) {
  if (FLAGS_agent_config.empty()) {
    std::fprintf(stderr, "chaosbed agent: --agent_config FILE is required\n");
    return kExitUsage;
  }
  // Started before the controller (srun, mpirun): its results directory may not hold the file yet.
  auto config = chaos::AgentConfig::read(FLAGS_agent_config);
  for (const Deadline until = deadlineIn(std::chrono::milliseconds(int64_t(FLAGS_join_timeout_s * 1000)));
       !config.isOk() && config.status().code() == StatusCode::kNotFound && SteadyClock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polls a shared filesystem
    config = chaos::AgentConfig::read(FLAGS_agent_config);
  }
  if (!config.isOk()) {
    std::fprintf(stderr, "chaosbed agent: %s\n", config.status().toString().c_str());
    return config.status().code() == StatusCode::kNotFound ? kExitInfrastructure : kExitUsage;
  }
  std::atomic<bool> interrupted{false};
  auto watcher = chaos::StopSignalWatcher::start([&](int) { interrupted = true; });
  if (!watcher.isOk()) {
    std::fprintf(stderr, "chaosbed agent: %s\n", watcher.status().toString().c_str());
    return kExitInfrastructure;
  }
  Status s = chaos::runHostAgent(*config, FLAGS_index, &interrupted);
  if (interrupted) return (*watcher)->received() == SIGTERM ? 143 : kExitInterrupted;
  if (!s.isOk()) {
    std::fprintf(stderr, "chaosbed agent: %s\n", s.toString().c_str());
    // Refused to join (not one of the run's hosts, or all of them have joined): the command was wrong.
    return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitInfrastructure;
  }
  return kExitPass;
}

}  // namespace chaosbed::cli
