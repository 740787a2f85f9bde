#pragma once
// What the chaos controller needs from the cluster it torments. The launcher implements it for real node
// processes; tests implement it over forked children.
//
// Contract
// - nodes() is fixed for the life of a run: every node that ever exists, by name ("worker-2", "ps-0"),
//   role ("worker", "ps", "evaluator") and index within its role.
// - processGroup() is the process group of the node's current incarnation (a node leads its own group);
//   after replace() it is the new one. NotFound when the node is not running (killed, not yet replaced).
// - cgroup() is the node's NodeCgroup (node isolation) or nullptr when the node runs without one; the
//   pointer stays valid for the run. cpuQuota() is the node's configured quota in cores (0 = none).
// - host() is the emulated host the node is placed on (hosts: netns; fixed for the run, replacements
//   included), or -1 when the run has none.
// - replace() starts a new incarnation of a dead node (restart_after); it returns once it is launched.
// - Thread safety: the controller calls these from its own thread only, one call at a time.

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/isolation/cgroup.h"
#include "transports/base/status.h"

namespace chaosbed::chaos {

struct NodeInfo {
  std::string name;  // "<role>-<index>"
  std::string role;
  int index = 0;
  bool operator==(const NodeInfo&) const = default;
};

// Nodes named "<role>-<i>" for i in [0, count) of each (role, count), in the order given.
std::vector<NodeInfo> makeNodes(const std::vector<std::pair<std::string, int>>& roles);

class Cluster {
 public:
  virtual ~Cluster() = default;
  virtual std::vector<NodeInfo> nodes() const = 0;
  virtual Result<pid_t> processGroup(const std::string& node) = 0;
  virtual NodeCgroup* cgroup(const std::string& node) = 0;
  virtual double cpuQuota(const std::string& node) = 0;
  virtual int host(const std::string& /*node*/) { return -1; }
  virtual Status replace(const std::string& node) = 0;
};

}  // namespace chaosbed::chaos
