#pragma once
// Node isolation with cgroups: each node gets its own cgroup with a CPU quota (so pausing or killing one node
// does not hand its CPU to the others) and a freezer (the `pause` fault).
//
// Layout: cgroup v1 where the `cpu` and `freezer` controllers are mounted as v1 hierarchies (two directories
// per node: <cpu mount>/chaosbed/<group>/<node> and <freezer mount>/chaosbed/<group>/<node>), else cgroup v2
// (one directory, <cgroup2 mount>/chaosbed/<group>/<node>, with `cpu` enabled in the parents' subtree_control
// and cgroup.freeze as the freezer). Mount points come from /proc/self/mountinfo.
//
// Contract
// - create() creates the directories or opens them when they exist (so the chaos controller may open the
//   launcher's cgroup by name). A NodeCgroup handle never removes anything when it goes out of scope: call
//   destroy(), or removeGroup() for a whole experiment. Both are idempotent.
// - Errors name the file written or read and the errno text; nothing throws.
// - Writing needs root (or a delegated hierarchy); probeCgroups() says what is usable and, if not, why.
// - Thread safety: a NodeCgroup has no mutable state of its own; concurrent calls race only in the kernel,
//   which serialises writes to one control file.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed {

struct CgroupSupport {
  bool cpu = false;      // CPU quotas can be set
  bool freezer = false;  // nodes can be frozen
  int version = 0;       // 1 or 2; 0 when neither hierarchy is usable
  std::string why_not;   // when cpu or freezer is false: what is missing, where, and what to do
};

// Where the hierarchies are mounted; probeCgroups() fills it from /proc/self/mountinfo. Tests may point it
// at another mount.
struct CgroupRoots {
  int version = 0;
  std::string cpu_root;      // v1: the cpu controller's mount
  std::string freezer_root;  // v1: the freezer controller's mount
  std::string unified_root;  // v2: the cgroup2 mount
};

// What is usable on this machine, without creating anything.
CgroupSupport probeCgroups();
// The roots that probeCgroups() judged usable; Unavailable (with the why_not text) when none is.
Result<CgroupRoots> detectCgroupRoots();

class NodeCgroup {
 public:
  // group and node: [A-Za-z0-9._-]+, not "." or "..". Creates (or opens) the node's directories.
  static Result<NodeCgroup> create(const std::string& group, const std::string& node);
  static Result<NodeCgroup> create(const std::string& group, const std::string& node, const CgroupRoots& roots);

  NodeCgroup(NodeCgroup&&) noexcept = default;
  NodeCgroup& operator=(NodeCgroup&&) noexcept = default;
  NodeCgroup(const NodeCgroup&) = delete;
  NodeCgroup& operator=(const NodeCgroup&) = delete;
  ~NodeCgroup() = default;  // leaves the cgroup in place (see the contract above)

  // Moves pid (the whole process; its later children follow) into this cgroup.
  Status addProcess(pid_t pid);
  // CPU quota in cores: quota = cpus * period (period 100 ms); 0 = unlimited. At least 0.01 when not 0.
  Status setCpuLimit(double cpus);
  // The current quota in cores; 0 when unlimited.
  Result<double> cpuLimit() const;
  // CPU time consumed by the cgroup's processes, when the kernel reports it (v1: cpuacct where co-mounted
  // with cpu, else Unavailable; v2: cpu.stat usage_usec).
  Result<std::chrono::microseconds> cpuUsage() const;

  // Freezes every process of the cgroup and waits until the kernel reports it frozen (Timeout otherwise;
  // the freeze request stays in effect). thaw() undoes it and waits until thawed. Both are idempotent.
  Status freeze(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  Status thaw(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // True only once fully frozen (v1 FREEZING reads false).
  Result<bool> isFrozen() const;

  // Processes now in the cgroup (their tgids).
  Result<std::vector<pid_t>> processes() const;

  // Thaws, SIGKILLs every remaining process, waits (up to timeout) until the cgroup is empty, and removes the
  // directories. Idempotent: a cgroup that is already gone is OK.
  Status destroy(std::chrono::milliseconds timeout = std::chrono::seconds(5));

  const std::string& group() const { return group_; }
  const std::string& node() const { return node_; }
  int version() const { return version_; }
  // The directories of this node: v1 {cpu, freezer}, v2 {unified}.
  std::vector<std::string> paths() const;

 private:
  NodeCgroup() = default;
  const std::string& procsDir() const;  // the directory whose cgroup.procs lists the node's processes

  int version_ = 0;
  std::string group_;
  std::string node_;
  std::string cpu_dir_;      // v1 cpu dir, or the v2 dir
  std::string freezer_dir_;  // v1 freezer dir, or the v2 dir
};

// Thaws, kills and removes every node cgroup under chaosbed/<group>, then the group directory. Idempotent.
Status removeGroup(const std::string& group);
Status removeGroup(const std::string& group, const CgroupRoots& roots);
// Groups present under chaosbed/ (for example left over by a crashed run), sorted.
Result<std::vector<std::string>> listGroups();
Result<std::vector<std::string>> listGroups(const CgroupRoots& roots);

// A warning when the quotas add up to more cores than this process may run on (then quotas no longer
// isolate nodes from each other); nullopt when they fit. cores <= 0 means the CPUs in our affinity mask.
std::optional<std::string> cpuQuotaOvercommit(std::span<const double> cpus, int cores = 0);

// The number of CPUs this process may run on (sched_getaffinity).
int availableCpus();

}  // namespace chaosbed
