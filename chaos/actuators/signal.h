#pragma once
// Signal actuators.
// - SignalActuator (kill, preempt): kill = SIGKILL to the node's process group; preempt = SIGTERM (the
//   notice) on apply, SIGKILL on escalate (the controller schedules it grace_s later). A node in a frozen
//   cgroup is thawed after SIGKILL, because a frozen v1 task cannot die until thawed. revert() is a no-op:
//   a dead process comes back only by replacement (Cluster::replace). A group that is already gone is OK.
// - PauseActuator (pause, vanish): the cgroup freezer when the node has a cgroup and the kernel a freezer,
//   else SIGSTOP/SIGCONT to the process group (PauseMode picks: auto, freezer only, signal only). A vanish
//   is a freeze that is never reverted while the run lasts: the failure detector fences the node (experiments/run).
//   Overlapping holds of one process nest: it thaws when the last one is reverted. Holds belong to the
//   process they froze: a replacement starts thawed (the launcher thaws its cgroup) and a hold left from its
//   predecessor neither keeps it frozen nor is thawed on it.

#include <map>
#include <set>
#include <string>

#include "chaos/actuators/actuator.h"
#include "chaos/model/spec.h"

namespace chaosbed::chaos {

class SignalActuator final : public Actuator {
 public:
  explicit SignalActuator(Cluster& cluster) : cluster_(cluster) {}
  const char* name() const override { return "signal"; }
  Status checkAvailable(const Fault& fault, const std::string& node) override;
  Result<std::vector<HealRecord>> prepare(const Fault&, const std::string&) override { return std::vector<HealRecord>{}; }
  Status apply(const Fault& fault, const std::string& node) override;
  Status escalate(const Fault& fault, const std::string& node) override;
  Status revert(const Fault&, const std::string&) override { return Status::ok(); }

 private:
  Status signalNode(const std::string& node, int sig);
  Cluster& cluster_;
};

class PauseActuator final : public Actuator {
 public:
  PauseActuator(Cluster& cluster, PauseMode mode);
  const char* name() const override { return "pause"; }
  Status checkAvailable(const Fault& fault, const std::string& node) override;
  Result<std::vector<HealRecord>> prepare(const Fault& fault, const std::string& node) override;
  Status apply(const Fault& fault, const std::string& node) override;
  Status revert(const Fault& fault, const std::string& node) override;

 private:
  bool useFreezer(const std::string& node);
  Cluster& cluster_;
  PauseMode mode_;
  bool freezer_supported_;
  std::string why_no_freezer_;
  struct Hold {
    pid_t pgid = 0;             // the process group (incarnation) held
    std::set<uint64_t> faults;  // the pause/vanish faults holding it
  };
  std::map<std::string, Hold> holds_;  // by node
};

}  // namespace chaosbed::chaos
