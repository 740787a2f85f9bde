#pragma once
// The wire between the controller and its host agents: keys of the run's store, values in JSON. The store
// authenticates both ends (the run's secret), so what is read here comes from a holder of the secret; it is
// still parsed as untrusted input (a malformed entry is an error, never a crash).
//
// "agents/<run>/claim/<i>" counts the claims on host i (the first claimant takes it); "agents/<run>/joined"
// hands out host numbers in the order of joining, to agents without a name or a launcher's rank. Under
// "agents/<run>/<host>/":
//   hello      the agent is up: {"pid", "host", "hostname", "address", "device", "launched_by"}; address is
//              the one it reaches the store from, device the interface that holds it, launched_by the engine
//              that started it ("slurm job 12 step 0 task 1", "mpirun rank 1 of 2", "the controller", ...)
//   order/<n>  the controller's n-th order (n = 0, 1, ...): {"op", ...}; the agent waits on the next one
//   reply/<n>  the agent's answer to order n: {"code", "message", ...}
//   exit/<n>   the agent's n-th exit notice: an ExitInfo and the session it belongs to
//   lease      a counter the controller renews while it lives
//   alive      a counter the agent renews while it lives
//
// Orders: begin {session, log_dir, cgroup_group, pause_mode} (one strategy run's nodes; ends any earlier
// session), end {grace_ms}, start {spec}, restart {node, timeout_ms}, signal {node, sig}, stop_all {grace_ms},
// fault {action: check|prepare|apply|escalate|revert, fault, node}, quit {grace_ms}.
// Replies to start/restart carry {pid, incarnation}; to prepare, {heal: [HealRecord...]}.

#include <string>

#include <nlohmann/json.hpp>

#include "chaos/model/fault.h"
#include "core/launcher/launcher.h"
#include "transports/base/status.h"

namespace chaosbed::chaos::agent_wire {

inline std::string joined(const std::string& run) { return "agents/" + run + "/joined"; }
inline std::string claim(const std::string& run, int host) { return "agents/" + run + "/claim/" + std::to_string(host); }
inline std::string base(const std::string& run, int host) { return "agents/" + run + "/" + std::to_string(host) + "/"; }
inline std::string hello(const std::string& run, int host) { return base(run, host) + "hello"; }
inline std::string order(const std::string& run, int host, int64_t n) { return base(run, host) + "order/" + std::to_string(n); }
inline std::string reply(const std::string& run, int host, int64_t n) { return base(run, host) + "reply/" + std::to_string(n); }
inline std::string exitNotice(const std::string& run, int host, int64_t n) {
  return base(run, host) + "exit/" + std::to_string(n);
}
inline std::string lease(const std::string& run, int host) { return base(run, host) + "lease"; }
inline std::string alive(const std::string& run, int host) { return base(run, host) + "alive"; }

nlohmann::json toJson(const NodeSpec& spec);  // without net_namespace_fd: a descriptor means nothing elsewhere
Result<NodeSpec> nodeSpecFromJson(const nlohmann::json& j);
// Whether an agent may start `spec` (InvalidArgument naming the node and the reason otherwise). An agent runs
// chaosbed's own node roles with its own executable: no binary named, arguments exactly `ROLE
// --node_config=FILE` with ROLE worker, ps or evaluator and the node's own role, and no environment but
// OPENBLAS_NUM_THREADS; a holder of the secret can thus start a node, never a program of its choice as root.
// A binary in `extra_binaries` (the agent's own config, for tests) may take any arguments.
Status admissible(const NodeSpec& spec, const std::vector<std::string>& extra_binaries);
nlohmann::json toJson(const ExitInfo& exit);  // `at` is not sent: the receiver stamps its own clock
Result<ExitInfo> exitFromJson(const nlohmann::json& j);
// What an agent needs of a fault to carry it out on a node (kill, preempt, pause, vanish, slow).
nlohmann::json toJson(const Fault& fault);
Result<Fault> faultFromJson(const nlohmann::json& j);
nlohmann::json toJson(const Status& status);  // {"code", "message"}
Status statusFromJson(const nlohmann::json& j);
// Parses an entry read from the store: InvalidArgument naming `what` when it is not a JSON object.
Result<nlohmann::json> parseEntry(const std::string& text, const std::string& what);

}  // namespace chaosbed::chaos::agent_wire
