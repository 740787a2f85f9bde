#pragma once
// The host's register of runs: one fixed directory per machine that holds every live run's fault state, so
// that whoever starts next (a run, or `chaosbed chaos heal`) can heal what a dead one left behind, whoever
// killed it and whatever happened to its results directory.
//
// Layout: <root>/<owner>/<strategy label>/{state.json,lease} (chaos/state.h) and <root>/<owner>/owner.lock,
// where <root> is hostStateRoot() and <owner> is "<pid>.<start time>" of the controller that claimed it
// (RunClaim), which holds a lock on owner.lock while it lives. The start time (clock
// ticks since boot, /proc/<pid>/stat field 22) tells a live owner from a recycled pid. The run's cgroup groups
// are named "<owner>-<label>" (core/isolation), so a dead owner's groups are found by name too.
//
// Security: chaosbed runs as root. The root directory is created 0700 and must be a real directory (never a
// symlink) owned by this user with no group or other write bit, else every call is refused with a message
// that says why. Entries are looked at with lstat and removed without following links.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "chaos/event_log.h"
#include "transports/base/status.h"

namespace chaosbed::chaos {

// /run/chaosbed as root; else $XDG_RUNTIME_DIR/chaosbed, else /tmp/chaosbed-<uid>. Created (0700) when
// missing; InvalidArgument when it exists but is not safe to use (and the reason).
Result<std::string> hostStateRoot();
// Checks (and creates) `root` as above; for tests that use a root of their own.
Status prepareRoot(const std::string& root);
// The same for any directory chaosbed keeps: created with `mode` when missing, then it must be a real
// directory (not a symlink) of this user, without group or other write. `what` names it in errors.
Status prepareOwnDirectory(const std::string& dir, mode_t mode, const std::string& what);

// "<pid>.<start time>" of a process, or nullopt when it does not exist.
std::optional<std::string> ownerName(pid_t pid);
// Whether the owner a claim names still runs. A claim's owner holds a lock on <claim>/owner.lock (flock) for
// as long as it lives, which holds across PID namespaces (a `chaos heal` in a container sees other pids);
// where the claim has that file, the lock alone decides. Otherwise: the same pid with the same start time.
// `claims_root` empty: the pid check alone (for names outside the register, such as Prometheus target files).
bool ownerAlive(const std::string& owner, const std::string& claims_root = {});

// This process's claim on the host: <root>/<owner>/, created 0700 by create(). Removed by the destructor when
// every state file in it is finished; otherwise left for the agent or the next start to heal.
class RunClaim {
 public:
  static Result<RunClaim> create(const std::string& root);
  RunClaim(RunClaim&& other) noexcept;
  RunClaim& operator=(RunClaim&&) = delete;
  RunClaim(const RunClaim&) = delete;
  ~RunClaim();

  const std::string& dir() const { return dir_; }
  const std::string& owner() const { return owner_; }  // the prefix of the run's cgroup groups
  // The chaos state directory of one strategy (not created: the chaos controller creates it).
  std::string stateDir(const std::string& label) const { return dir_ + "/" + label; }
  // A private directory for the run's own files that must go when it does (the nodes' copy of the dataset):
  // created 0700 on first use, removed with the claim (also by a heal after a crash). Its name holds '@',
  // which strategy labels cannot, so it never meets a state directory.
  Result<std::string> scratchDir() const;

 private:
  RunClaim(std::string dir, std::string owner, int lock_fd)
      : dir_(std::move(dir)), owner_(std::move(owner)), lock_fd_(lock_fd) {}
  std::string dir_, owner_;
  int lock_fd_ = -1;  // holds owner.lock's flock while the claim lives (-1: another claim of this process does)
};

struct HealReport {
  int runs = 0;         // dead owners whose claims were healed and removed
  int records = 0;      // heal records replayed (thaw, CPU quota, SIGCONT, qdisc)
  int cgroups = 0;      // cgroup groups of dead owners removed (their processes thawed and killed)
  std::vector<std::string> errors;
};

// Heals every claim under root whose owner is dead: replays its unfinished fault state, removes its cgroup
// groups (thawing and killing what is still in them), then the claim, unless a state could not be read or
// healed whole (a truncated file, a link): that claim stays, with the error, for a person to see; and
// removes cgroup groups named after a dead owner whose claim is gone. Claims of live owners are left alone. `log` (optional) records each
// healed fault; otherwise each state's own events file does.
HealReport healDeadRuns(const std::string& root, EventLog* log = nullptr);

}  // namespace chaosbed::chaos
