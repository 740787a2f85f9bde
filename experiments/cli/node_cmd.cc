// `chaosbed worker | ps | evaluator`: one node of a strategy run. The local launcher starts these; on a
// cluster, Slurm, mpirun, a Kubernetes indexed job or TF_CONFIG say which node a process is.

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdio>
#include <string>

#include "core/launcher/identity.h"
#include "core/node/node.h"
#include "experiments/cli/cli.h"

DEFINE_string(node_config, "", "the node config file the controller wrote (JSON)");
DEFINE_int32(index, -1, "a node's index within its role, or an agent's host; -1 reads it from the environment "
                        "(CHAOSBED_RANK, TF_CONFIG, SLURM_PROCID, OMPI_COMM_WORLD_RANK, torchrun's RANK, "
                        "JOB_COMPLETION_INDEX; an agent: its launcher's rank, else the next free host)");

namespace chaosbed::cli {

static int runRole(const std::string& role) {
  if (FLAGS_node_config.empty()) {
    std::fprintf(stderr, "chaosbed %s: --node_config FILE is required\n", role.c_str());
    return kExitUsage;
  }
  NodeLaunch launch;
  launch.config_path = FLAGS_node_config;
  launch.role = role;
  launch.index = FLAGS_index;
  auto identity = identityFromEnvironment();
  if (identity.isOk()) {
    launch.incarnation = identity->incarnation;
    if (launch.index < 0) {
      if (identity->role != role) {
        std::fprintf(stderr, "chaosbed %s: the environment (%s) says this process is a %s\n", role.c_str(),
                     identity->source.c_str(), identity->role.c_str());
        return kExitUsage;
      }
      launch.index = identity->index;
    }
  } else if (launch.index < 0) {
    std::fprintf(stderr, "chaosbed %s: no --index and %s\n", role.c_str(), identity.status().toString().c_str());
    return kExitUsage;
  }
  return runNodeProcess(launch);
}

int runWorker(int, char**) { return runRole("worker"); }
int runPs(int, char**) { return runRole("ps"); }
int runEvaluatorNode(int, char**) { return runRole("evaluator"); }

}  // namespace chaosbed::cli
