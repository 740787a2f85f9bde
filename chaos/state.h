#pragma once
// Crash safety of the chaos controller: a state file of what is applied, a lease, and the agent.
//
// Files in the state directory:
//   state.json  {"version":1, "controller_pid", "agent_pid", "finished", "events_path",
//                "entries": [{"fault_id", "name", "kind", "node", "heal": [HealRecord...]}]}
//               Rewritten atomically (write to a temporary file, then rename(2)) before every apply and after
//               every revert. No fsync: what it protects against is a dead controller, not a dead machine
//               (cgroups, qdiscs and processes do not survive a reboot either), and rename is atomic for
//               every reader on the machine.
//   lease       CLOCK_MONOTONIC nanoseconds of the controller's last renewal (about every second), written
//               atomically; CLOCK_MONOTONIC is system-wide, so the agent can compare it with its own clock.
//
// The agent (`chaosbed chaos agent --state DIR`, started by the controller with setsid so that it survives
// it) heals every entry of an unfinished state file once the controller is gone: at once when its control
// pipe reads EOF (the controller died; the kernel closes the pipe) and the state is not finished, or when
// the lease is older than lease_timeout_s (a hung or stopped controller). It exits 0 when the state file
// says finished (normal end) or after healing. A SIGKILLed process in a frozen v1 cgroup cannot die until
// thawed: healing thaws it.
//
// cleanupStale() at the next start heals whatever an unfinished state file still lists (agent also dead,
// machine-level kill), then marks it finished.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chaos/actuators/heal.h"
#include "chaos/event_log.h"
#include "transports/base/status.h"

namespace chaosbed::chaos {

struct StateEntry {
  uint64_t fault_id = 0;
  std::string name;
  std::string kind;
  std::string node;
  std::vector<HealRecord> heal;
  bool operator==(const StateEntry&) const = default;
};

struct ChaosState {
  pid_t controller_pid = 0;
  pid_t agent_pid = 0;
  bool finished = false;
  std::string events_path;
  std::vector<StateEntry> entries;
  bool operator==(const ChaosState&) const = default;
};

inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kLeaseFile = "lease";
// What an agent healed when the lease lapsed (a state file of its entries): the controller, if it wakes,
// takes these faults as reverted instead of reverting or re-recording them (Controller::adoptAgentHealLocked).
inline constexpr const char* kHealedFile = "healed.json";


Status writeState(const std::string& dir, const ChaosState& state);
// nullopt when there is no state file; DataLoss naming the file when it is corrupt.
Result<std::optional<ChaosState>> readState(const std::string& dir);
// The same for a state file at any path (kHealedFile).
Status writeStateFile(const std::string& path, const ChaosState& state);
Result<std::optional<ChaosState>> readStateFile(const std::string& path);

Status renewLease(const std::string& dir, int64_t monotonic_ns);
Result<int64_t> readLease(const std::string& dir);

// Heals every record of an unfinished state file in `dir` and marks it finished. Returns the number of
// records healed (0 when there was nothing). Errors of single records are logged to `log` (when given)
// and returned after every other record was tried.
Result<int> cleanupStale(const std::string& dir, EventLog* log, const std::string& by = "cleanup");

struct AgentOptions {
  int control_fd = -1;          // read end of the controller's pipe; -1 = lease only
  double lease_timeout_s = 3.0;
  double poll_interval_s = 0.1;
};
// The agent's main loop; returns the process exit code (0 healed or finished, 4 heal errors).
int runAgent(const std::string& dir, const AgentOptions& options);

// Starts `binary chaos agent --state dir --control_fd 3` in its own session (setsid), with the read end of a
// fresh pipe as fd 3. Returns its pid and stores the write end (close-on-exec) in *control_fd.
Result<pid_t> spawnAgent(const std::string& binary, const std::string& dir, double lease_timeout_s, int* control_fd);

}  // namespace chaosbed::chaos
