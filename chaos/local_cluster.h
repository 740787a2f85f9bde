#pragma once
// LocalCluster: a Cluster of forked child processes on this machine, for the chaos tests and the fidelity
// benchmark (the real launcher lives in core/launcher). Each node is a child that leads its own
// process group, dies with this process (PR_SET_PDEATHSIG), optionally runs in its own NodeCgroup with a
// CPU quota, and runs `body(node)` until killed (body must not return; if it does the child exits 0).
//
// The child is moved into its cgroup before body starts (it waits on a pipe for the parent to do so).
// body runs in a forked copy of a possibly multi-threaded process: it must keep to async-signal-safe calls
// (write, read, clock_gettime, plain computation). The destructor kills every node and removes the cgroups.

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "chaos/model/cluster.h"
#include "core/isolation/cgroup.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed::chaos {

class LocalCluster final : public Cluster {
 public:
  struct Options {
    std::string cgroup_group;  // empty: no cgroups
    double cpu_quota = 0.0;    // per node, cores (0 = none); needs cgroup_group
  };
  using Body = std::function<void(const NodeInfo& node, int incarnation)>;

  static Result<std::unique_ptr<LocalCluster>> start(std::vector<NodeInfo> nodes, Body body, Options options);
  ~LocalCluster() override;

  std::vector<NodeInfo> nodes() const override { return nodes_; }
  Result<pid_t> processGroup(const std::string& node) override;
  NodeCgroup* cgroup(const std::string& node) override;
  double cpuQuota(const std::string&) override { return options_.cpu_quota; }
  Status replace(const std::string& node) override;

  // Waits (up to timeout_s) for the node's current process to exit; returns its wait status.
  Result<int> waitExit(const std::string& node, double timeout_s);
  pid_t pid(const std::string& node) const;  // 0 when not running
  int incarnation(const std::string& node) const;

 private:
  LocalCluster(std::vector<NodeInfo> nodes, Body body, Options options)
      : nodes_(std::move(nodes)), body_(std::move(body)), options_(std::move(options)) {}
  Status launch(const NodeInfo& node) CHAOSBED_REQUIRES(mu_);
  const NodeInfo* find(const std::string& node) const;

  std::vector<NodeInfo> nodes_;
  Body body_;
  Options options_;
  // The chaos controller's thread replaces nodes and reads their groups while a test waits for exits.
  mutable Mutex mu_;
  std::map<std::string, pid_t> pids_ CHAOSBED_GUARDED_BY(mu_);
  std::map<std::string, int> incarnations_ CHAOSBED_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<NodeCgroup>> cgroups_;
};

}  // namespace chaosbed::chaos
