#pragma once
// HealRecord: how to undo one applied fault without the cluster or the actuator that applied it. The
// controller writes the records of every applied fault to its state file BEFORE applying (so a half-done
// apply is covered), and the agent or the next start's cleanupStale() replays them after a crash.
//
// heal() is idempotent and tolerant: a cgroup or device that no longer exists, or a process group that is
// gone, is already healed (OK). Kill and preempt leave no record: a dead process needs no undoing.

#include <sys/types.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "transports/base/status.h"

namespace chaosbed::chaos {

struct HealRecord {
  enum class Op : uint8_t {
    kThaw,      // thaw the node's freezer cgroup (group, node, paths)
    kCpuLimit,  // set the node's CPU quota back to `cpus` (group, node, paths; 0 = unlimited)
    kSigcont,   // SIGCONT the process group `pgid`
  };
  Op op = Op::kThaw;
  std::string group, node;
  std::vector<std::string> paths;  // the cgroup directories; heal does nothing when they are gone
  double cpus = 0.0;
  pid_t pgid = 0;
  bool operator==(const HealRecord&) const = default;
};

const char* healOpName(HealRecord::Op op);
nlohmann::json healToJson(const HealRecord& r);
Result<HealRecord> healFromJson(const nlohmann::json& j);

// Undoes what the record describes; OK when there is nothing left to undo.
Status heal(const HealRecord& r);

}  // namespace chaosbed::chaos
