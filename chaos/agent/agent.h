#pragma once
// The host agent (`chaosbed agent`): one per host of an experiment, it owns the node processes of its host.
// For each strategy run (a session: begin ... end) it starts, restarts, signals and stops them (a Launcher
// of its own: process groups, cgroups and quotas as on one machine), carries out the process faults the
// controller orders with the same actuators the controller uses on one machine (signal, freezer, CPU
// quota), and reports every exit. Link faults stay with the controller: the shapers are reached through the
// store, the emulated hosts' kernels by the controller that owns them.
//
// An agent is started by the controller (emulated hosts: one in each host's namespace, told its host) or
// by the user's engine (srun, mpirun, a pod: it joins and is given the next free host). It talks to the
// controller only through the run's store, which proves the run's secret on every connection
// (transports/bootstrap/store.h); the wire is chaos/agent/protocol.h.
//
// Leases, both ways: the controller renews a counter while it lives, and the agent one of its own. When the
// agent's store connection is lost (the controller's process is gone) or the controller's counter has not
// moved for lease_s (it is stalled or cut off), the agent reverts every fault it applied, stops its nodes,
// removes their cgroups and exits: nothing it started outlives the controller by more than the lease. The
// controller declares a host lost when the agent's counter stops (HostAgents).

#include <atomic>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chaos/model/spec.h"
#include "transports/base/status.h"

namespace chaosbed::chaos {

// What an agent needs to find its run: the file the controller writes (agents.json in the results
// directory; 0600), the same for every agent of the run.
struct AgentConfig {
  std::string store;        // host:port of the run's store, as reachable from the agents' hosts
  std::string secret_file;  // the run's secret (a 0600 file; on a filesystem every host shares)
  std::string run;          // the run's id: the agents' keys live under it
  int hosts = 0;            // how many agents the run has
  // Host i is the machine named host_names[i] (empty: hosts in the order the agents join); a name matches
  // the machine's hostname or its first label.
  std::vector<std::string> host_names;
  double lease_s = 10.0;    // the controller is gone when its lease has not moved for this long
  // Programs an order may start besides the agent's own node roles (tests start `sleep` as a stand-in).
  // Empty in every run the controller writes; an order never widens it (this file is as trusted as the
  // secret it names).
  std::vector<std::string> extra_binaries;

  nlohmann::json toJson() const;
  // From the file the controller wrote; InvalidArgument naming the file and the field that is wrong.
  static Result<AgentConfig> read(const std::string& path);
};

// Serves host `host` (-1: joins as the next free host, or the next free one named as this machine) until the controller says quit (OK) or is gone
// (Unavailable, with why), or until *interrupted (Cancelled). Either way its nodes are stopped and its faults
// reverted before it returns.
Status runHostAgent(const AgentConfig& config, int host, const std::atomic<bool>* interrupted);

}  // namespace chaosbed::chaos
