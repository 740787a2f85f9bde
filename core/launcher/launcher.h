#pragma once
// Launcher: runs each node (worker, ps, evaluator) as its own OS process, so that kill and pause are real.
//
// Contract
// - start() fork+execs the node's binary (by default the running executable, /proc/self/exe) with its args
//   and environment: the launcher's environment, plus spec.env, plus CHAOSBED_NODE, CHAOSBED_ROLE,
//   CHAOSBED_RANK (= spec.index) and CHAOSBED_INCARNATION (identity.h reads them back). The child:
//     * leads its own process group (pgid = pid); signal() and stopAll() signal the whole group;
//     * has PR_SET_PDEATHSIG(SIGKILL), so it dies with the launcher (checked against the fork race);
//     * writes stdout and stderr to <log_dir>/<name>.log (appended; one header line per incarnation);
//     * when spec.cpus is set, is placed in its NodeCgroup (group = options.cgroup_group, node = name) before
//       it execs, so not one instruction of the node runs outside its quota.
//   start() returns once the exec has succeeded, or the reason it failed (exec errors included).
// - Exit notices: one launcher thread waits on a pidfd per node; when a node's process ends it SIGKILLs what
//   is left of the node's process group and cgroup, reaps it and calls options.on_exit within milliseconds.
//   The callback runs on that thread, never under a launcher lock; it must not wait for exit notices itself
//   (no restart/stopAll/waitExit of a running node from inside it: post such work to another thread).
// - The same thread forks every node, because PR_SET_PDEATHSIG fires when the *thread* that forked exits:
//   start() may then be called from any thread, including short-lived ones.
// - Nothing else in the process may waitpid(-1)/wait() children, or exit notices are lost.
// - The destructor stops every node (stopAll with options.stop_grace), removes the cgroups it created and
//   joins its thread. No orphans, no zombies, no cgroups are left behind.
// - Thread safety: every method may be called from any thread.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/isolation/cgroup.h"
#include "transports/base/status.h"
#include "transports/transport.h"

namespace chaosbed {

struct NodeSpec {
  std::string name;                        // unique: "worker-0", "ps-1", "evaluator"; [A-Za-z0-9._-]+
  std::string role;                        // "worker", "ps", "evaluator"
  int index = 0;                           // rank within the role
  std::vector<std::string> args;           // argv[1..]; argv[0] is the binary
  std::map<std::string, std::string> env;  // set in the child on top of the launcher's environment
  std::string binary;                      // empty: the running executable; a bare name is looked up in PATH
  std::optional<double> cpus;              // isolate in a NodeCgroup with this CPU quota (0 = no quota)
  int net_namespace_fd = -1;               // enter this network namespace before exec (hosts: netns);
                                           // the caller keeps it open while the launcher lives
};

// How one incarnation of a node ended.
struct ExitInfo {
  std::string name;
  pid_t pid = -1;
  int incarnation = 0;
  bool signaled = false;  // killed by a signal (`signal`), else exited with `code`
  int code = 0;           // exit code when !signaled
  int signal = 0;         // terminating signal when signaled
  bool requested = false; // the launcher stopped it (stopAll, restart), not the node or a fault
  SteadyClock::time_point at;          // when the launcher reaped it
  std::chrono::nanoseconds lifetime{};  // from start to exit
  // "exited with code 3" / "killed by signal 9 (Killed)".
  std::string describe() const;
};

using ExitCallback = std::function<void(const ExitInfo&)>;

struct LauncherOptions {
  std::string log_dir;       // required; created if missing
  std::string cgroup_group;  // cgroup group for isolated nodes; empty: "launcher-<pid>"
  ExitCallback on_exit;      // optional; see the contract above
  std::chrono::milliseconds stop_grace{2000};  // SIGTERM grace used by the destructor
};

// What a run's supervisor needs from whoever runs its node processes: the Launcher on this machine, or the
// host agents of emulated or real hosts (chaos/agent), which run a Launcher each where the nodes live. Exit
// notices reach the on_exit callback its creator was given; the contract of each call is the Launcher's.
class NodeRunner {
 public:
  virtual ~NodeRunner() = default;
  // Starts a new node (incarnation 1). InvalidArgument for a bad spec or a name already in use.
  virtual Result<pid_t> start(const NodeSpec& spec) = 0;
  // Starts the next incarnation of a known node with the same spec (same name, role and rank). A node still
  // running is SIGKILLed first and its exit awaited until deadline. Its cgroup is thawed and its quota reset
  // to spec.cpus.
  virtual Result<pid_t> restart(const std::string& name, Deadline deadline) = 0;
  // The pid of the running incarnation; NotFound for an unknown name, Unavailable when it is not running.
  virtual Result<pid_t> pid(const std::string& name) const = 0;
  virtual bool running(const std::string& name) const = 0;
  virtual int incarnation(const std::string& name) const = 0;  // 0 for an unknown name
  // Sends sig to the node's process group; after SIGKILL its cgroup is thawed (a frozen task cannot die).
  // Unavailable when the node is not running.
  virtual Status signal(const std::string& name, int sig) = 0;
  // Waits until the current incarnation has exited (returns at once if it has); Timeout at the deadline.
  virtual Result<ExitInfo> waitExit(const std::string& name, Deadline deadline) = 0;
  // SIGTERM to every running node (after thawing its cgroup and SIGCONT), up to `grace` for them to exit,
  // then SIGKILL and reap. OK when nothing is left running.
  virtual Status stopAll(std::chrono::milliseconds grace) = 0;
  // The node's cgroup on this machine (for the chaos controller's freezer and quota), or nullptr when it is
  // not isolated or lives on a host this process does not own. Valid for the runner's lifetime.
  virtual NodeCgroup* cgroup(const std::string& name) = 0;
  virtual std::string logPath(const std::string& name) const = 0;
  // Whether the node's host is gone (its agent lost), so that no restart of it there can succeed.
  virtual bool hostLost(const std::string& /*name*/) const { return false; }
};

class Launcher final : public NodeRunner {
 public:
  static Result<std::unique_ptr<Launcher>> create(LauncherOptions options);
  ~Launcher() override;
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  Result<pid_t> start(const NodeSpec& spec) override;
  Result<pid_t> restart(const std::string& name, Deadline deadline) override;
  Result<pid_t> pid(const std::string& name) const override;
  bool running(const std::string& name) const override;
  int incarnation(const std::string& name) const override;
  Status signal(const std::string& name, int sig) override;
  Result<ExitInfo> waitExit(const std::string& name, Deadline deadline) override;
  Status stopAll(std::chrono::milliseconds grace) override;
  NodeCgroup* cgroup(const std::string& name) override;
  std::string logPath(const std::string& name) const override;
  std::vector<std::string> names() const;
  const std::string& cgroupGroup() const { return options_.cgroup_group; }

 private:
  struct Node;
  struct SpawnJob;
  explicit Launcher(LauncherOptions options, std::string self_exe, int event_fd);

  Result<pid_t> launch(const std::string& name, bool first);
  void loop();                     // the launcher thread
  void spawn(SpawnJob& job);       // on the launcher thread
  void reap(const std::string& name);  // on the launcher thread
  void wake();

  const LauncherOptions options_;
  const std::string self_exe_;
  const int event_fd_;
  bool created_cgroups_ = false;  // guarded by mu_

  mutable std::mutex mu_;
  std::condition_variable exited_cv_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;   // guarded by mu_
  std::deque<std::shared_ptr<SpawnJob>> spawn_queue_;    // guarded by mu_
  bool shutdown_ = false;                                // guarded by mu_
  std::thread thread_;
};

}  // namespace chaosbed
