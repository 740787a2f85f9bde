#include "chaos/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <glog/logging.h>

namespace chaosbed::chaos {

Result<std::unique_ptr<LocalCluster>> LocalCluster::start(std::vector<NodeInfo> nodes, Body body, Options options) {
  std::unique_ptr<LocalCluster> c(new LocalCluster(std::move(nodes), std::move(body), std::move(options)));
  for (const NodeInfo& n : c->nodes_) {
    if (!c->options_.cgroup_group.empty()) {
      CHAOSBED_ASSIGN_OR_RETURN(NodeCgroup cg, NodeCgroup::create(c->options_.cgroup_group, n.name));
      c->cgroups_[n.name] = std::make_unique<NodeCgroup>(std::move(cg));
      CHAOSBED_RETURN_IF_ERROR(c->cgroups_[n.name]->setCpuLimit(c->options_.cpu_quota));
    }
    MutexLock lock(c->mu_);  // no other thread yet: for the analysis
    CHAOSBED_RETURN_IF_ERROR(c->launch(n));
  }
  return c;
}

LocalCluster::~LocalCluster() {
  for (auto& [name, pid] : pids_) {
    if (pid <= 0) continue;
    ::kill(-pid, SIGKILL);
    if (auto it = cgroups_.find(name); it != cgroups_.end()) (void)it->second->thaw();  // a frozen task does not die
    (void)::waitpid(pid, nullptr, 0);
  }
  if (!options_.cgroup_group.empty()) {
    for (auto& [name, cg] : cgroups_)
      if (Status s = cg->destroy(); !s.isOk()) LOG(WARNING) << "local cluster: " << s.toString();
    if (Status s = removeGroup(options_.cgroup_group); !s.isOk()) LOG(WARNING) << "local cluster: " << s.toString();
  }
}

const NodeInfo* LocalCluster::find(const std::string& node) const {
  for (const NodeInfo& n : nodes_)
    if (n.name == node) return &n;
  return nullptr;
}

Status LocalCluster::launch(const NodeInfo& node) {
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return Status::fromErrno("pipe");
  const int incarnation = incarnations_[node.name]++;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::fromErrno("fork");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::close(go[1]);
    char c;
    while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::close(go[0]);
    body_(node, incarnation);
    ::_exit(0);
  }
  ::setpgid(pid, pid);  // also from the parent, so the group exists before anyone signals it
  ::close(go[0]);
  Status s;
  if (auto it = cgroups_.find(node.name); it != cgroups_.end()) s = it->second->addProcess(pid);
  (void)!::write(go[1], "g", 1);
  ::close(go[1]);
  pids_[node.name] = pid;
  return s;
}

Result<pid_t> LocalCluster::processGroup(const std::string& node) {
  MutexLock lock(mu_);
  auto it = pids_.find(node);
  if (it == pids_.end() || it->second <= 0) return Status::notFound(node + " is not running");
  return it->second;
}

NodeCgroup* LocalCluster::cgroup(const std::string& node) {
  auto it = cgroups_.find(node);
  return it == cgroups_.end() ? nullptr : it->second.get();
}

Status LocalCluster::replace(const std::string& node) {
  const NodeInfo* n = find(node);
  if (!n) return Status::notFound("no node " + node);
  MutexLock lock(mu_);
  auto it = pids_.find(node);
  if (it != pids_.end() && it->second > 0) {
    // Replacing a live node: the old incarnation goes first.
    ::kill(-it->second, SIGKILL);
    if (NodeCgroup* cg = cgroup(node)) (void)cg->thaw();  // a frozen task does not die
    (void)::waitpid(it->second, nullptr, 0);
    it->second = 0;
  }
  return launch(*n);
}

Result<int> LocalCluster::waitExit(const std::string& node, double timeout_s) {
  pid_t pid = 0;
  {
    MutexLock lock(mu_);
    auto it = pids_.find(node);
    if (it == pids_.end() || it->second <= 0) return Status::notFound(node + " is not running");
    pid = it->second;
  }
  // A pidfd becomes readable when the process exits: wait on it instead of polling waitpid.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return Status::fromErrno(node + ": pidfd_open");
  pollfd p{pidfd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
  } while (n < 0 && errno == EINTR);
  ::close(pidfd);
  if (n == 0) return Status::timeout(node + " did not exit within " + std::to_string(timeout_s) + " s");
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return Status::fromErrno(node + ": waitpid");
  MutexLock lock(mu_);
  if (auto it = pids_.find(node); it != pids_.end() && it->second == pid) it->second = 0;
  return status;
}

pid_t LocalCluster::pid(const std::string& node) const {
  MutexLock lock(mu_);
  auto it = pids_.find(node);
  return it == pids_.end() ? 0 : it->second;
}

int LocalCluster::incarnation(const std::string& node) const {
  MutexLock lock(mu_);
  auto it = incarnations_.find(node);
  return it == incarnations_.end() ? 0 : it->second - 1;
}

}  // namespace chaosbed::chaos
