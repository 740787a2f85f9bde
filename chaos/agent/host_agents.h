#pragma once
// HostAgents: the controller's side of its host agents (chaos/agent/agent.h), one per host, for a whole
// experiment. It either starts them (emulated hosts: `chaosbed agent` in each host's network namespace) or
// waits for them to join (real machines: started by srun, mpirun or a pod with the run's agents.json).
//
// Each strategy run opens a session: an AgentNodes, the NodeRunner of a run whose nodes live on hosts. Each
// of its calls is an order to the agent of the node's host, each exit an agent's notice; actuator() carries
// out process faults (kill, preempt, pause, vanish, slow) through the same agents, so a fault on a node is
// done by the host that runs it. Closing the session stops its nodes and reverts what its faults left.
//
// A host is lost when its agent dies (a started one: its process ended) or falls silent (its lease counter
// has not moved for the run's lease_s): its nodes died with it or are cut off, each is reported as killed
// (SIGKILL), and orders to that host fail with Unavailable from then on. The destructor tells each agent to
// quit and waits for the started ones to exit.
// Thread safety: every method may be called from any thread; on_exit runs on a host's watcher thread.

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chaos/actuators/actuator.h"
#include "chaos/agent/agent.h"
#include "core/launcher/launcher.h"
#include "transports/bootstrap/store.h"

namespace chaosbed::chaos {

class AgentNodes;

class HostAgents {
 public:
  struct Options {
    Store* store = nullptr;      // the controller's client of the run's store; outlives this
    AgentConfig config;          // what the agents read from config_path (written by the caller, 0600)
    std::string config_path;
    // Started here: one agent per entry, in that network namespace (-1: this one); its log is
    // log_dir/agent-<host>.log. Empty: wait up to join_timeout for config.hosts agents to join.
    std::vector<int> netns_fds;
    std::string binary;          // chaosbed, for `chaosbed agent`; empty: the running executable
    std::string log_dir;
    std::chrono::milliseconds join_timeout{120000};
    const std::atomic<bool>* interrupted = nullptr;  // ends the wait for agents (Cancelled)
    std::chrono::milliseconds order_timeout{20000};
    std::chrono::milliseconds lease_renewal{250};
  };
  struct Host {
    pid_t pid = 0;
    std::string hostname, address, device, launched_by;  // as the agent reported them (protocol.h)
  };
  struct SessionOptions {
    std::string log_dir;       // where the nodes' logs go (on the agents' hosts)
    std::string cgroup_group;  // the nodes' cgroup group (each host adds "-h<host>")
    PauseMode pause_mode = PauseMode::kAuto;
    std::function<int(const std::string& node)> host_of;  // which host runs a node
    ExitCallback on_exit;      // the nodes' exits, as the Launcher reports them
  };

  static Result<std::unique_ptr<HostAgents>> start(Options options);
  ~HostAgents();

  int size() const { return int(hosts_.size()); }
  const Host& host(int index) const;
  bool alive(int index) const;  // false once the host is lost (its agent exited or went silent)
  // One strategy run's nodes. One session at a time; it must be destroyed before this.
  Result<std::unique_ptr<AgentNodes>> session(SessionOptions options);

 private:
  friend class AgentNodes;
  struct HostState;
  explicit HostAgents(Options options);

  Status awaitHellos(const std::function<Status(int)>& still_coming);
  Result<nlohmann::json> order(int host, nlohmann::json order, std::chrono::milliseconds timeout);
  void watch(int host);               // a host's thread: exit notices, both leases
  void lose(int host, const std::string& why);  // the host's nodes are reported killed; orders fail
  void agentExited(const ExitInfo& exit);       // the launcher of started agents

  const Options options_;
  std::unique_ptr<Launcher> started_;  // the agents started here, or none
  std::vector<std::unique_ptr<HostState>> hosts_;
  std::atomic<bool> quitting_{false};  // the agents are told to quit: their exits are expected
  std::atomic<bool> stopping_{false};  // the watchers end
  std::mutex session_mu_;              // held while a notice is delivered: a closed session gets none
  AgentNodes* session_ = nullptr;      // guarded by session_mu_
  int64_t sessions_ = 0;               // guarded by session_mu_
};

// The nodes of one strategy run, on the hosts of a HostAgents.
class AgentNodes final : public NodeRunner {
 public:
  ~AgentNodes() override;

  Result<pid_t> start(const NodeSpec& spec) override;
  Result<pid_t> restart(const std::string& name, Deadline deadline) override;
  Result<pid_t> pid(const std::string& name) const override;
  bool running(const std::string& name) const override;
  bool hostLost(const std::string& name) const override;
  int incarnation(const std::string& name) const override;
  Status signal(const std::string& name, int sig) override;
  Result<ExitInfo> waitExit(const std::string& name, Deadline deadline) override;
  Status stopAll(std::chrono::milliseconds grace) override;
  NodeCgroup* cgroup(const std::string&) override { return nullptr; }  // it lives on the agent's host
  std::string logPath(const std::string& name) const override;

  // Carries out process faults on the node's host (through its agent).
  Actuator* actuator();

 private:
  friend class HostAgents;
  struct Node {
    int host = -1;
    bool running = false;
    int incarnation = 0;  // the newest started
    int exited = 0;       // the newest whose exit was delivered
    pid_t pid = 0;
    std::optional<ExitInfo> last_exit;
  };
  class RemoteActuator;
  AgentNodes(HostAgents& agents, int64_t id, HostAgents::SessionOptions options);

  Result<pid_t> started(const std::string& name, const Result<nlohmann::json>& reply);
  Status faultOrder(const char* action, const Fault& fault, const std::string& node, std::vector<HealRecord>* heal);
  void deliver(const ExitInfo& exit);  // under HostAgents::session_mu_
  void hostLost(int host);             // under HostAgents::session_mu_

  HostAgents& agents_;
  const int64_t id_;
  const HostAgents::SessionOptions options_;
  std::unique_ptr<RemoteActuator> actuator_;
  mutable std::mutex mu_;
  std::condition_variable exited_cv_;
  std::map<std::string, Node> nodes_;  // guarded by mu_
};

}  // namespace chaosbed::chaos
