#pragma once
// Which node this process is (role and rank), read from the environment, so that one binary runs under the
// local launcher and on a cluster. Sources, first match wins:
//  1. chaosbed's own: CHAOSBED_ROLE (worker | ps | evaluator) and CHAOSBED_RANK (index within the role), set
//     by the local launcher; optional counts CHAOSBED_WORKERS, CHAOSBED_SERVERS, CHAOSBED_EVALUATORS.
//  2. TF_CONFIG (TensorFlow's cluster spec): {"cluster": {"worker": [...], "ps": [...], "chief": [...],
//     "evaluator": [...]}, "task": {"type": "worker", "index": 1}}. A "chief" is worker 0 and the workers
//     follow it (worker i becomes worker i + number of chiefs); addresses come from the cluster lists.
//  3. Slurm: SLURM_PROCID / SLURM_NTASKS.
//  4. Open MPI: OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE.
//  5. torchrun (`--no-python`): RANK / WORLD_SIZE, where TORCHELASTIC_RUN_ID says torchrun set them.
//  6. Kubernetes Indexed Job: JOB_COMPLETION_INDEX, with the size in CHAOSBED_WORLD_SIZE (Kubernetes does not
//     export the job's completions; set it from the same value in the pod template).
// Sources 3-6 give one global rank (launcherRankFromEnvironment); it is split into roles by this convention: ranks [0, S) are ps,
// [S, size - E) workers, [size - E, size) evaluators, with S = CHAOSBED_SERVERS and E = CHAOSBED_EVALUATORS
// (both default 0). At least one worker must remain.
//
// Errors: InvalidArgument naming the variable and what is wrong with its value; NotFound when no source is
// present.

#include <map>
#include <string>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed {

struct NodeIdentity {
  std::string role;  // "worker", "ps" or "evaluator"
  int index = 0;     // rank within the role
  // Cluster shape; -1 where the source does not say (CHAOSBED_* without the count variables).
  int num_workers = -1;
  int num_servers = -1;
  int num_evaluators = -1;
  int incarnation = 0;       // CHAOSBED_INCARNATION when set by the launcher, else 0
  std::string source;        // "CHAOSBED_ROLE", "TF_CONFIG", "SLURM", "OMPI", "TORCHRUN", "JOB_COMPLETION_INDEX"
  // From TF_CONFIG only: role -> "host:port" per index (chief entries merged into "worker").
  std::map<std::string, std::vector<std::string>> addresses;

  // "worker-1", "ps-0", "evaluator-0": the launcher's node naming.
  std::string nodeName() const;
};

Result<NodeIdentity> identityFromEnvironment();

// The rank a process launcher gave this process and how many it started (sources 3-6 above, first match
// wins): what a host agent started by srun, mpirun, torchrun or an Indexed Job takes as its host number.
// NotFound when no launcher says; InvalidArgument naming the variable for a bad value.
struct LauncherRank {
  std::string source;    // "SLURM", "OMPI", "TORCHRUN", "JOB_COMPLETION_INDEX"
  std::string rank_var;  // e.g. "SLURM_PROCID"
  std::string size_var;  // e.g. "SLURM_NTASKS"
  int rank = 0;
  int size = 0;
};
Result<LauncherRank> launcherRankFromEnvironment();

}  // namespace chaosbed
